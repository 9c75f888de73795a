"""Fair pools (#30): per-key rate limits, weighted round robin across keys, kept slots."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

import starflow
from starflow import ConfigError, Starflow
from starflow.adapters.base import WorkflowStateAdapter
from starflow.runtime.maintenance import Maintenance
from starflow_testing import FakeClock
from tests.conftest import require_postgres

START = datetime(2030, 1, 1, tzinfo=UTC)


@starflow.workflow(name="fair-job")
async def job(n: int) -> int:
    return n


@starflow.workflow(name="fair-napper")
async def napper(n: int) -> int:
    await starflow.sleep(timedelta(minutes=5))
    return n


FLAKY = {"fail": True}


@starflow.step
async def maybe_fail(n: int) -> int:
    if FLAKY["fail"]:
        raise RuntimeError("flaky")
    return n


@starflow.workflow(name="fair-flaky")
async def flaky(n: int) -> int:
    return await maybe_fail(n)


@asynccontextmanager
async def app_on(db_url: str, workspace_id: str, clock: FakeClock
                 ) -> AsyncIterator[Starflow]:
    async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False,
                             clock=clock) as sf:
        yield sf


#: The concurrency key of every run :func:`queue` started (RunInfo does not carry it).
KEYS: dict[str, str | None] = {}


async def claim_keys(sf: Starflow, pool: str, limit: int) -> list[str | None]:
    """Claim up to ``limit`` runs of ``pool``; their concurrency keys in claim order."""
    now = sf.clock.now()
    runs = await sf.adapter.claim_runs("w", pool=pool, now=now,
                                       lease_until=now + timedelta(hours=1), limit=limit)
    return [KEYS[r.id] for r in runs]


async def finish_all(adapter: WorkflowStateAdapter, pool: str) -> None:
    for run in await adapter.list_runs(status="running", limit=10_000):
        if run.runner_pool == pool:
            await adapter.update_run(run.id, "test_finish", status="success",
                                     claim_state="complete", leased_by=None, lease_until=None)


async def queue(sf: Starflow, clock: FakeClock, pool: str, key: str | None, count: int) -> None:
    opts = sf.options(pool=pool, concurrency_key=key)
    for n in range(count):
        KEYS[(await opts.start(job, n)).run_id] = key
        await clock.advance(timedelta(milliseconds=1))


class TestFairness:
    """A fair pool claims round robin across keys; a plain pool claims oldest first."""

    @pytest.mark.parametrize("fair", [True, False])
    async def test_a_hot_tenant_does_not_starve_a_small_one(
            self, db_url: str, workspace_id: str, fair: bool) -> None:
        """1,000 runs of a hot tenant queued first: a fair claim of one run at a time
        reaches the small tenant's five runs within ten claims; a plain one not at all."""
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", concurrency=4, fair=fair)
            await queue(sf, clock, "p", "hot", 1000)
            await queue(sf, clock, "p", "small", 5)
            served: list[str | None] = []
            for _ in range(10):
                served += await claim_keys(sf, "p", 1)
                await finish_all(sf.adapter, "p")
            small = served.count("small")
            assert small == (5 if fair else 0), served
            if fair:  # strictly alternating while both have runs
                assert served[:10] == ["hot", "small"] * 5

    async def test_many_keys_each_get_a_turn(self, db_url: str, workspace_id: str) -> None:
        """A batch claim of a fair pool takes one run per key before a second of any."""
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", fair=True)
            await queue(sf, clock, "p", "hot", 50)
            for k in range(20):
                await queue(sf, clock, "p", f"t{k:02}", 2)
            await queue(sf, clock, "p", None, 2)  # runs without a key share one turn
            first = await claim_keys(sf, "p", 22)
            assert Counter(first) == Counter(["hot", None, *(f"t{k:02}" for k in range(20))])
            second = await claim_keys(sf, "p", 22)
            assert Counter(second) == Counter(first)
            # Only the hot key is left: it takes the rest.
            assert await claim_keys(sf, "p", 100) == ["hot"] * 48

    async def test_weights(self, db_url: str, workspace_id: str) -> None:
        """Weight 3 against weight 1: three claims for every one while both wait."""
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", fair=True, key_weights={"a": 3})
            await queue(sf, clock, "p", "b", 40)  # b queued first: FIFO would favour it
            await queue(sf, clock, "p", "a", 40)
            # The ratio holds within every claim of four (a claim returns its
            # runs oldest first, not in the order picked).
            for _ in range(10):
                assert Counter(await claim_keys(sf, "p", 4)) == {"a": 3, "b": 1}

    async def test_priority_first_then_fairness(self, db_url: str, workspace_id: str) -> None:
        """Fairness works within a priority level: higher-priority runs go first
        (round robin among their keys), as in a plain pool."""
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", fair=True)
            await queue(sf, clock, "p", "a", 5)
            for key, count in (("b", 3), ("c", 1)):
                opts = sf.options(pool="p", concurrency_key=key, priority=10)
                for n in range(count):
                    KEYS[(await opts.start(job, n)).run_id] = key
                    await clock.advance(timedelta(milliseconds=1))
            served = [k for _ in range(6) for k in await claim_keys(sf, "p", 1)]
            assert served == ["b", "c", "b", "b", "a", "a"]
            # In one claim too: the four urgent runs, then a's.
            await queue(sf, clock, "p", "d", 2)
            opts = sf.options(pool="p", concurrency_key="e", priority=5)
            KEYS[(await opts.start(job, 0)).run_id] = "e"
            assert Counter(await claim_keys(sf, "p", 3)) == {"e": 1, "a": 1, "d": 1}

    async def test_an_idle_key_gathers_no_credit(self, db_url: str, workspace_id: str) -> None:
        """A key that had nothing queued while others were served does not get a
        burst of turns when it comes back: it rejoins at the pool's virtual time."""
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", fair=True)
            await queue(sf, clock, "p", "a", 30)
            assert await claim_keys(sf, "p", 20) == ["a"] * 20
            await queue(sf, clock, "p", "b", 10)
            served = await claim_keys(sf, "p", 6)
            assert Counter(served) == {"a": 3, "b": 3}

    async def test_key_concurrency_and_pool_concurrency_hold(
            self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", fair=True, concurrency=5, key_concurrency=2)
            await queue(sf, clock, "p", "a", 10)
            await queue(sf, clock, "p", "b", 10)
            await queue(sf, clock, "p", "c", 10)
            served = await claim_keys(sf, "p", 20)
            assert len(served) == 5
            assert max(Counter(served).values()) == 2
            assert await claim_keys(sf, "p", 20) == []

    async def test_turning_fair_on_takes_effect_at_the_next_claim(
            self, db_url: str, workspace_id: str) -> None:
        """Even after claims of the pool as a plain limited one (PostgreSQL caches a
        pool's limits between claims): the next claim is fair."""
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", concurrency=100)
            await queue(sf, clock, "p", "hot", 20)
            await queue(sf, clock, "p", "small", 2)
            assert await claim_keys(sf, "p", 1) == ["hot"]
            await sf.set_pool_limits("p", concurrency=100, fair=True)
            served = [k for _ in range(4) for k in await claim_keys(sf, "p", 1)]
            assert served.count("small") == 2, served

    async def test_racing_claimers_keep_every_limit(self, db_url: str,
                                                    workspace_id: str) -> None:
        """Two adapters, four claimers at once on one fair pool: no run claimed twice,
        the pool's concurrency, each key's concurrency and rate all hold."""
        if db_url == "memory://":
            pytest.skip("a private in-memory database cannot be shared by two adapters")
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as a, \
                app_on(db_url, workspace_id, clock) as b:
            await a.set_pool_limits("p", concurrency=7, key_concurrency=3,
                                    key_rate_limit=(2, timedelta(minutes=1)), fair=True)
            for key in ("x", "y", "z", "w"):
                await queue(a, clock, "p", key, 10)
            claimed: list[str | None] = []

            async def claimer(sf: Starflow) -> None:
                for _ in range(5):
                    claimed.extend(await claim_keys(sf, "p", 3))

            async with anyio.create_task_group() as tg:
                for sf in (a, b, a, b):
                    tg.start_soon(claimer, sf)
            assert len(claimed) == 7
            assert max(Counter(claimed).values()) == 2  # the key rate binds first
            running = [r for r in await a.list_runs(status="running", limit=100)
                       if r.runner_pool == "p"]
            assert len(running) == 7

    async def test_runs_of_any_pool_keep_their_turn(self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", fair=True)
            await sf.start(job, 0)  # queued for any pool, oldest
            await queue(sf, clock, "p", "a", 3)
            runs = await sf.adapter.claim_runs("w", pool="p", now=clock.now(),
                                               lease_until=clock.now() + timedelta(hours=1),
                                               limit=2)
            assert [r.runner_pool for r in runs].count(None) == 1


class TestKeyRateLimit:
    """At most n claims per key in any window; other keys are not held back."""

    @pytest.mark.parametrize("fair", [False, True])
    async def test_window(self, db_url: str, workspace_id: str, fair: bool) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", key_rate_limit=(2, timedelta(minutes=1)), fair=fair)
            await queue(sf, clock, "p", "a", 6)
            await queue(sf, clock, "p", "b", 6)
            await queue(sf, clock, "p", None, 3)  # no key: not limited by it
            first = await claim_keys(sf, "p", 20)
            assert Counter(first) == {"a": 2, "b": 2, None: 3}
            await finish_all(sf.adapter, "p")
            await clock.advance(timedelta(seconds=30))
            assert await claim_keys(sf, "p", 20) == []  # finished runs still count
            await clock.advance(timedelta(seconds=31))
            assert Counter(await claim_keys(sf, "p", 20)) == {"a": 2, "b": 2}

    async def test_sliding_not_fixed(self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", key_rate_limit=(2, timedelta(minutes=1)))
            await queue(sf, clock, "p", "a", 6)
            assert await claim_keys(sf, "p", 1) == ["a"]
            await clock.advance(timedelta(seconds=40))
            assert await claim_keys(sf, "p", 5) == ["a"]
            await clock.advance(timedelta(seconds=25))  # the first claim left the window
            assert await claim_keys(sf, "p", 5) == ["a"]
            assert await claim_keys(sf, "p", 5) == []


class TestKeepSlot:
    """A sleeping run releases its slot by default; with keep_slot it keeps it."""

    @pytest.mark.parametrize("keep_slot", [False, True])
    async def test_a_sleeping_run(self, db_url: str, workspace_id: str, keep_slot: bool) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", concurrency=1, keep_slot=keep_slot)
            sleeper = (await sf.options(pool="p").start(napper, 1)).run_id
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 1
            assert (await sf.get_run(sleeper)).status == "paused"
            other = (await sf.options(pool="p").start(job, 2)).run_id
            async with anyio.create_task_group() as tg:
                claimed = await sf.worker(pool="p").claim_once(tg)
            assert claimed == (0 if keep_slot else 1)
            usage = {u.pool: u for u in await sf.pools()}["p"]
            assert (usage.active, usage.kept) == (0, 1 if keep_slot else 0)
            # The sleeper wakes: with keep_slot it is claimed at once, ahead of
            # the run that waits for a slot, although the pool is at its limit.
            await clock.advance(timedelta(minutes=5))
            async with anyio.create_task_group() as tg:
                await Maintenance(sf.runner, poll=False).fire_due(tg)
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 1
            assert await sf.result(sleeper) == 1
            if keep_slot:
                assert (await sf.get_run(other)).status == "queued"
                async with anyio.create_task_group() as tg:
                    assert await sf.worker(pool="p").claim_once(tg) == 1
            assert await sf.result(other) == 2

    async def test_a_retried_run_waits_for_a_slot(self, db_url: str, workspace_id: str) -> None:
        """A run that ended gave its slot up: retried, it queues for a new one."""
        clock = FakeClock(START)
        FLAKY["fail"] = True
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", concurrency=1, keep_slot=True)
            failed = (await sf.options(pool="p").start(flaky, 1)).run_id
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 1
            assert (await sf.get_run(failed)).status == "error"
            await sf.options(pool="p").start(napper, 2)
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 1  # sleeps, keeps it
            FLAKY["fail"] = False
            await sf.retry(failed)
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 0
            assert (await sf.get_run(failed)).status == "queued"

    async def test_key_concurrency_too(self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", key_concurrency=1, keep_slot=True)
            await sf.options(pool="p", concurrency_key="t").start(napper, 1)
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 1
            await sf.options(pool="p", concurrency_key="t").start(job, 2)
            await sf.options(pool="p", concurrency_key="u").start(job, 3)
            async with anyio.create_task_group() as tg:
                assert await sf.worker(pool="p").claim_once(tg) == 1  # only u's


class TestLimitsAreStored:
    """The new limits round-trip, show in sf.pools(), and removing them clears them."""

    async def test_round_trip(self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            stored = await sf.set_pool_limits(
                "p", key_rate_limit=(5, timedelta(seconds=10)), fair=True,
                key_weights={"b": 2, "a": 7}, keep_slot=True)
            assert stored is not None
            assert (stored.key_rate_limit, stored.key_rate_period) == (5, timedelta(seconds=10))
            assert (stored.fair, stored.key_weights, stored.keep_slot) == (
                True, {"a": 7, "b": 2}, True)
            assert [u.limits for u in await sf.pools()] == [stored]
            assert await sf.set_pool_limits("p") is None
            assert await sf.pools() == []

    @pytest.mark.parametrize("kwargs", [
        {"key_rate_limit": (0, timedelta(seconds=1))},
        {"key_rate_limit": (1, 5)},
        {"key_rate_limit": (1, timedelta(days=40_000))},
        {"fair": "yes"},
        {"keep_slot": 1},
        {"key_weights": {"a": 2}},  # without fair
        {"fair": True, "key_weights": {"a": 0}},
        {"fair": True, "key_weights": {"a": True}},
        {"fair": True, "key_weights": {"": 2}},
        {"fair": True, "key_weights": {"a": 1001}},
        {"fair": True, "key_weights": ["a"]},
    ])
    async def test_bad_input_writes_nothing(self, db_url: str, workspace_id: str,
                                            kwargs: dict[str, object]) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", concurrency=3)
            with pytest.raises(ConfigError, match="set_pool_limits"):
                await sf.set_pool_limits("p", **kwargs)  # type: ignore[arg-type]
            limits = await sf.adapter.get_pool_limits("p")
            assert limits is not None
            assert (limits.concurrency, limits.fair, limits.key_weights) == (3, False, None)

    async def test_every_problem_at_once(self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            with pytest.raises(ConfigError) as info:
                await sf.set_pool_limits("p", key_rate_limit=(0, timedelta(1)),
                                         key_weights={"a": -1}, fair=True)
            assert "key_rate_limit" in str(info.value)
            assert "key_weights['a']" in str(info.value)
            assert await sf.pools() == []


class TestPlans:
    """A fair claim walks its keys through idx_workflow_runs_queued_key (049): one
    probe per key, never a scan of the pool's backlog."""

    async def test_postgres(self) -> None:
        require_postgres()
        from adapters.test_postgres import _index_names, scratch_database

        from starflow.adapters.dialect import POSTGRES
        from starflow.adapters.pool_sql import pool_sql, scope_args

        async with scratch_database("starflow_fair") as (_, conn):
            await conn.execute("""
                INSERT INTO workflow_runs (id, workspace_id, env, status, started_at,
                                           claim_state, runner_pool, concurrency_key)
                SELECT gen_random_uuid(), 'ws0', 'prod',
                    CASE WHEN g % 4 = 0 THEN 'queued' ELSE 'success' END,
                    now() - g * interval '1 second',
                    CASE WHEN g % 4 = 0 THEN 'queued' ELSE 'complete' END,
                    CASE WHEN g % 2 = 0 THEN 'p' END,
                    CASE WHEN g % 10 = 0 THEN NULL ELSE 'k' || (g % 1000) END
                FROM generate_series(1, 80000) g""")
            await conn.execute("ANALYZE workflow_runs")
            sql = pool_sql(POSTGRES, None, False)
            args = scope_args(POSTGRES, "ws0", "prod", "p", START, None)
            raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql.heads}", *args)
            assert _index_names(json.loads(raw)) <= {"idx_workflow_runs_queued_key",
                                                     "workflow_runs_pkey"}, raw
            assert "Seq Scan" not in raw, raw
            raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql.null_runs}", *args, 16)
            assert _index_names(json.loads(raw)) == {"idx_workflow_runs_queued_key"}, raw

    async def test_sqlite(self, tmp_path: Path) -> None:
        from starflow.adapters.dialect import SQLITE
        from starflow.adapters.pool_sql import pool_sql, scope_args
        from starflow.adapters.sqlite import LocalWorkflowStateAdapter

        adapter = LocalWorkflowStateAdapter(str(tmp_path / "p.db"), workspace_id="plans")
        async with adapter:
            sql = pool_sql(SQLITE, 0, False)
            args = scope_args(SQLITE, "plans", "prod", "p", START, None)

            def explain(conn: sqlite3.Connection) -> list[str]:
                return [" ".join(str(r[3]) for r in conn.execute(
                    "EXPLAIN QUERY PLAN " + q, a).fetchall()) for q, a in (
                    (sql.heads, args), (sql.key_runs, (*args, "k", 16)),
                    (sql.null_runs, (*args, 16)))]

            plans = await adapter._call(explain)
        for plan in plans:
            assert "idx_workflow_runs_queued_key" in plan, plan
            assert "SCAN workflow_runs" not in plan and "TEMP B-TREE" not in plan, plan
