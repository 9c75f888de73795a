"""A start in the caller's own transaction (#30): ``sf.start(wf, …, connection=conn)``.

The run's rows are written on the caller's connection, in its open transaction:
invisible to everyone else until the caller commits, gone if it rolls back,
and claimed by a worker once committed (on PostgreSQL the commit itself wakes
an idle worker: ``NOTIFY`` is transactional). Each refusal happens before
anything is written and leaves the caller's transaction usable.

Over SQLite (an aiosqlite connection to the app's file), PostgreSQL (asyncpg)
and PostgreSQL through PgBouncer in transaction mode.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

import starflow
import starflow.sync
from starflow import (
    ConfigError,
    DuplicateRun,
    ForeignConnection,
    NotInTransaction,
    RunIdConflict,
    RunNotFound,
    Starflow,
    StarflowConfig,
    TransactionalStartUnsupported,
)
from starflow.adapters.delegating import DelegatingAdapter
from starflow.codec import ZlibCodec, is_encoded
from starflow_testing import FakeClock
from starflow_testing._quiesce import quiesce
from tests.conftest import (
    PGBOUNCER_URL,
    POOLER_RLS_ROLE,
    POSTGRES_URL,
    adapter_url,
    ensure_pooler_rls_role,
    require_postgres,
)

START = datetime(2030, 1, 1, tzinfo=UTC)
#: Workers poll once an hour: one that runs a committed start within seconds was
#: woken by the commit.
SLOW_POLL = StarflowConfig(poll_interval=timedelta(hours=1))
EXECUTED: list[str] = []


@starflow.workflow(name="txn-fulfil")
async def fulfil(order_id: str) -> str:
    EXECUTED.append(order_id)
    return f"shipped {order_id}"


@starflow.workflow(name="txn-other")
async def other(order_id: str) -> str:
    return order_id


@pytest.fixture(autouse=True)
def _reset() -> None:
    EXECUTED.clear()


@pytest.fixture(params=["sqlite", "postgres", "pgbouncer", "pgbouncer-rls"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class Caller:
    """The application's own connection and its ``orders`` table."""

    def __init__(self, kind: str, conn: Any, table: str) -> None:
        self.kind = kind
        self.conn = conn
        self.table = table
        self._tx: Any = None

    @property
    def sqlite(self) -> bool:
        return self.kind == "sqlite"

    async def begin(self) -> None:
        if self.sqlite:
            await self.conn.execute("BEGIN")
        else:
            self._tx = self.conn.transaction()
            await self._tx.start()

    async def commit(self) -> None:
        if self.sqlite:
            await self.conn.commit()
        else:
            await self._tx.commit()

    async def rollback(self) -> None:
        if self.sqlite:
            await self.conn.rollback()
        else:
            await self._tx.rollback()

    async def insert(self, order_id: str) -> None:
        if self.sqlite:
            await self.conn.execute(f"INSERT INTO {self.table} (id) VALUES (?)", (order_id,))
        else:
            await self.conn.execute(f"INSERT INTO {self.table} (id) VALUES ($1)", order_id)

    async def orders(self) -> list[str]:
        if self.sqlite:
            rows = await self.conn.execute_fetchall(f"SELECT id FROM {self.table} ORDER BY id")
        else:
            rows = await self.conn.fetch(f"SELECT id FROM {self.table} ORDER BY id")
        return [r[0] for r in rows]


async def connect(kind: str, tmp_path: Path, table: str) -> Any:
    if kind == "sqlite":
        import aiosqlite

        conn = await aiosqlite.connect(tmp_path / "starflow.db")
        await conn.execute(f"CREATE TABLE {table} (id TEXT PRIMARY KEY)")
        await conn.commit()
        return conn
    import asyncpg

    owner = await asyncpg.connect(POSTGRES_URL)
    try:
        await owner.execute(f"CREATE TABLE {table} (id text PRIMARY KEY)")
        await owner.execute(f'GRANT ALL ON {table} TO "{POOLER_RLS_ROLE}"')
    finally:
        await owner.close()
    if kind == "pgbouncer":
        return await asyncpg.connect(PGBOUNCER_URL, statement_cache_size=0)
    if kind == "pgbouncer-rls":  # a role Row Level Security applies to
        return await asyncpg.connect(PGBOUNCER_URL, statement_cache_size=0,
                                     user=POOLER_RLS_ROLE)
    return await asyncpg.connect(POSTGRES_URL)


@asynccontextmanager
async def app(kind: str, tmp_path: Path, workspace_id: str,
              config: StarflowConfig | None = None
              ) -> AsyncIterator[tuple[Starflow, FakeClock, Caller]]:
    apps: list[Starflow] = []

    async def settle() -> None:
        async def idle() -> None:
            for a in apps:
                await a.adapter.idle()

        await quiesce(idle)

    clock = FakeClock(START, settle=settle)
    url = adapter_url(kind, tmp_path)
    if kind != "sqlite":
        require_postgres()
        ensure_pooler_rls_role()
    async with Starflow.open(url, workspace_id=workspace_id, clock=clock, config=config,
                             maintenance=False) as sf:
        apps.append(sf)
        table = f"orders_{workspace_id.replace('-', '_')}"
        conn = await connect(kind, tmp_path, table)
        try:
            yield sf, clock, Caller(kind, conn, table)
        finally:
            await conn.close()
            if kind != "sqlite":
                import asyncpg

                owner = await asyncpg.connect(POSTGRES_URL)
                await owner.execute(f"DROP TABLE IF EXISTS {table}")
                await owner.close()


async def claim(sf: Starflow) -> int:
    """One claim pass of a worker; drives what it claims."""
    async with anyio.create_task_group() as tg:
        return await sf.worker().claim_once(tg)


async def no_run(sf: Starflow, run_id: str) -> None:
    with pytest.raises(RunNotFound):
        await sf.get_run(run_id)


class TestCommit:
    """Committed with the caller's rows: visible then, and run by a worker."""

    async def test_commit_makes_it_visible_and_a_worker_runs_it(
            self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            await caller.begin()
            await caller.insert("o-1")
            handle = await sf.start(fulfil, "o-1", connection=caller.conn)
            assert handle.status == "queued"
            await no_run(sf, handle.run_id)  # not committed: no one else sees it
            if kind != "sqlite":  # (SQLite: the caller holds the write lock a claim needs)
                assert await claim(sf) == 0
            await caller.commit()
            run = await sf.get_run(handle.run_id)
            assert (run.status, run.claim_state, run.start_mode) == ("queued", "queued",
                                                                     "queued")
            assert await claim(sf) == 1
            assert await sf.result(handle) == "shipped o-1"
            assert EXECUTED == ["o-1"] and await caller.orders() == ["o-1"]

    async def test_writes_what_a_plain_start_writes(
            self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            options: dict[str, Any] = {"pool": "p", "priority": 3, "attributes": {"o": "x"},
                                       "timeout": timedelta(hours=1),
                                       "start_after": timedelta(minutes=5)}
            plain = await sf.options(**options).start(fulfil, "x")
            await caller.begin()
            inside = await sf.options(**options, connection=caller.conn).start(fulfil, "x")
            await caller.commit()
            a, b = await sf.get_run(plain.run_id), await sf.get_run(inside.run_id)
            for field in a.__struct_fields__:
                if field != "id":
                    assert getattr(a, field) == getattr(b, field), field
            assert await sf.get_attributes(inside.run_id) == {"o": "x"}
            assert await sf.events(inside.run_id) == await sf.events(plain.run_id) == []

    # NOTIFY: SQLite workers poll; behind PgBouncer in transaction mode they poll
    # too, unless the app has a listen_url.
    @pytest.mark.parametrize("kind", ["postgres"])
    async def test_the_commit_wakes_an_idle_worker(
            self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id, SLOW_POLL) as (sf, clock, caller):
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await clock.settle()
                await caller.begin()
                await caller.insert("o-2")
                handle = await sf.start(fulfil, "o-2", connection=caller.conn)
                await clock.settle()
                assert EXECUTED == []
                await caller.commit()
                with anyio.fail_after(10):
                    assert await sf.result(handle) == "shipped o-2"
                await worker.drain()
                tg.cancel_scope.cancel()


class TestPoolConnections:
    """A connection acquired from the caller's own asyncpg pool (a proxy) works the same."""

    @pytest.mark.parametrize("kind", ["postgres", "pgbouncer"])
    async def test_pool_acquired_connections(self, kind: str, tmp_path: Path,
                                             workspace_id: str) -> None:
        import asyncpg

        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            url, options = (PGBOUNCER_URL, {"statement_cache_size": 0}) \
                if kind == "pgbouncer" else (POSTGRES_URL, {})
            async with asyncpg.create_pool(url, min_size=1, max_size=1, **options) as pool:
                handles = []
                for order in ("p-1", "p-2"):  # the same connection, through two proxies
                    async with pool.acquire() as conn, conn.transaction():
                        await conn.execute(f"INSERT INTO {caller.table} (id) VALUES ($1)",
                                           order)
                        handles.append(await sf.start(fulfil, order, connection=conn))
                async with pool.acquire() as conn:
                    with pytest.raises(NotInTransaction):
                        await sf.start(fulfil, "p-3", connection=conn)
            assert sorted(r.id for r in await sf.list_runs()) == sorted(
                h.run_id for h in handles)
            assert await claim(sf) == 2
            assert await caller.orders() == ["p-1", "p-2"]


class TestCallerCodecs:
    """The caller's own codecs on its connection change nothing starflow stores or reads."""

    @pytest.mark.parametrize("kind", ["postgres"])
    async def test_a_json_codec_of_the_callers(self, kind: str, tmp_path: Path,
                                              workspace_id: str) -> None:
        import json

        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            # A common setup: jsonb as Python objects through the json module, uuids
            # as text. starflow's JSON must not be encoded twice through it.
            await caller.conn.set_type_codec("jsonb", encoder=json.dumps, decoder=json.loads,
                                             schema="pg_catalog")
            await caller.conn.set_type_codec("uuid", encoder=str, decoder=str,
                                             schema="pg_catalog", format="text")
            run_id = str(uuid.uuid4())
            plain = await sf.start(fulfil, "o-7")
            await caller.begin()
            first = await sf.options(run_id=run_id, connection=caller.conn).start(fulfil, "o-7")
            again = await sf.options(run_id=run_id, connection=caller.conn).start(fulfil, "o-7")
            await caller.commit()
            assert first.run_id == again.run_id == run_id
            stored = await sf.get_run(run_id)
            assert stored.input_json == (await sf.get_run(plain.run_id)).input_json
            assert await claim(sf) == 2
            assert await sf.result(run_id) == "shipped o-7"


class TestPayloadCodec:
    """With ``Starflow.open(codec=)`` the arguments are sealed as a plain start seals them."""

    async def test_arguments_stored_sealed_and_read_open(
            self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (_, _, caller):
            url = adapter_url(kind, tmp_path)
            async with Starflow.open(url, workspace_id=workspace_id, codec=ZlibCodec(),
                                     maintenance=False) as sf:
                run_id = str(uuid.uuid4())
                await caller.begin()
                await sf.options(run_id=run_id, connection=caller.conn).start(fulfil, "o-8")
                # Read back through the caller's transaction (the idempotent start): opened.
                again = await sf.options(run_id=run_id, connection=caller.conn).start(
                    fulfil, "o-8")
                await caller.commit()
                assert again.run_id == run_id
                assert (await sf.get_run(run_id)).input_json == {"args": ["o-8"],
                                                                 "kwargs": {}}
                raw = sf.adapter
                while isinstance(raw, DelegatingAdapter):
                    raw = raw.inner
                stored = await raw.get_run(run_id)
                assert stored is not None and is_encoded(stored.input_json)
                assert await claim(sf) == 1
                assert await sf.result(run_id) == "shipped o-8"


class TestRollback:
    """Rolled back with the caller's rows: no run, no attribute, no definition left."""

    async def test_rollback_leaves_no_run(self, kind: str, tmp_path: Path,
                                          workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            await caller.begin()
            await caller.insert("o-3")
            handle = await sf.options(connection=caller.conn, attributes={"k": 1}).start(
                fulfil, "o-3")
            await caller.rollback()
            await no_run(sf, handle.run_id)
            assert await sf.list_runs() == []
            assert await claim(sf) == 0
            assert await caller.orders() == []

    async def test_a_definition_rolled_back_is_written_again(
            self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        # The app has never started this workflow: its definition row is written in
        # the caller's transaction too, and must not be remembered once rolled back.
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            await caller.begin()
            await sf.start(fulfil, "gone", connection=caller.conn)
            await caller.rollback()
            await caller.begin()
            handle = await sf.start(fulfil, "kept", connection=caller.conn)
            await caller.commit()
            assert await claim(sf) == 1
            assert await sf.result(handle) == "shipped kept"


class TestIdempotence:
    """A run id names one run, inside the transaction and across it."""

    async def test_same_run_id_in_one_transaction_and_after(
            self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            run_id = str(uuid.uuid4())
            await caller.begin()
            first = await sf.options(run_id=run_id, connection=caller.conn).start(fulfil, "a")
            again = await sf.options(run_id=run_id, connection=caller.conn).start(fulfil, "a")
            assert first.run_id == again.run_id == run_id
            with pytest.raises(RunIdConflict):
                await sf.options(run_id=run_id, connection=caller.conn).start(other, "a")
            await caller.insert("after-conflict")  # the transaction goes on
            await caller.commit()
            assert [r.id for r in await sf.list_runs()] == [run_id]
            await caller.begin()
            later = await sf.options(run_id=run_id, connection=caller.conn).start(fulfil, "a")
            await caller.commit()
            plain = await sf.options(run_id=run_id).start(fulfil, "a")
            assert later.run_id == plain.run_id == run_id
            assert len(await sf.list_runs()) == 1
            assert await caller.orders() == ["after-conflict"]

    async def test_a_run_key(self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        # A caller-chosen key (#30 item 6) names the run as an id does: the order's key.
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            await caller.begin()
            await caller.insert("order-42")
            first = await sf.options(run_id="order-42", connection=caller.conn).start(
                fulfil, "order-42")
            again = await sf.options(run_id="order-42", connection=caller.conn).start(
                fulfil, "order-42")
            await caller.commit()
            assert first.run_id == again.run_id
            run = await sf.get_run("order-42")
            assert (run.id, run.run_key) == (first.run_id, "order-42")

    async def test_a_refused_insert_keeps_the_transaction(
            self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        # The dedup index refuses the second start's insert: under its savepoint, so
        # the caller's transaction (on PostgreSQL, aborted otherwise) commits the rest.
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            await caller.begin()
            await caller.insert("o-4")
            first = await sf.options(dedup_key="d", connection=caller.conn).start(fulfil, "a")
            with pytest.raises(DuplicateRun) as info:
                await sf.options(dedup_key="d", connection=caller.conn).start(fulfil, "b")
            assert info.value.run_id == first.run_id
            await caller.insert("o-5")
            await caller.commit()
            assert [r.id for r in await sf.list_runs()] == [first.run_id]
            assert await caller.orders() == ["o-4", "o-5"]


class TestRefused:
    """Each refusal comes before any write and leaves the caller's transaction usable."""

    async def refused(self, sf: Starflow, caller: Caller, error: type[Exception],
                      **options: Any) -> None:
        with pytest.raises(error) as info:
            await sf.options(**options).start(fulfil, "x")
        assert "Nothing was written" in str(info.value) or error is ConfigError
        assert await sf.list_runs() == []

    async def test_not_in_a_transaction(self, kind: str, tmp_path: Path,
                                        workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            await self.refused(sf, caller, NotInTransaction, connection=caller.conn)
            assert await caller.orders() == []

    async def test_another_database(self, kind: str, tmp_path: Path,
                                    workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            if kind == "sqlite":
                import aiosqlite

                elsewhere = await aiosqlite.connect(tmp_path / "other.db")
                await elsewhere.execute("BEGIN")
            else:
                import asyncpg

                url = POSTGRES_URL.rsplit("/", 1)[0] + "/postgres"
                elsewhere = await asyncpg.connect(url)
                tx = elsewhere.transaction()
                await tx.start()
            try:
                await self.refused(sf, caller, ForeignConnection, connection=elsewhere)
            finally:
                await elsewhere.close()

    async def test_another_driver(self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            raw = sqlite3.connect(tmp_path / "starflow.db")
            try:
                await self.refused(sf, caller, ForeignConnection, connection=raw)
            finally:
                raw.close()
            await self.refused(sf, caller, ForeignConnection, connection=object())

    # A failed statement aborts a PostgreSQL transaction (not a SQLite one).
    @pytest.mark.parametrize("kind", ["postgres", "pgbouncer"])
    async def test_a_failed_caller_transaction_is_storage_error(
            self, kind: str, tmp_path: Path, workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            await caller.begin()
            with pytest.raises(Exception):  # noqa: B017 - the caller's own error
                await caller.conn.execute("SELECT 1/0")
            with pytest.raises(starflow.StorageError):
                await sf.start(fulfil, "x", connection=caller.conn)
            await caller.rollback()
            assert await sf.list_runs() == []

    async def test_with_run_and_debounce(self, kind: str, tmp_path: Path,
                                         workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (sf, _, caller):
            await caller.begin()
            await caller.insert("o-6")
            with pytest.raises(TransactionalStartUnsupported, match=r"\.run\(\)"):
                await sf.run(fulfil, "x", connection=caller.conn)
            with pytest.raises(TransactionalStartUnsupported, match="debounce"):
                sf.options(debounce=timedelta(seconds=5), debounce_key="k",
                           connection=caller.conn)
            await caller.commit()
            assert await sf.list_runs() == [] and EXECUTED == []
            assert await caller.orders() == ["o-6"]

    async def test_with_the_warm_tier(self, kind: str, tmp_path: Path,
                                      workspace_id: str) -> None:
        async with app(kind, tmp_path, workspace_id) as (_, _, caller):
            url = adapter_url(kind, tmp_path)
            async with Starflow.open(url, workspace_id=workspace_id, warm="memory://",
                                     maintenance=False) as warm:
                await caller.begin()
                await self.refused(warm, caller, TransactionalStartUnsupported,
                                   connection=caller.conn)
                await caller.rollback()


class TestUnsupportedApps:
    """Apps with no database to share, and the blocking facade, refuse ``connection=``."""

    @pytest.mark.parametrize("url", ["memory://", "null://"])
    async def test_memory_and_null(self, url: str, tmp_path: Path) -> None:
        import aiosqlite

        async with Starflow.open(url, maintenance=False) as sf, \
                aiosqlite.connect(tmp_path / "x.db") as conn:
            await conn.execute("BEGIN")
            with pytest.raises(TransactionalStartUnsupported, match="Nothing was written"):
                await sf.start(fulfil, "x", connection=conn)
            if url == "memory://":
                assert await sf.list_runs() == []

    def test_sync_facade(self, tmp_path: Path) -> None:
        with starflow.sync.Starflow.open(f"sqlite:///{tmp_path / 's.db'}") as sf:
            with pytest.raises(TransactionalStartUnsupported, match=r"starflow\.sync"):
                sf.start(fulfil, "x", connection=object())
            with pytest.raises(TransactionalStartUnsupported, match=r"starflow\.sync"):
                sf.options(connection=object())
            assert sf.list_runs() == []
