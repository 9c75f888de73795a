"""In-process cancellation and graceful drain of a worker."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from starflow import RunFinished
from starflow_testing import FakeClock

from . import flows
from .conftest import OpenApp
from .support import all_blocked


class TestCancel:
    """sf.cancel: a paused run at once, a running one at its next boundary."""

    async def test_cancel_a_running_run(self, open_app: OpenApp) -> None:
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.gated_flow, "c")).run_id
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                assert await worker.claim_once(tg) == 1
                await flows.started("c").wait()
                handle = await sf.cancel(run_id, force=True)
                assert handle.status == "cancelled"
                await probe.until(lambda: worker.active == 0, "the engine to stop")
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.error, run.leased_by) == (
                "cancelled", "failed", "cancelled", None)
            types = [e.event_type for e in await sf.events(run_id)]
            assert types == ["node_start", "run_cancelled"]
            assert [f"{run_id}:step:gated#1"] == flows.EXECUTED

    async def test_cancel_a_paused_run(self, open_app: OpenApp) -> None:
        async with open_app() as (sf, _):
            run_id = (await sf.start(flows.signal_flow, "p")).run_id
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 1
            assert (await sf.get_run(run_id)).status == "paused"
            assert (await sf.cancel(run_id, force=True)).status == "cancelled"
            run = await sf.get_run(run_id)
            assert (run.status, run.checkpoint_json) == ("cancelled", None)
            assert await sf.adapter.list_waits(run_id) == []
            assert [e.event_type for e in await sf.events(run_id)][-1] == "run_cancelled"
            with pytest.raises(RunFinished):
                await sf.signal(run_id, "go", {"by": "late"})

    async def test_cancel_a_queued_run(self, open_app: OpenApp) -> None:
        async with open_app() as (sf, _):
            run_id = (await sf.start(flows.one_step, "q")).run_id
            assert (await sf.cancel(run_id, force=True)).status == "cancelled"
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 0
            assert flows.EXECUTED == []


class TestDrain:
    """worker.stop(): no new claims; hand back at the next step, or cancel after grace."""

    async def test_hand_back_at_next_step(self, open_app: OpenApp) -> None:
        async with open_app() as (sf, probe), open_app() as (other, _):
            run_id = (await sf.start(flows.gated_flow, "d")).run_id
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await flows.started("d").wait()
                worker.stop()
                waiting = (await sf.start(flows.one_step, "never-claimed-here")).run_id
                flows.gate("d").set()  # the step in flight finishes...
                await worker.drain()  # ...then the run is handed back
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.leased_by) == ("queued", "queued", None)
            assert worker.released == 1
            assert (await sf.get_run(waiting)).status == "queued"
            types = [e.event_type for e in await sf.events(run_id)]
            assert types == ["node_start", "node_complete"]
            # Another worker finishes it; the finished step is not run again.
            async with anyio.create_task_group() as tg:
                o = other.worker()
                tg.start_soon(o.run)
                await probe.until_run(run_id, lambda r: r.status == "success")
                await o.drain()
            assert flows.EXECUTED.count(f"{run_id}:step:gated#1") == 1

    async def test_grace_expiry_cancels_and_releases(self, open_app: OpenApp,
                                                     clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.gated_flow, "g")).run_id
            worker = sf.worker(grace=5)
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await flows.started("g").wait()
                worker.stop()
                await probe.until(lambda: worker.draining_since is not None, "the drain")
                await all_blocked()  # its timer is set
                await clock.advance(timedelta(seconds=4))
                assert worker.active == 1  # still within the grace period
                await clock.advance(timedelta(seconds=1))
                await worker.drain()
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.leased_by) == ("queued", "queued", None)
            assert [m for m, held in probe.units if held][-1] == ["release_lease"]

    async def test_second_stop_cancels_at_once(self, open_app: OpenApp) -> None:
        async with open_app() as (sf, _):
            run_id = (await sf.start(flows.gated_flow, "s")).run_id
            worker = sf.worker(grace=3600)
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await flows.started("s").wait()
                worker.stop()
                worker.stop(0)
                await worker.drain()
            assert (await sf.get_run(run_id)).status == "queued"
