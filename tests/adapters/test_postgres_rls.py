"""Role pins (migration 025): a role pinned to workspace ``a`` cannot read ``b`` by SET.

The tables are enumerated from the catalog, not listed here: every table that
holds tenant data (a ``workspace_id`` column, or a ``run_id`` that belongs to
a run) is checked, so a table added later without a pin fails this test.
Before the pin, a role whose session set ``starflow.workspace_id = 'b'`` read
``b``'s rows, ``worker_jobs`` arguments included.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from starflow import workflow
from starflow.adapters.postgres import PostgresWorkflowStateAdapter
from starflow.records import JobSpec, PoolLimits, ScheduleRecord, StartOptions
from starflow.warm.mirror import mirror
from starflow.workflow.context import WorkflowContext
from tests.conftest import POSTGRES_URL, require_postgres

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def url_as(user: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(POSTGRES_URL)
    return urlunsplit((parts.scheme, f"{user}@{parts.hostname}:{parts.port}", parts.path,
                       parts.query, ""))


async def tenant_tables(conn: Any) -> dict[str, str]:
    """Table -> how its rows name their tenant (``workspace_id`` or ``run_id``), from
    the catalog of the schema starflow migrated."""
    rows = await conn.fetch(
        "SELECT c.relname, array_agg(a.attname::text) FROM pg_class c "
        "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped "
        "WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace "
        "GROUP BY c.relname")
    tables = {}
    for name, columns in rows:
        if "workspace_id" in columns:
            tables[name] = "workspace_id"
        elif "run_id" in columns:
            tables[name] = "run_id"
    return tables


def rows_of(table: str, key: str) -> str:
    """SQL counting ``table``'s rows of workspace $1."""
    if key == "workspace_id":
        return f"SELECT count(*) FROM {table} WHERE workspace_id = $1"
    return (f"SELECT count(*) FROM {table} WHERE run_id IN "
            "(SELECT id FROM workflow_runs WHERE workspace_id = $1)")


async def seed(adapter: PostgresWorkflowStateAdapter) -> str:
    """One row of this workspace in every table the adapter writes."""
    run_id = str(uuid.uuid4())
    warm = mirror(adapter, f"memory://rls-{uuid.uuid4().hex[:8]}")  # mirror_outbox rows
    ctx = WorkflowContext(run_id=run_id, workflow="wf", workspace_id=adapter.workspace_id)
    async with warm.unit():
        await warm.on_run_start(run_id, ctx, now=T0)
    await adapter.on_node_start(run_id, "step:a#1", {"secret": "card"}, now=T0)
    await adapter.enqueue_signal(run_id, "go", {"secret": 1}, now=T0)
    await adapter.emit_wait_wake(run_id, "wait:go#1", "go", None, now=T0)
    await adapter.session_set("session", "key", "secret", now=T0)
    await adapter.set_attributes(run_id, {"customer": '"secret"'}, now=T0)
    await adapter.set_event(run_id, "status", "secret", node_id="event:status#1", now=T0)
    await adapter.append_stream(run_id, "log", 1, "secret", node_id="stream:log#1", now=T0)
    await adapter.ensure_definition("wf", 1, "hash", now=T0)
    await adapter.get_secret("wake", now=T0)
    await adapter.insert_job(JobSpec(
        id=str(uuid.uuid4()), run_id=run_id, node_id="step:render#1", pool="p",
        step_name="render", idempotency_key=f"{run_id}:step:render#1",
        input={"args": ["secret arguments"], "kwargs": {}}), now=T0)
    await adapter.upsert_schedule(ScheduleRecord(
        id="nightly", workflow="wf", workflow_version=1, definition_id=None,
        input={"args": ["secret"], "kwargs": {}}, cron="0 3 * * *", timezone="UTC",
        overlap="skip", catchup=timedelta(0), pool=None, next_fire_at=T0, due_at=T0), now=T0)
    await adapter.set_pool_limits(PoolLimits(pool="p", concurrency=2), now=T0)
    # A fair pool's claim writes its round robin's state (starflow_pool_keys).
    await adapter.set_pool_limits(PoolLimits(pool="fair", fair=True), now=T0)
    queued = str(uuid.uuid4())
    await adapter.on_run_start(queued, WorkflowContext(
        run_id=queued, workflow="wf", workspace_id=adapter.workspace_id), StartOptions(
        status="queued", claim_state="queued", runner_pool="fair", concurrency_key="t"), now=T0)
    assert len(await adapter.claim_runs("r", pool="fair", now=T0, lease_until=T0, limit=1)) == 1
    return run_id


@pytest.fixture
async def admin() -> AsyncIterator[Any]:
    require_postgres()
    import asyncpg

    owner = PostgresWorkflowStateAdapter(POSTGRES_URL, workspace_id="rls-migrate")
    await owner.open()  # migrated
    await owner.close()
    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        yield conn
    finally:
        await conn.close()


class TestRolePins:
    """Every tenant table, found in the catalog, refuses a pinned role another tenant's rows."""

    async def test_pinned_role_cannot_set_another_workspace(self, admin: Any) -> None:
        import asyncpg

        suffix = uuid.uuid4().hex[:8]
        roles = {"a": f"sf_pin_a_{suffix}", "b": f"sf_pin_b_{suffix}"}
        spaces = {"a": f"pin-a-{suffix}", "b": f"pin-b-{suffix}"}
        for k, role in roles.items():
            await admin.execute(f'CREATE ROLE "{role}" LOGIN')
            await admin.execute(
                f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
            await admin.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public '
                                f'TO "{role}"')
            await admin.execute("SELECT starflow_pin_role($1, $2, 'prod')", role, spaces[k])
        adapters = []
        try:
            for k in ("a", "b"):  # each tenant writes as its own pinned role
                adapter = PostgresWorkflowStateAdapter(url_as(roles[k]), workspace_id=spaces[k])
                await adapter.open()
                adapters.append(adapter)
                await seed(adapter)

            tables = await tenant_tables(admin)
            assert {"workflow_runs", "workflow_run_events", "worker_jobs"} <= set(tables)
            for table, key in tables.items():
                if table == "starflow_role_workspaces":
                    continue  # the pins themselves: checked below
                owner_sees = await admin.fetchval(rows_of(table, key), spaces["b"])
                assert owner_sees > 0, f"seed() writes no row of {table}: extend it"

            # Role a claims to be b: it sees, changes and creates nothing of b's.
            conn = await asyncpg.connect(url_as(roles["a"]), server_settings={
                "starflow.workspace_id": spaces["b"], "starflow.env": "prod"})
            try:
                for table, key in tables.items():
                    assert await conn.fetchval(rows_of(table, key), spaces["b"]) == 0, table
                    if table != "starflow_role_workspaces":  # its own pin: below
                        assert await conn.fetchval(f"SELECT count(*) FROM {table}") == 0, table
                await conn.execute("SET starflow.workspace_id = '{}'".format(spaces["b"]))
                assert await conn.fetchval("SELECT count(*) FROM worker_jobs") == 0
                assert await conn.execute("UPDATE workflow_runs SET error = 'x'") == "UPDATE 0"
                assert await conn.execute("DELETE FROM worker_jobs") == "DELETE 0"
                with pytest.raises(asyncpg.InsufficientPrivilegeError,
                                   match="row-level security"):
                    await conn.execute(
                        "INSERT INTO workflow_runs (id, workspace_id, env, status) "
                        "VALUES ($1, $2, 'prod', 'running')", uuid.uuid4(), spaces["b"])
                # Nor can it move its pin.
                assert await conn.execute(
                    "UPDATE starflow_role_workspaces SET workspace_id = $1",
                    spaces["b"]) == "UPDATE 0"
                with pytest.raises(asyncpg.InsufficientPrivilegeError):
                    await conn.execute("INSERT INTO starflow_role_workspaces VALUES ($1, $2)",
                                       "someone", spaces["b"])
                assert await conn.fetch("SELECT role_name::text, workspace_id "
                                        "FROM starflow_role_workspaces") == [
                    (roles["a"], spaces["a"])]
            finally:
                await conn.close()

            # Its own workspace, set properly, is all there.
            own = await asyncpg.connect(url_as(roles["a"]), server_settings={
                "starflow.workspace_id": spaces["a"], "starflow.env": "prod"})
            try:
                for table, key in tables.items():
                    if table != "starflow_role_workspaces":
                        assert await own.fetchval(rows_of(table, key), spaces["a"]) > 0, table
            finally:
                await own.close()

            # Every tenant table has row security on and a pin policy.
            pinned = {r[0] for r in await admin.fetch(
                "SELECT c.relname FROM pg_policy p JOIN pg_class c ON c.oid = p.polrelid "
                "WHERE p.polname = 'starflow_role_pin' AND NOT p.polpermissive")}
            secured = {r[0] for r in await admin.fetch(
                "SELECT relname FROM pg_class WHERE relrowsecurity "
                "AND relnamespace = current_schema()::regnamespace")}
            assert set(tables) - {"starflow_role_workspaces"} <= pinned
            assert set(tables) <= secured
        finally:
            for adapter in adapters:
                await adapter.close()
            for role in roles.values():
                await admin.execute("DELETE FROM starflow_role_workspaces WHERE role_name = $1",
                                    role)
                await admin.execute(f'DROP OWNED BY "{role}"')
                await admin.execute(f'DROP ROLE "{role}"')

    async def test_unpinned_role_is_unchanged(self, admin: Any) -> None:
        """A role without a pin keeps the session-setting policy (021): no regression."""
        role = f"sf_free_{uuid.uuid4().hex[:8]}"
        space = f"free-{uuid.uuid4().hex[:8]}"
        await admin.execute(f'CREATE ROLE "{role}" LOGIN')
        await admin.execute(
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
        await admin.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        adapter = PostgresWorkflowStateAdapter(url_as(role), workspace_id=space)
        try:
            await adapter.open()
            run_id = await seed(adapter)
            assert (await adapter.get_run(run_id)) is not None
            assert len(await adapter.list_jobs(run_id=run_id)) == 1
        finally:
            await adapter.close()
            await admin.execute(f'DROP OWNED BY "{role}"')
            await admin.execute(f'DROP ROLE "{role}"')


@workflow(name="rls_recipe_double")
async def recipe_double(n: int) -> int:
    return n * 2


def _recipe(role: str, workspace: str) -> list[str]:
    """The statements of the guide's tenant-role recipe, for ``role`` and ``workspace``."""
    import re
    from pathlib import Path

    guide = (Path(__file__).parents[2] / "docs" / "guides" / "postgres.md").read_text()
    section = guide.split("### The safe setup", 1)[1]
    block = section.split("```sql", 1)[1].split("```", 1)[0]
    text = re.sub(r"--[^\n]*", "", block).replace("sf_acme", role)
    text = text.replace("'acme'", f"'{workspace}'").replace('"sf_acme"', f'"{role}"')
    return [s.strip() for s in text.split(";") if s.strip()]


class TestTenantRecipe:
    """The guide's tenant role writes nothing shared: one tenant cannot stop every app
    on the database from opening by changing ``starflow_migrations``."""

    async def _refused(self, conn: Any, admin: Any) -> None:
        import asyncpg

        before = await admin.fetch("SELECT version, name FROM starflow_migrations ORDER BY 1")
        for sql in ("DELETE FROM starflow_migrations",
                    "UPDATE starflow_migrations SET name = 'x'",
                    "INSERT INTO starflow_migrations (version, name) VALUES (9999, 'x')"):
            try:
                status = await conn.execute(sql)
            except asyncpg.InsufficientPrivilegeError:
                continue
            assert status.endswith(" 0"), (sql, status)
        assert await admin.fetch("SELECT version, name FROM starflow_migrations "
                                 "ORDER BY 1") == before
        # ...and it still reads it, as an app does at open
        assert await conn.fetchval("SELECT count(*) FROM starflow_migrations") == len(before)

    async def _opens(self, role: str, workspace: str) -> None:
        from starflow import Starflow

        async with Starflow.open(url_as(role), workspace_id=workspace,
                                 maintenance=False) as sf:
            assert (await sf.run(recipe_double, 2)).result == 4

    async def test_documented_recipe(self, admin: Any) -> None:
        """The recipe as the guide prints it: no write on the migrations table, and the
        app opens and runs as that role."""
        import asyncpg

        suffix = uuid.uuid4().hex[:8]
        role, workspace = f"sf_recipe_{suffix}", f"recipe-{suffix}"
        try:
            for statement in _recipe(role, workspace):
                await admin.execute(statement)
            conn = await asyncpg.connect(url_as(role))
            try:
                await self._refused(conn, admin)
            finally:
                await conn.close()
            await self._opens(role, workspace)
        finally:
            await admin.execute("DELETE FROM starflow_role_workspaces WHERE role_name = $1",
                                role)
            await admin.execute(f'DROP OWNED BY "{role}"')
            await admin.execute(f'DROP ROLE "{role}"')

    async def test_role_granted_every_table(self, admin: Any) -> None:
        """A role given DML on every table (the recipe before #29, still in place on
        upgraded databases) cannot change the migrations table either (040)."""
        import asyncpg

        role, workspace = f"sf_wide_{uuid.uuid4().hex[:8]}", f"wide-{uuid.uuid4().hex[:8]}"
        await admin.execute(f'CREATE ROLE "{role}" LOGIN')
        await admin.execute(
            f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO "{role}"')
        await admin.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO "{role}"')
        try:
            conn = await asyncpg.connect(url_as(role))
            try:
                await self._refused(conn, admin)
            finally:
                await conn.close()
            await self._opens(role, workspace)
        finally:
            await admin.execute(f'DROP OWNED BY "{role}"')
            await admin.execute(f'DROP ROLE "{role}"')
