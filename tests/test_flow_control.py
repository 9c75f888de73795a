"""Flow control (#18): pool limits enforced in the claim, priorities, dedup, debounce."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

import starflow
from starflow import ConfigError, DuplicateRun, InvalidArgument, Starflow, StorageError
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Command, Unit
from starflow.records import PoolLimits, ScheduleRecord
from starflow.warm.mirror import mirror
from starflow_testing import FakeClock
from starflow_testing.faults import FaultInjectingAdapter
from tests.conftest import POSTGRES_URL, require_postgres

R = TypeVar("R")
START = datetime(2030, 1, 1, tzinfo=UTC)
LEASE = START + timedelta(hours=1)


@starflow.workflow(name="flow-job")
async def job(n: int) -> int:
    return n


@asynccontextmanager
async def app_on(db_url: str, workspace_id: str, clock: FakeClock | None = None
                 ) -> AsyncIterator[Starflow]:
    async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False,
                             clock=clock or FakeClock(START)) as sf:
        yield sf


async def claim(adapter: WorkflowStateAdapter, pool: str | None, now: datetime = START,
                limit: int = 10) -> list[str]:
    runs = await adapter.claim_runs("w", pool=pool, now=now, lease_until=now + timedelta(hours=1),
                                    limit=limit)
    return [r.id for r in runs]


async def finish(adapter: WorkflowStateAdapter, run_id: str) -> None:
    await adapter.update_run(run_id, "test_finish", status="success", claim_state="complete",
                             leased_by=None, lease_until=None)


async def inputs(adapter: WorkflowStateAdapter, ids: list[str]) -> list[Any]:
    return [(await adapter.get_run(i)).input_json["args"][0] for i in ids]  # type: ignore[union-attr]


class TestPriority:
    """Highest priority first, FIFO within one, with and without limits."""

    @pytest.mark.parametrize("limited", [False, True])
    async def test_claim_order(self, db_url: str, workspace_id: str, limited: bool) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            if limited:
                await sf.set_pool_limits("p", concurrency=100)
            for n, priority in enumerate([0, 5, 5, -1, 10, 0]):
                await sf.options(pool="p", priority=priority).start(job, n)
                await clock.advance(timedelta(seconds=1))
            order = []
            for _ in range(6):
                order += await claim(sf.adapter, "p", clock.now(), limit=1)
            assert await inputs(sf.adapter, order) == [4, 1, 2, 0, 5, 3]


class TestConcurrency:
    """Global concurrency is enforced by the claim itself."""

    async def test_limit_counts_executing_runs_of_the_pool(
            self, db_url: str, workspace_id: str) -> None:
        async with app_on(db_url, workspace_id) as sf:
            await sf.set_pool_limits("p", concurrency=2)
            for n in range(5):
                await sf.options(pool="p").start(job, n)
            anywhere = (await sf.start(job, 99)).run_id  # no pool: not the pool's
            first = await claim(sf.adapter, "p")
            assert len(first) == 3 and anywhere in first  # two of the pool's + the free one
            assert await claim(sf.adapter, "p") == []
            await finish(sf.adapter, next(i for i in first if i != anywhere))
            assert len(await claim(sf.adapter, "p")) == 1
            assert await claim(sf.adapter, "p") == []
            usage = {u.pool: u for u in await sf.pools()}["p"]
            assert (usage.queued, usage.active) == (2, 2)

    async def test_racing_claimers_never_exceed_the_limit(
            self, db_url: str, workspace_id: str) -> None:
        if db_url == "memory://":
            pytest.skip("a private in-memory database cannot be shared by two adapters")
        async with app_on(db_url, workspace_id) as a, app_on(db_url, workspace_id) as b:
            await a.set_pool_limits("p", concurrency=3)
            for n in range(30):
                await a.options(pool="p").start(job, n)
            claimed: list[str] = []

            async def claimer(sf: Starflow) -> None:
                for _ in range(5):
                    claimed.extend(await claim(sf.adapter, "p", limit=4))

            async with anyio.create_task_group() as tg:
                for sf in (a, b, a, b):
                    tg.start_soon(claimer, sf)
            assert len(claimed) == 3 == len(set(claimed))

    async def test_key_concurrency(self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", key_concurrency=1)
            started = {}
            for n, key in enumerate(["a", "a", "b", None, "a"]):
                handle = await sf.options(pool="p", concurrency_key=key).start(job, n)
                started[n] = handle.run_id
                await clock.advance(timedelta(milliseconds=1))  # claim order: started_at
            first = await inputs(sf.adapter, await claim(sf.adapter, "p", clock.now()))
            assert sorted(first) == [0, 2, 3]  # one per key; a run without a key is free
            assert await claim(sf.adapter, "p", clock.now()) == []
            await finish(sf.adapter, started[0])
            assert await inputs(sf.adapter, await claim(sf.adapter, "p", clock.now())) == [1]


    async def test_a_pool_at_its_limit_still_takes_runs_of_any_pool_behind_its_own(
            self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", concurrency=1)
            for n in range(40):  # distinct start times: claim order is by started_at
                await sf.options(pool="p").start(job, n)
                await clock.advance(timedelta(milliseconds=1))
            first = await claim(sf.adapter, "p", clock.now(), limit=1)
            assert await inputs(sf.adapter, first) == [0]
            await clock.advance(timedelta(seconds=1))
            free = {(await sf.start(job, 100 + n)).run_id for n in range(2)}
            # 39 of the pool's runs come first in claim order; none can go.
            assert set(await claim(sf.adapter, "p", clock.now(), limit=10)) == free

    async def test_a_full_key_does_not_hide_other_keys(
            self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            await sf.set_pool_limits("p", key_concurrency=1)
            for n in range(40):  # distinct start times: claim order is by started_at
                await sf.options(pool="p", concurrency_key="a").start(job, n)
                await clock.advance(timedelta(milliseconds=1))
            await clock.advance(timedelta(seconds=1))
            await sf.options(pool="p", concurrency_key="b").start(job, 99)
            assert await inputs(sf.adapter, await claim(sf.adapter, "p", clock.now(),
                                                        limit=2)) == [0]
            assert await inputs(sf.adapter, await claim(sf.adapter, "p", clock.now(),
                                                        limit=2)) == [99]


@asynccontextmanager
async def round_trips(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[list[str]]:
    """Each request asyncpg sends and waits on while in the block: a statement
    (``fetch``/``execute`` with arguments), a pipelined batch (``fetchmany``, one
    Sync), or a simple query (``BEGIN``, ``COMMIT``)."""
    import asyncpg.connection

    cls = asyncpg.connection.Connection
    sent: list[str] = []
    real_execute, real_many, real_simple = cls._execute, cls._executemany, cls.execute

    async def execute(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(query)
        return await real_execute(self, query, *args, **kwargs)

    async def many(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        sent.append(f"pipelined: {query}")
        return await real_many(self, query, *args, **kwargs)

    async def simple(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        if not args:  # with arguments it goes through _execute
            sent.append(query)
        return await real_simple(self, query, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(cls, "_execute", execute)
        patch.setattr(cls, "_executemany", many)
        patch.setattr(cls, "execute", simple)
        yield sent


class TestLimitedClaimByVersion:
    """PostgreSQL: a claim of a pool with limits reads, then claims in one statement
    if the pool's limits row is still the version it read, else reads again."""

    async def test_two_round_trips(self, workspace_id: str,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
        require_postgres()
        async with app_on(POSTGRES_URL, workspace_id) as sf:
            await sf.set_pool_limits("p", concurrency=5)
            for n in range(8):
                await sf.options(pool="p").start(job, n)
            assert len(await claim(sf.adapter, "p", limit=2)) == 2  # the pool is known now
            async with round_trips(monkeypatch) as sent:
                assert len(await claim(sf.adapter, "p", limit=2)) == 2
            assert len(sent) == 2, sent  # was 5: BEGIN, lock, read, claim, COMMIT
            assert "xmin::text = $4" in sent[1]  # the claim by version
            assert len(await claim(sf.adapter, "p", limit=10)) == 1  # the limit holds

    @pytest.mark.parametrize("other", ["by version", "locked"])
    async def test_a_claim_between_the_read_and_the_claim_is_seen(
            self, workspace_id: str, monkeypatch: pytest.MonkeyPatch, other: str) -> None:
        """Another claim (of either shape) commits after this claim's read: this one
        claims nothing, reads again and finds the pool full."""
        require_postgres()
        async with app_on(POSTGRES_URL, workspace_id) as a, \
                app_on(POSTGRES_URL, workspace_id) as b:
            b.adapter.versioned_claims = other == "by version"  # type: ignore[attr-defined]
            await a.set_pool_limits("p", concurrency=2)
            for n in range(6):
                await a.options(pool="p").start(job, n)
            assert len(await claim(a.adapter, "p", limit=1)) == 1  # a knows the pool
            adapter: Any = a.adapter
            real_read = adapter._limited_read
            reads: list[list[str]] = []

            async def read(*args: Any, **kwargs: Any) -> Any:
                got = await real_read(*args, **kwargs)
                reads.append(got.ids)
                if len(reads) == 1:  # b spends the last slot after a's read
                    assert len(await claim(b.adapter, "p", limit=1)) == 1
                return got

            monkeypatch.setattr(adapter, "_limited_read", read)
            assert await claim(a.adapter, "p", limit=1) == []
            assert [len(ids) for ids in reads] == [1, 0]  # picked one, then found no room
            usage = {u.pool: u for u in await a.pools()}["p"]
            assert usage.active == 2


class TestRateLimit:
    """At most n claims in any window of the period, across the period boundary too."""

    async def test_window(self, db_url: str, workspace_id: str) -> None:
        async with app_on(db_url, workspace_id) as sf:
            await sf.set_pool_limits("p", rate_limit=(3, timedelta(minutes=1)))
            for n in range(10):
                await sf.options(pool="p").start(job, n)
            t0 = START + timedelta(seconds=30)
            got = await claim(sf.adapter, "p", t0)
            assert len(got) == 3
            for run_id in got:  # finishing does not give the window back
                await finish(sf.adapter, run_id)
            # The window is (now - period, now]: the claims at t0 leave it at t0 + 60 s.
            assert await claim(sf.adapter, "p", t0 + timedelta(seconds=59.999999)) == []
            later = t0 + timedelta(seconds=60)
            assert len(await claim(sf.adapter, "p", later)) == 3
            assert await claim(sf.adapter, "p", later + timedelta(seconds=59)) == []
            usage = {u.pool: u for u in await sf.pools()}["p"]
            assert usage.claimed_in_window == 6  # measured at START: the window is ahead


class TestDedup:
    """A second active run with the key is refused, naming the first, under concurrency."""

    async def test_concurrent_callers(self, db_url: str, workspace_id: str) -> None:
        async with app_on(db_url, workspace_id) as sf:
            outcomes: list[str | DuplicateRun] = []

            async def start(n: int) -> None:
                try:
                    handle = await sf.options(pool="p", dedup_key="order-7").start(job, n)
                    outcomes.append(handle.run_id)
                except DuplicateRun as exc:
                    outcomes.append(exc)

            async with anyio.create_task_group() as tg:
                for n in range(8):
                    tg.start_soon(start, n)
            winners = [o for o in outcomes if isinstance(o, str)]
            losers = [o for o in outcomes if isinstance(o, DuplicateRun)]
            assert len(winners) == 1 and len(losers) == 7
            assert {e.run_id for e in losers} == set(winners)
            assert "order-7" in str(losers[0]) and winners[0] in str(losers[0])
            assert len(await sf.list_runs(template_id="flow-job")) == 1
            # Another pool, or after the run ends: a new run.
            await sf.options(pool="q", dedup_key="order-7").start(job, 1)
            await finish(sf.adapter, winners[0])
            await sf.options(pool="p", dedup_key="order-7").start(job, 2)
            assert len(await sf.list_runs(template_id="flow-job")) == 3


class TestDebounce:
    """The start waits; later calls in the window replace the arguments and restart it."""

    async def test_latest_arguments_after_a_quiet_window(
            self, db_url: str, workspace_id: str) -> None:
        clock = FakeClock(START)
        async with app_on(db_url, workspace_id, clock) as sf:
            ids = set()
            for n in range(3):
                handle = await sf.options(pool="p", debounce=timedelta(seconds=5),
                                          debounce_key="cust-1").start(job, n)
                ids.add(handle.run_id)
                await clock.advance(timedelta(seconds=2))
            assert len(ids) == 1
            # Last call at +4 s: not claimable before +9 s.
            assert await claim(sf.adapter, "p", START + timedelta(seconds=8.9)) == []
            got = await claim(sf.adapter, "p", START + timedelta(seconds=9))
            assert got == list(ids) and await inputs(sf.adapter, got) == [2]
            # Once claimed, a new call starts a new pending run.
            again = await sf.options(pool="p", debounce=timedelta(seconds=5),
                                     debounce_key="cust-1").start(job, 3)
            assert again.run_id not in ids

    async def test_concurrent_callers_share_one_run(
            self, db_url: str, workspace_id: str) -> None:
        async with app_on(db_url, workspace_id) as sf:
            handles = []

            async def call(n: int) -> None:
                handles.append(await sf.options(debounce=timedelta(seconds=5),
                                                debounce_key="k").start(job, n))

            async with anyio.create_task_group() as tg:
                for n in range(8):
                    tg.start_soon(call, n)
            assert len({h.run_id for h in handles}) == 1
            assert len(await sf.list_runs(template_id="flow-job")) == 1


class TestBadInput:
    """Invalid limits and options are ConfigErrors naming them; nothing is written."""

    async def test_pool_limits(self, db_url: str, workspace_id: str) -> None:
        async with app_on(db_url, workspace_id) as sf:
            with pytest.raises(InvalidArgument, match="pool must be a non-empty string"):
                await sf.set_pool_limits("", concurrency=1)
            with pytest.raises(ConfigError) as err:
                await sf.set_pool_limits("p", concurrency=0, key_concurrency=True,  # type: ignore[arg-type]
                                         rate_limit=(5, 60))  # type: ignore[arg-type]
            text = str(err.value)
            for part in ("concurrency must be an int >= 1: 0",
                         "key_concurrency must be an int >= 1: True", "rate_limit must be"):
                assert part in text
            assert await sf.pools() == []
            # All None removes the limits.
            await sf.set_pool_limits("p", concurrency=1)
            assert await sf.set_pool_limits("p") is None
            assert await sf.pools() == []

    async def test_options(self, db_url: str, workspace_id: str) -> None:
        async with app_on(db_url, workspace_id) as sf:
            with pytest.raises(InvalidArgument, match="dedup_key must be a non-empty"):
                sf.options(dedup_key="")
            with pytest.raises(InvalidArgument, match="concurrency_key contains a NUL"):
                sf.options(concurrency_key="a\x00")
            with pytest.raises(ConfigError) as err:
                sf.options(priority=1.5, debounce=timedelta(0))  # type: ignore[arg-type]
            text = str(err.value)
            for part in ("priority must be an int", "debounce must be a positive",
                         "go together"):
                assert part in text
            with pytest.raises(ConfigError, match="apply to queued runs"):
                await sf.options(priority=3).run(job, 1)
            assert await sf.list_runs() == []


@pytest.mark.slow  # EXPLAIN on filled tables
class TestPlans:
    """The claim reads the priority index: a lookup, not a sort of the backlog."""

    async def test_postgres(self) -> None:
        require_postgres()
        from adapters.test_postgres import _index_names, scratch_database

        from starflow.adapters.postgres import CLAIM_SQL

        async with scratch_database("starflow_prio") as (_, conn):
            await conn.execute("""
                INSERT INTO workflow_runs (id, workspace_id, env, status, started_at,
                                           claim_state, runner_pool, priority)
                SELECT gen_random_uuid(), 'ws0', 'prod',
                    CASE WHEN g % 4 = 0 THEN 'queued' ELSE 'success' END,
                    now() - g * interval '1 second',
                    CASE WHEN g % 4 = 0 THEN 'queued' ELSE 'complete' END,
                    CASE WHEN g % 2 = 0 THEN 'gpu' END, g % 7
                FROM generate_series(1, 80000) g""")
            await conn.execute("ANALYZE workflow_runs")
            raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {CLAIM_SQL}", "ws0", "prod",
                                      "gpu", 5, "w", START, START, START, None)
            plan = json.loads(raw)
            assert "idx_workflow_runs_claim_priority" in _index_names(plan), raw
            assert '"Sort"' not in raw, raw  # priority order comes from the index

    async def test_sqlite(self, tmp_path: Path) -> None:
        from starflow.adapters.sqlite import LocalWorkflowStateAdapter

        adapter = LocalWorkflowStateAdapter(str(tmp_path / "p.db"), workspace_id="plans")
        async with adapter:
            statements: list[str] = []
            await adapter._call(lambda conn: conn.set_trace_callback(statements.append))
            await adapter.claim_runs("me", pool="gpu", now=START, lease_until=LEASE, limit=5)
            await adapter._call(lambda conn: conn.set_trace_callback(None))
            update = next(s for s in statements if s.lstrip().upper().startswith("UPDATE"))

            def explain(conn: sqlite3.Connection) -> str:
                rows = conn.execute("EXPLAIN QUERY PLAN " + update).fetchall()
                return " ".join(str(r[3]) for r in rows)

            plan = await adapter._call(explain)
        assert "idx_workflow_runs_claim_priority" in plan, plan
        assert "TEMP B-TREE" not in plan, plan


# -- three worker processes ---------------------------------------------------------


def _max_overlap(spans: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans],
                   key=lambda x: (x[0], x[1]))  # an end before a start at the same instant
    best = cur = 0
    for _, step in edges:
        cur += step
        best = max(best, cur)
    return best


@pytest.mark.slow
class TestWorkerProcesses:
    """3 worker processes on one pool with concurrency=2: never more than 2 at once."""

    @pytest.mark.parametrize("kind", ["sqlite", "postgres"])
    async def test_global_concurrency(self, kind: str, tmp_path: Path,
                                      workspace_id: str) -> None:
        from worker.apps import chunks
        from worker.support import side_effects, spawn_worker, stop

        if kind == "postgres":
            require_postgres()
            url = POSTGRES_URL
        else:
            url = f"sqlite:///{tmp_path / 'w.db'}"
        env = {"SF_POLL": "0.05", "SF_LEASE": "5", "SF_HEARTBEAT": "1", "SF_SWEEP": "5",
               "STARFLOW_TEST_SIDE_LOG": str(tmp_path / "side.log")}
        async with Starflow.open(url, workspace_id=workspace_id, maintenance=False) as sf:
            await sf.set_pool_limits("limited", concurrency=2)
            ids = [(await sf.options(pool="limited").start(chunks, 3, 0.1)).run_id
                   for _ in range(12)]
            # One run at a time per process: three processes could run three at once,
            # and two at once are two processes (so the limit is what holds them).
            procs = [spawn_worker(url, tmp_path / "w.log", "--pool", "limited",
                                  "--concurrency", "1", "--workspace", workspace_id, **env)
                     for _ in range(3)]
            try:
                deadline = time.monotonic() + 90
                while len(await sf.list_runs(status="success", limit=100)) < 12:
                    assert time.monotonic() < deadline, (tmp_path / "w.log").read_text()
                    await anyio.sleep(0.1)
            finally:
                stop(procs)
            spans = []
            for run_id in ids:
                events = await sf.events(run_id)
                starts = [e.created_at for e in events if e.event_type == "node_start"]
                ends = [e.created_at for e in events if e.event_type == "node_complete"]
                spans.append((min(starts).timestamp(), max(ends).timestamp()))
        assert _max_overlap(spans) == 2, spans
        # The runs were spread over the processes (each step logs its pid).
        pids = {pid for _, _, pid in side_effects(tmp_path / "side.log")}
        assert len(pids) >= 2, pids
        assert len(ids) == 12


class _Seams(DelegatingAdapter):
    """Records what reaches the two write seams (where every wrapper sees writes)."""

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self.writes: list[str] = []

    async def execute(self, unit: Unit) -> bool:
        self.writes.extend(unit.methods)
        return await self.inner.execute(unit)

    async def perform(self, command: Command[R]) -> R:
        self.writes.append(command.method)
        return await self.inner.perform(command)


def _schedule(schedule_id: str = "s") -> ScheduleRecord:
    return ScheduleRecord(id=schedule_id, workflow="flow-job", workflow_version=1,
                          definition_id=None, input={"args": [1], "kwargs": {}},
                          cron="0 3 * * *", timezone="UTC", overlap="skip",
                          catchup=timedelta(0), pool=None, next_fire_at=LEASE, due_at=LEASE)


class TestThroughTheSeams:
    """Schedule and pool-limit writes and the debounce re-arm reach ``perform``, so a
    fault there writes nothing and the mirror writes its outbox row with them."""

    async def test_every_write_reaches_perform(self, adapter: WorkflowStateAdapter) -> None:
        seen = _Seams(adapter)
        stored = await seen.upsert_schedule(_schedule(), now=START)
        assert await seen.update_schedule("s", stored.revision, {"paused": True}, now=START)
        await seen.set_pool_limits(PoolLimits(pool="p", concurrency=1), now=START)
        assert await seen.rearm_debounced("flow-job", None, "k", {"args": [2]}, LEASE) is None
        assert await seen.delete_schedule("s")
        assert seen.writes == ["upsert_schedule", "update_schedule", "set_pool_limits",
                               "rearm_debounced", "delete_schedule"]

    async def test_a_fault_writes_nothing(self, adapter: WorkflowStateAdapter) -> None:
        faults = FaultInjectingAdapter(adapter, fail={"upsert_schedule": 1,
                                                      "set_pool_limits": 1})
        with pytest.raises(StorageError, match="injected fault"):
            await faults.upsert_schedule(_schedule(), now=START)
        with pytest.raises(StorageError, match="injected fault"):
            await faults.set_pool_limits(PoolLimits(pool="p", concurrency=1), now=START)
        assert await adapter.list_schedules() == []
        assert await adapter.get_pool_limits("p") is None
        assert (await faults.upsert_schedule(_schedule(), now=START)).id == "s"

    async def test_the_mirror_sees_a_rearm(self, db_url: str, workspace_id: str) -> None:
        async with app_on(db_url, workspace_id) as sf:
            first = await sf.options(debounce=timedelta(seconds=5),
                                     debounce_key="k").start(job, 1)
            mirrored = mirror(sf.adapter, f"memory://rearm-{uuid.uuid4().hex[:8]}")
            before = len(await mirrored.pending_outbox(limit=10_000))
            run_id = await mirrored.rearm_debounced("flow-job", None, "k",
                                                    {"args": [7], "kwargs": {}}, LEASE)
            assert run_id == first.run_id
            rows = (await mirrored.pending_outbox(limit=10_000))[before:]
            assert [(r.run_id, r.kind, r.payload["op"], r.payload["columns"]) for r in rows] == [
                (run_id, "run", "update", {"input_json": {"args": [7], "kwargs": {}}})]
