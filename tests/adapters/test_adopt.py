"""Adopting a database where the state model's engine already ran its migrations
(001, 018, 019 without ``starflow_migrations``), and both engines on it after.

Each test gets a database of its own (created next to the test database and
dropped after), built from the state model's DDL: starflow's 001/018/019 files
are that DDL, unchanged.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

import starflow
from starflow import Starflow, step, workflow
from starflow.adapters.postgres import PostgresWorkflowStateAdapter
from starflow.errors import StorageError
from starflow.migrations import load_migrations
from tests.conftest import POSTGRES_URL, require_postgres

pytestmark = pytest.mark.postgres

ROOT = Path(__file__).resolve().parents[2]
SEED = {m.version: m for m in load_migrations("postgres") if m.version in (1, 18, 19)}
NOW = datetime.now(UTC).replace(microsecond=0)


@step
async def adopt_double(x: int) -> int:
    return 2 * x


@workflow(name="adopt-flow")
async def adopt_flow(session: str, x: int) -> int:
    y = await adopt_double(x)
    await starflow.session_set(session, "answer", y, keep_until=datetime(2100, 1, 1, tzinfo=UTC))
    return y


@pytest.fixture
async def fresh_db() -> AsyncIterator[str]:
    """The URL of a new, empty database (dropped afterwards)."""
    import asyncpg

    require_postgres()
    name = f"sf_adopt_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(POSTGRES_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(POSTGRES_URL)
        yield urlunsplit(parts._replace(path=f"/{name}"))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


async def seed_schema(url: str, upto: int = 19) -> None:
    """The state model's migrations, run the way its own tooling would."""
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        for version in sorted(SEED):
            if version <= upto:
                await conn.execute(SEED[version].sql)
    finally:
        await conn.close()


#: The state model's engine's writes (its adapter's SQL: no starflow column).
SEED_RUN = ("INSERT INTO workflow_runs (id, template_id, status, started_at) "
            "VALUES ($1, $2, 'running', $3)")
SEED_LEASE = ("UPDATE workflow_runs SET claim_state = 'running', leased_by = $2, "
              "lease_until = $3, last_heartbeat = $4 WHERE id = $1")
SEED_EVENT = ("INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json) "
              "VALUES ($1, $2, $3, $4::jsonb)")
SEED_SESSION_SET = ("INSERT INTO workflow_session_vars (session_id, key, value_json) "
                    "VALUES ($1, $2, $3::jsonb) ON CONFLICT (session_id, key) "
                    "DO UPDATE SET value_json = excluded.value_json")


async def seed_engine_rows(conn: Any) -> dict[str, uuid.UUID]:
    runs = {k: uuid.uuid4() for k in ("done", "paused", "running")}
    for kind, run_id in runs.items():
        await conn.execute(SEED_RUN, run_id, f"seed-{kind}", NOW - timedelta(minutes=5))
        await conn.execute(SEED_LEASE, run_id, "seed-runner", NOW + timedelta(hours=1), NOW)
        await conn.execute(SEED_EVENT, run_id, "node_start", "n1", json.dumps({"in": 1}))
    await conn.execute(SEED_EVENT, runs["done"], "node_complete", "n1", json.dumps({"out": 2}))
    await conn.execute("UPDATE workflow_runs SET status = 'success', duration_ms = 1200, "
                       "completed_at = $2, leased_by = NULL, lease_until = NULL WHERE id = $1",
                       runs["done"], NOW)
    await conn.execute("UPDATE workflow_runs SET status = 'paused', checkpoint_json = $2::jsonb, "
                       "leased_by = NULL, lease_until = NULL WHERE id = $1",
                       runs["paused"], json.dumps({"variables": {"__celestialWait": {"e": 1}}}))
    await conn.execute(SEED_EVENT, runs["paused"], "run_paused", None, None)
    await conn.execute(SEED_SESSION_SET, "seed-session", "k", json.dumps("v1"))
    await conn.execute(SEED_SESSION_SET, "seed-session", "k", json.dumps("v2"))
    return runs


SEED_VIEW = ("SELECT r.id, r.template_id, r.status, r.started_at, r.completed_at, r.duration_ms, "
             "r.checkpoint_json, r.error, r.workspace_id, r.env, r.claim_state, r.runner_pool, "
             "r.leased_by, r.lease_until, r.last_heartbeat, r.claim_attempts, r.definition_id, "
             "(SELECT json_agg(json_build_array(e.id, e.event_type, e.node_id, e.payload_json) "
             " ORDER BY e.id) FROM workflow_run_events e WHERE e.run_id = r.id)::text "
             "FROM workflow_runs r WHERE r.template_id LIKE 'seed-%' ORDER BY r.template_id")


def migrate_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "starflow", "migrate", "--db", url, *args],
                          capture_output=True, text=True, cwd=str(ROOT), timeout=60, check=False)


async def test_adopt_and_run_beside_the_seeds_rows(fresh_db: str) -> None:
    import asyncpg

    await seed_schema(fresh_db)
    conn = await asyncpg.connect(fresh_db)
    try:
        runs = await seed_engine_rows(conn)
        before = [tuple(r) for r in await conn.fetch(SEED_VIEW)]

        # --dry-run says what it would do and changes nothing.
        dry = migrate_cli(fresh_db, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        lines = dry.stdout.splitlines()
        assert lines[:3] == ["would record 001 initial as applied (the state model's schema "
                             "is in place)",
                             "would record 018 workflow_runs_workspace as applied (the state "
                             "model's schema is in place)",
                             "would record 019 workflow_runs_lease as applied (the state "
                             "model's schema is in place)"]
        assert lines[3].startswith("would apply 020 ")
        assert any(line.startswith("would apply 029 ") for line in lines)
        assert await conn.fetchval("SELECT to_regclass('starflow_migrations')") is None

        done = migrate_cli(fresh_db)
        assert done.returncode == 0, done.stderr
        recorded = {r[0]: r[1] for r in await conn.fetch(
            "SELECT version, name FROM starflow_migrations")}
        assert recorded[1] == "initial (adopted)" and recorded[19].endswith("(adopted)")
        assert set(recorded) == {m.version for m in load_migrations("postgres")}
        # The state model's constraint is back (029), beside starflow's.
        assert await conn.fetchval(
            "SELECT indisunique FROM pg_index WHERE indexrelid = "
            "'idx_workflow_session_vars_key'::regclass")

        # starflow runs in the default workspace, next to the state model's rows.
        async with Starflow.open(fresh_db, maintenance=False) as sf:
            handles = [await sf.run(adopt_flow, f"sf-session-{i}", i) for i in range(3)]
            assert [h.result for h in handles] == [0, 2, 4]
            assert await sf.session_get("sf-session-2", "answer") == 4
            # The state model's own session variable reads through starflow too.
            assert await sf.session_get("seed-session", "k") == "v2"
            listed = {r.template_id for r in await sf.list_runs(limit=10)}
            assert {"adopt-flow", "seed-done", "seed-paused", "seed-running"} <= listed

        # On an adopted database a (session_id, key) pair is unique across workspaces.
        other = PostgresWorkflowStateAdapter(fresh_db, workspace_id="other")
        await other.open()
        try:
            with pytest.raises(StorageError, match="already used in another workspace"):
                await other.session_set("seed-session", "k", "theirs", now=NOW)
            await other.session_set("other:seed-session", "k", "theirs", now=NOW)
        finally:
            await other.close()

        # The state model's engine still works: its upsert, its inserts, its reads.
        await conn.execute(SEED_SESSION_SET, "seed-session", "k", json.dumps("v3"))
        await conn.execute(SEED_SESSION_SET, "sf-session-1", "answer", json.dumps(99))
        assert await conn.fetchval("SELECT value_json FROM workflow_session_vars WHERE "
                                   "session_id = 'sf-session-1' AND key = 'answer'") == "99"
        late = uuid.uuid4()
        await conn.execute(SEED_RUN, late, "seed-late", NOW)
        await conn.execute(SEED_EVENT, late, "node_start", "n1", None)
        # Its rows are exactly as it wrote them.
        after = [tuple(r) for r in await conn.fetch(SEED_VIEW)
                 if r[1] != "seed-late"]
        assert after == before
        assert {str(r) for r in runs.values()} <= {str(r[0]) for r in after}
    finally:
        await conn.close()


async def test_an_older_seed_schema_is_adopted_at_its_version(fresh_db: str) -> None:
    await seed_schema(fresh_db, upto=18)
    adapter = PostgresWorkflowStateAdapter(fresh_db)
    plan = await adapter.migration_plan()
    assert [m.version for m in plan.adopt] == [1, 18]
    assert plan.apply[0].version == 19
    await adapter.open()
    try:
        assert adapter.applied_migrations[0] == 19
    finally:
        await adapter.close()


async def test_a_foreign_schema_is_refused_and_left_alone(fresh_db: str) -> None:
    import asyncpg

    await seed_schema(fresh_db)
    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute("ALTER TABLE workflow_runs DROP COLUMN env")
        await conn.execute("ALTER TABLE workflow_runs ADD COLUMN tenant text")
        await conn.execute("ALTER TABLE workflow_run_events ALTER COLUMN node_id TYPE int "
                           "USING NULL")
        await conn.execute("DROP INDEX idx_workflow_session_vars_key")
        schema = await conn.fetch("SELECT table_name, column_name, data_type FROM "
                                  "information_schema.columns WHERE table_schema = 'public' "
                                  "ORDER BY 1, 2")
        for args in (("--dry-run",), ()):
            refused = migrate_cli(fresh_db, *args)
            assert refused.returncode != 0
            for needle in ("column workflow_runs.env is missing",
                           "column workflow_runs.tenant (text) is not the state model's",
                           "column workflow_run_events.node_id is integer, expected text",
                           "index idx_workflow_session_vars_key is missing",
                           "Nothing was changed"):
                assert needle in refused.stderr, refused.stderr
        adapter = PostgresWorkflowStateAdapter(fresh_db)
        with pytest.raises(StorageError, match="refusing to migrate"):
            await adapter.open()
        assert await conn.fetchval("SELECT to_regclass('starflow_migrations')") is None
        assert await conn.fetch("SELECT table_name, column_name, data_type FROM "
                                "information_schema.columns WHERE table_schema = 'public' "
                                "ORDER BY 1, 2") == schema
    finally:
        await conn.close()


async def test_starflow_tables_without_history_are_refused(fresh_db: str) -> None:
    await seed_schema(fresh_db)
    import asyncpg

    conn = await asyncpg.connect(fresh_db)
    try:
        await conn.execute("CREATE TABLE workflow_waits (run_id uuid)")
    finally:
        await conn.close()
    with pytest.raises(StorageError, match="table workflow_waits exists"):
        await PostgresWorkflowStateAdapter(fresh_db).migration_plan()


async def test_a_database_starflow_created_keeps_per_workspace_session_keys(
        workspace_id: str) -> None:
    """029 changes nothing where starflow made the schema (tenancy contract)."""
    require_postgres()
    a = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id=workspace_id)
    b = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id=f"{workspace_id}-b")
    await a.open()
    await b.open()
    try:
        await a.session_set("same", "k", 1, now=NOW)
        await b.session_set("same", "k", 2, now=NOW)
        assert (await a.session_get("same", "k"), await b.session_get("same", "k")) == (1, 2)
    finally:
        await a.close()
        await b.close()
