"""A run's end and an update's answer reach callers in other processes by NOTIFY.

The waiting app runs on a fake clock with an hour-long ``poll_interval``, so a
call that returns did not poll: it was woken by the announcement (issue #25:
"woken by NOTIFY on PostgreSQL"). SQLite, and PostgreSQL behind a transaction
pooler without ``listen_url``, cannot announce: ``watch_run`` yields None there
and callers poll.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

import starflow
from starflow import Starflow, StarflowConfig, receive, wait_for, workflow
from starflow.adapters.base import RunWatch
from starflow_testing import FakeClock
from tests.conftest import adapter_url

#: Real seconds a test may take before it fails: far below the fake poll interval.
BOUND = 20


@workflow(name="announce-gate")
async def gate() -> str:
    return str(await wait_for("go"))


@workflow(name="announce-desk")
async def desk() -> int:
    req = await receive("ask", type=int)
    await req.reply(req.payload * 2)
    return int(await wait_for("done"))


@workflow(name="announce-done")
async def done() -> int:
    starflow.set_event("phase", "built")
    starflow.write_stream("out", 1)
    starflow.close_stream("out")
    return 5


@workflow(name="announce-answered")
async def answered() -> int:
    req = await receive("ask", type=int)
    await req.reply(req.payload + 1)
    return 0


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres", "pgbouncer"])
async def test_watch_run_only_where_the_database_announces(kind: str, tmp_path: Path) -> None:
    async with Starflow.open(adapter_url(kind, tmp_path), maintenance=False,
                             workspace_id=f"ws-{uuid.uuid4().hex[:12]}") as sf, \
            sf.adapter.watch_run(str(uuid.uuid4())) as watch:
        if kind == "postgres":
            assert isinstance(watch, RunWatch)
            first = watch.arm()
            assert watch.arm() is first  # not fired: the same event
            first.set()
            assert watch.arm() is not first  # fired: a fresh one
        else:
            assert watch is None


@asynccontextmanager
async def two_processes(workspace_id: str) -> AsyncIterator[tuple[Starflow, Starflow]]:
    """``waiter`` never polls within the test; ``doer`` executes the runs."""
    url = adapter_url("postgres", Path("."))
    config = StarflowConfig(poll_interval=timedelta(hours=1))
    async with Starflow.open(url, workspace_id=workspace_id, maintenance=False,
                             clock=FakeClock(), config=config) as waiter, \
            Starflow.open(url, workspace_id=workspace_id, maintenance=False) as doer:
        yield waiter, doer


async def waiting(sf: Starflow, run_id: str) -> None:
    """Return once ``sf`` watches ``run_id`` and its read is done (it is waiting)."""
    watches = sf.adapter._run_watches  # type: ignore[attr-defined]
    for _ in range(BOUND * 100):  # the caller's task registers, then reads
        if run_id in watches:
            break
        await anyio.sleep(0.01)
    await sf.adapter.idle()


async def test_result_is_woken_by_the_run_ending_elsewhere(workspace_id: str) -> None:
    async with two_processes(workspace_id) as (waiter, doer):
        handle = await doer.run(gate)
        assert handle.status == "paused"
        got: list[str] = []
        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                async def wait() -> None:
                    got.append(await waiter.result(handle.run_id))

                tg.start_soon(wait)
                await waiting(waiter, handle.run_id)
                assert not got
                await doer.signal(handle.run_id, "go", "green")
        assert got == ["green"]
        assert not waiter.adapter._run_watches  # type: ignore[attr-defined]


async def test_update_is_answered_by_a_worker_elsewhere(workspace_id: str) -> None:
    async with two_processes(workspace_id) as (waiter, doer):
        handle = await doer.start(desk)
        worker = doer.worker()
        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                while (await doer.get_run(handle.run_id)).status != "paused":
                    await doer.runner.wait_settled(1.0)
                assert await waiter.update(handle.run_id, "ask", 21) == 42
                await waiter.signal(handle.run_id, "done", 7)
                assert await waiter.result(handle.run_id) == 7
                worker.stop()


async def test_reads_that_need_not_wait_open_no_listen_connection(
        workspace_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``result``, ``get_event``, ``read_stream`` and a retried ``update`` of a run
    that has ended read first: finding what they want, they LISTEN on nothing."""
    import asyncpg

    connects: list[object] = []
    real_connect = asyncpg.connect

    async def counting(*args: object, **kwargs: object) -> object:
        connects.append(args)
        return await real_connect(*args, **kwargs)

    url = adapter_url("postgres", Path("."))
    config = StarflowConfig(poll_interval=timedelta(hours=1))
    async with Starflow.open(url, workspace_id=workspace_id, maintenance=False,
                             clock=FakeClock(), config=config) as sf:
        monkeypatch.setattr(asyncpg, "connect", counting)
        run = await sf.run(done)
        asking = await sf.run(answered)
        assert await sf.update(asking.run_id, "ask", 1, update_id="u-1") == 2
        assert await sf.result(run.run_id) == 5
        assert await sf.get_event(run.run_id, "phase") == "built"
        assert [v async for v in sf.read_stream(run.run_id, "out")] == [1]
        assert await sf.update(asking.run_id, "ask", 1, update_id="u-1") == 2
        assert connects == []
        assert sf.adapter._listener is None  # type: ignore[attr-defined]
        # A call that must wait still listens (the run is paused in its receive).
        waiting_run = await sf.run(answered)
        got: list[int] = []
        with anyio.fail_after(BOUND):
            async with anyio.create_task_group() as tg:
                async def wait() -> None:
                    got.append(await sf.result(waiting_run.run_id))

                tg.start_soon(wait)
                await waiting(sf, waiting_run.run_id)
                assert len(connects) == 1
                assert await sf.update(waiting_run.run_id, "ask", 6) == 7
        assert got == [0]


async def test_an_end_between_the_first_read_and_the_watch_is_not_missed(
        workspace_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run ends in another process after ``result``'s first read and before
    its watch listens (that NOTIFY reaches no one): the read after arming sees it."""
    async with two_processes(workspace_id) as (waiter, doer):
        handle = await doer.run(gate)
        real_get_run = waiter.adapter.get_run
        reads: list[str | None] = []

        async def get_run(run_id: str) -> object:
            row = await real_get_run(run_id)
            reads.append(None if row is None else row.status)
            if len(reads) == 1:  # the end lands while this stale row is in hand
                await doer.signal(run_id, "go", "late")
            return row

        monkeypatch.setattr(waiter.adapter, "get_run", get_run)
        with anyio.fail_after(BOUND):
            assert await waiter.result(handle.run_id) == "late"
        assert reads == ["paused", "success"]
