"""The drainer: outbox -> warm in order, backoff while the warm tier is down, lag gauge."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from starflow import Starflow, StarflowConfig
from starflow.adapters import adapter_from_url
from starflow.warm.mirror import mirror
from starflow_testing import capture_logs

from .conftest import FakeClock, eventually, open_warm
from .flows import approval_flow, sum_flow
from .helpers import FlakyWarm, drained, drainer_of, wait_drained


@pytest.fixture
async def app(warm_url: str, clock: FakeClock, redis_cleanup: list[str]
              ) -> AsyncIterator[tuple[Starflow, FlakyWarm]]:
    ws = f"ws-{uuid.uuid4().hex[:10]}"
    redis_cleanup.append(ws)
    tier = FlakyWarm(open_warm(warm_url, ws))
    cold = adapter_from_url("memory://", workspace_id=ws)
    config = StarflowConfig(outbox_retention=timedelta(minutes=1))
    async with Starflow(mirror(cold, tier, clock=clock), clock=clock, config=config) as sf:
        yield sf, tier


class TestDrain:
    """Healthy warm tier: rows drain promptly and warm equals cold."""

    async def test_runs_reach_the_warm_tier(self, app: tuple[Starflow, FlakyWarm]) -> None:
        """After a run, the outbox empties and the warm projection hashes equal cold."""
        sf, _ = app
        done = await sf.run(sum_flow, 2, 3)
        paused = await sf.run(approval_flow, "o-1")
        await wait_drained(sf, [done.run_id, paused.run_id])
        warm = sf.warm
        assert warm is not None
        state = await warm.get_run(done.run_id)
        assert state is not None and state["status"] == "success"
        assert state["result_json"] == 5
        live = await sf.live_runs()
        assert [r.run_id for r in live] == [paused.run_id]
        assert live[0].status == "paused" and live[0].last_event is not None
        status = await sf.outbox_status()
        assert status.level == "ok" and status.applied > 0 and status.warm_healthy
        assert status.drift_corrections == 0  # nothing drifted: reconciliation found it equal

    async def test_applied_rows_are_pruned_after_retention(
            self, app: tuple[Starflow, FlakyWarm], clock: FakeClock) -> None:
        """Applied rows older than outbox_retention are deleted; pending ones never."""
        sf, _ = app
        handle = await sf.run(sum_flow, 1, 1)
        await wait_drained(sf, [handle.run_id])
        drainer = drainer_of(sf)
        await drainer.prune()
        assert await _outbox_rows(sf) > 0  # applied just now: kept
        await clock.advance(61)
        await drainer.prune()  # the drainer may have pruned first on its own schedule
        assert await _outbox_rows(sf) == 0


class TestWarmTierDown:
    """Warm tier down: runs finish, lag climbs and is reported, then drains to zero."""

    async def test_lag_climbs_then_drains_after_recovery(
            self, app: tuple[Starflow, FlakyWarm], clock: FakeClock) -> None:
        """Cold never waits for warm; warn past 2 s, page past 30 s; equal after recovery."""
        sf, tier = app
        tier.down = True
        handles = [await sf.run(sum_flow, i, i) for i in range(3)]
        handles.append(await sf.run(approval_flow, "o-2"))
        assert [h.status for h in handles] == ["success"] * 3 + ["paused"]
        assert (await sf.get_run(handles[0].run_id)).result_json == 0

        status = await sf.outbox_status()
        assert status.pending > 0 and status.level == "ok"
        pending = status.pending

        with capture_logs() as logs:
            await clock.advance(3)
            status = await sf.outbox_status()
            assert status.level == "warn" and status.pending == pending
            assert status.buckets["2s_30s"] == pending
            assert status.oldest_age_seconds == pytest.approx(3.0)
            # The drainer reports it at its next retry (backoff is at most 5 s).
            await _advance_until(clock, lambda: _logged(logs, "outbox lag past 2 s"))

            await clock.advance(30)
            status = await sf.outbox_status()
            assert status.level == "page" and status.buckets["gt_30s"] == pending
            await _advance_until(clock, lambda: _logged(logs, "outbox lag past 30 s"))
        page = next(e for e in logs if e["event"].startswith("outbox lag past 30 s"))
        assert page["log_level"] == "error" and page["pending"] == pending
        warn = next(e for e in logs if e["event"].startswith("outbox lag past 2 s"))
        assert warn["log_level"] == "warning"
        assert status.warm_healthy is False and "injected" in (status.last_error or "")
        assert tier.failures >= 2  # it kept retrying

        tier.down = False
        await clock.advance(5)  # past the longest backoff
        await wait_drained(sf, [h.run_id for h in handles])
        status = await sf.outbox_status()
        assert status.level == "ok" and status.pending == 0 and status.warm_healthy

    async def test_unreachable_redis_does_not_stop_runs(self, clock: FakeClock) -> None:
        """A warm URL nobody listens on: the app opens, runs finish, rows wait."""
        pytest.importorskip("redis")
        async with Starflow.open("memory://", warm="redis://127.0.0.1:1/0", clock=clock) as sf:
            handle = await sf.run(sum_flow, 4, 5)
            assert handle.status == "success" and handle.result == 9
            await eventually(lambda: _unhealthy(sf), what="drainer saw the failure")
            status = await sf.outbox_status()
            assert status.pending > 0 and "127.0.0.1:1" in (status.last_error or "")
            assert not await drained(sf)


async def _advance_until(clock: FakeClock, predicate: Callable[[], Awaitable[bool]]) -> None:
    """Move time 0.5 s at a time (at most the longest backoff) until ``predicate`` holds."""
    for _ in range(12):
        for _ in range(20):  # let woken tasks finish their database calls
            if await predicate():
                return
            await anyio.lowlevel.checkpoint()
        await clock.advance(0.5)
    await eventually(predicate, what="reported within the longest backoff")


async def _logged(logs: Sequence[Mapping[str, Any]], prefix: str) -> bool:
    return any(str(e.get("event", "")).startswith(prefix) for e in logs)


async def _unhealthy(sf: Starflow) -> bool:
    return drainer_of(sf).warm_healthy is False


async def _outbox_rows(sf: Starflow) -> int:
    """Every mirror_outbox row of the (private, in-memory SQLite) cold database."""
    from starflow.adapters.sqlite import LocalWorkflowStateAdapter

    cold = sf.adapter.inner  # type: ignore[attr-defined]
    assert isinstance(cold, LocalWorkflowStateAdapter)
    row = await cold._call(lambda c: c.execute("SELECT count(*) FROM mirror_outbox").fetchone())
    return int(row[0])


def test_lag_buckets_match_the_metrics_gauge() -> None:
    """outbox_status buckets use the labels the Prometheus outbox-lag gauge expects."""
    from starflow.observability import OUTBOX_AGE_BUCKETS
    from starflow.warm.drainer import LAG_BUCKETS

    assert tuple(label for label, _ in LAG_BUCKETS) == OUTBOX_AGE_BUCKETS
