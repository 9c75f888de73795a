"""Child workflows (#17): a child run per ``await child_wf()`` / ``start_child``, its
result recorded in the parent's history, failures and cancels that reach the parent."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import starflow
from starflow import (
    InvalidArgument,
    RunCancelled,
    StarflowError,
    WorkflowDefinitionError,
    WorkflowFailed,
    step,
    wait_for,
    workflow,
)
from starflow.engine.child_nodes import child_id_for
from starflow.records import StartOptions
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres
from tests.core.conftest import SpyAdapter

CALLS: dict[str, int] = {}


def _count(key: str) -> None:
    CALLS[key] = CALLS.get(key, 0) + 1


@step(name="child-double")
async def double(n: int) -> int:
    _count(f"double:{n}")
    return 2 * n


@workflow(name="child-square")
async def square(n: int) -> int:
    return await double(n) * n // 2


@workflow(name="child-parent")
async def parent(n: int) -> int:
    first = await square(n)               # a child run, awaited durably
    second = await square(n + 1)
    return first + second


@workflow(name="child-boom")
async def boom(n: int) -> int:
    raise ValueError(f"boom {n}")


@workflow(name="child-catches")
async def catches() -> str:
    try:
        await boom(7)
    except WorkflowFailed as exc:
        return f"{exc.error_type}: {exc.error_message} ({exc.run_id})"
    return "no error"


@workflow(name="child-fan")
async def fan(n: int) -> int:
    handles = [await starflow.start_child(square, i) for i in range(n)]
    values = await asyncio.gather(*(h.result() for h in handles))
    return sum(values)


@workflow(name="child-waiter")
async def waiter() -> str:
    value = await wait_for("go")
    return str(value)


@workflow(name="child-awaits-waiter")
async def awaits_waiter(detached: bool) -> str:
    handle = await starflow.start_child(waiter, detached=detached)
    return await handle.result()


@pytest.fixture
def env_kind(adapter_kind: str) -> str:
    if adapter_kind == "postgres":
        require_postgres()
    return adapter_kind


class TestAwaitChild:
    """``await child_wf(x)`` starts a child run and returns its result."""

    async def test_children_run_as_their_own_runs(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(parent, 3)
            assert await env.result(handle) == 9 + 16
            kids = await env.list_runs(parent_run_id=handle.run_id)
            assert sorted(k.template_id or "" for k in kids) == ["child-square"] * 2
            assert all(k.status == "success" and k.parent_run_id == handle.run_id
                       for k in kids)
            info = await env.get_run(handle.run_id)
            assert info.parent_run_id is None
            nodes = [(e.event_type, e.node_id) for e in await env.events(handle.run_id)
                     if e.node_id is not None]
            first = child_id_for(handle.run_id, "child:child-square#1")
            assert ("node_complete", "child:child-square#1") in nodes
            assert ("node_complete", f"result:{first}#1") in nodes
            assert {k.id for k in kids} == {first,
                                            child_id_for(handle.run_id, "child:child-square#2")}

    async def test_inline_parent_is_woken_by_its_child(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.run(parent, 2)
            assert await env.result(handle.run_id) == 4 + 9

    async def test_replay_returns_the_recorded_result(self, env_kind: str) -> None:
        """A replayed parent starts no second child: the history holds the result."""
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(parent, 5)
            assert await env.result(handle) == 25 + 36
            before = len(await env.list_runs(parent_run_id=handle.run_id))
            run = await env.get_run(handle.run_id)
            replayed = await env.runner.prepare(run)
            outcome = await replayed.execute()
            # (the run has ended: the replay's final write is refused by the lease guard)
            assert outcome.status in ("lease_lost", "success")
            assert len(await env.list_runs(parent_run_id=handle.run_id)) == before == 2


class TestFailures:
    async def test_failed_child_raises_workflow_failed_with_its_cause(self,
                                                                      env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(catches)
            text = await env.result(handle)
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            assert text == f"ValueError: boom 7 ({kid.id})"
            assert kid.status == "error"

    async def test_uncaught_child_failure_fails_the_parent(self, env_kind: str) -> None:
        @workflow(name=f"child-uncaught-{uuid.uuid4().hex[:6]}")
        async def uncaught() -> int:
            return await boom(1)

        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(uncaught)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle)
            assert info.value.error_type == "WorkflowFailed"
            assert "boom 1" in (info.value.error_message or "")


class TestFanOut:
    async def test_gather_over_handles(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(fan, 20)
            assert await env.result(handle) == sum(i * i for i in range(20))
            kids = await env.list_runs(parent_run_id=handle.run_id, limit=100)
            assert len(kids) == 20 and {k.status for k in kids} == {"success"}


class TestCancel:
    async def test_cancelling_a_parent_cancels_attached_children(self,
                                                                  env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(awaits_waiter, False)
            await env.run_until_idle()
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            assert kid.status == "paused"
            await env.cancel(handle.run_id)
            await env.run_until_idle()
            with pytest.raises(RunCancelled):
                await env.result(handle)
            assert (await env.get_run(kid.id)).status == "cancelled"

    async def test_a_detached_child_lives_on(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(awaits_waiter, True)
            await env.run_until_idle()
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            assert kid.detached
            await env.cancel(handle.run_id)
            await env.run_until_idle()
            with pytest.raises(RunCancelled):
                await env.result(handle)
            assert (await env.get_run(kid.id)).status == "paused"
            await env.signal(kid.id, "go", "later")
            assert await env.result(kid.id) == "later"

    async def test_parent_awaiting_a_cancelled_child_gets_run_cancelled(
            self, env_kind: str) -> None:
        @workflow(name=f"child-sees-cancel-{uuid.uuid4().hex[:6]}")
        async def sees() -> str:
            handle = await starflow.start_child(waiter)
            try:
                return await handle.result()
            except RunCancelled as exc:
                return f"child {exc.run_id} cancelled"

        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(sees)
            await env.run_until_idle()
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            await env.cancel(kid.id)
            assert await env.result(handle) == f"child {kid.id} cancelled"


class TestBadInput:
    """Refused with a StarflowError before anything is written."""

    async def test_start_child_outside_a_workflow(self) -> None:
        with pytest.raises(StarflowError, match="outside a workflow"):
            await starflow.start_child(square, 1)

    async def test_bad_arguments(self) -> None:
        async def not_a_workflow(n: int) -> int:
            return n

        @workflow(name=f"child-bad-{uuid.uuid4().hex[:6]}")
        async def bad(which: str) -> str:
            try:
                if which == "fn":
                    await starflow.start_child(not_a_workflow, 1)
                elif which == "args":
                    await starflow.start_child(square, "x", "y")
                elif which == "run_id":
                    await starflow.start_child(square, 1, run_id="nope\n")
                elif which == "detached":
                    await starflow.start_child(square, 1, detached="yes")  # type: ignore[arg-type]
            except (WorkflowDefinitionError, InvalidArgument) as exc:
                return type(exc).__name__
            return "accepted"

        async with WorkflowEnvironment() as env:
            for which, expected in (("fn", "WorkflowDefinitionError"),
                                    ("args", "WorkflowDefinitionError"),
                                    ("run_id", "InvalidArgument"),
                                    ("detached", "InvalidArgument")):
                handle = await env.run(bad, which)
                assert await env.result(handle.run_id) == expected
                assert await env.list_runs(parent_run_id=handle.run_id) == []
                assert not any(e.node_id and e.node_id.startswith("child:")
                               for e in await env.events(handle.run_id))



class TestDeterministicChildId:
    """A parent that replays after a failure around the child's start finds the same child."""

    async def test_failed_start_unit_then_replay_starts_one_child(self, env_kind: str) -> None:
        from starflow import StarflowConfig
        from starflow_testing import FaultInjectingAdapter

        faults: list[FaultInjectingAdapter] = []

        def wrap(adapter: Any) -> Any:
            # Call 1 of on_run_start is the parent's; 2-3 are the unit carrying the
            # child's row and the parent's child node (tried, retried): both fail.
            faults.append(FaultInjectingAdapter(adapter, fail={"on_run_start": {2, 3}}))
            return faults[0]

        config = StarflowConfig(storage_retries=1)
        async with WorkflowEnvironment(adapter=env_kind, wrap=wrap, config=config) as env:
            handle = await env.start(parent, 4)
            assert await env.result(handle) == 16 + 25
            assert faults[0].failures == ["on_run_start", "on_run_start"]
            kids = await env.list_runs(parent_run_id=handle.run_id)
            assert sorted(k.id for k in kids) == sorted(
                child_id_for(handle.run_id, f"child:child-square#{i}") for i in (1, 2))
            events = [e.event_type for e in await env.events(handle.run_id)]
            assert "runner_lost" in events  # the sweep handed the parent to a new runner

    async def test_child_started_but_not_recorded_is_found(self, env_kind: str) -> None:
        """The child's row exists (started) but the parent's node is not recorded:
        the parent's replay adopts it instead of starting another."""
        CALLS.clear()
        async with WorkflowEnvironment(adapter=env_kind) as env:
            parent_id = str(uuid.uuid4())
            child_id = child_id_for(parent_id, "child:child-square#1")
            await env.app.options(run_id=child_id).start(square, 6)  # started, not recorded
            assert await env.result(child_id) == 36
            handle = await env.app.options(run_id=parent_id).start(parent, 6)
            assert await env.result(handle) == 36 + 49
            kids = await env.list_runs(parent_run_id=parent_id)
            assert len(kids) == 1  # the adopted one has no parent column: only #2 lists
            assert CALLS.get("double:6") == 1


@pytest.mark.slow  # a thousand child runs
class TestThousandChildren:
    """Fan-out/fan-in of 1,000 children with asyncio.gather over their handles."""

    async def test_thousand_children_on_sqlite(self, tmp_path: Any) -> None:
        async with WorkflowEnvironment(adapter=f"sqlite:///{tmp_path}/fan.db",
                                       concurrency=32) as env:
            handle = await env.start(fan, 1000)
            assert await env.result(handle) == sum(i * i for i in range(1000))
            kids = await env.list_runs(parent_run_id=handle.run_id, limit=2000)
            assert len(kids) == 1000 and {k.status for k in kids} == {"success"}
            events = await env.events(handle.run_id)
            results = [e for e in events if e.event_type == "node_complete"
                       and (e.node_id or "").startswith("result:")]
            assert len(results) == 1000  # each child's result recorded once


class TestDeterminism:
    async def test_a_child_started_with_other_arguments_on_replay_is_divergence(
            self) -> None:
        """The start node records the child's argument hash: replayed code that starts
        the child with other arguments raises NonDeterminismError, like a step."""
        from starflow import NonDeterminismError

        flip = {"n": 1}

        @workflow(name=f"child-diverge-{uuid.uuid4().hex[:6]}")
        async def diverge() -> int:
            handle = await starflow.start_child(square, flip["n"])
            await wait_for("go")
            return await handle.result()

        async with WorkflowEnvironment() as env:
            handle = await env.start(diverge)
            await env.run_until_idle()
            flip["n"] = 2
            await env.signal(handle.run_id, "go")
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle)
            assert info.value.error_type == NonDeterminismError.__name__


class TestReplayer:
    async def test_replayer_replays_parents_finished_and_paused(self) -> None:
        """``starflow replay``: a finished parent replays to success without starting
        anything; a parent paused on a child stops there (outcome ``paused``)."""
        from starflow_testing import Replayer

        async with WorkflowEnvironment() as env:
            done = await env.start(parent, 2)
            assert await env.result(done) == 4 + 9
            waiting = await env.start(awaits_waiter, False)
            await env.run_until_idle()
            replayer = Replayer(workflows=[parent, awaits_waiter])
            first = await replayer.replay_run(env, done.run_id)
            assert (first.ok, first.outcome) == (True, "success"), first.error
            second = await replayer.replay_run(env, waiting.run_id)
            assert (second.ok, second.outcome) == (True, "paused"), second.error


class TestCancelQueuedChild:
    async def test_parent_of_a_never_claimed_child_ends_cancelled(self,
                                                                    env_kind: str) -> None:
        """A child queued for a pool nobody serves: cancelling the parent ends both
        cancelled (the parent's cleanup runs; the child never ran)."""
        cleanup: list[str] = []

        @step(name=f"child-cleanup-{uuid.uuid4().hex[:6]}")
        async def undo() -> None:
            cleanup.append("undo")

        @workflow(name=f"child-nowhere-{uuid.uuid4().hex[:6]}")
        async def nowhere() -> int:
            handle = await starflow.start_child(square, 3, pool="nobody-serves-this")
            try:
                return await handle.result()
            except RunCancelled:
                await undo()
                raise

        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(nowhere)
            await env.run_until_idle()
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            assert (kid.status, kid.runner_pool) == ("queued", "nobody-serves-this")
            await env.cancel(handle.run_id)
            await env.run_until_idle()
            assert (await env.get_run(handle.run_id)).status == "cancelled"
            assert (await env.get_run(kid.id)).status == "cancelled"
            assert cleanup == ["undo"]


class TestStrandedParent:
    async def test_maintenance_wakes_a_parent_whose_childs_runner_died(
            self, env_kind: str) -> None:
        """The child's end is recorded but its runner never woke the parent (it died
        in between): the maintenance pass at the sweep interval wakes it."""
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(awaits_waiter, False)
            await env.run_until_idle()
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            # The child ends "in another process" that dies before waking the parent:
            # its final unit, written directly, and nothing else.
            adapter = env.adapter
            async with adapter.unit() as unit:
                ctx = starflow.WorkflowContext(run_id=kid.id, workflow="child-waiter")
                await adapter.on_run_complete(kid.id, ctx, 1, now=env.now(), result="late")
                await adapter.clear_lease(kid.id)
                await adapter.clear_waits(kid.id)
            assert unit.held
            await env.run_until_idle()
            assert (await env.get_run(handle.run_id)).status == "paused"  # stranded
            assert await env.runner.wake_stranded_parents() == 1
            assert await env.result(handle) == "late"

    @staticmethod
    async def end_without_waking(env: WorkflowEnvironment, kid_id: str, result: Any,
                                 *, continued_as: str | None = None,
                                 parent: str | None = None) -> None:
        """The child's final unit, as a process that dies before the wake writes it
        (``continued_as``: it continued as that run, started queued here)."""
        adapter = env.adapter
        async with adapter.unit() as unit:
            ctx = starflow.WorkflowContext(run_id=kid_id, workflow="child-waiter")
            await adapter.on_run_complete(kid_id, ctx, 1, now=env.now(), result=result)
            await adapter.clear_lease(kid_id)
            await adapter.clear_waits(kid_id)
            if continued_as is not None:
                await adapter.update_run(kid_id, "continue_as_new", continued_as=continued_as)
                await adapter.on_run_start(
                    continued_as, starflow.WorkflowContext(run_id=continued_as,
                                                           workflow="child-waiter"),
                    StartOptions(input={"args": [], "kwargs": {}}, status="queued",
                                 claim_state="queued", start_mode="queued",
                                 runner_pool="nobody-serves-this", parent_run_id=parent),
                    now=env.now())
        assert unit.held

    async def test_every_stranded_parent_is_found_in_keyset_batches(
            self, env_kind: str) -> None:
        """Seven parents paused on children, four stranded: batches of two find all
        four, and no other parent is woken."""
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handles = [await env.start(awaits_waiter, False) for _ in range(7)]
            await env.run_until_idle()
            kids = {h.run_id: (await env.list_runs(parent_run_id=h.run_id))[0].id
                    for h in handles}
            stranded = sorted(kids)[::2]  # every other one in run id order: 4 of 7
            for parent_id in stranded:
                await self.end_without_waking(env, kids[parent_id], f"late {parent_id}")
            await env.run_until_idle()
            assert await env.runner.wake_stranded_parents(batch=2) == 4
            for parent_id in stranded:
                assert await env.result(parent_id) == f"late {parent_id}"
            rest = [h.run_id for h in handles if h.run_id not in stranded]
            assert {(await env.get_run(r)).status for r in rest} == {"paused"}
            assert await env.runner.wake_stranded_parents(batch=2) == 0

    async def test_the_pass_reads_no_child_of_a_parent_still_waiting(
            self, env_kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
        """Parents whose children are still active cost one statement per batch:
        no run row is read (the pass read each parent's child every sweep)."""
        async with WorkflowEnvironment(adapter=env_kind) as env:
            for _ in range(5):
                await env.start(awaits_waiter, False)
            await env.run_until_idle()
            adapter = env.runner.adapter
            calls: list[str] = []
            for name in ("get_run", "list_runs", "child_waits"):
                real = getattr(adapter, name)

                def counted(*a: Any, _real: Any = real, _name: str = name, **k: Any) -> Any:
                    calls.append(_name)
                    return _real(*a, **k)

                monkeypatch.setattr(adapter, name, counted)
            assert await env.runner.wake_stranded_parents(batch=2) == 0
            assert calls == ["child_waits"] * 3  # 2 + 2 + 1

    async def test_a_stranded_parent_of_a_chain_is_woken(self, env_kind: str) -> None:
        """The child continued as new and the chain's last run ended, but nobody woke
        the parent (paused on the first run): the pass follows the chain."""
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(awaits_waiter, False)
            await env.run_until_idle()
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            nxt = str(uuid.uuid4())
            await self.end_without_waking(env, kid.id, None, continued_as=nxt,
                                          parent=handle.run_id)
            await env.run_until_idle()
            assert await env.runner.wake_stranded_parents() == 0  # the chain goes on
            await self.end_without_waking(env, nxt, "end of chain")
            assert await env.runner.wake_stranded_parents() == 1
            assert await env.result(handle) == "end of chain"


class TestPools:
    async def test_a_child_in_another_pool_is_run_by_that_pools_workers(
            self, env_kind: str) -> None:
        @workflow(name=f"child-gpu-parent-{uuid.uuid4().hex[:6]}")
        async def gpu_parent() -> int:
            handle = await starflow.start_child(square, 7, pool="gpu")
            return await handle.result()

        async with WorkflowEnvironment(adapter=env_kind, pools=(None, "gpu")) as env:
            handle = await env.start(gpu_parent)
            assert await env.result(handle) == 49
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            assert (kid.runner_pool, kid.status) == ("gpu", "success")
        async with WorkflowEnvironment(adapter=env_kind, pools=(None,)) as env:
            handle = await env.start(gpu_parent)
            await env.run_until_idle()
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            assert kid.status == "queued"  # no worker of pool gpu here


@workflow(name="child-chain")
async def chain_child(n: int, fail: bool) -> str:
    """Continues as new ``n`` times (a chain of ``n + 1`` runs), then ends."""
    if n > 0:
        starflow.continue_as_new(n - 1, fail)
    if fail:
        raise ValueError("last link failed")
    return "chain done"


@workflow(name="child-awaits-chain")
async def awaits_chain(n: int, fail: bool, detached: bool) -> str:
    handle = await starflow.start_child(chain_child, n, fail, detached=detached)
    try:
        return await handle.result()
    except WorkflowFailed as exc:
        return f"{exc.error_type}: {exc.error_message} ({exc.run_id})"


class TestChildContinueAsNew:
    """A child that calls ``continue_as_new``: the chain inherits the parent link and
    the parent's await follows it to the last run's result."""

    @staticmethod
    async def chain_of(env: WorkflowEnvironment, parent_id: str) -> list[Any]:
        kids = await env.list_runs(parent_run_id=parent_id)
        by_id = {k.id: k for k in kids}
        successors = {k.continued_as for k in kids}
        [first] = [k for k in kids if k.id not in successors]
        chain = [first]
        while chain[-1].continued_as is not None:
            chain.append(by_id[chain[-1].continued_as])
        assert len(chain) == len(kids)
        return chain

    async def test_parent_waits_through_a_three_link_chain(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(awaits_chain, 2, False, True)
            assert await env.result(handle) == "chain done"
            chain = await self.chain_of(env, handle.run_id)
            assert len(chain) == 3
            assert all(k.parent_run_id == handle.run_id and k.detached for k in chain)
            assert [k.status for k in chain] == ["success"] * 3
            # The parent recorded the last run's outcome at its result node.
            first = chain[0].id
            [done] = [e for e in await env.events(handle.run_id)
                      if e.node_id == f"result:{first}#1" and e.event_type == "node_complete"]
            assert done.payload_json["output"]["run_id"] == chain[-1].id

    async def test_inline_parent_follows_the_chain(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.run(awaits_chain, 2, False, False)
            assert await env.result(handle.run_id) == "chain done"
            chain = await self.chain_of(env, handle.run_id)
            assert len(chain) == 3 and not any(k.detached for k in chain)

    async def test_the_last_links_failure_reaches_the_parent(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(awaits_chain, 2, True, False)
            text = await env.result(handle)
            chain = await self.chain_of(env, handle.run_id)
            assert text == f"ValueError: last link failed ({chain[-1].id})"
            assert [k.status for k in chain] == ["success", "success", "error"]

    async def test_a_parent_paused_on_an_earlier_link_is_woken(self, env_kind: str) -> None:
        """The parent paused on the chain's first run; the last run's end (a run that
        continued an earlier one) wakes it."""
        async with WorkflowEnvironment(adapter=env_kind) as env:
            started = env.now()
            handle = await env.start(awaits_chain, 2, False, False)
            await env.run_until_idle()
            assert await env.result(handle) == "chain done"
            # Woken by the last run's runner, not by the maintenance pass later.
            assert env.now() == started
            chain = await self.chain_of(env, handle.run_id)
            woken = [e for e in await env.events(handle.run_id)
                     if e.event_type == "run_paused"]
            # It paused once, on the first run of the chain (the wait names it).
            assert [e.payload_json["event"] for e in woken] == [
                f"__starflow.child:{chain[0].id}"]

    async def test_cancelling_the_parent_cancels_the_running_link(self,
                                                                  env_kind: str) -> None:
        @workflow(name=f"child-chain-waits-{uuid.uuid4().hex[:6]}")
        async def chain_then_wait(n: int) -> str:
            if n > 0:
                starflow.continue_as_new(n - 1)
            return str(await wait_for("go"))

        @workflow(name=f"child-awaits-waiting-chain-{uuid.uuid4().hex[:6]}")
        async def awaits() -> str:
            return await chain_then_wait(1)

        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(awaits)
            await env.run_until_idle()
            chain = await self.chain_of(env, handle.run_id)
            assert [k.status for k in chain] == ["success", "paused"]
            await env.cancel(handle.run_id)
            await env.run_until_idle()
            with pytest.raises(RunCancelled):
                await env.result(handle)
            assert (await env.get_run(chain[-1].id)).status == "cancelled"


class TestFanInCommits:
    """Recording the results of children that have already ended commits with the
    parent's next unit (``fused_boundaries``), not once per child."""

    async def test_results_of_ended_children_ride_with_the_runs_end(
            self, sf: starflow.Starflow, spy: SpyAdapter) -> None:
        import anyio

        @workflow(name=f"child-fan-in-{uuid.uuid4().hex[:6]}")
        async def fan_in(n: int) -> int:
            handles = [await starflow.start_child(square, i) for i in range(n)]
            await wait_for("go")  # the children end meanwhile
            return sum(await asyncio.gather(*(h.result() for h in handles)))

        async with anyio.create_task_group() as tg:
            tg.start_soon(sf.worker().run)
            handle = await sf.run(fan_in, 5)
            assert handle.status == "paused"
            for kid in await sf.list_runs(parent_run_id=handle.run_id):
                await sf.result(kid.id, timeout=30)
            spy.units.clear()
            done = await sf.signal(handle.run_id, "go", None)  # driven here to its end
            tg.cancel_scope.cancel()
        assert (done.status, done.result) == ("success", sum(i * i for i in range(5)))
        # After the wake, one unit: the five result nodes and the run's end (a child's
        # own last unit may be recorded here too: it holds one node_complete).
        wake = next(i for i, u in enumerate(spy.units) if "on_run_resumed" in u)
        after = spy.units[wake + 1:]
        assert [u.count("on_node_complete") for u in after
                if "on_run_complete" in u and u.count("on_node_complete") > 1] == [5], after
        assert ["on_node_complete"] not in after
        results = [e for e in await sf.events(handle.run_id)
                   if (e.node_id or "").startswith("result:")]
        assert len(results) == 5
