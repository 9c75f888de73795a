"""sf.retry: a run that ended in error runs again from its recorded history."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import anyio
import pytest

from starflow import (
    RunFinished,
    RunNotFound,
    Starflow,
    StarflowError,
    StepFailed,
    WorkflowFailed,
    step,
    wait_for,
    workflow,
)
from starflow.admin.history import export_run, load_history
from starflow.admin.replayer import Replayer
from starflow.workflow.decorators import registry
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres

calls: dict[str, int] = {}
bug = {"present": True}


@step
async def reserve(item: str) -> str:
    calls["reserve"] = calls.get("reserve", 0) + 1
    return f"reserved-{item}"


@workflow(name="retry-buggy")
async def buggy(item: str) -> str:
    reserved = await reserve(item)
    if bug["present"]:
        raise KeyError("a bug in the workflow body")
    return reserved


@workflow(name="retry-waits")
async def waits() -> str:
    await reserve("w")
    await wait_for("go")
    return "done"


class TestRetry:
    """Retry replays the history with the code deployed now; nothing recorded re-runs."""

    async def test_fixed_body_bug(self, sf: Starflow) -> None:
        """A body exception fails the run; after the fix, retry finishes it."""
        calls.clear()
        bug["present"] = True
        handle = await sf.run(buggy, "x")
        assert handle.status == "error" and "KeyError" in (handle.error or "")
        bug["present"] = False
        done = await sf.retry(handle.run_id)
        assert done.status == "success" and done.result == "reserved-x"
        assert calls == {"reserve": 1}
        run = await sf.get_run(handle.run_id)
        assert (run.status, run.error, run.claim_state) == ("success", None, "complete")
        types = [e.event_type for e in await sf.events(handle.run_id)]
        assert types.count("run_retried") == 1 and types.count("node_start") == 1

    async def test_after_a_nondeterministic_deploy_is_reverted(self, sf: Starflow) -> None:
        """An incompatible deploy fails a resumed run; reverting and retrying finishes it."""
        calls.clear()
        handle = await sf.run(waits)
        original = waits.__starflow_workflow__  # type: ignore[attr-defined]

        @workflow(name="retry-waits")
        async def changed() -> str:
            await reserve("w")
            await reserve("inserted")
            await wait_for("go")
            return "done"

        try:
            failed = await sf.signal(handle.run_id, "go")
            assert failed.status == "error" and "NonDeterminismError" in (failed.error or "")
        finally:
            registry.add(original)  # the fix: redeploy compatible code
        done = await sf.retry(handle.run_id)
        assert done.status == "success" and done.result == "done"
        assert calls == {"reserve": 1}

    async def test_only_failed_runs(self, sf: Starflow) -> None:
        """Successful, cancelled, active and unknown runs are refused; nothing written."""
        bug["present"] = False
        ok = await sf.run(buggy, "y")
        paused = await sf.run(waits)
        before = [len(await sf.events(r)) for r in (ok.run_id, paused.run_id)]
        with pytest.raises(RunFinished, match="cannot retry"):
            await sf.retry(ok.run_id)
        with pytest.raises(StarflowError, match="still paused"):
            await sf.retry(paused.run_id)
        missing = str(uuid.uuid4())
        with pytest.raises(RunNotFound):
            await sf.retry(missing)
        await sf.cancel(paused.run_id, force=True)
        with pytest.raises(RunFinished, match="cancelled"):
            await sf.retry(paused.run_id)
        after = [len(await sf.events(r)) for r in (ok.run_id, paused.run_id)]
        assert after[0] == before[0] and after[1] == before[1] + 1  # only the cancel event

    async def test_worker_run_goes_back_to_the_queue(self, sf: Starflow) -> None:
        """A queued-mode run is requeued with fresh claim attempts and a worker ends it."""
        calls.clear()
        bug["present"] = True
        handle = await sf.start(buggy, "z")
        worker = sf.worker()
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            while (await sf.get_run(handle.run_id)).status != "error":
                await sf.runner.wait_settled(0.05)
            worker.stop()
        # No worker runs now: the requeued row is seen before anyone claims it.
        bug["present"] = False
        again = await sf.retry(handle.run_id)
        assert again.status == "queued"
        assert (await sf.get_run(handle.run_id)).claim_attempts == 0
        worker = sf.worker()
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            assert await sf.result(handle.run_id) == "reserved-z"
            worker.stop()
        assert calls == {"reserve": 1}


fixed = {"charge": False}


@step
async def charge(item: str) -> str:
    calls["charge"] = calls.get("charge", 0) + 1
    if not fixed["charge"]:
        raise ConnectionRefusedError(f"charge {item}: a bug in the step")
    return f"charged-{item}"


@step
async def ship(item: str) -> str:
    calls["ship"] = calls.get("ship", 0) + 1
    return f"shipped-{item}"


@workflow(name="retry-step-bug")
async def step_bug(item: str) -> list[str]:
    reserved = await reserve(item)
    charged = await charge(item)
    return [reserved, charged, await ship(item)]


@step
async def refund(item: str) -> str:
    calls["refund"] = calls.get("refund", 0) + 1
    return f"refunded-{item}"


@workflow(name="retry-compensates")
async def compensates(item: str) -> str:
    reserved = await reserve(item)
    try:
        charged = await charge(item)
    except StepFailed:
        await refund(item)  # compensation, then the failure ends the run
        raise
    return f"{reserved} {charged}"


class TestRetryRerunsTheFailedStep:
    """A retry runs the step whose failure ended the run again, with the code deployed now."""

    async def test_fixed_step(self, sf: Starflow) -> None:
        """After the step's fix, retry ends in success; the steps before it are not re-run."""
        calls.clear()
        fixed["charge"] = False
        handle = await sf.run(step_bug, "x")
        assert handle.status == "error" and "ConnectionRefusedError" in (handle.error or "")
        assert calls == {"reserve": 1, "charge": 1}
        fixed["charge"] = True
        done = await sf.retry(handle.run_id)
        assert done.status == "success", done.error
        assert done.result == ["reserved-x", "charged-x", "shipped-x"]
        assert calls == {"reserve": 1, "charge": 2, "ship": 1}
        events = await sf.events(handle.run_id)
        retried = next(e for e in events if e.event_type == "run_retried")
        assert retried.payload["from_node"] == "step:charge#1"
        # The earlier failure stays in the history, before the retry marker.
        charge_events = [e.event_type for e in events if e.node_id == "step:charge#1"]
        assert charge_events == ["node_start", "node_error", "node_start", "node_complete"]
        # A replay of the whole history (the replayer, from the database and from an
        # exported history) takes the retry's path, without a divergence.
        replayer = Replayer(workflows=[step_bug])
        result = await replayer.replay_run(sf.adapter, handle.run_id)
        assert (result.ok, result.outcome) == (True, "success"), result.error
        exported = load_history(await export_run(sf.adapter, handle.run_id))
        result = await replayer.replay_history(exported)
        assert (result.ok, result.outcome) == (True, "success"), result.error
        assert calls == {"reserve": 1, "charge": 2, "ship": 1}

    async def test_what_followed_the_failure_is_superseded(self, sf: Starflow) -> None:
        """The compensation that ran after the failure is not the retried run's: once
        the step succeeds, the code does not reach it, and that is no divergence."""
        calls.clear()
        fixed["charge"] = False
        handle = await sf.run(compensates, "z")
        assert handle.status == "error" and calls == {"reserve": 1, "charge": 1, "refund": 1}
        fixed["charge"] = True
        done = await sf.retry(handle.run_id)
        assert (done.status, done.result) == ("success", "reserved-z charged-z"), done.error
        assert calls == {"reserve": 1, "charge": 2, "refund": 1}

    async def test_still_broken_then_fixed(self, sf: Starflow) -> None:
        """A retry that fails again can be retried again; each one re-runs the step once."""
        calls.clear()
        fixed["charge"] = False
        handle = await sf.run(step_bug, "y")
        again = await sf.retry(handle.run_id)
        assert again.status == "error" and "ConnectionRefusedError" in (again.error or "")
        assert calls == {"reserve": 1, "charge": 2}
        fixed["charge"] = True
        done = await sf.retry(handle.run_id)
        assert done.status == "success" and calls == {"reserve": 1, "charge": 3, "ship": 1}


@workflow(name="retry-waits-timeout")
async def waits_timeout() -> str:
    await reserve("t")
    value = await wait_for("go", timeout=timedelta(hours=1))
    return f"got {value}"


@workflow(name="retry-child-broken")
async def child_broken(item: str) -> str:
    return await charge(item)


@workflow(name="retry-parent")
async def parent_of_broken(item: str) -> str:
    reserved = await reserve(item)
    return f"{reserved}+{await child_broken(item)}"


@workflow(name="retry-deadline", timeout=timedelta(hours=1))
async def with_deadline() -> str:
    await reserve("d")
    await wait_for("go")
    return "in time"


#: The steps of ``gathered`` meet here while the bug is present: all three are
#: running (their starts recorded) before the broken one fails.
side_by_side: dict[str, Any] = {}


@step
async def beside(tag: str) -> str:
    calls[tag] = calls.get(tag, 0) + 1
    if not fixed["charge"]:
        side_by_side["in"].add(tag)
        if len(side_by_side["in"]) == 3:
            side_by_side["all"].set()
        await side_by_side["all"].wait()
        if tag == "b":
            raise ConnectionRefusedError("b: a bug in the step")
    return tag


@workflow(name="retry-gather")
async def gathered(item: str) -> list[str]:
    values = await asyncio.gather(beside("a"), beside("b"), beside("c"),
                                  return_exceptions=True)
    for value in values:
        if isinstance(value, BaseException):
            raise value  # once all three have ended (and their outcomes are recorded)
    return [*[str(v) for v in values], await reserve(item)]


@pytest.fixture
async def env(adapter_kind: str) -> AsyncIterator[WorkflowEnvironment]:
    if adapter_kind == "postgres":
        require_postgres()
    async with WorkflowEnvironment(adapter=adapter_kind) as environment:
        yield environment


class TestRetryPoints:
    """What a retry runs again, by what ended the run."""

    async def test_wait_timeout_waits_again(self, env: WorkflowEnvironment) -> None:
        """A wait that timed out waits again (a new timeout from the retry); steps stay."""
        calls.clear()
        handle = await env.run(waits_timeout)
        await env.advance(timedelta(hours=2))
        run = await env.get_run(handle.run_id)
        assert run.status == "error" and "WaitTimeout" in (run.error or "")
        again = await env.app.retry(handle.run_id)
        assert again.status == "paused"
        done = await env.signal(handle.run_id, "go", 7)
        assert done.status == "success" and done.result == "got 7"
        assert calls == {"reserve": 1}

    async def test_failed_child_is_retried_with_its_parent(
            self, env: WorkflowEnvironment) -> None:
        """A parent that failed on its child's failure retries the child, then awaits it."""
        calls.clear()
        fixed["charge"] = False
        handle = await env.start(parent_of_broken, "c")
        with pytest.raises(WorkflowFailed):
            await env.result(handle.run_id)
        [kid] = await env.list_runs(parent_run_id=handle.run_id)
        assert kid.status == "error"
        fixed["charge"] = True
        await env.app.retry(handle.run_id)
        assert await env.result(handle.run_id) == "reserved-c+charged-c"
        assert (await env.get_run(kid.id)).status == "success"
        assert calls == {"reserve": 1, "charge": 2}

    async def test_past_its_deadline_gets_a_new_one(self, env: WorkflowEnvironment) -> None:
        """A run that failed on its deadline is retried with a new window of the same length."""
        calls.clear()
        handle = await env.run(with_deadline)
        await env.advance(timedelta(hours=2))
        run = await env.get_run(handle.run_id)
        assert run.status == "error" and "WorkflowTimeout" in (run.error or "")
        again = await env.app.retry(handle.run_id)
        assert again.status == "paused"
        retried = await env.get_run(handle.run_id)
        assert retried.deadline_at == env.now() + timedelta(hours=1)
        done = await env.signal(handle.run_id, "go")
        assert done.status == "success" and calls == {"reserve": 1}

    async def test_concurrent_failure_keeps_its_siblings(
            self, env: WorkflowEnvironment) -> None:
        """A step failing beside others: only it (and what follows) runs again."""
        calls.clear()
        fixed["charge"] = False
        side_by_side.update({"in": set(), "all": anyio.Event()})
        handle = await env.run(gathered, "g")
        assert handle.status == "error" and "ConnectionRefusedError" in (handle.error or "")
        assert calls == {"a": 1, "b": 1, "c": 1}
        fixed["charge"] = True
        done = await env.app.retry(handle.run_id)
        assert done.status == "success", done.error
        assert done.result == ["a", "b", "c", "reserved-g"]
        assert calls == {"a": 1, "b": 2, "c": 1, "reserve": 1}
