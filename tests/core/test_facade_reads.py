"""The reads ``Starflow`` offers the CLI and the web page (#31): a run's events
after an id, its waits, keyset pages of runs, due timers, a run's history
export and the app's scope, over every adapter."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta

import pytest

import starflow.sync
from starflow import InvalidArgument, RunNotFound, Starflow, StarflowError, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow.adapters.pages import RunPageQuery
from starflow.admin.history import export_run
from starflow_testing import FakeClock

pytestmark = pytest.mark.anyio


@workflow(name="facade-reads-waiter")
async def waiter(x: int) -> int:
    got = await wait_for("go", timeout=timedelta(hours=1))
    return x + int(got or 0)


@pytest.fixture
async def sf(db_url: str, workspace_id: str) -> AsyncIterator[Starflow]:
    adapter = adapter_from_url(db_url, workspace_id=workspace_id, env="test")
    async with Starflow(adapter, clock=FakeClock(), maintenance=False) as app:
        yield app


async def test_events_after_an_id_and_waits_of_a_paused_run(sf: Starflow) -> None:
    handle = await sf.run(waiter, 1)
    assert handle.status == "paused"
    [wait] = await sf.waits(handle.run_id)
    assert (wait.run_id, wait.event) == (handle.run_id, "go")
    assert wait.deadline == sf.clock.now() + timedelta(hours=1)
    await sf.signal(handle.run_id, "go", 2)
    assert await sf.result(handle) == 3
    assert await sf.waits(handle.run_id) == []  # an ended run waits on nothing
    events = await sf.events(handle.run_id)
    assert len(events) >= 2
    assert await sf.events(handle.run_id, after_id=events[0].id) == events[1:]
    assert await sf.events(handle.run_id.upper(), after_id=events[-1].id) == []


async def test_events_and_waits_of_an_unknown_run_or_a_bad_id_raise(sf: Starflow) -> None:
    missing = str(uuid.uuid4())
    with pytest.raises(RunNotFound, match=missing):
        await sf.events(missing)
    with pytest.raises(RunNotFound, match=missing):
        await sf.events(missing, after_id=5)
    with pytest.raises(RunNotFound, match=missing):
        await sf.waits(missing)
    handle = await sf.run(waiter, 1)
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(InvalidArgument, match="after_id must be an int >= 0"):
            await sf.events(handle.run_id, after_id=bad)  # type: ignore[arg-type]


async def test_list_runs_page_pages_filters_and_counts(sf: Starflow) -> None:
    ids = [(await sf.start(waiter, i)).run_id for i in range(3)]
    paused = await sf.run(waiter, 9)
    first = await sf.list_runs_page(RunPageQuery(limit=3, counts=True))
    assert len(first.runs) == 3 and first.next is not None
    assert first.counts is not None
    assert {k: v for k, v in first.counts.items() if v} == {"queued": 3, "paused": 1}
    rest = await sf.list_runs_page(RunPageQuery(limit=3, after=first.next))
    assert rest.next is None
    assert {r.id for r in [*first.runs, *rest.runs]} == {*ids, paused.run_id}
    queued = await sf.list_runs_page(RunPageQuery(status="queued"))
    assert sorted(r.id for r in queued.runs) == sorted(ids)
    with pytest.raises(StarflowError, match="limit"):
        await sf.list_runs_page(RunPageQuery(limit=0))


async def test_count_due_timers_counts_waits_and_queued_deadlines(sf: Starflow) -> None:
    now = sf.clock.now()
    await sf.run(waiter, 1)  # a wait_for timeout due in an hour
    await sf.options(timeout=timedelta(minutes=1)).start(waiter, 2)  # a queued run's deadline
    assert await sf.count_due_timers(now) == 0
    assert await sf.count_due_timers(now + timedelta(minutes=2)) == 1
    assert await sf.count_due_timers(now + timedelta(hours=2)) == 2
    assert await sf.count_due_timers(now + timedelta(hours=2), limit=1) == 1
    with pytest.raises(InvalidArgument, match="before must be a timezone-aware"):
        await sf.count_due_timers(datetime(2030, 1, 1))
    with pytest.raises(InvalidArgument, match="limit must be an int >= 1"):
        await sf.count_due_timers(now, limit=0)


async def test_export_run_is_the_history_export_and_scope_is_the_adapters(
        sf: Starflow, workspace_id: str) -> None:
    handle = await sf.run(waiter, 1)
    assert await sf.export_run(handle.run_id) == await export_run(sf.adapter, handle.run_id)
    missing = str(uuid.uuid4())
    with pytest.raises(RunNotFound, match=missing):
        await sf.export_run(missing)
    assert (sf.workspace_id, sf.env) == (workspace_id, "test")


def test_the_sync_facade_reads_the_same(db_url: str, workspace_id: str) -> None:
    with starflow.sync.Starflow.open(db_url, workspace_id=workspace_id, env="test",
                                     clock=FakeClock(), maintenance=False) as sf:
        handle = sf.run(waiter, 1)
        events = sf.events(handle.run_id)
        assert sf.events(handle.run_id, after_id=events[-1].id) == []
        assert [w.event for w in sf.waits(handle.run_id)] == ["go"]
        assert [r.id for r in sf.list_runs_page(RunPageQuery()).runs] == [handle.run_id]
        assert sf.count_due_timers(sf.aio.clock.now() + timedelta(hours=2)) == 1
        assert sf.export_run(handle.run_id)["run"]["id"] == handle.run_id
        assert (sf.workspace_id, sf.env) == (workspace_id, "test")
