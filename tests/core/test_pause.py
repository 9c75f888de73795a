"""Pause and resume by an operator (#30): runs (sf.pause / sf.resume(run_id)) and pools."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest

import starflow
from starflow import InvalidArgument, RunFinished, RunNotFound, Starflow, StarflowConfig
from starflow_testing import FakeClock

START = datetime(2030, 1, 1, tzinfo=UTC)
CONFIG = StarflowConfig(lease_ttl=timedelta(seconds=30), heartbeat_interval=timedelta(seconds=10),
                        sweep_interval=timedelta(seconds=30), poll_interval=timedelta(seconds=1))

#: Steps executed, in order (reset per test).
EXECUTED: list[str] = []
GATE: dict[str, anyio.Event] = {}
STARTED: dict[str, anyio.Event] = {}


@pytest.fixture(autouse=True)
def _reset() -> None:
    EXECUTED.clear()
    GATE.clear()
    STARTED.clear()


def gate(tag: str) -> anyio.Event:
    return GATE.setdefault(tag, anyio.Event())


def started(tag: str) -> anyio.Event:
    return STARTED.setdefault(tag, anyio.Event())


@starflow.step
async def step_a(tag: str) -> str:
    EXECUTED.append("A")
    started(tag).set()
    await gate(tag).wait()
    return "a"


@starflow.step
async def step_b(tag: str) -> str:
    EXECUTED.append("B")
    return "b"


@starflow.step
async def step_c(tag: str) -> str:
    EXECUTED.append("C")
    return "c"


@starflow.workflow(name="pause-abc")
async def abc(tag: str) -> str:
    return await step_a(tag) + await step_b(tag) + await step_c(tag)


@starflow.step
async def quick(tag: str) -> str:
    EXECUTED.append(tag)
    return tag


@starflow.workflow(name="pause-signal")
async def waits(tag: str) -> str:
    await quick(tag)
    got = await starflow.wait_for("go", timeout=timedelta(hours=1))
    return await quick(f"{tag}-{got['by']}")


@starflow.workflow(name="pause-one")
async def one(tag: str) -> str:
    return await quick(tag)


@asynccontextmanager
async def app(db_url: str, workspace_id: str, clock: FakeClock) -> AsyncIterator[Starflow]:
    async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False,
                             clock=clock, config=CONFIG) as sf:
        yield sf


async def types(sf: Starflow, run_id: str) -> list[str]:
    return [e.event_type for e in await sf.events(run_id)]


class TestPauseRun:
    """A run pauses at its next step, keeps its state, and resumes where it was."""

    async def test_inline_run_paused_during_a_step(self, db_url: str, workspace_id: str
                                                   ) -> None:
        """A, B, C paused during A: A is recorded, B not started; resume finishes it here."""
        clock = FakeClock(START)
        run_id = str(uuid.uuid4())
        async with app(db_url, workspace_id, clock) as sf:
            handles: list[Any] = []

            async def drive() -> None:
                handles.append(await sf.run(abc, "i", run_id=run_id))

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                await started("i").wait()
                asked = await sf.pause(run_id)
                assert asked.status == "running"  # parks at its next step
                gate("i").set()
            assert handles[0].status == "paused"
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.leased_by) == ("paused", "held", None)
            assert EXECUTED == ["A"]
            assert await types(sf, run_id) == [
                "node_start", "run_pause_requested", "node_complete", "run_paused_by_operator"]
            assert await sf.adapter.find_signal(run_id, "__starflow.pause") is None
            again = await sf.pause(run_id)  # idempotent: nothing written
            assert again.status == "paused"
            assert len(await sf.events(run_id)) == 4
            done = await sf.resume(run_id)
            assert (done.status, done.result) == ("success", "abc")
            assert EXECUTED == ["A", "B", "C"]
            assert "run_resumed_by_operator" in await types(sf, run_id)

    async def test_worker_run_paused_during_a_step(self, db_url: str, workspace_id: str
                                                   ) -> None:
        """A worker run parks after A; no worker claims it until resumed, then it finishes."""
        clock = FakeClock(START)
        async with app(db_url, workspace_id, clock) as sf:
            run_id = (await sf.start(abc, "w")).run_id
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                assert await worker.claim_once(tg) == 1
                await started("w").wait()
                await sf.pause(run_id)
                gate("w").set()
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state) == ("paused", "held")
            assert EXECUTED == ["A"]
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 0
            resumed = await sf.resume(run_id)
            assert resumed.status == "queued"
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 1
            assert await sf.result(run_id) == "abc"
            assert EXECUTED == ["A", "B", "C"]

    async def test_queued_run(self, db_url: str, workspace_id: str) -> None:
        """A queued run is held at once and not claimed; resumed, it is queued again."""
        clock = FakeClock(START)
        async with app(db_url, workspace_id, clock) as sf:
            run_id = (await sf.start(one, "q")).run_id
            handle = await sf.pause(run_id)
            assert handle.status == "paused"
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 0
            assert await types(sf, run_id) == ["run_paused_by_operator"]
            assert (await sf.resume(run_id)).status == "queued"
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 1
            assert await sf.result(run_id) == "q"

    async def test_waiting_run_keeps_a_signal_until_resumed(self, db_url: str,
                                                            workspace_id: str) -> None:
        """Paused at a wait: a signal is recorded but does not wake it; resume delivers it."""
        clock = FakeClock(START)
        run_id = str(uuid.uuid4())
        async with app(db_url, workspace_id, clock) as sf:
            assert (await sf.run(waits, "s", run_id=run_id)).status == "paused"
            assert (await sf.pause(run_id)).status == "paused"
            handle = await sf.signal(run_id, "go", {"by": "op"})
            assert handle.status == "paused"
            kept = await sf.adapter.find_signal(run_id, "go")
            assert kept is not None and kept.payload == {"by": "op"}
            assert EXECUTED == ["s"]
            done = await sf.resume(run_id)
            assert (done.status, done.result) == ("success", "s-op")
            assert EXECUTED == ["s", "s-op"]

    async def test_waiting_run_timer_waits_for_resume(self, db_url: str, workspace_id: str
                                                      ) -> None:
        """A held run's timer neither fires nor counts as due; resumed past it, it fires."""
        clock = FakeClock(START)
        run_id = str(uuid.uuid4())
        async with app(db_url, workspace_id, clock) as sf:
            await sf.run(waits, "t", run_id=run_id)
            await sf.pause(run_id)
            await clock.advance(timedelta(hours=2))
            assert await sf.adapter.due_waits(clock.now()) == []
            assert await sf.adapter.next_deadline() is None
            done = await sf.resume(run_id)
            assert done.status == "error"  # its wait_for timed out, now
            assert "WaitTimeout" in (done.error or "")

    async def test_cancel_a_held_run(self, db_url: str, workspace_id: str) -> None:
        """sf.cancel still ends a run paused between steps (its cleanup runs)."""
        clock = FakeClock(START)
        async with app(db_url, workspace_id, clock) as sf:
            run_id = (await sf.start(abc, "c")).run_id
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 1
                await started("c").wait()
                await sf.pause(run_id)
                gate("c").set()
            await sf.cancel(run_id)
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 1
            assert (await sf.get_run(run_id)).status == "cancelled"
            assert EXECUTED == ["A"]


class TestBadInput:
    """Unknown or ended runs: a clear error and nothing written."""

    async def test_unknown_run(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id, FakeClock(START)) as sf:
            missing = str(uuid.uuid4())
            with pytest.raises(RunNotFound):
                await sf.pause(missing)
            with pytest.raises(RunNotFound):
                await sf.resume(missing)
            assert await sf.list_runs() == []

    async def test_ended_run(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id, FakeClock(START)) as sf:
            run_id = str(uuid.uuid4())
            await sf.run(one, "e", run_id=run_id)
            before = await sf.events(run_id)
            with pytest.raises(RunFinished) as info:
                await sf.pause(run_id)
            assert info.value.run_id == run_id
            with pytest.raises(RunFinished):
                await sf.resume(run_id)
            assert await sf.events(run_id) == before

    async def test_resume_a_run_not_paused_writes_nothing(self, db_url: str,
                                                           workspace_id: str) -> None:
        async with app(db_url, workspace_id, FakeClock(START)) as sf:
            run_id = (await sf.start(one, "n")).run_id
            assert (await sf.resume(run_id)).status == "queued"
            assert await sf.events(run_id) == []

    async def test_run_id_with_payload(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id, FakeClock(START)) as sf:
            run_id = (await sf.start(one, "p")).run_id
            await sf.pause(run_id)
            before = await sf.events(run_id)
            with pytest.raises(InvalidArgument):
                await sf.resume(run_id, {"x": 1})
            assert await sf.events(run_id) == before
            assert (await sf.get_run(run_id)).claim_state == "held"

    async def test_token_wake_still_works(self, db_url: str, workspace_id: str) -> None:
        """sf.resume(token, payload) is unchanged: a token is never a UUID."""
        async with app(db_url, workspace_id, FakeClock(START)) as sf:
            run_id = str(uuid.uuid4())
            paused = await sf.run(waits, "k", run_id=run_id)
            assert paused.wake_token is not None
            done = await sf.resume(paused.wake_token, {"by": "token"})
            assert (done.status, done.result) == ("success", "k-token")


class TestPausePool:
    """sf.pause_pool: no claims from that pool; other pools go on; resume claims again."""

    async def test_pause_and_resume(self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("gpu", concurrency=5)
            paused = await sf.pause_pool("gpu")
            assert (paused.paused, paused.concurrency) == (True, 5)
            held = (await sf.options(pool="gpu").start(one, "g")).run_id
            other = (await sf.options(pool="cpu").start(one, "c")).run_id
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="gpu").claim_once(tg) == 0
                assert await sf.worker(pool="cpu").claim_once(tg) == 1
            assert (await sf.get_run(held)).status == "queued"
            assert await sf.result(other) == "c"
            resumed = await sf.resume_pool("gpu")
            assert resumed is not None
            assert (resumed.paused, resumed.concurrency) == (False, 5)
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="gpu").claim_once(tg) == 1
            assert await sf.result(held) == "g"

    async def test_pool_without_limits(self, db_url: str, workspace_id: str) -> None:
        """A pool with no limits is paused too; resumed, its row is gone again."""
        clock = FakeClock(START)
        async with app(db_url, workspace_id, clock) as sf:
            await sf.pause_pool("p")
            run_id = (await sf.options(pool="p").start(one, "p")).run_id
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 0
            # Limits set meanwhile keep the pause; removing them keeps it too.
            await sf.set_pool_limits("p", concurrency=2)
            await sf.set_pool_limits("p")
            assert (await sf.adapter.get_pool_limits("p")).paused  # type: ignore[union-attr]
            assert await sf.resume_pool("p") is None
            assert await sf.resume_pool("p") is None  # idempotent
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 1
            assert await sf.result(run_id) == "p"

    async def test_bad_pool_name_writes_nothing(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id, FakeClock(START)) as sf:
            with pytest.raises(InvalidArgument):
                await sf.pause_pool("")
            assert await sf.pools() == []
