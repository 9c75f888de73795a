"""``LocalWorkflowStateAdapter``: the state model on SQLite through aiosqlite.

One connection, one database thread. Every write (a :class:`Unit`, a claim, a
sweep pass) is a function run on that thread; writes queued while another
batch commits are merged into the next transaction (group commit), each inside
its own SAVEPOINT so one failing unit does not take others down. A batch that
holds only non-durable units (``node_start``) commits with
``synchronous=OFF``; the next durable commit flushes the WAL for both.

A hop to the database thread and back costs more than a small commit's SQLite
work, so when the connection is free some calls run on the event loop's own
thread instead (a lock keeps the two threads off the connection at once):
non-durable writes, the durable writes of a run writing alone, and point
reads. None of them ever waits there for another process's lock.
"""

from __future__ import annotations

import functools
import re
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel

from ..clock import format_ts
from ..errors import (
    ConfigError,
    ForeignConnection,
    NotInTransaction,
    StorageError,
    TransactionalStartUnsupported,
)
from ..migrations import MigrationPlan, load_migrations
from ..records import DueStarts, PoolLimits, RunInfo, SweepResult
from ..urls import normalize_scheme
from ._flow import (
    Candidate,
    Queued,
    full_keys,
    pick_claims,
    room_left,
    scan_size,
    take_holders,
)
from .caller import SAVEPOINT, CallerConnection, CallerTransaction
from .sql.adapter import After, Count, Each, MakeScript, One, Rows, SqlAdapter, Walk
from .sql.pools import pool_counts, pool_sql, scope_args
from .sql.queries import SCHEDULED
from .sql.queries import SQLITE_QUERIES as Q
from .sql.shared import (
    CLAIM_ORDER,
    RUN_COLUMNS,
    SQLITE,
    claim_ids_sql,
    claim_set,
    claimable,
    claimed_runs,
    event_args,
    event_sql,
    guard_args,
    guard_shape,
    guard_sql,
    guarded_event,
    held_sql,
    merge_run_writes,
    op_sql,
    pool_limits,
    signal_queued_sql,
    sweep_set,
    swept,
    wait_exists_sql,
)
from .sweep import lost_payload
from .units import (
    ClaimRuns,
    Guard,
    InsertEvent,
    Op,
    QueueDueStarts,
    SweepLeases,
    Unit,
)

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["LocalWorkflowStateAdapter"]

PC = pool_counts(SQLITE)


@functools.lru_cache(maxsize=512)
def _numbered(sql: str) -> bool:
    return re.search(r"\?\d", sql) is not None


def _bind(sql: str, args: Any) -> Any:
    """The parameters of ``sql`` as sqlite3 binds them.

    sqlite3 binds ``?NNN`` placeholders (the statements of ``sql/pools.py``
    repeat arguments) by name: given a sequence it warns since Python 3.12 and
    refuses from 3.14, so a sequence becomes the mapping ``{"1": first, ...}``.
    """
    if isinstance(args, (tuple, list)) and _numbered(sql):
        return {str(i): value for i, value in enumerate(args, 1)}
    return args


class _Connection(sqlite3.Connection):
    """A connection that binds numbered placeholders on every Python (:func:`_bind`)."""

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        return super().execute(sql, _bind(sql, parameters))

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        if _numbered(sql):
            parameters = (_bind(sql, row) for row in parameters)
        return super().executemany(sql, parameters)

T = TypeVar("T")
#: ``_last_run`` after a run let go of its lease with nobody else writing.
_NOBODY = ""
#: What :meth:`LocalWorkflowStateAdapter._on_loop` returns when it did not run.
_NOT_RUN = object()
WriteFn = Callable[[sqlite3.Connection], Any]

class _Write:
    """A queued write and the slots its outcome is left in."""

    __slots__ = ("durable", "error", "fn", "result", "run")

    def __init__(self, fn: WriteFn, durable: bool, run: str | None) -> None:
        self.fn = fn
        self.durable = durable
        self.run = run
        self.result: Any = None
        self.error: BaseException | None = None


class LocalWorkflowStateAdapter(SqlAdapter):
    """SQLite state adapter (self-hosted, single node, dev, tests).

    Args:
        path: Database file, or ``":memory:"`` for a private in-memory database.
        workspace_id: Tenant scope of every query.
        env: Environment scope of every query.
        synchronous: ``PRAGMA synchronous`` for durable commits (default FULL).
        busy_timeout_ms: How long to wait for another process's write lock.
        inline_commits: Let one run writing alone commit on the event loop's
            thread (see :meth:`_may_inline`); False sends every durable commit
            through the database thread, so the loop never waits for a flush.
    """

    d = SQLITE
    Q = Q
    PC = PC

    def __init__(self, path: str, *, workspace_id: str = "celestial", env: str = "prod",
                 synchronous: str = "FULL", busy_timeout_ms: int = 10_000,
                 inline_commits: bool = True) -> None:
        super().__init__(workspace_id=workspace_id, env=env)
        if synchronous.upper() not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
            raise ConfigError(f"synchronous must be OFF, NORMAL, FULL or EXTRA: {synchronous!r}")
        self.path = path
        self.synchronous = synchronous.upper()
        self.busy_timeout_ms = busy_timeout_ms
        self.inline_commits = inline_commits
        # The run of the last write, if it committed alone (None: contended).
        self._last_run: str | None = _NOBODY
        self._db: aiosqlite.Connection | None = None
        self._queue: list[_Write] = []
        self._writing = False
        # Set once the batch that will take the writes queued now has committed.
        self._queued_done: anyio.Event | None = None
        self._sync_mode = ""
        # Held by whoever uses the connection: the database thread for a call,
        # the event loop's thread for an inline write or read (see _on_loop).
        self._lock = threading.Lock()
        #: The database file as SQLite names it (``PRAGMA database_list``), once open.
        self._file = ""
        #: Callers' connections found open on that file (``caller_transaction``).
        self._callers_checked: weakref.WeakKeyDictionary[Any, bool] = \
            weakref.WeakKeyDictionary()

    @property
    def shared(self) -> bool:
        """A private ``:memory:`` database is seen by this process only."""
        return self.path != ":memory:"

    @classmethod
    def from_url(cls, url: str, **kwargs: Any) -> LocalWorkflowStateAdapter:
        """Build from ``sqlite:///relative.db``, ``sqlite:////abs.db`` or ``memory://``
        (the scheme in any case)."""
        url = normalize_scheme(url)
        if url.startswith("memory://"):
            return cls(":memory:", **kwargs)
        if not url.startswith("sqlite://"):
            raise ConfigError(f"not a sqlite URL: {url!r} (use sqlite:///path.db)")
        path = url[len("sqlite://"):]
        if path.startswith("/"):
            path = path[1:]
        if not path:
            raise ConfigError(f"sqlite URL without a path: {url!r} (use sqlite:///path.db)")
        return cls(path, **kwargs)

    # -- connection ----------------------------------------------------------

    @property
    def _conn(self) -> aiosqlite.Connection:
        if self._db is None:
            raise StorageError("the SQLite adapter is not open: use `async with Starflow.open()`")
        return self._db

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` with the raw connection on the database thread (one hop)."""
        conn = self._conn

        def job() -> T:
            with self._lock:
                # Only here, off the event loop, may a call wait for another
                # process's lock: the connection rests at busy_timeout 0.
                raw = conn._conn
                raw.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
                try:
                    return fn(raw)
                finally:
                    raw.execute("PRAGMA busy_timeout = 0")

        self._busy_enter()
        try:
            return await conn._execute(job)  # type: ignore[no-any-return,no-untyped-call]
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite error: {exc}") from exc
        finally:
            self._busy_exit()

    async def open(self) -> None:
        if self._db is not None:
            return
        import aiosqlite

        # check_same_thread=False: inline writes use the connection from the
        # event loop's thread, never at the same time as the database thread.
        connection = aiosqlite.connect(self.path, isolation_level=None,
                                       check_same_thread=False, factory=_Connection)
        try:
            self._db = await connection
        except sqlite3.Error as exc:
            # aiosqlite queues its thread's stop without waiting for it: wait here, or
            # the thread reports to an event loop that closed meanwhile (a traceback
            # on stderr after the command's one-line error).
            thread = getattr(connection, "_thread", None)
            if thread is not None:
                await anyio.to_thread.run_sync(thread.join)
            raise StorageError(f"cannot open SQLite database {self.path!r}: {exc}") from exc

        def setup(conn: sqlite3.Connection) -> None:
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            self.applied_migrations = tuple(self._migrate(conn))
            self._file = _main_file(conn.execute("PRAGMA database_list").fetchall())

        self._sync_mode = self.synchronous
        try:
            await self._call(setup)
        except BaseException:
            # aiosqlite's thread holds the process open until the connection is
            # closed: a database that cannot be set up must not hang the exit.
            await self.close()
            raise

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied."""
        return await self._call(self._migrate)

    # -- the caller's transaction (#30) ----------------------------------------

    async def caller_transaction(self, connection: object) -> CallerTransaction:
        import aiosqlite

        if self.path == ":memory:":
            raise TransactionalStartUnsupported(
                "a memory:// app's database is private to it: no other connection can "
                "share its transaction (connection=). Open the app on sqlite:///path.db. "
                "Nothing was written")
        if not isinstance(connection, aiosqlite.Connection):
            raise ForeignConnection(
                f"connection= must be an aiosqlite connection for this SQLite app "
                f"({self.path!r}): got {type(connection).__name__}. Nothing was written")
        caller = _CallerConnection(connection)
        try:
            in_transaction = connection.in_transaction
        except ValueError as exc:  # aiosqlite: no active connection (closed)
            raise ForeignConnection(f"connection= is closed: {exc}. Nothing was "
                                    "written") from exc
        if not in_transaction:
            raise NotInTransaction(
                "connection= has no open transaction, so the run would not commit with "
                "your rows: `await conn.execute('BEGIN')` (or write your rows) first, "
                "and commit after the start. Nothing was written")
        if connection not in self._callers_checked:
            theirs = _main_file(await caller.fetchall("PRAGMA database_list"))
            if theirs != self._file and not await anyio.to_thread.run_sync(
                    _same_file, theirs, self._file):
                raise ForeignConnection(
                    f"connection= is open on {theirs or 'a private database'!r}, but this "
                    f"app's database is {self._file!r}: pass a connection to the app's "
                    "file. Nothing was written")
            self._callers_checked[connection] = True
        return CallerTransaction(caller, workspace_id=self.workspace_id, env=self.env)

    async def migration_plan(self) -> MigrationPlan:
        """What :meth:`migrate` would do, changing nothing (``starflow migrate
        --dry-run``); reads the file without :meth:`open`. (Adopting the state
        model's own schema is PostgreSQL's: its migrations 001-019 are Supabase's.)"""
        import os

        migrations = load_migrations("sqlite")

        def read() -> set[int]:
            if self.path == ":memory:" or not os.path.exists(self.path):
                return set()
            try:
                conn = sqlite3.connect(f"file:{self.path}?mode=ro", uri=True)
                try:
                    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' "
                                    "AND name = 'starflow_migrations'").fetchone() is None:
                        return set()
                    return {r[0] for r in conn.execute("SELECT version FROM starflow_migrations")}
                finally:
                    conn.close()
            except sqlite3.Error as exc:
                raise StorageError(f"cannot read SQLite database {self.path!r}: {exc}") from exc

        done = await anyio.to_thread.run_sync(read)
        return MigrationPlan(adopt=(), apply=tuple(m for m in migrations
                                                   if m.version not in done))

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> list[int]:
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute(
                "CREATE TABLE IF NOT EXISTS starflow_migrations ("
                "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
            )
            done = {r[0] for r in conn.execute("SELECT version FROM starflow_migrations")}
            applied = []
            for mig in load_migrations("sqlite"):
                if mig.version in done:
                    continue
                for statement in _split_sql(mig.sql):
                    conn.execute(statement)
                conn.execute(
                    "INSERT INTO starflow_migrations (version, name, applied_at) "
                    "VALUES (?, ?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))",
                    (mig.version, mig.name),
                )
                applied.append(mig.version)
            conn.execute("COMMIT")
            return applied
        except BaseException:
            conn.execute("ROLLBACK")
            raise

    # -- group-committing writer ---------------------------------------------

    async def _write(self, fn: WriteFn, *, durable: bool = True, run: str | None = None) -> Any:
        item = _Write(fn, durable, run)
        self._busy_enter()
        try:
            return await self._write_queued(item)
        finally:
            self._busy_exit()

    async def _write_queued(self, item: _Write) -> Any:
        if not self._writing and self._may_inline(item) and self._try_inline(item):
            self._last_run = item.run
            if item.durable:
                # Let other tasks in before this run writes again: if other runs
                # are writing too, the next write sees them and queues (group
                # commit) instead of taking the loop for one flush each.
                await anyio.lowlevel.checkpoint()
            return self._outcome(item)
        self._queue.append(item)
        if self._writing:
            # One event for every write queued behind the current batch.
            if self._queued_done is None:
                self._queued_done = anyio.Event()
            await self._queued_done.wait()
        else:
            self._writing = True
            try:
                # Shielded: the leader commits for others too, so its own
                # cancellation must not strand their writes.
                with anyio.CancelScope(shield=True):
                    # One turn of the loop first: writes of other runs that are
                    # ready now join this batch instead of waiting a whole
                    # commit for the next one (with 50 runs in flight: one
                    # flush per wave instead of a lone one and then the rest).
                    await anyio.lowlevel.checkpoint()
                    while self._queue:
                        batch, self._queue = self._queue, []
                        done, self._queued_done = self._queued_done, None
                        self._last_run = batch[0].run if len(batch) == 1 else None
                        try:
                            await self._call(functools.partial(self._apply_batch, batch=batch))
                        except BaseException as exc:
                            for w in batch:
                                if w.error is None:
                                    w.error = exc
                        finally:
                            if done is not None:
                                done.set()
            finally:
                self._writing = False
        return self._outcome(item)

    @staticmethod
    def _outcome(item: _Write) -> Any:
        if item.error is not None:
            if isinstance(item.error, sqlite3.Error):
                raise _storage_error(item.error, item.run) from item.error
            raise item.error
        return item.result

    def _may_inline(self, item: _Write) -> bool:
        """Whether ``item`` may be committed on the event loop's thread.

        A non-durable write (``node_start``, ``synchronous=OFF``) always may:
        it is under a hundred microseconds of SQLite work, less than the round
        trip to the database thread and back. A durable one may only when one
        run is writing alone (``inline_commits``): it is the only database call
        in flight and the last write committed was this run's alone (or was
        the end of a run, with nobody writing since). The loop then waits for
        the flush (one fsync) instead of for two thread hops, which on a
        sequential run is most of the cost above the flush itself.
        Under concurrency the writes of different runs interleave (an inline
        durable commit is followed by a checkpoint that lets them in), so a
        run never sees its own write last and group commit takes over.
        """
        if not item.durable:
            return True
        return (self.inline_commits and item.run is not None
                and self._last_run in (item.run, _NOBODY) and self._inflight == 1)

    def _try_inline(self, item: _Write) -> bool:
        """Commit ``item`` alone on the event loop's thread if the connection is free.

        Taken only when nothing is queued ahead of it (order is kept) and the
        database thread is not using the connection (see :meth:`_on_loop`).
        Returns False, having written nothing, when it cannot: the write then
        goes through the queue.
        """
        if self._queue:
            return False
        try:
            done = self._on_loop(functools.partial(self._apply_batch, batch=[item]))
        except sqlite3.Error as exc:
            item.error = exc
            return True
        return done is not _NOT_RUN

    def _on_loop(self, fn: Callable[[sqlite3.Connection], T]) -> T | object:
        """Run ``fn`` with the connection on the event loop's thread, or return ``_NOT_RUN``.

        Only while the database thread is not using the connection, and never
        waiting for another process's write lock (the connection's resting
        ``busy_timeout`` is 0; only :meth:`_call` raises it): SQLITE_BUSY or
        SQLITE_LOCKED roll back and return ``_NOT_RUN``, so the caller goes to
        the database thread, which may wait. Other SQLite errors are raised,
        after a rollback.
        """
        db = self._db
        if db is None or not self._lock.acquire(blocking=False):
            return _NOT_RUN
        try:
            conn: sqlite3.Connection = db._conn
            try:
                return fn(conn)
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                if (isinstance(exc, sqlite3.OperationalError) and exc.sqlite_errorcode & 0xFF
                        in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)):
                    return _NOT_RUN
                raise
        finally:
            self._lock.release()

    async def _lookup(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """A point read (a row, or the few waits of one run): on the event loop's
        thread when the connection is free, which spares two thread hops; on
        the database thread otherwise. Reads that can be long (journals,
        listings, scans) use :meth:`_call`.

        It still yields to the loop first, as any awaited query would: a caller
        polling a row in a loop must not starve the tasks that change it."""
        await anyio.lowlevel.checkpoint()
        try:
            result = self._on_loop(fn)
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite error: {exc}") from exc
        if result is _NOT_RUN:
            return await self._call(fn)
        return result  # type: ignore[return-value]

    def _apply_batch(self, conn: sqlite3.Connection, batch: list[_Write]) -> None:
        mode = (self.synchronous if (batch[0].durable if len(batch) == 1
                                     else any(w.durable for w in batch)) else "OFF")
        if mode != self._sync_mode:
            conn.execute(f"PRAGMA synchronous = {mode}")
            self._sync_mode = mode
        conn.execute("BEGIN IMMEDIATE")
        # Without savepoints first (two statements less per unit): a unit that
        # raises is rare (a guard that fails writes nothing and raises nothing).
        # If one does, the transaction is rolled back: a unit alone has lost
        # only itself; a batch is applied again with a savepoint per unit, so
        # that only the failing unit is lost.
        applied = False
        try:
            for w in batch:
                w.result = w.fn(conn)
            applied = True
            conn.execute("COMMIT")
            return
        except Exception as exc:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            if applied:
                raise  # the COMMIT itself failed, for every unit
            if len(batch) == 1:
                batch[0].error = exc
                return
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("BEGIN IMMEDIATE")
        try:
            for w in batch:
                w.result = None
                conn.execute("SAVEPOINT unit")
                try:
                    w.result = w.fn(conn)
                except Exception as exc:
                    conn.execute("ROLLBACK TO unit")
                    w.error = exc
                conn.execute("RELEASE unit")
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise

    async def execute(self, unit: Unit) -> bool:
        run = unit.run_id
        result: bool = await self._write(functools.partial(self._apply_unit, unit=unit),
                                         durable=unit.durable, run=run)
        if self._last_run == run and unit.releases_lease:
            self._last_run = _NOBODY  # its run let go: whichever run writes next is alone
        return result

    def _apply_unit(self, conn: sqlite3.Connection, unit: Unit) -> bool:
        ops = unit.ops
        g = unit.guard
        if (g is not None and g.wait_node is None and g.no_signal is None and not g.not_held
                and not g.held and ops
                and type(ops[0]) is InsertEvent
                and ops[0].run_id == g.run_id):
            # Most units of a run (every node_start and node_complete) open with an
            # event of the guarded run: its INSERT checks the guard itself, one
            # statement instead of a SELECT and an INSERT. It inserts nothing when
            # the guard fails, and nothing was written before it.
            if self._insert_event(conn, ops[0], g) == 0:
                return False
            if len(ops) > 2:
                ops = merge_run_writes(ops)  # one statement per run row write
            for op in ops[1:]:
                self._apply_op(conn, op)
            return True
        if g is not None:
            if conn.execute(guard_sql(SQLITE, *guard_shape(g)),
                            (g.run_id, self.workspace_id, self.env, *guard_args(SQLITE, g)),
                            ).fetchone() is None:
                return False
            if g.wait_node is not None and not conn.execute(
                    wait_exists_sql(SQLITE), (g.run_id, g.wait_node)).fetchone()[0]:
                return False
            if (g.not_held or g.held) and bool(conn.execute(
                    held_sql(SQLITE), (g.run_id,)).fetchone()[0]) != g.held:
                return False
            if g.no_signal is not None and conn.execute(
                    signal_queued_sql(SQLITE),
                    (g.run_id, g.no_signal, self.workspace_id, self.env)).fetchone()[0]:
                return False
        for op in (merge_run_writes(ops) if len(ops) > 1 else ops):
            self._apply_op(conn, op)
        return True

    def _insert_event(self, conn: sqlite3.Connection, op: InsertEvent,
                      guard: Guard | None = None) -> int:
        """Insert ``op`` if its run is in scope (and ``guard`` holds); the rows inserted."""
        args = event_args(SQLITE, op, self.workspace_id, self.env)
        if guard is None:
            return conn.execute(event_sql(SQLITE), args).rowcount
        sql, more = guarded_event(SQLITE, guard)
        return conn.execute(sql, (*args, *more)).rowcount

    def _apply_op(self, conn: sqlite3.Connection, op: Op) -> None:
        statement = op_sql(SQLITE, op, self.workspace_id, self.env)
        if statement is not None:
            conn.execute(*statement)

    # -- running scripts (the shared reads and commands of SqlAdapter) ----------

    async def _run_read(self, action: str, make: MakeScript[T], *, run_id: str | None = None,
                        point: bool = False) -> T:
        fn = functools.partial(self._drive, make=make)
        return await (self._lookup(fn) if point else self._call(fn))

    async def _run_write(self, action: str, make: MakeScript[T], *, atomic: bool = True) -> T:
        # Every write goes through the one writer, so ``atomic`` changes nothing here.
        result: T = await self._write(functools.partial(self._drive, make=make))
        return result

    def _drive(self, conn: sqlite3.Connection, make: MakeScript[T]) -> T:
        # A fresh script each time: _lookup may run it again on the database
        # thread, and a group-commit batch is re-applied unit by unit.
        walk = Walk(make())
        for statement in walk:
            match statement:
                case Rows(sql, args):
                    walk.sent = conn.execute(sql, args).fetchall()
                case One(sql, args):
                    walk.sent = conn.execute(sql, args).fetchone()
                case Count(sql, args):
                    walk.sent = conn.execute(sql, args).rowcount
                case Each(sql, rows):
                    conn.executemany(sql, rows)
                case After(ops):
                    for op in ops:
                        self._apply_op(conn, op)
        return walk.value

    # -- read-modify-writes ----------------------------------------------------

    async def _claim_runs(self, c: ClaimRuns) -> list[RunInfo]:
        names, after = c.workflows, c.after
        if names is not None and not names:
            return []
        # "+": not from idx_workflow_runs_template_page (035), a workflow's whole
        # history; queued runs come from the claim indexes.
        only = f" AND +template_id IN ({', '.join('?' for _ in names)})" if names else ""
        ts = format_ts(c.now)

        def claim(conn: sqlite3.Connection) -> list[RunInfo]:
            # Flow control (#18): a pool with stored limits is claimed by
            # _claim_limited, in this same writer transaction (never check-then-claim).
            limits = None
            if c.pool is not None:
                row = conn.execute(Q.get_pool_limits,
                                   (self.workspace_id, self.env, c.pool)).fetchone()
                limits = pool_limits(row, SQLITE) if row is not None else None
            if limits is not None:
                rows = self._claim_limited(conn, limits, c, only)
            else:
                rows = conn.execute(
                    f"UPDATE workflow_runs SET {claim_set(SQLITE, 1)} WHERE id IN ("
                    # Unary + keeps the planner off the (workspace, started_at) index,
                    # which would walk every run of the workspace: the partial
                    # queued index holds only what can be claimed.
                    "  SELECT id FROM workflow_runs WHERE claim_state = 'queued' "
                    "  AND +workspace_id = ? AND +env = ? "
                    "  AND (runner_pool IS NULL OR runner_pool = ?)"
                    f"{only} AND {claimable(SQLITE, 1)} ORDER BY {CLAIM_ORDER} LIMIT ?"
                    f") RETURNING {RUN_COLUMNS}",
                    (c.runner_id, format_ts(c.lease_until), ts, ts, self.workspace_id,
                     self.env, c.pool, *(names or ()), ts, c.limit),
                ).fetchall()
            runs = claimed_runs(rows, SQLITE)
            if after is not None and runs:
                for op in after(runs):
                    self._apply_op(conn, op)
            return runs

        result: list[RunInfo] = await self._write(claim)
        return result

    def _claim_limited(self, conn: sqlite3.Connection, limits: PoolLimits, c: ClaimRuns,
                       only: str) -> list[sqlite3.Row]:
        """Claim for a pool with stored limits, inside the writer's transaction.

        ``BEGIN IMMEDIATE`` holds the database's write lock from the counts to
        the UPDATE, so no other claimer (of any process) spends the same room.
        """
        assert c.pool is not None
        scope = (self.workspace_id, self.env, c.pool)
        ts = format_ts(c.now)
        active = int(conn.execute(Q.pool_active, scope).fetchone()[0])
        recent = 0
        if limits.rate_limit is not None and limits.rate_period is not None:
            recent = int(conn.execute(
                Q.pool_window, (*scope, format_ts(c.now - limits.rate_period))).fetchone()[0])
        key_active: dict[str, int] = {}
        if limits.key_concurrency is not None:
            key_active = {r[0]: int(r[1]) for r in conn.execute(Q.key_active, scope)}
        if limits.keep_slot:  # paused runs that keep their slot count as active
            active += int(conn.execute(PC.pool_kept, scope).fetchone()[0])
            if limits.key_concurrency is not None:
                for key, count in conn.execute(PC.key_kept, scope):
                    key_active[key] = key_active.get(key, 0) + int(count)
        key_recent: dict[str, int] = {}
        if limits.key_rate_limit is not None and limits.key_rate_period is not None:
            key_recent = {r[0]: int(r[1]) for r in conn.execute(
                PC.key_window, (*scope, format_ts(c.now - limits.key_rate_period)))}
        sql = pool_sql(SQLITE, len(c.workflows or ()), limits.keep_slot)
        args = scope_args(SQLITE, *scope, c.now, c.workflows)
        room = room_left(limits, active, recent)
        holders: list[Queued] = []
        if limits.keep_slot:
            rows = conn.execute(sql.holders, (*args, c.limit)).fetchall()
            holders, recent = take_holders([(Queued(r[0], r[1], r[2]), r[3]) for r in rows],
                                           limits, recent=recent, key_recent=key_recent)
            room = room_left(limits, active, recent)
        limit = c.limit - len(holders)
        if limits.fair:
            pool = scope[2]
            ids = self._drive(conn, lambda: self._fair_round(
                limits, sql, args, pool, room=room, limit=limit, key_active=key_active,
                key_recent=key_recent))
        else:
            full = full_keys(limits, key_active, key_recent)
            at_limit = room is not None and room <= 0
            mine = ("runner_pool IS NULL" if at_limit
                    else "(runner_pool IS NULL OR runner_pool = ?)")
            skip = (f" AND (concurrency_key IS NULL OR concurrency_key NOT IN "
                    f"({', '.join('?' for _ in full)}))") if full else ""
            kept = " AND (runner_pool IS NULL OR claimed_at IS NULL)" if limits.keep_slot else ""
            cands = [Candidate(r[0], r[1], r[2]) for r in conn.execute(
                "SELECT id, runner_pool, concurrency_key FROM workflow_runs "
                "WHERE claim_state = 'queued' AND +workspace_id = ? AND +env = ? "
                f"AND {mine}{only}{skip}{kept} AND {claimable(SQLITE, 1)} "
                f"ORDER BY {CLAIM_ORDER} LIMIT ?",
                (self.workspace_id, self.env, *(() if at_limit else (c.pool,)),
                 *(c.workflows or ()), *full, ts, scan_size(limit, limits)))]
            ids = pick_claims(cands, limits, limit=limit, active=active,
                              claimed_in_window=recent, key_active=key_active,
                              key_recent=key_recent)
        ids = [h.id for h in holders] + ids
        if not ids:
            return []
        return conn.execute(claim_ids_sql(SQLITE, len(ids)), (
            c.runner_id, format_ts(c.lease_until), ts, ts, *SQLITE.many(ids))).fetchall()

    async def _expire_old_leases(self, c: SweepLeases) -> list[SweepResult]:
        ts, reason, after = format_ts(c.now), c.reason, c.after

        def sweep(conn: sqlite3.Connection) -> list[SweepResult]:
            rows = conn.execute(
                f"UPDATE workflow_runs SET {sweep_set('', '?', '?', requeue=c.requeue)} "
                # Unary +: search the partial lease index (only leased runs), not
                # every run of the workspace.
                "WHERE +workspace_id = ? AND +env = ? AND lease_until IS NOT NULL "
                "AND lease_until < ? AND status IN ('running', 'paused') "
                "RETURNING id, leased_by, claim_state",
                (reason, ts, self.workspace_id, self.env, ts),
            ).fetchall()
            results = swept(rows)
            conn.executemany(
                "INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json, "
                "created_at) VALUES (?, 'runner_lost', NULL, ?, ?)",
                [(r.run_id, SQLITE.json(lost_payload(r.leased_by, r.action, reason)), ts)
                 for r in results],
            )
            if after is not None and results:
                for op in after(results):
                    self._apply_op(conn, op)
            return results

        result: list[SweepResult] = await self._write(sweep)
        return result

    # -- schedules and flow control (#18) ----------------------------------------

    async def _queue_due_starts(self, c: QueueDueStarts) -> DueStarts:
        ts, scope = format_ts(c.now), (self.workspace_id, self.env)

        def next_start(conn: sqlite3.Connection) -> datetime | None:
            return SQLITE.ts_out(conn.execute(Q.next_start, (*scope, ts)).fetchone()[0])

        # A read first: the write lock is taken only when a start is due.
        ahead = await self._lookup(lambda conn: conn.execute(
            "SELECT EXISTS (SELECT 1 FROM workflow_runs WHERE +workspace_id = ? "
            f"AND +env = ? AND {SCHEDULED} AND not_before <= ?)", (*scope, ts)).fetchone()[0])
        if not ahead:
            return DueStarts(next_start=await self._lookup(next_start))

        def queue(conn: sqlite3.Connection) -> DueStarts:
            ids = [str(r[0]) for r in conn.execute(Q.queue_due_starts, (*scope, ts))]
            if ids and c.after is not None:
                for op in c.after(ids):
                    self._apply_op(conn, op)
            return DueStarts(queued=tuple(ids), next_start=next_start(conn))

        result: DueStarts = await self._write(queue)
        return result



class _CallerConnection(CallerConnection):
    """The caller's aiosqlite connection."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        super().__init__(SQLITE)
        self._conn = conn

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        try:
            await self._conn.execute(sql, tuple(args))
        except sqlite3.Error as exc:
            raise _storage_error(exc, None) from exc

    async def fetchrow(self, sql: str, args: Sequence[Any] = ()) -> Sequence[Any] | None:
        try:
            async with self._conn.execute(sql, tuple(args)) as cursor:
                row: Sequence[Any] | None = await cursor.fetchone()
                return row
        except sqlite3.Error as exc:
            raise _storage_error(exc, None) from exc

    async def write(self, statements: Sequence[tuple[str, tuple[Any, ...]]], *,
                    savepoint: bool = True) -> None:
        # One hop to aiosqlite's thread for the whole savepoint, not one per statement.
        # (Always a savepoint: a failed statement does not abort a SQLite transaction.)
        opening = self.savepoint()

        def write(raw: sqlite3.Connection) -> None:
            raw.execute(opening)
            try:
                for sql, args in statements:
                    raw.execute(sql, args)
            except sqlite3.Error:
                raw.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
                raw.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
                raise
            raw.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")

        try:
            await self._conn._execute(  # type: ignore[no-untyped-call]
                lambda: write(self._conn._conn))
        except sqlite3.Error as exc:
            raise _storage_error(exc, None) from exc

    async def fetchall(self, sql: str) -> list[Any]:
        try:
            return list(await self._conn.execute_fetchall(sql))
        except sqlite3.Error as exc:
            raise _storage_error(exc, None) from exc


def _main_file(rows: Sequence[Any]) -> str:
    """The main database's file in ``PRAGMA database_list`` rows ("" if private)."""
    return next((str(r[2] or "") for r in rows if r[1] == "main"), "")


def _same_file(a: str, b: str) -> bool:
    import os

    return bool(a and b) and os.path.realpath(a) == os.path.realpath(b)


def _storage_error(exc: sqlite3.Error, run_id: str | None) -> StorageError:
    """The StorageError for a failed write of ``run_id``'s unit (as PostgreSQL words it)."""
    if isinstance(exc, sqlite3.IntegrityError) and "workflow_runs.id" in str(exc):
        return StorageError(
            f"SQLite error: {exc}: run {run_id} already exists; run ids are unique across "
            "workspaces: start the run with a new id, or get_run() it first", run_id=run_id)
    return StorageError(f"SQLite error: {exc}", run_id=run_id)


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (no semicolons inside our literals)."""
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
