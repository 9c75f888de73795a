"""The Redis warm tier expires a run's keys once it ends (``warm_finished_ttl``), not before."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from starflow import ConfigError, Starflow, StarflowConfig
from starflow.adapters import adapter_from_url
from starflow.warm.mirror import mirror
from starflow.warm.redis_tier import RedisWarmTier

from .conftest import REDIS_URL, FakeClock, require_redis
from .flows import approval_flow, sum_flow
from .helpers import wait_drained


@pytest.mark.parametrize("warm_kind", ["redis"])
async def test_ended_runs_expire_live_ones_do_not(
        warm_kind: str, clock: FakeClock, redis_cleanup: list[str]) -> None:
    """A finished run's keys carry the configured TTL; a paused run's keys have none."""
    require_redis()
    import redis.asyncio as aioredis

    ws = f"ttl-{uuid.uuid4().hex[:8]}"
    redis_cleanup.append(ws)
    config = StarflowConfig(warm_finished_ttl=timedelta(hours=2))
    cold = adapter_from_url("memory://", workspace_id=ws)
    tier = RedisWarmTier(REDIS_URL, workspace_id=ws, finished_ttl=config.warm_finished_ttl)
    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        async with Starflow(mirror(cold, tier, clock=clock), config=config, clock=clock) as sf:
            done = await sf.run(sum_flow, 1, 2)
            paused = await sf.run(approval_flow, "o-1")
            await wait_drained(sf, [done.run_id, paused.run_id])
            prefix = tier.prefix
            for kind in ("run", "events", "seq"):
                ttl = await client.ttl(f"{prefix}{kind}:{done.run_id}")
                assert 7200 - 60 < ttl <= 7200, (kind, ttl)
                assert await client.ttl(f"{prefix}{kind}:{paused.run_id}") == -1  # no expiry
            # The paused run ends: its keys get the expiry too.
            await sf.signal(paused.run_id, "approval", {"ok": True})
            await wait_drained(sf, [paused.run_id])
            ttl = await client.ttl(f"{prefix}run:{paused.run_id}")
            assert 7200 - 60 < ttl <= 7200
    finally:
        await client.aclose()


def test_ttl_is_validated() -> None:
    """A non-positive TTL is refused, naming the setting."""
    with pytest.raises(ConfigError, match="warm_finished_ttl must be positive"):
        StarflowConfig(warm_finished_ttl=timedelta(0))
    with pytest.raises(ConfigError, match="finished_ttl"):
        RedisWarmTier("redis://127.0.0.1:6379/15", finished_ttl=timedelta(0))


def test_default_is_a_day() -> None:
    """The default keeps an ended run for 24 hours."""
    assert StarflowConfig().warm_finished_ttl == timedelta(hours=24)
    assert RedisWarmTier("redis://127.0.0.1:6379/15").finished_ttl == timedelta(hours=24)
