"""A prune reaches the warm tier: the runs it deletes from cold are forgotten
by the warm tier too (issue #24), through the same-transaction outbox."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from starflow import Starflow
from starflow.adapters import adapter_from_url
from starflow.warm.base import WarmTier
from starflow.warm.memory import InMemoryWarmTier
from starflow.warm.mirror import mirror
from starflow.warm.redis_tier import RedisWarmTier

from .conftest import FakeClock, open_warm
from .flows import approval_flow, progress_flow, sum_flow
from .helpers import drainer_of, wait_drained


@pytest.fixture
async def app(db_url: str, warm_url: str, clock: FakeClock, redis_cleanup: list[str]
              ) -> AsyncIterator[tuple[Starflow, WarmTier]]:
    ws = f"ws-{uuid.uuid4().hex[:10]}"
    redis_cleanup.append(ws)
    tier = open_warm(warm_url, ws)
    cold = adapter_from_url(db_url, workspace_id=ws)
    async with Starflow(mirror(cold, tier, clock=clock), clock=clock) as sf:
        yield sf, tier


async def _pending(sf: Starflow) -> int:
    status = await sf.outbox_status()
    return status.pending


async def _redis_keys(tier: WarmTier, run_id: str) -> list[bytes]:
    assert isinstance(tier, RedisWarmTier)
    return [k async for k in tier.client.scan_iter(match=f"*{run_id}*")]


class TestPruneForgetsWarmCopies:
    """Pruned runs leave the warm tier; everything else stays as it was."""

    async def test_pruned_runs_are_forgotten_by_the_warm_tier(
            self, app: tuple[Starflow, WarmTier], clock: FakeClock) -> None:
        """After prune and drain, the warm tier holds no trace of a pruned run
        (columns, events, progress, high-water mark; on Redis no key), and
        keeps the active runs' projections unchanged."""
        sf, tier = app
        done = [(await sf.run(sum_flow, i, 1)).run_id for i in range(3)]
        paused = (await sf.run(approval_flow, "o-1")).run_id
        working = (await sf.run(progress_flow, 2)).run_id  # paused, with step progress
        await wait_drained(sf, [*done, paused, working])
        for run_id in done:
            assert (await tier.get_run(run_id) or {}).get("status") == "success"
        if isinstance(tier, RedisWarmTier):
            assert await _redis_keys(tier, done[0])
        kept_before = await tier.hashes([paused, working])

        await clock.advance(2)
        applied = drainer_of(sf).applied
        report = await sf.prune(timedelta(seconds=1))
        assert report.runs == 3
        await drainer_of(sf).drain()  # the drainer may have started on its own
        assert await _pending(sf) == 0
        # One session-var delete and one forget per pruned run, nothing more.
        assert drainer_of(sf).applied - applied == 2 * len(done)

        for run_id in done:
            assert await sf.adapter.get_run(run_id) is None
            assert await tier.get_run(run_id) is None
        assert await tier.hashes(done) == dict.fromkeys(done)
        assert await tier.hashes([paused, working]) == kept_before
        assert {r["id"] for r in await tier.live_runs()} == {paused, working}
        if isinstance(tier, RedisWarmTier):
            for run_id in done:
                assert await _redis_keys(tier, run_id) == []
        else:
            assert isinstance(tier, InMemoryWarmTier)
            scope = tier.store.scope(tier.workspace_id, tier.env)
            assert not set(done) & (set(scope.runs) | set(scope.seq) | set(scope.progress))

    async def test_a_dry_run_writes_no_outbox_row(
            self, app: tuple[Starflow, WarmTier], clock: FakeClock) -> None:
        """A dry run deletes nothing, so it tells the warm tier nothing."""
        sf, tier = app
        run_id = (await sf.run(sum_flow, 1, 1)).run_id
        await wait_drained(sf, [run_id])
        await clock.advance(2)
        applied = drainer_of(sf).applied
        report = await sf.prune(timedelta(seconds=1), dry_run=True)
        assert report.run_ids == [run_id]
        await drainer_of(sf).drain()
        assert await _pending(sf) == 0 and drainer_of(sf).applied == applied
        assert await tier.get_run(run_id) is not None
