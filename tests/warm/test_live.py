"""Warm reads: sf.watch, sf.live_runs, starflow.progress; tenancy of the warm tier."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import anyio
import pytest

import starflow
from starflow import LiveRun, Starflow
from starflow.adapters import adapter_from_url
from starflow.errors import ConfigError, StarflowError
from starflow.warm.mirror import mirror

from .conftest import FakeClock, eventually, open_warm
from .flows import approval_flow, progress_flow, sum_flow
from .helpers import wait_drained


def _open(warm_url: str, ws: str, clock: FakeClock) -> Starflow:
    cold = adapter_from_url("memory://", workspace_id=ws)
    return Starflow(mirror(cold, open_warm(warm_url, ws), clock=clock), clock=clock)


@pytest.fixture
async def app(warm_url: str, clock: FakeClock, redis_cleanup: list[str]
              ) -> AsyncIterator[Starflow]:
    ws = f"ws-{uuid.uuid4().hex[:10]}"
    redis_cleanup.append(ws)
    async with _open(warm_url, ws, clock) as sf:
        yield sf


class TestWatch:
    """sf.watch pushes live status and step progress from the warm tier until the run ends."""

    async def test_watch_sees_progress_and_the_end(self, app: Starflow) -> None:
        """Progress of a step, the pause and the final success reach the watcher."""
        sf = app
        run_id = str(uuid.uuid4())
        seen: list[LiveRun] = []

        async def watcher() -> None:
            async for live in sf.watch(run_id):
                seen.append(live)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher)
            handle = await sf.run(progress_flow, 3, run_id=run_id)  # type: ignore[call-arg]
            assert handle.status == "paused"

            async def progressed() -> bool:
                return any(s.progress.get("step:warm_work#1") == {"done": 3, "of": 3}
                           and s.status == "paused" for s in seen)

            await eventually(progressed, what="watcher saw progress and the pause")
            done = await sf.signal(run_id, "go")
            assert done.status == "success"
        # The watcher returned on its own after the terminal state.
        assert seen[-1].status == "success" and seen[-1].is_terminal
        assert seen[-1].result_json == 3
        assert seen[-1].last_event is not None
        # Progress is warm only: cold never heard of it.
        cold = [e.payload for e in await sf.events(run_id)]
        assert "done" not in str(cold)

    async def test_live_runs_lists_unfinished_runs(self, app: Starflow) -> None:
        """Paused runs are live; finished ones are not."""
        sf = app
        paused = await sf.run(approval_flow, "o-1")
        finished = await sf.run(sum_flow, 1, 2)
        await wait_drained(sf, [paused.run_id, finished.run_id])
        live = await sf.live_runs()
        assert [r.run_id for r in live] == [paused.run_id]
        assert live[0].status == "paused" and live[0].template_id == "warm-approval"
        # The wake token never reaches the warm tier.
        assert paused.wake_token and paused.wake_token not in str(live[0])


class TestProgress:
    """starflow.progress: inside a step only; a no-op without a warm tier."""

    async def test_outside_a_step_is_an_error(self) -> None:
        with pytest.raises(StarflowError, match="inside a @step"):
            await starflow.progress({"x": 1})

    async def test_without_warm_tier_runs_still_work(self, clock: FakeClock) -> None:
        async with Starflow.open("memory://", clock=clock) as sf:
            handle = await sf.run(progress_flow, 2)
            assert handle.status == "paused"
            with pytest.raises(ConfigError, match="warm"):
                async for _ in sf.watch(handle.run_id):
                    pass
            with pytest.raises(ConfigError):
                await sf.live_runs()
            status = await sf.outbox_status()
            assert status.pending == 0 and status.warm is None


class TestTenancy:
    """Two workspaces on one warm store never see each other's state."""

    async def test_workspaces_are_isolated(self, warm_url: str, clock: FakeClock,
                                           redis_cleanup: list[str]) -> None:
        ws_a, ws_b = f"ws-a-{uuid.uuid4().hex[:8]}", f"ws-b-{uuid.uuid4().hex[:8]}"
        redis_cleanup.extend([ws_a, ws_b])
        async with _open(warm_url, ws_a, clock) as a, _open(warm_url, ws_b, clock) as b:
            run_a = await a.run(approval_flow, "a")
            run_b = await b.run(approval_flow, "b")
            await wait_drained(a, [run_a.run_id])
            await wait_drained(b, [run_b.run_id])
            assert [r.run_id for r in await a.live_runs()] == [run_a.run_id]
            assert [r.run_id for r in await b.live_runs()] == [run_b.run_id]
            assert a.warm is not None and b.warm is not None
            assert await a.warm.get_run(run_b.run_id) is None
            assert await b.warm.get_run(run_a.run_id) is None
            assert (await a.warm.hashes([run_b.run_id]))[run_b.run_id] is None
            # A drift sweep in one workspace leaves the other's projection alone.
            await a._maintenance.drainer.sweep_once()  # type: ignore[union-attr]
            assert await b.warm.get_run(run_b.run_id) is not None
            assert (await b._maintenance.drainer.sweep_once()) == 0  # type: ignore[union-attr]
