"""Plain ``def`` workflows: the body runs in a worker thread, each starflow call it makes
runs on the event loop and returns its value; recorded, replayed, cancelled and timed
out exactly as the ``async def`` form."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import starflow
from starflow import (
    ConfigError,
    InvalidArgument,
    RetryPolicy,
    RunCancelled,
    Starflow,
    StarflowConfig,
    StarflowError,
    StepFailed,
    WorkflowDefinitionError,
    WorkflowFailed,
    step,
    workflow,
)
from starflow.workflow.decorators import registry
from starflow.workflow.threads import WorkflowThreadStopped, in_workflow_thread
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def env_kind(adapter_kind: str) -> str:
    if adapter_kind == "postgres":
        require_postgres()
    return adapter_kind


CALLS: dict[str, int] = {}
THREADS: dict[str, int] = {}


def _count(key: str) -> None:
    CALLS[key] = CALLS.get(key, 0) + 1


@step(name="swf-reserve")
async def reserve(item: str) -> str:
    _count(f"reserve:{item}")
    return f"reserved-{item}"


@step(name="swf-weigh")
def weigh(item: str) -> int:
    """A plain step: in its own thread, not the workflow's."""
    _count(f"weigh:{item}")
    THREADS[f"weigh:{item}"] = threading.get_ident()
    return len(item)


@workflow(name="swf-order")
def order(item: str) -> dict[str, Any]:
    THREADS[f"order:{item}"] = threading.get_ident()
    reservation = reserve(item)                       # an async step: its value
    grams = starflow.call(weigh, item)                # a plain step, typed through call
    starflow.context().phase = "approval"
    decision = starflow.wait_for("approve")           # pauses durably; the thread unwinds
    starflow.set_event("decision", decision)
    return {"reservation": reservation, "grams": grams, "by": decision["by"],
            "run": starflow.context().run_id}


@workflow(name="swf-order-async")
async def order_async(item: str) -> dict[str, Any]:
    """The same workflow as ``order``, written ``async def``: the same history."""
    reservation = await reserve(item)
    grams = await weigh(item)
    starflow.context().phase = "approval"
    decision = await starflow.wait_for("approve")
    starflow.set_event("decision", decision)
    return {"reservation": reservation, "grams": grams, "by": decision["by"],
            "run": starflow.context().run_id}


async def threads_released(limiter: anyio.CapacityLimiter) -> None:
    """Until every workflow thread has ended (a stopped one unwinds at its next call)."""
    with anyio.fail_after(10):  # the limiter has no event to wait on
        while limiter.borrowed_tokens:
            await anyio.lowlevel.checkpoint()


def _history(events: list[Any]) -> list[tuple[str, str | None]]:
    return [(e.event_type, e.node_id) for e in events]


class TestRunAndReplay:
    async def test_runs_to_completion_with_the_async_forms_history(self, sf: Starflow) -> None:
        """Paused at its wait, woken by a signal: the finished steps are not run again,
        the result is the function's, and the events are those of the async twin."""
        item = unique("widget")
        loop_thread = threading.get_ident()
        handle = await sf.run(order, item)
        assert handle.status == "paused"
        assert CALLS[f"reserve:{item}"] == 1 and CALLS[f"weigh:{item}"] == 1
        assert THREADS[f"order:{item}"] != loop_thread
        assert THREADS[f"weigh:{item}"] not in (loop_thread, THREADS[f"order:{item}"])
        # The pause unwound the thread: a paused run holds none.
        assert sf.runner.runtime.workflow_threads().borrowed_tokens == 0
        done = await sf.signal(handle.run_id, "approve", {"by": "ada"})
        assert done.status == "success"
        assert done.result == {"reservation": f"reserved-{item}", "grams": len(item),
                               "by": "ada", "run": handle.run_id}
        assert CALLS[f"reserve:{item}"] == 1 and CALLS[f"weigh:{item}"] == 1  # replayed

        twin = await sf.run(order_async, item)
        twin_done = await sf.signal(twin.run_id, "approve", {"by": "ada"})
        assert twin_done.result == {**done.result, "run": twin.run_id}
        sync_history = _history(await sf.events(handle.run_id))
        assert sync_history == _history(await sf.events(twin.run_id))
        assert [n for t, n in sync_history if t == "node_complete"] == [
            "step:swf-reserve#1", "step:swf-weigh#1", "wait:approve#1", "event:decision#1"]

    async def test_in_every_adapter(self, env_kind: str) -> None:
        """Memory, SQLite and PostgreSQL: pause, signal, success, steps run once."""
        item = unique("crate")
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.run(order, item)
            assert handle.status == "paused"
            done = await env.signal(handle.run_id, "approve", {"by": "grace"})
            assert (done.status, done.result["by"]) == ("success", "grace")
            assert await env.result(handle.run_id) == done.result
            assert CALLS[f"reserve:{item}"] == 1 and CALLS[f"weigh:{item}"] == 1

    async def test_queued_run_finishes_on_a_worker(self, env_kind: str) -> None:
        """sf.start: a worker claims it, runs the thread, pauses, and finishes it."""
        item = unique("queued")
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(order, item)
            await env.run_until_idle()
            assert (await env.get_run(handle.run_id)).status == "paused"
            await env.signal(handle.run_id, "approve", {"by": "lin"})
            result = await env.result(handle.run_id)
            assert result["by"] == "lin"
            assert CALLS[f"reserve:{item}"] == 1

    async def test_pause_is_not_caught_by_except_exception(self, sf: Starflow) -> None:
        """The pause is a BaseException raised through the user's code in the thread."""
        caught: list[str] = []

        @workflow(name=unique("swf-catch-all"))
        def flow() -> str:
            try:
                return str(starflow.wait_for("go"))
            except Exception as exc:  # must not see the pause
                caught.append(type(exc).__name__)
                return "caught"

        handle = await sf.run(flow)
        assert handle.status == "paused" and caught == []
        assert (await sf.signal(handle.run_id, "go", "went")).result == "went"


class TestCrash:
    async def test_killed_runner_replays_and_skips_finished_steps(self, env_kind: str) -> None:
        """A runner killed while the workflow's second step runs: the thread unwinds (no
        thread is left), the sweep requeues the run, the replay skips the first step."""
        first, second = unique("first"), unique("second")
        started = anyio.Event()
        release = {"now": False}
        effects: list[str] = []

        @step(name=first)
        def prepare() -> str:
            effects.append("prepare")
            return "prepared"

        @step(name=second)
        async def slow(value: str) -> str:
            effects.append("slow")
            started.set()
            if not release["now"]:
                await anyio.sleep_forever()
            return value.upper()

        @workflow(name=unique("swf-crash"))
        def flow() -> str:
            return slow(prepare())

        config = StarflowConfig(lease_ttl=timedelta(seconds=30),
                                sweep_interval=timedelta(seconds=30))
        async with WorkflowEnvironment(adapter=env_kind, config=config) as env:
            handle = await env.start(flow)
            with anyio.fail_after(20):
                await started.wait()
            await env.kill_runner(handle.run_id)
            await threads_released(env.runner.runtime.workflow_threads())
            release["now"] = True
            await env.advance(timedelta(seconds=61))  # lease expired, swept, requeued
            assert await env.result(handle.run_id) == "PREPARED"
        assert effects == ["prepare", "slow", "slow"]  # prepare replayed, slow at least once


class TestTimeAndRetries:
    async def test_sleep_on_the_fake_clock(self, env_kind: str) -> None:
        """A two-day sleep: the run pauses on a timer and the time-skipping clock wakes it."""
        @workflow(name=unique("swf-sleeper"))
        def sleeper() -> str:
            before = starflow.now()
            starflow.sleep(timedelta(days=2))
            return str(starflow.now() - before)

        async with WorkflowEnvironment(adapter=env_kind) as env:
            started = env.now()
            handle = await env.start(sleeper)
            assert await env.result(handle.run_id) == str(timedelta(days=2))
            assert env.now() - started >= timedelta(days=2)
            events = _history(await env.events(handle.run_id))
            assert ("node_complete", "sleep#1") in events

    async def test_failing_step_is_retried_then_its_failure_caught(self, env_kind: str
                                                                   ) -> None:
        """A step's RetryPolicy applies (delays on the fake clock); past the last attempt
        StepFailed reaches the workflow's thread, where it is an ordinary exception."""
        attempts: list[int] = []

        @step(name=unique("swf-flaky"),
              retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=5)))
        def flaky(fail_always: bool) -> int:
            attempts.append(1)
            if fail_always or len(attempts) < 3:
                raise ConnectionError(f"attempt {len(attempts)}")
            return len(attempts)

        @workflow(name=unique("swf-retrying"))
        def flow() -> str:
            tries = flaky(False)
            try:
                flaky(True)
            except StepFailed as exc:
                return f"{tries} then {exc.error_type}"
            return "no failure"

        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(flow)
            assert await env.result(handle.run_id) == (
                "3 then builtins.ConnectionError")
            assert len(attempts) == 6
            retries = [e for e in await env.events(handle.run_id)
                       if e.event_type == "node_retry"]
            assert len(retries) == 4

    async def test_an_uncaught_exception_fails_the_run(self, sf: Starflow) -> None:
        @workflow(name=unique("swf-raises"))
        def flow(n: int) -> int:
            raise ValueError(f"bad {n}")

        handle = await sf.run(flow, 3)
        assert handle.status == "error"
        with pytest.raises(WorkflowFailed) as info:
            await sf.result(handle.run_id)
        assert info.value.error_type == "ValueError"
        assert "bad 3" in (info.value.error_message or "")


class TestCancelAndDeadline:
    async def test_cancel_at_a_wait_runs_the_compensation(self, env_kind: str) -> None:
        """sf.cancel of a paused run: RunCancelled is raised in the thread at its wait,
        the compensation step runs once, the run ends cancelled."""
        effects: list[str] = []

        @step(name=unique("swf-undo"))
        def undo(reservation: str) -> None:
            effects.append(f"undo {reservation}")

        @workflow(name=unique("swf-cancel-paused"))
        def flow(item: str) -> str:
            reservation = reserve(item)
            try:
                starflow.wait_for("approve")
            except RunCancelled:
                undo(reservation)
                raise
            return "approved"

        item = unique("cancel")
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.run(flow, item)
            assert handle.status == "paused"
            cancelled = await env.cancel(handle.run_id)
            assert cancelled.status == "cancelled"
            assert effects == [f"undo reserved-{item}"]
            assert CALLS[f"reserve:{item}"] == 1
            with pytest.raises(RunCancelled):
                await env.result(handle.run_id)

    async def test_cancel_while_a_step_runs(self, sf: Starflow) -> None:
        """A cancel while a step is in flight stops the step; the thread gets
        RunCancelled from that call and its cleanup runs."""
        started = anyio.Event()
        effects: list[str] = []

        @step(name=unique("swf-hang"))
        async def hang() -> None:
            started.set()
            await anyio.sleep_forever()

        @step(name=unique("swf-cleanup"))
        async def cleanup() -> None:
            effects.append("cleaned")

        @workflow(name=unique("swf-cancel-running"))
        def flow() -> str:
            try:
                hang()
            finally:
                cleanup()
            return "done"

        run_id = str(uuid.uuid4())
        outcome: list[str] = []

        async def drive() -> None:
            outcome.append((await sf.options(run_id=run_id).run(flow)).status)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            with anyio.fail_after(10):
                await started.wait()
            await sf.cancel(run_id)
        assert outcome == ["cancelled"] and effects == ["cleaned"]
        assert sf.runner.runtime.workflow_threads().borrowed_tokens == 0

    async def test_forced_cancel_stops_the_thread_at_its_next_call(self, sf: Starflow
                                                                   ) -> None:
        """cancel(force=True) runs no workflow code: the thread, busy in its own code,
        is stopped at its next starflow call, which never starts."""
        in_code = threading.Event()
        go_on = threading.Event()
        seen: list[str] = []
        later = unique("swf-later")

        @step(name=later)
        async def never() -> None:
            seen.append("later step ran")

        @workflow(name=unique("swf-forced"))
        def flow() -> None:
            reserve("forced")  # the run's row is written with its first boundary
            in_code.set()
            go_on.wait(10)  # the workflow's own code, between two starflow calls
            try:
                never()
            except Exception as exc:  # the stop is not an Exception
                seen.append(type(exc).__name__)
            except BaseException as exc:
                seen.append(type(exc).__name__)
                raise

        run_id = str(uuid.uuid4())
        outcome: list[str] = []

        async def drive() -> None:
            try:
                outcome.append((await sf.options(run_id=run_id).run(flow)).status)
            except StarflowError as exc:
                outcome.append(type(exc).__name__)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            await anyio.to_thread.run_sync(in_code.wait, 10)
            handle = await sf.cancel(run_id, force=True)
            assert handle.status == "cancelled"
            go_on.set()
        assert seen == [WorkflowThreadStopped.__name__]
        assert (await sf.get_run(run_id)).status == "cancelled"
        assert not [e for e in await sf.events(run_id) if e.node_id == f"step:{later}#1"]
        assert sf.runner.runtime.workflow_threads().borrowed_tokens == 0

    async def test_deadline_stops_a_running_workflow(self, env_kind: str) -> None:
        """@workflow(timeout=): past it the step in flight is cancelled, the thread
        unwinds and the run ends in error with WorkflowTimeout."""
        @step(name=unique("swf-forever"))
        async def forever() -> None:
            await anyio.sleep_forever()

        @workflow(name=unique("swf-deadline"), timeout=timedelta(minutes=5))
        def flow() -> None:
            forever()

        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(flow)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle.run_id)
            assert info.value.error_type == "WorkflowTimeout"
            assert env.runner.runtime.workflow_threads().borrowed_tokens == 0


@workflow(name="swf-child-sync")
def child_sync(n: int) -> int:
    return int(weigh("x" * n)) * 10


@workflow(name="swf-child-async")
async def child_async(n: int) -> int:
    return await weigh("y" * n) + 1


@workflow(name="swf-parent")
def parent(n: int) -> list[int]:
    a = child_sync(n)                                      # a child run, its value
    b = child_async(n)
    handle = starflow.start_child(child_sync, n + 1)
    c = handle.result()
    return [a, b, c]


@workflow(name="swf-async-parent")
async def async_parent(n: int) -> int:
    return await child_sync(n) + 1                          # a sync child, awaited


class TestChildren:
    async def test_children_from_a_sync_workflow(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(parent, 2)
            assert await env.result(handle.run_id) == [20, 3, 30]
            kids = await env.list_runs(parent_run_id=handle.run_id)
            assert sorted(k.template_id for k in kids) == sorted(
                ["swf-child-sync", "swf-child-async", "swf-child-sync"])
            assert all(k.status == "success" for k in kids)
            nodes = [e.node_id for e in await env.events(handle.run_id)
                     if e.event_type == "node_complete"]
            assert [n.split(":")[0] for n in nodes] == [
                "child", "result", "child", "result", "child", "result"]

    async def test_a_sync_child_of_an_async_workflow(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(async_parent, 4)
            assert await env.result(handle.run_id) == 41


class TestOtherCalls:
    async def test_continue_as_new_and_attributes(self, sf: Starflow) -> None:
        """continue_as_new unwinds the thread (a BaseException) and the chain goes on;
        set_attributes is recorded on each run."""
        name = unique("swf-chain")

        @workflow(name=name)
        def chain(n: int, total: int) -> int:
            starflow.set_attributes(link=n)
            total = reserve(str(n)).count("-") + total
            if n < 3:
                try:
                    starflow.continue_as_new(n + 1, total)
                except Exception:  # must not see the unwinding
                    return -1
            return total

        handle = await sf.run(chain, 1, 0)
        assert (handle.status, handle.result) == ("success", 3)
        runs = await sf.list_runs(template_id=name)
        assert len(runs) == 3
        assert sorted(r.continued_as is None for r in runs) == [False, False, True]
        assert sorted([(await sf.get_attributes(r.id))["link"] for r in runs]) == [1, 2, 3]

    async def test_updates_are_received_and_answered(self, sf: Starflow) -> None:
        @workflow(name=unique("swf-cart"))
        def cart() -> list[str]:
            items: list[str] = []
            while len(items) < 2:
                req = starflow.receive("add")
                items.append(req.payload)
                req.reply(len(items))
            return items

        handle = await sf.start(cart)
        async with anyio.create_task_group() as tg:
            worker = sf.worker()
            tg.start_soon(worker.run)
            assert await sf.update(handle.run_id, "add", "apple", timeout=30) == 1
            assert await sf.update(handle.run_id, "add", "pear", timeout=30) == 2
            assert await sf.result(handle.run_id, timeout=30) == ["apple", "pear"]
            worker.stop()

    async def test_called_outside_a_run_it_is_a_plain_function_in_a_thread(self) -> None:
        """Awaited outside a run, the body runs in a thread and its steps run unrecorded."""
        item = unique("bare")
        assert await child_sync(3) == 30
        assert in_workflow_thread() is False

        @workflow(name=unique("swf-bare"))
        def bare(x: str) -> str:
            return reserve(x)

        assert await bare(item) == f"reserved-{item}"

    async def test_call_outside_a_sync_workflow_is_refused(self, sf: Starflow) -> None:
        with pytest.raises(StarflowError, match=r"await reserve\(\.\.\.\)"):
            starflow.call(reserve, "x")

        @workflow(name=unique("swf-call-async"))
        async def flow() -> str:
            return starflow.call(reserve, "x")

        handle = await sf.run(flow)
        assert handle.status == "error" and "plain def workflows" in (handle.error or "")

    async def test_call_of_a_plain_function_is_refused(self, sf: Starflow) -> None:
        def plain() -> int:
            return 1

        @workflow(name=unique("swf-call-plain"))
        def flow() -> str:
            try:
                starflow.call(plain)  # type: ignore[arg-type]
            except InvalidArgument as exc:
                return str(exc)
            return "accepted"

        handle = await sf.run(flow)
        assert "not an awaitable" in handle.result

    async def test_returning_an_awaitable_is_an_error(self, sf: Starflow) -> None:
        async def later() -> int:  # a plain coroutine function: not a starflow call
            return 1

        @workflow(name=unique("swf-returns-coro"))
        def flow() -> Any:
            return later()

        handle = await sf.run(flow)
        assert handle.status == "error"
        assert "WorkflowDefinitionError" in (handle.error or "")


class TestThreads:
    async def test_bounded_by_sync_workflow_threads(self, spy: Any) -> None:
        """sync_workflow_threads=1: a second sync workflow waits for the first's thread,
        and gets it once the first pauses (a paused run holds none)."""
        order_of: list[str] = []
        first_in = threading.Event()
        release = threading.Event()

        @workflow(name=unique("swf-bounded"))
        def flow(name: str) -> str:
            order_of.append(f"{name} in")
            if name == "first":
                first_in.set()
                release.wait(10)
            starflow.wait_for("go")
            return name

        config = StarflowConfig(sync_workflow_threads=1)
        async with Starflow(spy, config=config, maintenance=False) as app:
            async with anyio.create_task_group() as tg:
                tg.start_soon(app.run, flow, "first")
                await anyio.to_thread.run_sync(first_in.wait, 10)
                tg.start_soon(app.run, flow, "second")
                limiter = app.runner.runtime.workflow_threads()
                with anyio.fail_after(10):
                    while limiter.statistics().tasks_waiting == 0:
                        await anyio.lowlevel.checkpoint()
                assert order_of == ["first in"]
                release.set()
            assert order_of == ["first in", "second in"]
            assert limiter.borrowed_tokens == 0

    def test_bad_thread_count_refused(self) -> None:
        for bad in (0, -1, True, 1.5):
            with pytest.raises(ConfigError, match="sync_workflow_threads"):
                StarflowConfig(sync_workflow_threads=bad)  # type: ignore[arg-type]

    def test_definition_is_threaded(self) -> None:
        assert registry.get("swf-order") is not None
        assert registry.get("swf-order").threaded  # type: ignore[union-attr]
        assert not registry.get("swf-order-async").threaded  # type: ignore[union-attr]

    def test_plain_def_methods_and_generators_still_refused(self) -> None:
        def gen() -> Any:
            yield 1

        with pytest.raises(WorkflowDefinitionError, match="generator function"):
            workflow(name=unique("swf-gen"))(gen)

        with pytest.raises(WorkflowDefinitionError, match="cannot decorate a method"):
            class Holder:
                @workflow(name=unique("swf-method"))
                def method(self) -> None:
                    return None



class TestSameHistory:
    async def test_a_paused_async_run_resumes_as_a_plain_def(self, sf: Starflow) -> None:
        """The same workflow deployed as async def, then as plain def: a run paused
        under the first replays under the second (same node ids), steps not re-run."""
        name = unique("swf-redeploy")
        item = unique("redeploy")

        @workflow(name=name)
        async def before(x: str) -> str:
            r = await reserve(x)
            go = await starflow.wait_for("go")
            return f"{r} {go}"

        handle = await sf.run(before, item)
        assert handle.status == "paused"

        @workflow(name=name)  # the new deploy: same name and version, plain def
        def after(x: str) -> str:
            r = reserve(x)
            go = starflow.wait_for("go")
            return f"{r} {go} (plain)"

        done = await sf.signal(handle.run_id, "go", "now")
        assert (done.status, done.result) == ("success", f"reserved-{item} now (plain)")
        assert CALLS[f"reserve:{item}"] == 1


class TestMoreWaits:
    async def test_wait_for_any_wake_token_and_session_vars(self, sf: Starflow) -> None:
        """wait_for_any, a wake token resumed from outside, session vars: each from the
        thread, each returning its value; replays return the same."""
        tokens: list[str] = []
        session = unique("sess")

        @step(name=unique("swf-hand-out"))
        def hand_out() -> None:
            tokens.append(starflow.wake_token("paid"))

        @workflow(name=unique("swf-waits"))
        def flow() -> list[Any]:
            event, payload = starflow.wait_for_any("approve", "reject")
            starflow.session_set(session, "decision", event)
            hand_out()
            paid = starflow.wait_for("paid")
            return [event, payload, paid, starflow.session_get(session, "decision")]

        handle = await sf.run(flow)
        handle = await sf.signal(handle.run_id, "reject", {"why": "too dear"})
        assert handle.status == "paused" and len(tokens) == 1
        done = await sf.resume(tokens[0], 42)
        assert done.result == ["reject", {"why": "too dear"}, 42, "reject"]
        nodes = [e.node_id for e in await sf.events(handle.run_id)
                 if e.event_type == "node_complete"]
        assert nodes[0] == "any:approve|reject#1" and "wait:paid#1" in nodes


class TestDeadlineBetweenCalls:
    @pytest.mark.parametrize("then_call", [True, False], ids=["next-call", "returns"])
    async def test_deadline_while_the_thread_runs_its_own_code(self, then_call: bool) -> None:
        """The deadline passes while the body runs its own code: it is stopped at its
        next call (which never starts), or, returning without one, its value is
        dropped; either way the run ends in WorkflowTimeout and no thread is left."""
        in_code = threading.Event()
        go_on = threading.Event()
        ran: list[str] = []

        @step(name=unique("swf-after"))
        async def after() -> None:
            ran.append("after")

        @workflow(name=unique("swf-dl-code"), timeout=timedelta(minutes=5))
        def flow() -> str:
            reserve("deadline")  # the run's row is written with its first boundary
            in_code.set()
            go_on.wait(10)  # the body's own code while the deadline passes
            if then_call:
                after()
            return "finished"

        async with WorkflowEnvironment(time_skipping=False) as env:
            handle = await env.start(flow)
            await anyio.to_thread.run_sync(in_code.wait, 10)
            await env.advance(timedelta(minutes=6))
            go_on.set()
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle.run_id, timeout=600)
            assert info.value.error_type == "WorkflowTimeout"
            await threads_released(env.runner.runtime.workflow_threads())
        assert ran == []


class TestPoolStepsAndMethods:
    async def test_a_pool_step_pauses_the_thread_and_a_job_worker_runs_it(self) -> None:
        """A @step(pool=...) from a plain def workflow: the run pauses on the job (no
        thread held), a job worker runs it, the wake replays the body to its value."""
        pool = unique("swf-pool")

        @step(name=unique("swf-remote"), pool=pool)
        def remote(x: int) -> int:
            return x * 2

        @workflow(name=unique("swf-remote-flow"))
        def flow() -> int:
            return starflow.call(remote, 21) + 1

        async with WorkflowEnvironment() as env:
            handle = await env.run(flow)
            assert handle.status == "paused"
            assert env.runner.runtime.workflow_threads().borrowed_tokens == 0
            jobs = env.app.job_worker(pool)
            async with anyio.create_task_group() as tg:
                tg.start_soon(jobs.work_once)
                await env.quiesce()
            assert await env.result(handle.run_id) == 43

    async def test_a_method_step_from_a_plain_def_workflow(self, sf: Starflow) -> None:
        """A step that is a method runs on the instance the workflow calls it on."""
        class Counter:
            def __init__(self) -> None:
                self.total = 0

            @step(name=unique("swf-counter-add"))
            def add(self, n: int) -> int:
                self.total += n
                return self.total

        counter = Counter()

        @workflow(name=unique("swf-method"))
        def flow() -> int:
            counter.add(2)
            return starflow.call(counter.add, 3)

        handle = await sf.run(flow)
        assert (handle.status, handle.result, counter.total) == ("success", 5, 5)
