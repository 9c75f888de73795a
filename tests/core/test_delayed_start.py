"""Delayed starts (#30): ``sf.start(..., start_at= / start_after=)`` on the fake clock.

The run is written at once (status queued, claim_state scheduled, its start
time in ``not_before``); no worker claims it before then; a worker wakes up
for it at that time; it can be cancelled before it runs.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio
import pytest

import starflow
from starflow import ConfigError, Starflow, StarflowConfig
from starflow.limits import MAX_DURATION
from starflow.warm.mirror import mirror
from starflow_testing import FakeClock
from starflow_testing._quiesce import quiesce

START = datetime(2030, 1, 1, tzinfo=UTC)
#: A poll interval far longer than any delay here: a worker that wakes at a
#: start time does so because it computed it, not because it polled.
SLOW_POLL = StarflowConfig(poll_interval=timedelta(hours=1))

EXECUTED: list[str] = []


@starflow.workflow(name="delayed-greet")
async def greet(name: str) -> str:
    EXECUTED.append(name)
    return f"hello {name}"


@pytest.fixture(autouse=True)
def _reset() -> None:
    EXECUTED.clear()


@asynccontextmanager
async def app(db_url: str, workspace_id: str, config: StarflowConfig | None = None
              ) -> AsyncIterator[tuple[Starflow, FakeClock]]:
    apps: list[Starflow] = []

    async def settle() -> None:
        async def idle() -> None:
            for a in apps:
                await a.adapter.idle()

        await quiesce(idle)

    clock = FakeClock(START, settle=settle)
    async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock,
                             config=config, maintenance=False) as sf:
        apps.append(sf)
        yield sf, clock


async def claim(sf: Starflow) -> int:
    """One claim pass of a worker (queueing due starts first); drives what it claims."""
    async with anyio.create_task_group() as tg:
        return await sf.worker().claim_once(tg)


class TestScheduled:
    """The run exists at once, visibly scheduled, and runs only from its start time."""

    async def test_written_at_once_and_visible(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, _):
            handle = await sf.start(greet, "ada", start_after=timedelta(hours=1))
            assert handle.status == "queued"
            run = await sf.get_run(handle.run_id)
            assert (run.status, run.claim_state) == ("queued", "scheduled")
            assert run.not_before == START + timedelta(hours=1)
            assert run.started_at == START
            assert [r.id for r in await sf.list_runs(status="queued")] == [handle.run_id]

    async def test_not_claimed_before_its_time(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, clock):
            at = START + timedelta(minutes=90)
            handle = await sf.options(start_at=at).start(greet, "bob")
            # The claim itself never takes a scheduled run, even once due, until a
            # worker queued it: claim_state scheduled is outside the claim indexes.
            raw = await sf.adapter.claim_runs("w", pool=None, now=at,
                                              lease_until=at + timedelta(minutes=1))
            assert raw == []
            await clock.advance_to(at - timedelta(seconds=1))
            assert await claim(sf) == 0
            assert (await sf.get_run(handle.run_id)).claim_state == "scheduled"
            await clock.advance_to(at)
            assert await claim(sf) == 1
            run = await sf.get_run(handle.run_id)
            assert (run.status, run.claim_state) == ("success", "complete")
            assert EXECUTED == ["bob"]

    async def test_queue_due_starts_names_runs_and_next_start(
            self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, _):
            soon = await sf.start(greet, "a", start_after=timedelta(minutes=5))
            await sf.start(greet, "b", start_after=timedelta(minutes=10))
            due = await sf.adapter.queue_due_starts(START)
            assert (due.queued, due.next_start) == ((), START + timedelta(minutes=5))
            due = await sf.adapter.queue_due_starts(START + timedelta(minutes=5))
            assert due.queued == (soon.run_id,)
            assert due.next_start == START + timedelta(minutes=10)
            assert (await sf.get_run(soon.run_id)).claim_state == "queued"
            due = await sf.adapter.queue_due_starts(START + timedelta(hours=1))
            assert len(due.queued) == 1 and due.next_start is None

    async def test_a_past_start_time_starts_at_once(self, db_url: str,
                                                   workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, _):
            handle = await sf.start(greet, "eve", start_at=START - timedelta(days=1))
            run = await sf.get_run(handle.run_id)
            assert (run.claim_state, run.not_before) == ("queued", START - timedelta(days=1))
            assert await claim(sf) == 1
            assert EXECUTED == ["eve"]

    async def test_timeout_counts_from_the_start_time(self, db_url: str,
                                                      workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, _):
            handle = await sf.options(timeout=timedelta(minutes=30),
                                      start_after=timedelta(hours=2)).start(greet, "tim")
            run = await sf.get_run(handle.run_id)
            assert run.deadline_at == START + timedelta(hours=2, minutes=30)


class TestWorkerWakesUp:
    """An idle worker sleeps until the next start time, not a whole poll interval."""

    async def test_wakes_at_the_start_time(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id, SLOW_POLL) as (sf, clock):
            handle = await sf.start(greet, "wake", start_after=timedelta(seconds=10))
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await clock.settle()
                assert worker.next_start == START + timedelta(seconds=10)
                assert clock.next_deadline() == START + timedelta(seconds=10)
                await clock.advance(timedelta(seconds=10))
                with anyio.fail_after(10):
                    assert await sf.result(handle) == "hello wake"
                await worker.drain()
            assert EXECUTED == ["wake"]

    async def test_a_start_written_while_idle_moves_the_wake_up(
            self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id, SLOW_POLL) as (sf, clock):
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await clock.settle()
                assert worker.next_start is None  # idle for a poll interval
                handle = await sf.start(greet, "later", start_after=timedelta(minutes=3))
                await clock.settle()
                assert worker.next_start == START + timedelta(minutes=3)
                await clock.advance(timedelta(minutes=3))
                with anyio.fail_after(10):
                    assert await sf.result(handle) == "hello later"
                await worker.drain()


class TestStuck:
    """A run waiting for its start time is not stuck; once due, it counts from then."""

    async def test_counts_from_the_start_time(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, clock):
            handle = await sf.start(greet, "slow", start_after=timedelta(hours=1))
            await clock.advance(timedelta(minutes=59))
            assert await sf.stuck_runs() == []
            await clock.advance(timedelta(minutes=2))
            await sf.adapter.queue_due_starts(clock.now())  # due: no worker claims it
            assert await sf.stuck_runs() == []  # queued a minute ago, not an hour
            await clock.advance(sf.config.stuck_after)
            assert [r.id for r in await sf.stuck_runs()] == [handle.run_id]


class TestCancelAndIdempotence:
    """Cancelled before its time it never runs; a second start returns the same run."""

    async def test_cancel_before_it_starts(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, clock):
            handle = await sf.start(greet, "never", start_after=timedelta(hours=1))
            assert (await sf.cancel(handle.run_id)).status == "cancelled"
            await clock.advance(timedelta(hours=2))
            assert await claim(sf) == 0
            run = await sf.get_run(handle.run_id)
            assert run.status == "cancelled"
            assert [e.node_id for e in await sf.events(handle.run_id)] == [None]
            assert EXECUTED == []

    async def test_same_run_id_same_run(self, db_url: str, workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, clock):
            run_id = str(uuid.uuid4())
            first = await sf.options(run_id=run_id, start_after=timedelta(hours=1)).start(
                greet, "once")
            await clock.advance(timedelta(minutes=10))
            again = await sf.options(run_id=run_id, start_after=timedelta(hours=1)).start(
                greet, "once")
            assert first.run_id == again.run_id == run_id
            runs = await sf.list_runs()
            assert [r.id for r in runs] == [run_id]
            assert runs[0].not_before == START + timedelta(hours=1)  # the first start's


class TestBadInput:
    """Refused with a ConfigError naming the value, before anything is written."""

    @pytest.mark.parametrize(("options", "says"), [
        ({"start_at": datetime(2030, 1, 2)}, "start_at must be a timezone-aware datetime"),
        ({"start_at": "2030-01-02T00:00:00Z"}, "start_at must be a timezone-aware datetime"),
        ({"start_at": START, "start_after": timedelta(1)}, "pass one of them"),
        ({"start_after": timedelta(seconds=-1)}, "start_after must be a timedelta of zero"),
        ({"start_after": 60}, "start_after must be a timedelta of zero"),
        ({"start_after": MAX_DURATION + timedelta(days=1)}, "at most 36500 days"),
        ({"start_at": START + MAX_DURATION + timedelta(days=1)}, "from now"),
        ({"start_after": timedelta(1), "debounce": timedelta(1), "debounce_key": "k"},
         "debounce sets its own start time"),
    ])
    async def test_refused_nothing_written(self, db_url: str, workspace_id: str,
                                           options: dict[str, object], says: str) -> None:
        async with app(db_url, workspace_id) as (sf, _):
            with pytest.raises(ConfigError, match=says):
                await sf.options(**options).start(greet, "x")  # type: ignore[arg-type]
            if "debounce" not in options:
                with pytest.raises(ConfigError, match=says):
                    await sf.start(greet, "x", **options)
            assert await sf.list_runs() == []

    @pytest.mark.parametrize("options", [{"start_after": timedelta(minutes=1)},
                                         {"start_at": START + timedelta(minutes=1)}])
    async def test_inline_run_refuses_a_delay(self, db_url: str, workspace_id: str,
                                              options: dict[str, object]) -> None:
        async with app(db_url, workspace_id) as (sf, _):
            run_id = str(uuid.uuid4())
            with pytest.raises(ConfigError, match=r"use \.start\(\), not \.run\(\)") as err:
                await sf.options(run_id=run_id, **options).run(greet, "x")  # type: ignore[arg-type]
            assert err.value.run_id == run_id
            with pytest.raises(ConfigError, match=r"use \.start\(\)"):
                await sf.run(greet, "x", **options)
            assert await sf.list_runs() == []
            assert EXECUTED == []


class TestWarmMirror:
    """Queueing a due start reaches the warm tier's outbox in the same transaction."""

    async def test_the_mirror_sees_a_start_queued(self, db_url: str,
                                                  workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, _):
            handle = await sf.start(greet, "warm", start_after=timedelta(minutes=1))
            mirrored = mirror(sf.adapter, f"memory://delayed-{uuid.uuid4().hex[:8]}")
            before = len(await mirrored.pending_outbox(limit=10_000))
            due = await mirrored.queue_due_starts(START + timedelta(minutes=1))
            assert due.queued == (handle.run_id,)
            rows = (await mirrored.pending_outbox(limit=10_000))[before:]
            assert [(r.run_id, r.kind, r.payload["op"], r.payload["columns"])
                    for r in rows] == [(handle.run_id, "run", "update",
                                        {"claim_state": "queued"})]
            # Nothing due: nothing written.
            assert (await mirrored.queue_due_starts(START + timedelta(minutes=2))).queued == ()
            assert len(await mirrored.pending_outbox(limit=10_000)) == before + 1
