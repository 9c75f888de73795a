"""An operator's pause from another process reaches a worker's run at its heartbeat (#30)."""

from __future__ import annotations

from datetime import timedelta

import anyio

from starflow_testing import FakeClock

from . import flows
from .conftest import OpenApp
from .support import all_blocked


class TestPauseFromAnotherProcess:
    """sf.pause in process B; the worker in process A parks the run after its step."""

    async def test_parks_after_the_step_in_flight(self, open_app: OpenApp,
                                                  clock: FakeClock) -> None:
        async with open_app() as (sf, probe), open_app() as (other, _):
            run_id = (await sf.start(flows.gated_flow, "x")).run_id
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                assert await worker.claim_once(tg) == 1
                await flows.started("x").wait()
                assert (await other.pause(run_id)).status == "running"
                await all_blocked()
                engine = sf.runner.engines[run_id]
                assert not engine.pause_requested  # another process: not told directly
                await clock.advance(timedelta(seconds=10))  # the worker's heartbeat
                await probe.until(lambda: engine.pause_requested, "the heartbeat to see it")
                flows.gate("x").set()
                await probe.until(lambda: worker.active == 0, "the run to park")
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.leased_by) == ("paused", "held", None)
            assert [f"{run_id}:step:gated#1"] == flows.EXECUTED
            types = [e.event_type for e in await sf.events(run_id)]
            assert types == ["node_start", "run_pause_requested", "node_complete",
                             "run_paused_by_operator"]
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 0
            assert (await other.resume(run_id)).status == "queued"
            async with anyio.create_task_group() as tg:
                assert await sf.worker().claim_once(tg) == 1
            assert await sf.result(run_id) == "x/x-after/x-last"
