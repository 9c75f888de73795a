"""Durable timers under plain workers (#29): every worker fires due timers, each once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from starflow import Starflow, sleep, workflow
from starflow.adapters import adapter_from_url
from starflow.runtime.worker import Worker
from starflow_testing import FakeClock, capture_logs
from starflow_testing._quiesce import quiesce
from tests.conftest import adapter_url

from . import flows
from .conftest import CONFIG
from .support import Probe


@workflow(name="wt-short-sleep")
async def short_sleep(tag: str) -> str:
    await flows.note(tag)
    await sleep(timedelta(seconds=1))
    return await flows.note(tag + "-woke")


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def any_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Every durable adapter (a private database for memory)."""
    return adapter_url(str(request.param), tmp_path)


@asynccontextmanager
async def app(url: str, workspace_id: str, clock: FakeClock, **kwargs: object
              ) -> AsyncIterator[tuple[Starflow, Probe]]:
    """An app that runs no maintenance of its own (``maintenance=False``)."""
    probe = Probe(adapter_from_url(url, workspace_id=workspace_id))
    async with Starflow(probe, config=CONFIG, clock=clock, maintenance=False,
                        **kwargs) as sf:  # type: ignore[arg-type]
        yield sf, probe


async def tick_until(clock: FakeClock, probes: list[Probe], run_ids: list[str],
                     seconds: float = 1.0, turns: int = 20) -> None:
    """Advance the clock ``seconds`` at a time until no run of ``run_ids`` is paused.

    The worker tests' clock sees a task waiting on a database thread as blocked:
    let every timer loop's reads finish before time moves again.
    """
    for _ in range(turns):
        await clock.advance(timedelta(seconds=seconds))
        for probe in probes:
            await quiesce(probe.inner.idle)
        runs = [await probes[0].inner.get_run(r) for r in run_ids]
        if all(r is not None and r.status != "paused" for r in runs):
            return


async def serve(worker: Worker, probe: Probe, run_ids: list[str], clock: FakeClock,
                probes: list[Probe] | None = None) -> None:
    """Run ``worker`` until every run has paused, then tick until each succeeded."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        for run_id in run_ids:
            await probe.until_run(run_id, lambda r: r.status in ("paused", "success"))
        await tick_until(clock, probes or [probe], run_ids)
        for run_id in run_ids:
            await probe.until_run(run_id, lambda r: r.status == "success")
        await worker.drain()


class TestPlainWorkerFiresTimers:
    """A plain worker (no ``maintenance``, no server) fires due timers."""

    async def test_a_sleep_of_a_queued_run_fires(self, any_url: str, workspace_id: str,
                                                 clock: FakeClock) -> None:
        async with app(any_url, workspace_id, clock) as (sf, probe):
            run_id = (await sf.start(short_sleep, "q")).run_id
            worker = sf.worker()
            assert worker.fires_timers
            assert worker.maintenance is not None and worker.maintenance.timers_only
            await serve(worker, probe, [run_id], clock)
            assert await sf.result(run_id) == "q-woke"
            events = await sf.events(run_id)
            paused, resumed = (next(e.created_at for e in events if e.event_type == kind)
                               for kind in ("run_paused", "run_resumed"))
            assert resumed - paused == timedelta(seconds=1)

    async def test_an_inline_run_of_a_closed_caller_fires(self, url: str, workspace_id: str,
                                                          clock: FakeClock) -> None:
        """``sf.run`` in a process that fires nothing; only a plain worker elsewhere."""
        async with app(url, workspace_id, clock) as (caller, _), \
                app(url, workspace_id, clock) as (host, probe):
            handle = await caller.run(short_sleep, "i")
            assert handle.status == "paused"
            await serve(host.worker(), probe, [handle.run_id], clock)
            assert await caller.result(handle.run_id) == "i-woke"

    async def test_two_workers_fire_each_timer_once(self, url: str, workspace_id: str,
                                                    clock: FakeClock) -> None:
        async with app(url, workspace_id, clock) as (a, pa), \
                app(url, workspace_id, clock) as (b, pb):
            run_ids = [(await a.start(short_sleep, f"t{i}")).run_id for i in range(12)]
            workers = (a.worker(concurrency=4), b.worker(concurrency=4))
            async with anyio.create_task_group() as tg:
                for worker in workers:
                    tg.start_soon(worker.run)
                for run_id in run_ids:
                    await pa.until_run(run_id, lambda r: r.status == "paused")
                await tick_until(clock, [pa, pb], run_ids)
                for run_id in run_ids:
                    await pa.until_run(run_id, lambda r: r.status == "success")
                for worker in workers:
                    await worker.drain()
            # One wake per run: of two workers firing one timer, one wake held its guard.
            assert pa.count("on_run_resumed") + pb.count("on_run_resumed") == len(run_ids)
            for run_id in run_ids:
                keys = [k for k in flows.EXECUTED if k.startswith(run_id)]
                assert len(keys) == len(set(keys)) == 2


class TestOptOut:
    """``timers=False`` (``--no-timers``) leaves timers to another process, and says so."""

    async def test_no_timers_warns_and_fires_nothing(self, any_url: str, workspace_id: str,
                                                     clock: FakeClock) -> None:
        async with app(any_url, workspace_id, clock) as (sf, probe):
            run_id = (await sf.start(short_sleep, "n")).run_id
            worker = sf.worker(timers=False)
            assert not worker.fires_timers and worker.maintenance is None
            with capture_logs("warning") as logs:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(worker.run)
                    await probe.until_run(run_id, lambda r: r.status == "paused")
                    await tick_until(clock, [probe], [run_id], turns=5)
                    assert (await sf.get_run(run_id)).status == "paused"  # nobody fires it
                    await worker.drain()
            warned = [e for e in logs if "fires no durable timers" in e["event"]]
            assert len(warned) == 1 and warned[0]["log_level"] == "warning"

    async def test_an_app_running_maintenance_adds_no_timer_loop(
            self, url: str, workspace_id: str, clock: FakeClock) -> None:
        probe = Probe(adapter_from_url(url, workspace_id=workspace_id))
        async with Starflow(probe, config=CONFIG, clock=clock, maintenance=True) as sf:
            worker = sf.worker()
            assert worker.maintenance is None and worker.fires_timers
            with capture_logs("warning") as logs:
                run_id = (await sf.start(short_sleep, "m")).run_id
                await serve(worker, probe, [run_id], clock)
            assert not [e for e in logs if "fires no durable timers" in e["event"]]
