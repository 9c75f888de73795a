"""Cancellation workflow code can see: RunCancelled at the current await, compensation
steps that run once, the run ends cancelled (or error when the cleanup fails)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import anyio
import pytest

from starflow import (
    InvalidArgument,
    RunCancelled,
    Starflow,
    StarflowConfig,
    WorkflowFailed,
    step,
    wait_for,
    workflow,
)
from starflow.workflow.context import CANCEL_EVENT
from starflow_testing import WorkflowEnvironment


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class TestCancelPaused:
    async def test_compensation_runs_once_and_run_ends_cancelled(self, sf: Starflow) -> None:
        effects: list[str] = []

        @step(name=unique("reserve"))
        async def reserve() -> str:
            effects.append("reserve")
            return "r-1"

        @step(name=unique("release"))
        async def release(reservation: str) -> None:
            effects.append(f"release {reservation}")

        @workflow(name=unique("cancel-paused"))
        async def wf() -> str:
            reservation = await reserve()
            try:
                await wait_for("approval")
            except RunCancelled:
                await release(reservation)
                raise
            return "approved"

        handle = await sf.run(wf)
        assert handle.status == "paused"
        cancelled = await sf.cancel(handle.run_id)
        assert cancelled.status == "cancelled"
        assert effects == ["reserve", "release r-1"]
        with pytest.raises(RunCancelled):
            await sf.result(handle.run_id)
        events = await sf.events(handle.run_id)
        types = [(e.event_type, e.node_id) for e in events]
        assert ("node_error", "wait:approval#1") in types
        assert ("run_cancel_requested", None) in types
        assert types[-1] == ("run_cancelled", None)
        # The request was consumed; a second cancel of the ended run is refused.
        assert await sf.runner.adapter.find_signal(handle.run_id, CANCEL_EVENT) is None

    async def test_finally_returning_still_ends_cancelled(self, sf: Starflow) -> None:
        @step(name=unique("undo"))
        async def undo() -> None:
            return None

        @workflow(name=unique("cancel-finally"))
        async def wf() -> str:
            try:
                await wait_for("go")
            except RunCancelled:
                await undo()
                return "swallowed"
            return "done"

        handle = await sf.run(wf)
        assert (await sf.cancel(handle.run_id)).status == "cancelled"
        run = await sf.get_run(handle.run_id)
        assert run.status == "cancelled"

    async def test_cleanup_that_fails_ends_in_error_with_its_cause(self, sf: Starflow) -> None:
        @workflow(name=unique("cancel-fails"))
        async def wf() -> str:
            try:
                await wait_for("go")
            finally:
                raise ValueError("compensation broke")

        handle = await sf.run(wf)
        ended = await sf.cancel(handle.run_id)
        assert ended.status == "error"
        run = await sf.get_run(handle.run_id)
        assert run.failure is not None and run.failure.type == "ValueError"
        with pytest.raises(WorkflowFailed, match="compensation broke"):
            await sf.result(handle.run_id)

    async def test_wait_in_cleanup_is_refused(self, sf: Starflow) -> None:
        @workflow(name=unique("cancel-wait-in-cleanup"))
        async def wf() -> str:
            try:
                await wait_for("go")
            except RunCancelled:
                try:
                    await wait_for("other")
                except RunCancelled as exc:
                    return str(exc)
            return "done"

        handle = await sf.run(wf)
        assert (await sf.cancel(handle.run_id)).status == "cancelled"

    async def test_force_runs_no_code(self, sf: Starflow) -> None:
        effects: list[str] = []

        @step(name=unique("never"))
        async def never() -> None:
            effects.append("ran")

        @workflow(name=unique("cancel-force"))
        async def wf() -> None:
            try:
                await wait_for("go")
            finally:
                await never()

        handle = await sf.run(wf)
        assert (await sf.cancel(handle.run_id, force=True)).status == "cancelled"
        assert effects == []

    async def test_reserved_event_refused(self, sf: Starflow) -> None:
        @workflow(name=unique("cancel-reserved"))
        async def wf() -> None:
            await wait_for("go")

        handle = await sf.run(wf)
        with pytest.raises(InvalidArgument, match="reserved"):
            await sf.signal(handle.run_id, CANCEL_EVENT, None)
        assert await sf.runner.adapter.find_signal(handle.run_id, CANCEL_EVENT) is None


class TestCancelRunning:
    async def test_step_in_flight_is_cancelled_and_compensated(self, sf: Starflow) -> None:
        """A cancel while a step runs: the step stops at its await, RunCancelled reaches
        the workflow at that step, its compensation runs once, the run ends cancelled."""
        started = anyio.Event()
        effects: list[str] = []

        slow_name = unique("slow")

        @step(name=slow_name)
        async def slow() -> None:
            effects.append("slow started")
            started.set()
            await anyio.sleep_forever()
            effects.append("slow finished")  # never

        @step(name=unique("compensate"))
        async def compensate() -> None:
            effects.append("compensated")

        @workflow(name=unique("cancel-running"))
        async def wf() -> str:
            try:
                await slow()
            except RunCancelled:
                await compensate()
                raise
            return "done"

        run_id = str(uuid.uuid4())
        result: list[str] = []

        async def drive() -> None:
            result.append((await sf.options(run_id=run_id).run(wf)).status)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            with anyio.fail_after(10):
                await started.wait()
            handle = await sf.cancel(run_id)
            assert handle.status in ("running", "cancelled")
        assert result == ["cancelled"]
        assert effects == ["slow started", "compensated"]
        events = await sf.events(run_id)
        errors = [e.node_id for e in events if e.event_type == "node_error"]
        assert errors == [f"step:{slow_name}#1"]
        assert (await sf.get_run(run_id)).status == "cancelled"


async def test_cancel_from_another_process_reaches_a_running_step(
        db_url: str, workspace_id: str) -> None:
    """The app running the run is not the one cancelling: the running engine finds the
    request at its next heartbeat and the step in flight is cancelled."""
    if db_url.startswith("memory"):
        pytest.skip("a private in-memory database cannot be shared by two apps")
    started = anyio.Event()
    effects: list[str] = []

    @step(name=unique("remote-slow"))
    async def slow() -> None:
        started.set()
        await anyio.sleep_forever()

    @step(name=unique("remote-undo"))
    async def undo() -> None:
        effects.append("undone")

    @workflow(name=unique("cancel-remote"))
    async def wf() -> None:
        try:
            await slow()
        finally:
            await undo()

    run_id = str(uuid.uuid4())
    async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False) as runs, \
            Starflow.open(db_url, workspace_id=workspace_id, maintenance=False) as other:
        outcome: list[str] = []

        async def drive() -> None:
            outcome.append((await runs.options(run_id=run_id).run(wf)).status)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            with anyio.fail_after(10):
                await started.wait()
            handle = await other.cancel(run_id)
            assert handle.status == "running"  # requested; the other process delivers it
            engine = runs.runner.engines[run_id]
            assert not engine.cancel_requested
            assert await engine.refresh_lease_once()  # its next heartbeat
            await engine.after_refresh()
        assert outcome == ["cancelled"]
        assert effects == ["undone"]


async def test_cleanup_deadline_ends_the_run_in_error() -> None:
    """A cleanup that outlives cancel_cleanup_timeout is stopped; the run ends error."""
    hang = unique("hang")

    @step(name=hang)
    async def hanging() -> None:
        await anyio.sleep_forever()

    @workflow(name=unique("cancel-deadline"))
    async def wf() -> None:
        try:
            await wait_for("go")
        except RunCancelled:
            await hanging()

    config = StarflowConfig(cancel_cleanup_timeout=timedelta(seconds=30))
    async with WorkflowEnvironment(config=config) as env:
        handle = await env.run(wf)
        assert handle.status == "paused"
        async with anyio.create_task_group() as tg:
            tg.start_soon(env.cancel, handle.run_id)
            await env.advance(timedelta(minutes=2))
        run = await env.get_run(handle.run_id)
        assert run.status == "error"
        assert run.error is not None and "cleanup did not finish" in run.error


async def test_killed_during_cleanup_resumes_the_cleanup() -> None:
    """A SIGKILL while the compensation runs: the recovered run replays the cancel at
    its wait, skips the compensation already recorded, finishes the rest, ends
    cancelled; the work after the wait never runs."""
    from starflow_testing import RunnerKilled

    effects: list[str] = []
    in_cleanup = anyio.Event()
    may_finish = {"now": False}

    @step(name=unique("undo-a"))
    async def undo_a() -> None:
        effects.append("undo a")

    @step(name=unique("slow-undo"))
    async def slow_undo() -> None:
        effects.append("slow undo started")
        in_cleanup.set()
        if not may_finish["now"]:
            await anyio.sleep_forever()

    @step(name=unique("undo-b"))
    async def undo_b() -> None:
        effects.append("undo b")

    @step(name=unique("work"))
    async def work() -> None:
        effects.append("work")

    @workflow(name=unique("cancel-killed"))
    async def wf() -> None:
        try:
            await wait_for("go")
        except RunCancelled:
            await undo_a()
            await slow_undo()
            await undo_b()
            raise
        await work()

    async with WorkflowEnvironment() as env:
        handle = await env.run(wf)
        assert handle.status == "paused"
        killed: list[BaseException] = []

        async def cancel() -> None:
            try:
                await env.cancel(handle.run_id)
            except RunnerKilled as exc:
                killed.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(cancel)
            with anyio.fail_after(10):
                await in_cleanup.wait()
            may_finish["now"] = True
            await env.kill_runner(handle.run_id)
        assert killed and effects == ["undo a", "slow undo started"]
        await env.advance(timedelta(minutes=5))  # lease expires, the sweep requeues it
        with pytest.raises(RunCancelled):
            await env.result(handle.run_id, timeout=timedelta(minutes=5))
        assert effects == ["undo a", "slow undo started", "slow undo started", "undo b"]
        run = await env.get_run(handle.run_id)
        assert run.status == "cancelled"
