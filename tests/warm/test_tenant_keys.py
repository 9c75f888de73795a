"""Tenants sharing one warm tier never see each other, whatever their names hold.

Keys used to be ``starflow:{workspace}:{env}:…`` joined with ``:``, so workspace
``acme:prod`` with env ``eu`` and workspace ``acme`` with env ``prod:eu`` shared
every key: one tenant's ``live_runs()`` and ``watch()`` showed the other's runs.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from starflow import Starflow
from starflow.adapters import adapter_from_url
from starflow.warm.mirror import mirror
from starflow.warm.redis_tier import key_prefix

from .conftest import FakeClock, open_warm
from .flows import approval_flow
from .helpers import wait_drained


def test_key_prefixes_cannot_be_forged() -> None:
    """No tenant's prefix equals, or starts, another's."""
    tenants = [("acme:prod", "eu"), ("acme", "prod:eu"), ("acme", "prod"), ("acme%3Aprod", "eu"),
               ("acme*", "eu"), ("a", "b:c:d"), ("a:b", "c:d"), ("a:b:c", "d")]
    prefixes = [key_prefix(ws, env) for ws, env in tenants]
    assert len(set(prefixes)) == len(tenants)
    for a in prefixes:
        for b in prefixes:
            assert a == b or not b.startswith(a), (a, b)
    assert key_prefix("ws-1_a.b~c", "prod") == "starflow:ws-1_a.b~c:prod:"  # plain names as before


@pytest.fixture
async def two_tenants(warm_url: str, clock: FakeClock, redis_cleanup: list[str]
                      ) -> AsyncIterator[tuple[Starflow, Starflow]]:
    tag = uuid.uuid4().hex[:8]
    first = (f"acme{tag}:prod", "eu")
    second = (f"acme{tag}", "prod:eu")
    redis_cleanup.extend([f"acme{tag}%3Aprod", f"acme{tag}"])
    apps = []
    for ws, env in (first, second):
        cold = adapter_from_url("memory://", workspace_id=ws, env=env)
        tier = open_warm(warm_url, ws, env)
        apps.append(Starflow(mirror(cold, tier, clock=clock), clock=clock))
    async with apps[0] as a, apps[1] as b:
        yield a, b


async def test_colliding_names_stay_apart(two_tenants: tuple[Starflow, Starflow]) -> None:
    """A run of ``acme:prod``/``eu`` is invisible to ``acme``/``prod:eu`` and vice versa."""
    a, b = two_tenants
    run_a = await a.run(approval_flow, "o-a")
    run_b = await b.run(approval_flow, "o-b")
    await wait_drained(a, [run_a.run_id])
    await wait_drained(b, [run_b.run_id])
    assert [r.run_id for r in await a.live_runs()] == [run_a.run_id]
    assert [r.run_id for r in await b.live_runs()] == [run_b.run_id]
    assert a.warm is not None and b.warm is not None
    assert await b.warm.get_run(run_a.run_id) is None
    assert await a.warm.get_run(run_b.run_id) is None
