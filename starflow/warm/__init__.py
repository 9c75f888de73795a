"""The warm tier: a live overlay of run state (a hint, never the authority).

Backends load lazily: importing ``starflow.warm`` never imports redis.
"""

from __future__ import annotations

from datetime import timedelta

from ..errors import ConfigError
from ..urls import normalize_scheme, scheme_of
from .base import LiveRun, Projection, WarmTier
from .memory import InMemoryWarmTier, MemoryStore

__all__ = [
    "InMemoryWarmTier",
    "LiveRun",
    "MemoryStore",
    "Projection",
    "WarmTier",
    "warm_from_url",
]


def warm_from_url(url: str, *, workspace_id: str = "celestial", env: str = "prod",
                  finished_ttl: timedelta | None = None) -> WarmTier:
    """Build the warm tier a URL names.

    ``memory://`` (private to this tier), ``memory://name`` (shared by every
    tier of this process opened with that name), ``redis://…`` / ``rediss://…``;
    the scheme in any case. ``finished_ttl``: how long a Redis tier keeps an
    ended run (default 24 h); the in-memory tier keeps runs for its lifetime.
    """
    scheme = scheme_of(url)
    url = normalize_scheme(url)
    if scheme == "memory":
        from .memory import named_store

        name = url[len("memory://"):] if url.startswith("memory://") else ""
        store = named_store(name) if name else None
        return InMemoryWarmTier(store, workspace_id=workspace_id, env=env, url=url)
    if scheme in ("redis", "rediss", "unix"):
        from .redis_tier import RedisWarmTier

        if finished_ttl is None:
            return RedisWarmTier(url, workspace_id=workspace_id, env=env)
        return RedisWarmTier(url, workspace_id=workspace_id, env=env, finished_ttl=finished_ttl)
    raise ConfigError(f"unsupported warm tier URL {url!r}: use memory:// or redis://host:6379/0")
