"""Warm tier URLs: schemes in any case (RFC 3986 3.1), unknown ones named with the valid ones."""

from __future__ import annotations

import uuid

import pytest

from starflow import ConfigError, Starflow, workflow
from starflow.warm import warm_from_url
from starflow.warm.memory import InMemoryWarmTier

from .conftest import REDIS_URL, require_redis


@workflow(name="warm-urls-echo")
async def echo(value: int) -> int:
    return value


class TestWarmUrlSchemesIgnoreCase:
    """The warm tier's URL scheme is matched without regard to case."""

    async def test_warm_memory_name(self) -> None:
        """MEMORY://name names the same shared in-memory warm tier as memory://name."""
        name = f"ci-{uuid.uuid4().hex[:8]}"
        upper = warm_from_url(f"MEMORY://{name}")
        lower = warm_from_url(f"memory://{name}")
        assert isinstance(upper, InMemoryWarmTier) and isinstance(lower, InMemoryWarmTier)
        assert upper.store is lower.store

    async def test_warm_redis(self) -> None:
        """REDIS://… reaches the Redis warm tier."""
        require_redis()
        url = "REDIS" + REDIS_URL[REDIS_URL.index(":"):]
        async with Starflow.open("memory://", warm=url, maintenance=False,
                                 workspace_id=f"ws-{uuid.uuid4().hex[:12]}") as sf:
            assert (await sf.run(echo, 4)).result == 4
            assert sf.warm is not None and sf.warm.url.startswith("redis://")

    def test_unknown_warm_scheme_lists_the_valid_ones(self) -> None:
        """An unknown warm tier scheme names memory:// and redis://."""
        with pytest.raises(ConfigError, match=r"memory://.*redis://"):
            Starflow.open("memory://", warm="memcached://x")
