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
