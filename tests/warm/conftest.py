"""Warm-tier fixtures: the fake clock, the warm tier matrix (memory, Redis), helpers.

Time is ``starflow_testing.FakeClock``: it moves only through ``advance``, so
no test sleeps.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import anyio
import anyio.lowlevel
import pytest
from conftest import require_service, service_available  # the suite's root conftest

from starflow.warm import WarmTier, warm_from_url
from starflow_testing import FakeClock

__all__ = ["FakeClock", "eventually", "open_warm", "require_redis"]

REDIS_URL = os.environ.get("STARFLOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
#: Set in CI: a missing Redis fails the Redis leg instead of skipping it.
REQUIRE_REDIS = bool(os.environ.get("STARFLOW_REQUIRE_REDIS"))

def redis_available() -> bool:
    return service_available(REDIS_URL, 6379)


def require_redis() -> None:
    """Skip (locally) or fail (STARFLOW_REQUIRE_REDIS set, as in CI) without Redis."""
    require_service("Redis", REDIS_URL, 6379, required=REQUIRE_REDIS,
                    url_variable="STARFLOW_TEST_REDIS_URL")


async def eventually(predicate: Callable[[], Awaitable[bool]], *, what: str,
                     limit: float = 10.0) -> None:
    """Yield to other tasks (no sleeping) until ``predicate()`` holds.

    ``limit`` is a real-time safety net only: database calls finish on driver
    threads, so the loop checks between scheduler passes.
    """
    with anyio.fail_after(limit):
        while not await predicate():
            await anyio.lowlevel.checkpoint()
    assert await predicate(), what


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=["memory", "redis"])
def warm_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def warm_url(warm_kind: str) -> str:
    if warm_kind == "redis":
        require_redis()
        return REDIS_URL
    return f"memory://test-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def redis_cleanup(warm_kind: str) -> AsyncIterator[list[str]]:
    """Workspaces whose Redis keys are deleted after the test."""
    workspaces: list[str] = []
    yield workspaces
    if warm_kind != "redis" or not workspaces:
        return
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(REDIS_URL)
    try:
        for ws in workspaces:
            keys = [k async for k in client.scan_iter(match=f"starflow:{ws}:*")]
            if keys:
                await client.delete(*keys)
    finally:
        await client.aclose()


def open_warm(url: str, workspace_id: str, env: str = "prod") -> WarmTier:
    return warm_from_url(url, workspace_id=workspace_id, env=env)
