"""PostgreSQL behind a transaction pooler (PgBouncer ``pool_mode = transaction``).

The contract suite runs through the pooler too (``pgbouncer`` kind in
test_contract.py); here: the URL options, the refused startup settings, Row
Level Security for a non-owner role through the pooler, and wake-ups
(``listen_url`` or polling). Needs ``STARFLOW_TEST_PGBOUNCER_URL`` (``.ci/run``
starts one and sets ``STARFLOW_REQUIRE_PGBOUNCER``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import anyio
import pytest

from starflow.adapters.postgres import PostgresWorkflowStateAdapter, _pooler_options
from starflow.errors import ConfigError, StorageError
from starflow.records import StartOptions
from starflow.workflow.context import WorkflowContext
from tests.conftest import (
    PGBOUNCER_URL,
    POOLER_RLS_ROLE,
    POSTGRES_URL,
    pgbouncer_url,
    require_pgbouncer,
    require_postgres,
)

pytestmark = pytest.mark.postgres

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
RLS_ROLE = POOLER_RLS_ROLE


async def start(adapter: PostgresWorkflowStateAdapter, **options: Any) -> str:
    run_id = str(uuid.uuid4())
    await adapter.on_run_start(run_id, WorkflowContext(run_id=run_id, workflow="wf"),
                               StartOptions(**options), now=T0)
    return run_id


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{user}@{parts.hostname}:{parts.port}"))


class TestOptions:
    def test_url_parameters_are_taken_out(self) -> None:
        listen = "postgresql://app@db:5432/sf"
        url, mode, got = _pooler_options(
            f"postgresql://app@pgb:6432/sf?sslmode=require&pooler=transaction"
            f"&listen_url={quote(listen, safe='')}", None, None)
        assert (url, mode, got) == ("postgresql://app@pgb:6432/sf?sslmode=require",
                                    "transaction", listen)

    def test_arguments_win_and_default_is_none(self) -> None:
        assert _pooler_options("postgresql://h/db?pooler=transaction", "session", None)[1] \
            == "session"
        assert _pooler_options("postgresql://h/db", None, None) == (
            "postgresql://h/db", "none", None)

    def test_supabase_pooler_is_detected(self) -> None:
        url = "postgresql://postgres.abc:pw@aws-0-eu-west-1.pooler.supabase.com:6543/postgres"
        assert _pooler_options(url, None, None)[1] == "transaction"
        session = url.replace(":6543", ":5432")
        assert _pooler_options(session, None, None)[1] == "none"

    def test_bad_values_are_refused(self) -> None:
        with pytest.raises(ConfigError, match="pooler must be one of"):
            PostgresWorkflowStateAdapter("postgresql://h/db?pooler=statement")
        with pytest.raises(ConfigError, match="listen_url is not a PostgreSQL URL"):
            PostgresWorkflowStateAdapter("postgresql://h/db", listen_url="redis://h")


@pytest.fixture
async def pooled(workspace_id: str) -> AsyncIterator[PostgresWorkflowStateAdapter]:
    require_pgbouncer()
    adapter = PostgresWorkflowStateAdapter(pgbouncer_url(), workspace_id=workspace_id)
    await adapter.open()
    try:
        yield adapter
    finally:
        await adapter.close()


class TestThroughPgBouncer:
    async def test_without_pooler_mode_the_error_says_what_to_do(self) -> None:
        require_pgbouncer()
        adapter = PostgresWorkflowStateAdapter(PGBOUNCER_URL)
        with pytest.raises(StorageError, match=r"add \?pooler=transaction"):
            await adapter.open()

    async def test_owner_needs_no_per_transaction_settings(
            self, pooled: PostgresWorkflowStateAdapter) -> None:
        assert pooled.pooler == "transaction"
        assert pooled._tx_settings == ""  # RLS does not apply: one round trip per statement
        run_id = await start(pooled)
        assert (await pooled.get_run(run_id)) is not None

    async def test_non_durable_commit_level_is_set_per_transaction(
            self, workspace_id: str) -> None:
        require_pgbouncer()
        adapter = PostgresWorkflowStateAdapter(pgbouncer_url(), workspace_id=workspace_id,
                                               synchronous_commit="off")
        await adapter.open()
        try:
            assert "set_config('synchronous_commit', 'off', true)" in adapter._tx_settings
            async with adapter._connection("check") as conn:
                assert await conn.fetchval("SHOW synchronous_commit") == "off"
        finally:
            await adapter.close()

    async def test_polls_without_listen_url(self, pooled: PostgresWorkflowStateAdapter
                                            ) -> None:
        slept: list[float] = []

        class Clock:
            def now(self) -> datetime:
                return T0

            async def sleep(self, seconds: float) -> None:
                slept.append(seconds)

        await start(pooled, status="queued", claim_state="queued")
        with anyio.fail_after(10):
            await pooled.wait_for_work(Clock(), 0.25)  # type: ignore[arg-type]
        assert slept == [0.25] and pooled._listener is None

    async def test_listen_url_wakes_workers(self, workspace_id: str) -> None:
        require_pgbouncer()
        require_postgres()
        adapter = PostgresWorkflowStateAdapter(
            pgbouncer_url(listen_url=POSTGRES_URL), workspace_id=workspace_id)
        await adapter.open()
        try:
            assert adapter.listen_url == POSTGRES_URL

            class Never:
                def now(self) -> datetime:
                    return T0

                async def sleep(self, seconds: float) -> None:
                    await anyio.Event().wait()

            class Instant(Never):
                async def sleep(self, seconds: float) -> None:
                    return None

            await adapter.wait_for_work(Instant(), 0)  # type: ignore[arg-type]
            assert adapter._listener is not None
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(adapter.wait_for_work, Never(), 3600)
                    await start(adapter, status="queued", claim_state="queued")
            # Returned on the NOTIFY although its clock never fired.
        finally:
            await adapter.close()


class TestRowLevelSecurityThroughThePooler:
    """A non-owner role through PgBouncer: tenant settings travel with each transaction."""

    async def test_non_owner_role(self, pooled: PostgresWorkflowStateAdapter) -> None:
        import asyncpg

        admin = await asyncpg.connect(POSTGRES_URL)
        try:
            if not await admin.fetchval("SELECT 1 FROM pg_roles WHERE rolname = $1", RLS_ROLE):
                await admin.execute(f'CREATE ROLE "{RLS_ROLE}" LOGIN')
            await admin.execute(f'GRANT USAGE ON SCHEMA public TO "{RLS_ROLE}"')
            await admin.execute(f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA '
                                f'public TO "{RLS_ROLE}"')
            await admin.execute(f'GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public '
                                f'TO "{RLS_ROLE}"')
        finally:
            await admin.close()
        suffix = uuid.uuid4().hex[:8]
        spaces = (f"pool-a-{suffix}", f"pool-b-{suffix}")
        url = as_user(pgbouncer_url(), RLS_ROLE)
        tenants = [PostgresWorkflowStateAdapter(url, workspace_id=ws, max_size=3)
                   for ws in spaces]
        try:
            for t in tenants:
                await t.open()
                assert "set_config('starflow.workspace_id'" in t._tx_settings
            runs: dict[int, list[str]] = {0: [], 1: []}

            async def work(i: int) -> None:
                t = tenants[i]
                for n in range(10):
                    run_id = await start(t)
                    runs[i].append(run_id)
                    await t.on_node_start(run_id, "step:a#1", n, now=T0)
                    await t.on_node_complete(run_id, "step:a#1", n, now=T0)
                    await t.session_set("shared", "k", i, now=T0)
                    assert await t.session_get("shared", "k") == i

            # Both tenants at once through 4 shared server connections: a setting
            # left on a server connection by one would show the other's rows.
            async with anyio.create_task_group() as tg:
                for i in (0, 1, 0, 1):
                    tg.start_soon(work, i)
            for i, t in enumerate(tenants):
                listed = {r.id for r in await t.list_runs(limit=100)}
                assert listed == set(runs[i])
                assert await t.get_run(runs[1 - i][0]) is None
                assert len(await t.list_events(runs[i][0])) == 2
                assert await t.list_events(runs[1 - i][0]) == []
            # The settings were transaction-local: a bare session of the role through
            # the pooler (any server connection) sees no rows at all (fail closed).
            bare = await asyncpg.connect(url.split("?")[0], statement_cache_size=0)
            try:
                for _ in range(8):
                    assert await bare.fetchval(
                        "SELECT count(*) FROM workflow_runs WHERE workspace_id = ANY($1)",
                        list(spaces)) == 0
            finally:
                await bare.close()
            # The owner sees both tenants' rows.
            assert await pooled.get_run(runs[0][0]) is None  # other workspace, owner too
        finally:
            for t in tenants:
                await t.close()
        admin = await asyncpg.connect(POSTGRES_URL)
        try:
            assert await admin.fetchval(
                "SELECT count(*) FROM workflow_runs WHERE workspace_id = ANY($1)",
                list(spaces)) == 20 + 20
        finally:
            await admin.close()




class TestGuide:
    """docs/guides/postgres.md's PgBouncer and Supabase settings are the ones that work."""

    GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "postgres.md"
    CI = Path(__file__).resolve().parents[2] / ".ci" / "run"

    def section(self, title: str) -> str:
        text = self.GUIDE.read_text()
        start = text.index(f"### {title}\n")
        end = text.find("\n## ", start)
        nxt = text.find("\n### ", start + 1)
        return text[start:min(i for i in (end, nxt) if i != -1)]

    @staticmethod
    def blocks(section: str, lang: str) -> list[str]:
        return re.findall(rf"```{lang}\n(.*?)```", section, flags=re.DOTALL)

    def test_pgbouncer_settings_are_cis(self) -> None:
        import configparser

        [ini] = self.blocks(self.section("PgBouncer"), "ini")
        guide = configparser.ConfigParser()
        guide.read_string(ini)
        ci_text = self.CI.read_text()
        ci = configparser.ConfigParser(interpolation=None)
        ci.read_string(ci_text[ci_text.index("<<INI\n") + 6:ci_text.index("\nINI\n")]
                       .replace("$PGBOUNCER_PORT", "6432"))
        assert guide["pgbouncer"]["pool_mode"] == "transaction"
        for key in ("listen_addr", "listen_port", "pool_mode", "default_pool_size",
                    "max_client_conn", "ignore_startup_parameters"):
            assert guide["pgbouncer"][key] == ci["pgbouncer"][key], key
        assert guide["databases"]["*"] == ci["databases"]["*"]

    def test_pgbouncer_url(self) -> None:
        [url] = self.blocks(self.section("PgBouncer"), "text")
        clean, mode, listen = _pooler_options(url.strip(), None, None)
        assert mode == "transaction"
        assert urlsplit(clean).port == 6432 and "pooler" not in clean
        assert listen == "postgresql://app:secret@127.0.0.1:5432/starflow"
        PostgresWorkflowStateAdapter(url.strip())  # accepted as is

    def test_supabase_url(self) -> None:
        [url] = self.blocks(self.section("Supabase"), "text")
        url = (url.strip().replace("<project-ref>", "abcdefgh").replace("<password>", "pw")
               .replace("<region>", "eu-west-1"))
        clean, mode, listen = _pooler_options(url, None, None)
        assert mode == "transaction"
        parts = urlsplit(clean)
        assert (parts.hostname, parts.port, parts.query) == (
            "aws-0-eu-west-1.pooler.supabase.com", 6543, "sslmode=require")
        assert listen == ("postgresql://postgres:pw@db.abcdefgh.supabase.co:5432/postgres"
                          "?sslmode=require")
        # The pooler port is recognised even without the parameter.
        bare = clean
        assert _pooler_options(bare, None, None)[1] == "transaction"
