"""PostgreSQL-only behaviour: schema, migrations, RLS, plans, NOTIFY, driver errors.

Skipped when no server answers, unless ``STARFLOW_REQUIRE_POSTGRES`` is set
(CI), in which case a missing server fails the run.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

import starflow
from starflow import Starflow, step, workflow
from starflow.adapters.postgres import (
    CLAIM_SQL,
    MIGRATION_LOCK_KEY,
    QUEUE_DUE_STARTS_SQL,
    SWEEP_SQL,
    PostgresWorkflowStateAdapter,
    channel_name,
)
from starflow.adapters.sql.dialect import POSTGRES
from starflow.adapters.sql.queries import POSTGRES_QUERIES, queue_stats_of
from starflow.adapters.units import Guard, InsertEvent, Unit
from starflow.errors import ConfigError, StorageError
from starflow.migrations import load_migrations
from starflow.records import StartOptions
from starflow.workflow.context import WorkflowContext
from tests.conftest import POSTGRES_URL, require_postgres

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parents[2]
ALL_VERSIONS = [m.version for m in load_migrations("postgres")]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def url_with(user: str | None = None, database: str | None = None, port: int | None = None
             ) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(POSTGRES_URL)
    netloc = f"{user or parts.username or 'postgres'}@{parts.hostname}:{port or parts.port}"
    path = f"/{database}" if database else parts.path
    return urlunsplit((parts.scheme, netloc, path, parts.query, ""))


@pytest.fixture
async def pg(workspace_id: str) -> AsyncIterator[PostgresWorkflowStateAdapter]:
    require_postgres()
    adapter = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id=workspace_id)
    await adapter.open()
    try:
        yield adapter
    finally:
        await adapter.close()


@pytest.fixture
async def admin(pg: PostgresWorkflowStateAdapter) -> AsyncIterator[Any]:
    """A raw superuser connection (the migrated database), for checks the port cannot make."""
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        yield conn
    finally:
        await conn.close()


async def start(adapter: PostgresWorkflowStateAdapter, **options: Any) -> str:
    run_id = str(uuid.uuid4())
    await adapter.on_run_start(run_id, WorkflowContext(run_id=run_id, workflow="wf"),
                               StartOptions(**options), now=T0)
    return run_id


class TestSchema:
    """The migrated schema is the state model's: types, defaults, named partial indexes."""

    async def test_workflow_runs_columns(self, admin: Any) -> None:
        rows = await admin.fetch(
            "SELECT column_name, data_type, is_nullable, column_default "
            "FROM information_schema.columns WHERE table_name = 'workflow_runs' "
            "AND table_schema = current_schema()")
        cols = {r[0]: (r[1], r[2], r[3]) for r in rows}
        assert cols["id"][0] == "uuid"
        assert cols["workspace_id"] == ("text", "NO", "'celestial'::text")
        assert cols["env"] == ("text", "NO", "'prod'::text")
        assert cols["status"][0] == "text"
        for ts in ("started_at", "completed_at", "lease_until", "last_heartbeat"):
            assert cols[ts][0] == "timestamp with time zone"
        # The seed's int, widened by 023 so runs longer than 24.8 days fit.
        assert cols["duration_ms"][0] == "bigint"
        assert cols["checkpoint_json"][0] == "jsonb"
        assert cols["claim_state"] == ("text", "NO", "'running'::text")
        assert cols["claim_attempts"] == ("integer", "NO", "0")
        assert cols["definition_id"] == ("uuid", "YES", None)
        for text_col in ("template_id", "error", "runner_pool", "leased_by"):
            assert cols[text_col] == ("text", "YES", None)

    async def test_events_session_vars_outbox_columns(self, admin: Any) -> None:
        rows = await admin.fetch(
            "SELECT table_name, column_name, data_type, column_default "
            "FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND table_name IN ('workflow_run_events', 'workflow_session_vars', 'mirror_outbox')")
        cols = {(r[0], r[1]): (r[2], r[3]) for r in rows}
        assert cols[("workflow_run_events", "id")][0] == "bigint"
        assert "nextval" in cols[("workflow_run_events", "id")][1]
        assert cols[("workflow_run_events", "run_id")][0] == "uuid"
        assert cols[("workflow_run_events", "payload_json")][0] == "jsonb"
        assert cols[("workflow_run_events", "created_at")] == ("timestamp with time zone",
                                                               "now()")
        assert cols[("workflow_session_vars", "value_json")][0] == "jsonb"
        assert cols[("mirror_outbox", "id")][0] == "bigint"
        assert cols[("mirror_outbox", "run_id")][0] == "uuid"
        assert cols[("mirror_outbox", "payload")][0] == "jsonb"
        assert cols[("mirror_outbox", "applied_at")][0] == "timestamp with time zone"

    async def test_named_indexes_and_definition_fk(self, admin: Any) -> None:
        defs = dict(await admin.fetch(
            "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema() "
            "AND tablename = 'workflow_runs'"))
        assert defs["idx_workflow_runs_workspace_started"].endswith(
            "(workspace_id, env, started_at DESC)")
        assert defs["idx_workflow_runs_lease_until"].endswith(
            "(lease_until) WHERE (lease_until IS NOT NULL)")
        assert defs["idx_workflow_runs_claim_pool"].endswith(
            "(claim_state, runner_pool, started_at) WHERE (claim_state = 'queued'::text)")
        fk = await admin.fetchval(
            "SELECT pg_get_constraintdef(oid) FROM pg_constraint "
            "WHERE conname = 'workflow_runs_definition_id_fkey'")
        assert fk == "FOREIGN KEY (definition_id) REFERENCES workflow_definitions(id)"

    async def test_values_are_stored_natively(self, pg: PostgresWorkflowStateAdapter,
                                              admin: Any) -> None:
        run_id = await start(pg, input={"n": [1, 2]})
        await pg.on_node_start(run_id, "step:a#1", {"x": "y"}, now=at(1))
        row = await admin.fetchrow(
            "SELECT jsonb_typeof(input_json), input_json->'n'->>1, pg_typeof(started_at)::text, "
            "started_at = $2::timestamptz FROM workflow_runs WHERE id = $1::uuid", run_id, T0)
        assert tuple(row) == ("object", "2", "timestamp with time zone", True)
        payload = await admin.fetchval(
            "SELECT payload_json->>'x' FROM workflow_run_events WHERE run_id = $1::uuid",
            run_id)
        assert payload == "y"

    async def test_migrate_again_applies_nothing(self, pg: PostgresWorkflowStateAdapter,
                                                 admin: Any) -> None:
        assert await pg.migrate() == []
        versions = [r[0] for r in await admin.fetch(
            "SELECT version FROM starflow_migrations ORDER BY version")]
        assert versions == ALL_VERSIONS
        assert {1, 18, 19, 20, 21} <= set(versions)


class TestConcurrentMigrations:
    """Two processes migrating one empty database at once: one applies, one waits and skips."""

    async def test_two_processes(self) -> None:
        require_postgres()
        import asyncpg

        name = f"starflow_mig_{uuid.uuid4().hex[:10]}"
        admin = await asyncpg.connect(POSTGRES_URL)
        await admin.execute(f'CREATE DATABASE "{name}"')
        url = url_with(database=name)
        try:
            # Hold the migration lock so both processes are provably inside
            # migrate() at the same time, then let them race for it.
            holder = await asyncpg.connect(url)
            await holder.execute("BEGIN")
            await holder.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
            script = (
                "import anyio, json, sys\n"
                "from starflow.adapters.postgres import PostgresWorkflowStateAdapter as A\n"
                "class Recording(A):\n"
                "    async def migrate(self):\n"
                "        self.applied = await super().migrate()\n"
                "        return self.applied\n"
                "async def main():\n"
                "    a = Recording(sys.argv[1], max_size=1)\n"
                "    await a.open()\n"
                "    print(json.dumps(a.applied))\n"
                "    await a.close()\n"
                "anyio.run(main)\n"
            )
            env = {**os.environ, "PYTHONPATH": str(ROOT)}
            outputs: list[list[int]] = []

            async def migrate_in_process() -> None:
                result = await anyio.run_process([sys.executable, "-c", script, url], env=env,
                                                 check=False)
                assert result.returncode == 0, result.stderr.decode()
                outputs.append(json.loads(result.stdout))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(migrate_in_process)
                    tg.start_soon(migrate_in_process)
                    # Poll a condition (not a fixed delay) until both wait on the lock:
                    # PostgreSQL offers no event for "a backend started waiting".
                    while await holder.fetchval(  # noqa: ASYNC110
                            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                            "AND NOT granted AND database = (SELECT oid FROM pg_database "
                            "WHERE datname = current_database())") < 2:
                        await anyio.sleep(0.02)
                    await holder.execute("COMMIT")
            await holder.close()
            assert sorted(outputs) == [[], ALL_VERSIONS]
            check = await asyncpg.connect(url)
            try:
                rows = await check.fetch("SELECT version FROM starflow_migrations ORDER BY 1")
                assert [r[0] for r in rows] == ALL_VERSIONS
                assert await check.fetchval("SELECT to_regclass('workflow_runs')::text") == (
                    "workflow_runs")
            finally:
                await check.close()
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()


class TestRowLevelSecurity:
    """Per-workspace roles see only their workspace's rows, even with hand-written SQL."""

    async def test_two_roles(self, pg: PostgresWorkflowStateAdapter, admin: Any) -> None:
        import asyncpg

        suffix = uuid.uuid4().hex[:8]
        roles = {"a": f"sf_ws_a_{suffix}", "b": f"sf_ws_b_{suffix}"}
        spaces = {"a": f"rls-a-{suffix}", "b": f"rls-b-{suffix}"}
        for role in roles.values():
            await admin.execute(f'CREATE ROLE "{role}" LOGIN')
            await admin.execute(
                f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
            await admin.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public '
                                f'TO "{role}"')
        adapters: dict[str, PostgresWorkflowStateAdapter] = {}
        try:
            runs: dict[str, str] = {}
            for k in ("a", "b"):
                adapter = PostgresWorkflowStateAdapter(url_with(user=roles[k]),
                                                       workspace_id=spaces[k])
                await adapter.open()  # as the tenant role: migrations already applied
                adapters[k] = adapter
                run_id = await start(adapter)
                runs[k] = run_id
                await adapter.on_node_start(run_id, "step:a#1", {"k": k}, now=at(1))
                await adapter.enqueue_signal(run_id, "go", k, now=at(1))
                await adapter.emit_wait_wake(run_id, "sleep#1", None, at(9), now=at(1))
                await adapter.session_set("shared-session", "key", k, now=T0)
                await adapter.ensure_definition("wf", 1, "h", now=T0)
                await adapter.get_secret("wake", now=T0)

            # Through the adapters: each finds its own run only.
            assert await adapters["a"].get_run(runs["b"]) is None
            assert await adapters["a"].session_get("shared-session", "key") == "a"
            assert await adapters["b"].session_get("shared-session", "key") == "b"

            tables = ("workflow_runs", "workflow_session_vars", "workflow_waits",
                      "workflow_signals", "workflow_definitions", "starflow_keys")
            for k, other in (("a", "b"), ("b", "a")):
                conn = await asyncpg.connect(url_with(user=roles[k]), server_settings={
                    "starflow.workspace_id": spaces[k], "starflow.env": "prod"})
                try:
                    for table in tables:
                        seen = {r[0] for r in await conn.fetch(
                            f"SELECT DISTINCT workspace_id FROM {table}")}
                        assert seen == {spaces[k]}, table
                    events = await conn.fetch("SELECT run_id::text FROM workflow_run_events")
                    assert {r[0] for r in events} == {runs[k]}
                    assert await conn.fetchval("SELECT count(*) FROM mirror_outbox "
                                               "WHERE workspace_id <> $1", spaces[k]) == 0
                    # Writes cannot reach or create the other workspace's rows.
                    await conn.execute("UPDATE workflow_runs SET error = 'touched'")
                    await conn.execute("DELETE FROM workflow_signals")
                    with pytest.raises(asyncpg.InsufficientPrivilegeError,
                                       match="row-level security"):
                        await conn.execute(
                            "INSERT INTO workflow_runs (id, workspace_id, env, status) "
                            "VALUES ($1, $2, 'prod', 'running')",
                            uuid.uuid4(), spaces[other])
                finally:
                    await conn.close()
            # Without the settings a tenant role sees nothing at all (fail closed).
            bare = await asyncpg.connect(url_with(user=roles["a"]))
            try:
                for table in (*tables, "workflow_run_events", "mirror_outbox"):
                    assert await bare.fetchval(f"SELECT count(*) FROM {table}") == 0, table
            finally:
                await bare.close()

            # The owner (here a superuser) is not forced through the policies.
            owner_view = await admin.fetch(
                "SELECT id::text, error FROM workflow_runs WHERE id = ANY($1::uuid[])",
                [uuid.UUID(r) for r in runs.values()])
            assert sorted(r[0] for r in owner_view) == sorted(runs.values())
            assert {r[1] for r in owner_view} == {"touched"}  # each by its own role only
            assert await admin.fetchval(
                "SELECT count(*) FROM workflow_signals WHERE run_id = ANY($1::uuid[])",
                [uuid.UUID(r) for r in runs.values()]) == 0
            flags = await admin.fetch(
                "SELECT relname, relrowsecurity, relforcerowsecurity FROM pg_class "
                "WHERE relname = ANY($1::text[]) AND relkind = 'r'",
                [*tables, "workflow_run_events", "mirror_outbox"])
            assert len(flags) == 8
            assert all(r[1] and not r[2] for r in flags)
        finally:
            for adapter in adapters.values():
                await adapter.close()
            for role in roles.values():
                await admin.execute(f'DROP OWNED BY "{role}"')
                await admin.execute(f'DROP ROLE "{role}"')


@asynccontextmanager
async def scratch_database(prefix: str) -> AsyncIterator[tuple[str, Any]]:
    """A new database with starflow's schema: its URL and a raw connection to it.

    Dropped afterwards, whatever happened.
    """
    require_postgres()
    import asyncpg

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(POSTGRES_URL)
    await admin.execute(f'CREATE DATABASE "{name}"')
    try:
        url = url_with(database=name)
        migrator = PostgresWorkflowStateAdapter(url, workspace_id="ws0")
        await migrator.open()
        await migrator.close()
        conn = await asyncpg.connect(url)
        try:
            yield url, conn
        finally:
            await conn.close()
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def explain_nodes(conn: Any, sql: str, *args: Any) -> list[dict[str, Any]]:
    """Every node of the plan PostgreSQL chooses for ``sql`` with these arguments."""
    raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
    return list(_plan_nodes(raw if isinstance(raw, list) else json.loads(raw)))


def seq_scanned(nodes: list[dict[str, Any]]) -> set[str | None]:
    """The tables a plan reads by a sequential scan."""
    return {n.get("Relation Name") for n in nodes if n.get("Node Type") == "Seq Scan"}


def _plan_nodes(plan: Any) -> Iterator[dict[str, Any]]:
    """Every node of an ``EXPLAIN (FORMAT JSON)`` plan, depth first."""
    if isinstance(plan, dict):
        yield plan
        for value in plan.values():
            yield from _plan_nodes(value)
    elif isinstance(plan, list):
        for value in plan:
            yield from _plan_nodes(value)


def _index_names(plan: Any) -> set[str]:
    return {node["Index Name"] for node in _plan_nodes(plan) if "Index Name" in node}


#: The partial indexes of queued runs a claim may read. With the plan test's few queued
#: rows the planner may take 044's (queue metrics: keyed by workspace, env, pool) and
#: sort the handful it finds; with a backlog (100,000 queued of 300,000, measured) it
#: takes 027's priority order, 0.2-0.5 ms, with or without 044's index. 049's index of
#: queued runs by pool and concurrency key (fair pools) serves the same rows, in
#: priority order within a key, and the planner may take it as well.
CLAIM_INDEXES = {"idx_workflow_runs_claim_pool", "idx_workflow_runs_claim_priority",
                 "idx_workflow_runs_queue_stats", "idx_workflow_runs_queued_key"}


@pytest.mark.slow  # EXPLAIN on filled tables
class TestPlans:
    """The claim and the sweep are served by the state model's partial indexes.

    Plans are checked on a production-shaped table in a scratch database: many
    finished runs, a few queued and leased ones, analyzed. ``enable_seqscan =
    off`` on the small shared test table is not a faithful check: with every
    row looking alike, the planner prefers idx_workflow_runs_workspace_started
    for the claim (it yields ``started_at`` order for the LIMIT), which on a
    real table would walk a workspace's whole history to find queued rows.
    """

    async def test_claim_and_sweep_plans(self) -> None:
        async with scratch_database("starflow_plan") as (_, conn):
            await conn.execute("""
                INSERT INTO workflow_runs (id, workspace_id, env, status, started_at,
                                           claim_state, runner_pool, lease_until)
                SELECT gen_random_uuid(), 'ws' || (g % 3), 'prod',
                    CASE WHEN g % 1500 = 0 THEN 'queued'
                         WHEN g % 900 = 1 THEN 'running' ELSE 'success' END,
                    now() - g * interval '1 second',
                    CASE WHEN g % 1500 = 0 THEN 'queued'
                         WHEN g % 900 = 1 THEN 'running' ELSE 'complete' END,
                    CASE WHEN g % 3000 = 0 THEN 'gpu' END,
                    CASE WHEN g % 900 = 1 THEN now() + interval '30 seconds' END
                FROM generate_series(1, 60000) g""")
            await conn.execute("ANALYZE workflow_runs")

            async def used(sql: str, *args: Any) -> set[str]:
                raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
                return _index_names(json.loads(raw))

            for pool in (None, "gpu"):
                for workflows in (None, ["wf"]):
                    # Either partial index of queued runs: the seed's, or 027's
                    # that also yields priority order (tests/test_flow_control.py).
                    assert CLAIM_INDEXES & await used(
                        CLAIM_SQL, "ws0", "prod", pool, 5, "w", at(30), T0, T0, workflows)
            for requeue in (True, False):  # StarflowConfig.lost_runs
                assert "idx_workflow_runs_lease_until" in await used(
                    SWEEP_SQL[requeue], "ws0", "prod", "runner_lost", T0, "chan")

    async def test_delayed_starts_stay_out_of_the_claim(self) -> None:
        """Runs started for later (#30) cost a claim nothing, however many wait: they
        are outside the claim indexes. Queueing the due ones and finding the next
        start time read idx_workflow_runs_scheduled (042), never the whole table."""
        async with scratch_database("starflow_plan") as (_, conn):
            await conn.execute("""
                INSERT INTO workflow_runs (id, workspace_id, env, status, started_at,
                                           claim_state, not_before)
                SELECT gen_random_uuid(), 'ws0', 'prod',
                    CASE WHEN g % 3 = 0 THEN 'queued' ELSE 'success' END,
                    now() - g * interval '1 second',
                    CASE WHEN g % 3 = 0 THEN 'scheduled' ELSE 'complete' END,
                    CASE WHEN g % 3 = 0 THEN $1::timestamptz + g * interval '1 second' END
                FROM generate_series(1, 60000) g""", at(3600))
            await conn.execute("ANALYZE workflow_runs")
            nodes = await explain_nodes(conn, QUEUE_DUE_STARTS_SQL, "ws0", "prod", T0, "chan")
            assert "idx_workflow_runs_scheduled" in {n.get("Index Name") for n in nodes}
            assert "workflow_runs" not in seq_scanned(nodes)
            # The claim, run for real (rolled back): 20,000 scheduled runs, none read.
            tx = conn.transaction()
            await tx.start()
            try:
                raw = await conn.fetchval(
                    f"EXPLAIN (ANALYZE, FORMAT JSON) {CLAIM_SQL}", "ws0", "prod", None, 5,
                    "w", at(30), T0, T0, None)
            finally:
                await tx.rollback()
            plan = list(_plan_nodes(raw if isinstance(raw, list) else json.loads(raw)))
            assert CLAIM_INDEXES & {n.get("Index Name") for n in plan}
            assert sum(n.get("Rows Removed by Filter", 0) for n in plan) == 0

    async def test_queue_metrics_read_uses_the_partial_indexes(self) -> None:
        """The queue metrics' one query per interval (#30 item 9) with 100,000 runs
        queued among 200,000 finished ones: both of its halves are index-only scans
        of partial indexes (queued runs, 044; executing runs, 027), no table scan.
        Measured: ~55 ms for the 100,000 queued runs (vacuumed); ~150 ms through a
        bitmap scan of the same index when a million-row table was not."""
        async with scratch_database("starflow_plan") as (_, conn):
            await conn.execute("""
                INSERT INTO workflow_runs (id, workspace_id, env, status, started_at,
                                           claim_state, runner_pool, not_before, lease_until)
                SELECT gen_random_uuid(), 'ws0', 'prod',
                    CASE WHEN g % 3 = 0 THEN 'queued'
                         WHEN g % 1000 = 1 THEN 'running' ELSE 'success' END,
                    now() - g * interval '1 second',
                    CASE WHEN g % 3 = 0 THEN 'queued'
                         WHEN g % 1000 = 1 THEN 'running' ELSE 'complete' END,
                    CASE WHEN g % 4 = 0 THEN 'gpu' WHEN g % 4 = 1 THEN 'cpu' END,
                    CASE WHEN g % 30 = 0 THEN $1::timestamptz END,
                    CASE WHEN g % 1000 = 1 THEN now() + interval '30 seconds' END
                FROM generate_series(1, 300000) g""", at(60))
            await conn.execute("VACUUM ANALYZE workflow_runs")
            args = ("ws0", "prod", T0, "ws0", "prod")
            raw = await conn.fetchval(
                f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {POSTGRES_QUERIES.queue_stats}",
                *args)
            parsed = raw if isinstance(raw, list) else json.loads(raw)
            nodes = list(_plan_nodes(parsed))
            used = {n.get("Index Name") for n in nodes}
            assert {"idx_workflow_runs_queue_stats", "idx_workflow_runs_pool_active"} <= used
            assert "workflow_runs" not in seq_scanned(nodes)
            stats = queue_stats_of(await conn.fetch(POSTGRES_QUERIES.queue_stats, *args),
                                   POSTGRES)
            assert sum(s.queued for s in stats) == 100000 - 10000  # not_before ahead: 10,000
            assert sum(s.running for s in stats) == 200
            print(f"queue_stats, 100k queued: {parsed[0]['Execution Time']:.1f} ms")


class ManualClock:
    """A clock whose sleeps end only when the test says so."""

    def __init__(self) -> None:
        self.wake = anyio.Event()

    def now(self) -> datetime:
        return T0

    async def sleep(self, seconds: float) -> None:
        await self.wake.wait()

    async def sleep_until(self, deadline: datetime) -> None:
        await self.wake.wait()


class InstantClock(ManualClock):
    def __init__(self) -> None:
        super().__init__()
        self.wake.set()


class TestWaitForWork:
    """LISTEN/NOTIFY wakes a waiting worker when claimable work is committed."""

    async def waits_until(self, pg: PostgresWorkflowStateAdapter, action: Any) -> None:
        await pg.wait_for_work(InstantClock(), 0)  # LISTEN is up; stale wake consumed
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(pg.wait_for_work, ManualClock(), 3600)
                await action()
        # Reaching here means the waiter returned although its clock never fired.

    async def test_timeout_without_work(self, pg: PostgresWorkflowStateAdapter) -> None:
        await pg.wait_for_work(InstantClock(), 0)
        clock = ManualClock()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(pg.wait_for_work, clock, 5)
                await pg.get_run(str(uuid.uuid4()))
                clock.wake.set()

    async def test_queued_start_notifies(self, pg: PostgresWorkflowStateAdapter) -> None:
        async def action() -> None:
            await start(pg, status="queued", claim_state="queued")

        await self.waits_until(pg, action)

    async def test_requeue_by_update_notifies(self, pg: PostgresWorkflowStateAdapter) -> None:
        run_id = await start(pg)

        async def action() -> None:
            await pg.update_run(run_id, "requeue", status="queued", claim_state="queued")

        await self.waits_until(pg, action)

    async def test_sweep_requeue_notifies(self, pg: PostgresWorkflowStateAdapter) -> None:
        run_id = await start(pg, status="queued", claim_state="queued")
        await pg.claim_runs("w", pool=None, now=T0, lease_until=at(30))

        async def action() -> None:
            assert [r.run_id for r in await pg.expire_old_leases(at(31))] == [run_id]

        await self.waits_until(pg, action)

    async def test_another_adapter_notifies(self, pg: PostgresWorkflowStateAdapter) -> None:
        other = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id=pg.workspace_id)
        await other.open()
        try:
            async def action() -> None:
                await start(other, status="queued", claim_state="queued")

            await self.waits_until(pg, action)
        finally:
            await other.close()

    def test_channel_per_workspace_and_env(self) -> None:
        names = {channel_name("a", "prod"), channel_name("a", "dev"), channel_name("b", "prod"),
                 channel_name("a\0b", "prod")}
        assert len(names) == 4
        assert all(len(n) <= 63 for n in names)


class TestRunIds:
    """Run ids are uuids on PostgreSQL: malformed ones read as absent, and cannot be written."""

    async def test_malformed_ids(self, pg: PostgresWorkflowStateAdapter) -> None:
        assert await pg.get_run("order-123") is None
        assert await pg.list_events("order-123") == []
        assert await pg.list_waits("order-123") == []
        assert await pg.find_signal("order-123", "go") is None
        assert await pg.get_definition("nope") is None
        assert await pg.execute(Unit(guard=Guard(run_id="order-123"), ops=[
            InsertEvent(method="x", run_id="order-123", event_type="phase", node_id=None,
                        payload=None, created_at=T0)])) is False
        with pytest.raises(ConfigError, match="must be a UUID") as info:
            await pg.on_run_start("order-123", WorkflowContext(run_id="order-123", workflow="w"),
                                  now=T0)
        assert info.value.run_id == "order-123"
        assert await pg.list_runs() == []

    async def test_uppercase_uuid_is_canonicalised(self, pg: PostgresWorkflowStateAdapter
                                                   ) -> None:
        run_id = str(uuid.uuid4())
        await pg.on_run_start(run_id.upper(), WorkflowContext(run_id=run_id, workflow="w"),
                              now=T0)
        run = await pg.get_run(run_id.upper())
        assert run is not None and run.id == run_id


class TestDriverErrors:
    """asyncpg never leaks: every driver or socket error is a StorageError that says what to do."""

    async def test_wrong_port(self) -> None:
        require_postgres()
        adapter = PostgresWorkflowStateAdapter(url_with(port=1))
        with pytest.raises(StorageError,
                           match=r"cannot reach PostgreSQL at .*127\.0\.0\.1:1\b") as info:
            await adapter.open()
        assert "Check that the server is running" in str(info.value)
        assert isinstance(info.value.__cause__, OSError)

    async def test_wrong_database(self) -> None:
        require_postgres()
        adapter = PostgresWorkflowStateAdapter(url_with(database="no_such_db_starflow"))
        with pytest.raises(StorageError, match=r"refused connect.*database name") as info:
            await adapter.open()
        assert type(info.value.__cause__).__module__.startswith("asyncpg")

    async def test_not_open(self) -> None:
        adapter = PostgresWorkflowStateAdapter(POSTGRES_URL)
        with pytest.raises(StorageError, match="not open"):
            await adapter.get_run(str(uuid.uuid4()))

    async def test_killed_connection(self, pg: PostgresWorkflowStateAdapter, admin: Any
                                     ) -> None:
        small = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id=pg.workspace_id,
                                             min_size=1, max_size=1)
        await small.open()
        try:
            assert small._pool is not None
            async with small._pool.acquire() as conn:
                pid = conn.get_server_pid()
            await admin.execute("SELECT pg_terminate_backend($1)", pid)
            # Whether the first use meets the dead socket or the pool already saw it
            # close and reconnected depends on timing; either way no asyncpg error
            # reaches the caller, only StorageError.
            try:
                assert await small.get_run(str(uuid.uuid4())) is None
            except StorageError as exc:
                assert "PostgreSQL error during get_run" in str(exc)
                assert type(exc.__cause__).__module__.startswith("asyncpg")
            assert await small.get_run(str(uuid.uuid4())) is None  # the pool reconnects
        finally:
            await small.close()

    async def test_duplicate_run(self, pg: PostgresWorkflowStateAdapter) -> None:
        run_id = await start(pg)
        with pytest.raises(StorageError, match="already exists"):
            await pg.on_run_start(run_id, WorkflowContext(run_id=run_id, workflow="wf"),
                                  now=T0)

    def test_bad_configuration(self) -> None:
        with pytest.raises(ConfigError, match="synchronous_commit"):
            PostgresWorkflowStateAdapter(POSTGRES_URL, synchronous_commit="sometimes")
        with pytest.raises(ConfigError, match="min_size"):
            PostgresWorkflowStateAdapter(POSTGRES_URL, min_size=5, max_size=2)
        with pytest.raises(ConfigError, match="not a PostgreSQL URL"):
            PostgresWorkflowStateAdapter("mysql://x")

    def test_asyncpg_is_imported_lazily(self) -> None:
        code = ("import sys, starflow.adapters.postgres as p; "
                "p.PostgresWorkflowStateAdapter('postgresql://x@h/d'); "
                "assert 'asyncpg' not in sys.modules, 'asyncpg imported eagerly'")
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                       env={**os.environ, "PYTHONPATH": str(ROOT)})


class TestIdle:
    """idle() tells a fake-clock harness that a query is still in flight."""

    async def test_idle(self, pg: PostgresWorkflowStateAdapter) -> None:
        await pg.idle()  # nothing in flight: returns at once
        async with anyio.create_task_group() as tg:
            tg.start_soon(pg.get_run, str(uuid.uuid4()))
            await anyio.wait_all_tasks_blocked()  # the query task waits on its socket
            assert pg._inflight == 1
            await pg.idle()
            assert pg._inflight == 0


class TestDurability:
    """Non-durable units commit with synchronous_commit off; durable ones with the setting."""

    async def test_levels(self, workspace_id: str) -> None:
        require_postgres()
        adapter = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id=workspace_id,
                                               synchronous_commit="local")
        await adapter.open()
        try:
            assert adapter._pool is not None
            async with adapter._pool.acquire() as conn:
                assert await conn.fetchval("SHOW synchronous_commit") == "local"
                assert await conn.fetchval("SHOW starflow.workspace_id") == workspace_id
            run_id = await start(adapter)
            async with adapter.unit(durable=False) as u:
                await adapter.on_node_start(run_id, "step:a#1", None, now=at(1))
            assert u.held is True
            assert [e.event_type for e in await adapter.list_events(run_id)] == ["node_start"]
            async with adapter._pool.acquire() as conn:  # SET LOCAL did not leak
                assert await conn.fetchval("SHOW synchronous_commit") == "local"
        finally:
            await adapter.close()


async def test_cancelled_listener_setup_leaks_no_connection(workspace_id: str) -> None:
    """Cancelling wait_for_work while LISTEN is being set up closes the half-made socket."""
    import gc
    import warnings

    from conftest import POSTGRES_URL, require_postgres

    from starflow.adapters.postgres import PostgresWorkflowStateAdapter
    from starflow.clock import SystemClock

    require_postgres()
    for _ in range(5):
        adapter = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id=workspace_id)
        await adapter.open()
        with anyio.move_on_after(0.0005):  # real time on purpose: cut the connect short
            await adapter.wait_for_work(SystemClock(), 1)
        await adapter.close()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    assert not [w for w in caught if issubclass(w.category, ResourceWarning)]


#: Scans of these tables that narrow by nothing but the tenant (workspace, env)
#: walk a whole workspace's history: the hot path must never plan one.
_SCANNED_TABLES = {"workflow_runs", "workflow_run_events", "workflow_waits", "workflow_signals",
                   "workflow_session_vars", "worker_jobs", "mirror_outbox"}
_TENANT_ONLY = re.compile(r"^[\s()]*(?:\(?(?:\w+\.)?(?:workspace_id|env) = [^()]*\)?(?: AND )?)+"
                          r"[\s()]*$")


def _tenant_scans(plan: Any) -> list[str]:
    """Scan nodes on starflow tables narrowed by the tenant alone (or by nothing)."""
    found: list[str] = []
    for node in _plan_nodes(plan):
        table = node.get("Relation Name")
        kind = node.get("Node Type", "")
        if table in _SCANNED_TABLES and kind.endswith("Scan"):
            cond = node.get("Index Cond", "")
            if kind == "Seq Scan" or _TENANT_ONLY.match(cond):
                found.append(f"{kind} on {table} ({node.get('Index Name', '-')}: "
                             f"{cond or 'no index condition'})")
    return found


@step
async def plan_step(x: int) -> int:
    return x + 1


@workflow(name="plan-probe")
async def plan_probe(x: int) -> int:
    await starflow.session_set("s-probe", "k", x)
    y = await plan_step(x)
    got = await starflow.wait_for("go", type=int)
    return await plan_step(y + got)


@pytest.mark.slow  # EXPLAIN of every hot-path statement
class TestHotPathPlans:
    """Every statement of a run's life looks rows up by key, never by tenant.

    Regression: with the run tables never analyzed (autovacuum off, or a table
    that grew since its last ANALYZE) the planner served ``id = $1 AND
    workspace_id = $2 AND env = $3`` from idx_workflow_runs_workspace_started,
    filtering every run of the workspace: each boundary cost O(runs).
    """

    async def test_no_statement_scans_a_whole_workspace(self, monkeypatch: Any) -> None:
        import asyncpg

        async with scratch_database("starflow_hot") as (url, conn):
            for table in sorted(_SCANNED_TABLES):
                await conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
            # One big tenant, never analyzed: thousands of runs, their events,
            # waits, signals and session variables.
            await conn.execute("""
                INSERT INTO workflow_runs (id, workspace_id, env, status, started_at,
                                           claim_state)
                SELECT gen_random_uuid(), 'ws0', 'prod', 'paused',
                       now() - g * interval '1 second', 'complete'
                FROM generate_series(1, 4000) g;
                INSERT INTO workflow_run_events (run_id, event_type, node_id, created_at)
                SELECT id, 'node_start', 'n', now() FROM workflow_runs;
                INSERT INTO workflow_waits (run_id, node_id, workspace_id, env, event,
                                            created_at)
                SELECT id, 'w', 'ws0', 'prod', 'go', now() FROM workflow_runs;
                INSERT INTO workflow_signals (run_id, workspace_id, env, event, created_at)
                SELECT id, 'ws0', 'prod', 'other', now() FROM workflow_runs;
                INSERT INTO workflow_session_vars (session_id, key, value_json, run_id,
                                                   workspace_id, env, updated_at)
                SELECT 's' || id, 'k', '1', id, 'ws0', 'prod', now() FROM workflow_runs;
            """)
            statements: dict[str, tuple[Any, ...]] = {}
            for method in ("execute", "fetch", "fetchrow", "fetchval", "executemany"):
                original = getattr(asyncpg.connection.Connection, method)

                def spy(self: Any, query: str, *args: Any, _original: Any = original,
                        _method: str = method, **kw: Any) -> Any:
                    if args:
                        statements.setdefault(
                            query, tuple(args[0][0]) if _method == "executemany" else args)
                    return _original(self, query, *args, **kw)

                monkeypatch.setattr(asyncpg.connection.Connection, method, spy)
            async with Starflow.open(url, workspace_id="ws0", maintenance=False) as sf:
                handle = await sf.run(plan_probe, 1)
                assert handle.status == "paused"
                done = await sf.signal(handle.run_id, "go", 5)
                assert done.status == "success" and done.result == 8
                assert await sf.get_run(handle.run_id) is not None
                assert len(await sf.events(handle.run_id)) > 0
                # Retention's statements too: the batch select and its deletes.
                assert (await sf.prune(timedelta(0))).runs == 1
            monkeypatch.undo()
            assert len(statements) > 5
            bad: dict[str, list[str]] = {}
            # Through an adapter's own connections: they carry its JSON codecs.
            adapter = PostgresWorkflowStateAdapter(url, workspace_id="ws0")
            await adapter.open()
            try:
                async with adapter._connection("explain") as explain:
                    for sql, args in statements.items():
                        raw = await explain.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", *args)
                        scans = _tenant_scans(raw if isinstance(raw, list) else json.loads(raw))
                        if scans:
                            bad[sql] = scans
            finally:
                await adapter.close()
            assert not bad, json.dumps(bad, indent=1)
