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
import sqlite3
import threading
import uuid
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import anyio.lowlevel

from .. import serde
from ..clock import format_ts, parse_ts
from ..errors import ConfigError, StorageError
from ..migrations import load_migrations
from ..urls import normalize_scheme
from .base import (
    JSON_RUN_COLUMNS,
    AfterClaim,
    AfterSweep,
    DefinitionRecord,
    DeleteSessionVars,
    DeleteSignal,
    DeleteWaits,
    FailRunJobs,
    FinishJob,
    Guard,
    InsertEvent,
    InsertJob,
    InsertOutbox,
    InsertRun,
    InsertSignal,
    InsertWait,
    JobRecord,
    Mark,
    Op,
    OutboxLag,
    OutboxRow,
    RunEvent,
    RunInfo,
    SignalRecord,
    SweepResult,
    Unit,
    UpdateRun,
    UpsertSessionVar,
    WaitRecord,
    WorkflowStateAdapter,
)
from .pages import RunPage, RunPageQuery, make_page, page_sql

if TYPE_CHECKING:
    import aiosqlite

__all__ = ["LocalWorkflowStateAdapter"]

T = TypeVar("T")
#: ``_last_run`` after a run let go of its lease with nobody else writing.
_NOBODY = ""
#: What :meth:`LocalWorkflowStateAdapter._on_loop` returns when it did not run.
_NOT_RUN = object()
WriteFn = Callable[[sqlite3.Connection], Any]

_RUN_COLUMNS = (
    "id, template_id, workspace_id, env, status, started_at, completed_at, duration_ms, "
    "checkpoint_json, error, claim_state, runner_pool, leased_by, lease_until, last_heartbeat, "
    "claim_attempts, definition_id, input_json, result_json, start_mode, max_claim_attempts, "
    "workflow_version"
)


def _db_value(column: str, value: Any) -> Any:
    if value is None:
        return None
    if column in JSON_RUN_COLUMNS:
        return serde.encode(value, what=column).decode()
    if isinstance(value, datetime):
        return format_ts(value)
    return value


def _ts(value: str | None) -> datetime | None:
    return parse_ts(value) if value else None


def _json(value: str | None) -> Any:
    return serde.decode(value) if value is not None else None


def _run(row: sqlite3.Row) -> RunInfo:
    return RunInfo(
        id=row[0],
        template_id=row[1],
        workspace_id=row[2],
        env=row[3],
        status=row[4],
        started_at=_ts(row[5]),
        completed_at=_ts(row[6]),
        duration_ms=row[7],
        checkpoint_json=_json(row[8]),
        error=row[9],
        claim_state=row[10],
        runner_pool=row[11],
        leased_by=row[12],
        lease_until=_ts(row[13]),
        last_heartbeat=_ts(row[14]),
        claim_attempts=row[15],
        definition_id=row[16],
        input_json=_json(row[17]),
        result_json=_json(row[18]),
        start_mode=row[19],
        max_claim_attempts=row[20],
        workflow_version=row[21],
    )


class _Write:
    """A queued write and the slots its outcome is left in."""

    __slots__ = ("durable", "error", "fn", "result", "run")

    def __init__(self, fn: WriteFn, durable: bool, run: str | None) -> None:
        self.fn = fn
        self.durable = durable
        self.run = run
        self.result: Any = None
        self.error: BaseException | None = None


class LocalWorkflowStateAdapter(WorkflowStateAdapter):
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

    def __init__(
        self,
        path: str,
        *,
        workspace_id: str = "celestial",
        env: str = "prod",
        synchronous: str = "FULL",
        busy_timeout_ms: int = 10_000,
        inline_commits: bool = True,
    ) -> None:
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
        self._inflight = 0
        self._idle_event: anyio.Event | None = None
        # Held by whoever uses the connection: the database thread for a call,
        # the event loop's thread for an inline write or read (see _on_loop).
        self._lock = threading.Lock()

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

    # aiosqlite answers from its own thread, so a task awaiting a query looks
    # blocked to the event loop; this counter tells test harnesses otherwise.
    def _busy_enter(self) -> None:
        self._inflight += 1

    def _busy_exit(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._idle_event is not None:
            self._idle_event.set()
            self._idle_event = None

    async def idle(self) -> None:
        """Return once no query or queued write is in flight (at once if none is)."""
        while self._inflight > 0:
            # Made on demand: most calls have nobody waiting for idleness.
            if self._idle_event is None:
                self._idle_event = anyio.Event()
            await self._idle_event.wait()

    async def open(self) -> None:
        if self._db is not None:
            return
        import aiosqlite

        try:
            # check_same_thread=False: inline writes use the connection from the
            # event loop's thread, never at the same time as the database thread.
            self._db = await aiosqlite.connect(self.path, isolation_level=None,
                                               check_same_thread=False)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open SQLite database {self.path!r}: {exc}") from exc

        def setup(conn: sqlite3.Connection) -> None:
            if self.path != ":memory:":
                conn.execute("PRAGMA journal_mode = WAL")
            conn.execute(f"PRAGMA synchronous = {self.synchronous}")
            conn.execute("PRAGMA foreign_keys = ON")
            self.applied_migrations = tuple(self._migrate(conn))

        self._sync_mode = self.synchronous
        await self._call(setup)

    async def close(self) -> None:
        if self._db is not None:
            db, self._db = self._db, None
            await db.close()

    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied."""
        return await self._call(self._migrate)

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
        mode = self.synchronous if any(w.durable for w in batch) else "OFF"
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
        result: bool = await self._write(lambda conn: self._apply_unit(conn, unit),
                                         durable=unit.durable, run=unit.run_id)
        if unit.releases_lease and self._last_run == unit.run_id:
            self._last_run = _NOBODY  # its run let go: whichever run writes next is alone
        return result

    def _apply_unit(self, conn: sqlite3.Connection, unit: Unit) -> bool:
        ops = unit.ops
        g = unit.guard
        if (g is not None and g.wait_node is None and g.no_signal is None and ops
                and type(ops[0]) is InsertEvent
                and ops[0].run_id == g.run_id):
            # Most units of a run (every node_start and node_complete) open with an
            # event of the guarded run: its INSERT checks the guard itself, one
            # statement instead of a SELECT and an INSERT. It inserts nothing when
            # the guard fails, and nothing was written before it.
            if self._insert_event(conn, ops[0], g) == 0:
                return False
            for op in ops[1:]:
                self._apply_op(conn, op)
            return True
        if g is not None:
            row = conn.execute(
                "SELECT leased_by, status FROM workflow_runs "
                "WHERE id = ? AND workspace_id = ? AND env = ?",
                (g.run_id, self.workspace_id, self.env),
            ).fetchone()
            if row is None:
                return False
            if g.leased_by is not None and row[0] != g.leased_by:
                return False
            if g.status_in is not None and row[1] not in g.status_in:
                return False
            if g.wait_node is not None and conn.execute(
                "SELECT 1 FROM workflow_waits WHERE run_id = ? AND node_id = ?",
                (g.run_id, g.wait_node),
            ).fetchone() is None:
                return False
            if g.no_signal is not None and conn.execute(
                "SELECT 1 FROM workflow_signals WHERE run_id = ? AND event = ? "
                "AND workspace_id = ? AND env = ?",
                (g.run_id, g.no_signal, self.workspace_id, self.env),
            ).fetchone() is not None:
                return False
        for op in unit.ops:
            self._apply_op(conn, op)
        return True

    def _insert_event(self, conn: sqlite3.Connection, op: InsertEvent,
                      guard: Guard | None = None) -> int:
        """Insert ``op`` if its run is in scope (and ``guard`` holds); the rows inserted."""
        args: list[Any] = [op.run_id, op.event_type, op.node_id,
                           None if op.payload is None else serde.encode(op.payload).decode(),
                           format_ts(op.created_at), op.run_id, self.workspace_id, self.env]
        leased = statuses = 0
        if guard is not None:
            if guard.leased_by is not None:
                leased = 1
                args.append(guard.leased_by)
            if guard.status_in is not None:
                statuses = len(guard.status_in)
                args.extend(guard.status_in)
        return conn.execute(_event_sql(leased, statuses), args).rowcount

    def _apply_op(self, conn: sqlite3.Connection, op: Op) -> None:
        ws, env = self.workspace_id, self.env
        if isinstance(op, InsertEvent):
            self._insert_event(conn, op)
        elif isinstance(op, UpdateRun):
            cols = list(op.values)
            sets = ", ".join(f"{c} = ?" for c in cols)
            conn.execute(
                f"UPDATE workflow_runs SET {sets} WHERE id = ? AND workspace_id = ? AND env = ?",
                (*(_db_value(c, op.values[c]) for c in cols), op.run_id, ws, env),
            )
        elif isinstance(op, InsertRun):
            cols = ["id", "workspace_id", "env", *op.values]
            conn.execute(
                f"INSERT INTO workflow_runs ({', '.join(cols)}) "
                f"VALUES ({', '.join('?' for _ in cols)})",
                (op.run_id, ws, env, *(_db_value(c, v) for c, v in op.values.items())),
            )
        elif isinstance(op, InsertWait):
            conn.execute(
                "INSERT OR REPLACE INTO workflow_waits (run_id, node_id, workspace_id, env, "
                "event, deadline, created_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (op.run_id, op.node_id, ws, env, op.event,
                 format_ts(op.deadline) if op.deadline else None, format_ts(op.created_at)),
            )
        elif isinstance(op, DeleteWaits):
            conn.execute(
                "DELETE FROM workflow_waits WHERE run_id = ? AND workspace_id = ? AND env = ?",
                (op.run_id, ws, env),
            )
        elif isinstance(op, InsertSignal):
            conn.execute(
                "INSERT INTO workflow_signals (run_id, workspace_id, env, event, payload_json, "
                "created_at) VALUES (?, ?, ?, ?, ?, ?)",
                (op.run_id, ws, env, op.event, serde.encode(op.payload).decode(),
                 format_ts(op.created_at)),
            )
        elif isinstance(op, DeleteSignal):
            conn.execute(
                "DELETE FROM workflow_signals WHERE id = ? AND workspace_id = ? AND env = ?",
                (op.signal_id, ws, env),
            )
        elif isinstance(op, UpsertSessionVar):
            conn.execute(
                "INSERT INTO workflow_session_vars (workspace_id, env, session_id, key, "
                "value_json, run_id, keep_until, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (workspace_id, env, session_id, key) DO UPDATE SET "
                "value_json = excluded.value_json, run_id = excluded.run_id, "
                "keep_until = excluded.keep_until, updated_at = excluded.updated_at",
                (ws, env, op.session_id, op.key, serde.encode(op.value).decode(), op.run_id,
                 format_ts(op.keep_until) if op.keep_until else None,
                 format_ts(op.updated_at)),
            )
        elif isinstance(op, DeleteSessionVars):
            conn.execute(
                "DELETE FROM workflow_session_vars WHERE workspace_id = ? AND env = ? "
                "AND run_id = ? AND keep_until IS NULL",
                (ws, env, op.run_id),
            )
        elif isinstance(op, Mark):
            pass
        elif isinstance(op, InsertJob):
            job = op.job
            conn.execute(
                "INSERT INTO worker_jobs (id, workspace_id, env, run_id, node_id, pool, "
                "step_name, idempotency_key, input_json, status, max_attempts, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, 'queued', ?, ?) "
                "ON CONFLICT DO NOTHING",
                (job.id, ws, env, job.run_id, job.node_id, job.pool, job.step_name,
                 job.idempotency_key, serde.encode(job.input).decode(), job.max_attempts,
                 format_ts(op.created_at)),
            )
        elif isinstance(op, FinishJob):
            conn.execute(
                "UPDATE worker_jobs SET status = ?, result_json = ?, error_json = ?, "
                "completed_at = ?, leased_by = NULL, lease_until = NULL "
                "WHERE id = ? AND workspace_id = ? AND env = ? "
                "AND status IN ('queued', 'claimed')",
                (op.status, serde.encode(op.result).decode(),
                 None if op.error is None else serde.encode(op.error).decode(),
                 format_ts(op.completed_at), op.job_id, ws, env),
            )
        elif isinstance(op, FailRunJobs):
            conn.execute(
                "UPDATE worker_jobs SET status = 'failed', error_json = ?, completed_at = ?, "
                "leased_by = NULL, lease_until = NULL "
                "WHERE run_id = ? AND workspace_id = ? AND env = ? "
                "AND status IN ('queued', 'claimed')",
                (serde.encode(op.error).decode(), format_ts(op.completed_at), op.run_id, ws,
                 env),
            )
        elif isinstance(op, InsertOutbox):
            conn.execute(
                "INSERT INTO mirror_outbox (run_id, kind, payload, created_at, workspace_id, env)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (op.run_id, op.kind, serde.encode(op.payload).decode(),
                 format_ts(op.created_at), ws, env),
            )
        else:  # pragma: no cover - a new Op type without SQL is a programming error
            raise TypeError(f"the SQLite adapter cannot apply {type(op).__name__}")

    # -- reads -----------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunInfo | None:
        def q(conn: sqlite3.Connection) -> RunInfo | None:
            row = conn.execute(
                f"SELECT {_RUN_COLUMNS} FROM workflow_runs "
                "WHERE id = ? AND workspace_id = ? AND env = ?",
                (run_id, self.workspace_id, self.env),
            ).fetchone()
            return _run(row) if row else None

        return await self._lookup(q)

    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50) -> list[RunInfo]:
        where = ["workspace_id = ?", "env = ?"]
        args: list[Any] = [self.workspace_id, self.env]
        if status is not None:
            where.append("status = ?")
            args.append(status)
        if template_id is not None:
            where.append("template_id = ?")
            args.append(template_id)
        if since is not None:
            where.append("started_at >= ?")
            args.append(format_ts(since))
        args.append(int(limit))
        sql = (f"SELECT {_RUN_COLUMNS} FROM workflow_runs WHERE {' AND '.join(where)} "
               "ORDER BY started_at DESC, id LIMIT ?")
        return await self._call(lambda conn: [_run(r) for r in conn.execute(sql, args)])

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        query.check()
        args: list[Any] = []

        def param(value: Any) -> str:
            args.append(value)
            return f"?{len(args)}"

        built = page_sql(query, workspace_id=self.workspace_id, env=self.env,
                         columns=_RUN_COLUMNS, param=param, ts=format_ts, uuid_ids=False)
        if built is None:
            return make_page([], query, {} if query.counts else None)
        select, count_sql, shared = built

        def q(conn: sqlite3.Connection) -> tuple[list[RunInfo], dict[str, int] | None]:
            runs = [_run(r) for r in conn.execute(select, args)]
            counts = (None if count_sql is None else
                      {r[0]: r[1] for r in conn.execute(count_sql, args[:shared])})
            return runs, counts

        runs, counts = await self._call(q)
        return make_page(runs, query, counts)

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        def q(conn: sqlite3.Connection) -> list[RunEvent]:
            rows = conn.execute(
                "SELECT e.id, e.run_id, e.event_type, e.node_id, e.payload_json, e.created_at "
                "FROM workflow_run_events e JOIN workflow_runs r ON r.id = e.run_id "
                "WHERE e.run_id = ? AND r.workspace_id = ? AND r.env = ? AND e.id > ? "
                "ORDER BY e.id",
                (run_id, self.workspace_id, self.env, after_id),
            )
            return [
                RunEvent(id=r[0], run_id=r[1], event_type=r[2], node_id=r[3],
                         payload_json=_json(r[4]), created_at=parse_ts(r[5]))
                for r in rows
            ]

        return await self._call(q)

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        return await self._lookup(lambda conn: [
            _wait(r) for r in conn.execute(
                "SELECT run_id, node_id, event, deadline, created_at FROM workflow_waits "
                "WHERE run_id = ? AND workspace_id = ? AND env = ? ORDER BY created_at",
                (run_id, self.workspace_id, self.env))
        ])

    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        return await self._call(lambda conn: [
            _wait(r) for r in conn.execute(
                "SELECT run_id, node_id, event, deadline, created_at FROM workflow_waits "
                "WHERE workspace_id = ? AND env = ? AND deadline IS NOT NULL AND deadline <= ? "
                "ORDER BY deadline LIMIT ?",
                (self.workspace_id, self.env, format_ts(now), int(limit)))
        ])

    async def next_deadline(self) -> datetime | None:
        row = await self._call(lambda conn: conn.execute(
            "SELECT min(deadline) FROM workflow_waits WHERE workspace_id = ? AND env = ? "
            "AND deadline IS NOT NULL", (self.workspace_id, self.env)).fetchone())
        return _ts(row[0]) if row else None

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        row = await self._lookup(lambda conn: conn.execute(
            "SELECT id, run_id, event, payload_json, created_at FROM workflow_signals "
            "WHERE run_id = ? AND event = ? AND workspace_id = ? AND env = ? "
            "ORDER BY id LIMIT 1", (run_id, event, self.workspace_id, self.env)).fetchone())
        if row is None:
            return None
        return SignalRecord(id=row[0], run_id=row[1], event=row[2], payload=_json(row[3]),
                            created_at=parse_ts(row[4]))

    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        row = await self._lookup(lambda conn: conn.execute(
            "SELECT value_json, keep_until FROM workflow_session_vars "
            "WHERE workspace_id = ? AND env = ? AND session_id = ? AND key = ?",
            (self.workspace_id, self.env, session_id, key)).fetchone())
        if row is None:
            return None
        if now is not None and row[1] is not None and parse_ts(row[1]) <= now:
            return None
        return _json(row[0])

    # -- read-modify-writes ----------------------------------------------------

    async def claim_runs(self, runner_id: str, *, pool: str | None, now: datetime,
                         lease_until: datetime, limit: int = 1,
                         workflows: Collection[str] | None = None,
                         after: AfterClaim | None = None) -> list[RunInfo]:
        names = sorted(set(workflows)) if workflows is not None else None
        if names is not None and not names:
            return []
        only = f" AND template_id IN ({', '.join('?' for _ in names)})" if names else ""

        def claim(conn: sqlite3.Connection) -> list[RunInfo]:
            rows = conn.execute(
                "UPDATE workflow_runs SET claim_state = 'claimed', status = 'running', "
                "claim_attempts = claim_attempts + 1, leased_by = ?, lease_until = ?, "
                "last_heartbeat = ? WHERE id IN ("
                # Unary + keeps the planner off the (workspace, started_at) index,
                # which would walk every run of the workspace: the partial
                # queued index holds only what can be claimed.
                "  SELECT id FROM workflow_runs WHERE claim_state = 'queued' "
                "  AND +workspace_id = ? AND +env = ? AND (runner_pool IS NULL OR runner_pool = ?)"
                f"{only} ORDER BY started_at LIMIT ?"
                f") RETURNING {_RUN_COLUMNS}",
                (runner_id, format_ts(lease_until), format_ts(now), self.workspace_id,
                 self.env, pool, *(names or ()), int(limit)),
            ).fetchall()
            # RETURNING has no guaranteed order: hand runs out oldest first.
            runs = [_run(r) for r in rows]
            runs.sort(key=lambda r: (r.started_at is not None, r.started_at, r.id))
            if after is not None and runs:
                for op in after(runs):
                    self._apply_op(conn, op)
            return runs

        result: list[RunInfo] = await self._write(claim)
        return result

    async def expire_old_leases(self, now: datetime, reason: str = "runner_lost",
                                *, after: AfterSweep | None = None) -> list[SweepResult]:
        ts = format_ts(now)

        def sweep(conn: sqlite3.Connection) -> list[SweepResult]:
            rows = conn.execute(
                "UPDATE workflow_runs SET "
                "status = CASE WHEN claim_attempts < max_claim_attempts "
                "  THEN 'queued' ELSE 'error' END, "
                "claim_state = CASE WHEN claim_attempts < max_claim_attempts "
                "  THEN 'queued' ELSE 'abandoned' END, "
                "error = CASE WHEN claim_attempts < max_claim_attempts THEN error ELSE ? END, "
                "completed_at = CASE WHEN claim_attempts < max_claim_attempts "
                "  THEN completed_at ELSE ? END, "
                "lease_until = CASE WHEN claim_attempts < max_claim_attempts "
                "  THEN NULL ELSE lease_until END "
                # Unary +: search the partial lease index (only leased runs), not
                # every run of the workspace.
                "WHERE +workspace_id = ? AND +env = ? AND lease_until IS NOT NULL "
                "AND lease_until < ? AND status IN ('running', 'paused') "
                "RETURNING id, leased_by, claim_state",
                (reason, ts, self.workspace_id, self.env, ts),
            ).fetchall()
            results = [
                SweepResult(run_id=r[0], leased_by=r[1],
                            action="requeued" if r[2] == "queued" else "abandoned")
                for r in rows
            ]
            conn.executemany(
                "INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json, "
                "created_at) VALUES (?, 'runner_lost', NULL, ?, ?)",
                [(r.run_id, serde.encode({"leased_by": r.leased_by, "action": r.action,
                                          "reason": reason}).decode(), ts) for r in results],
            )
            if after is not None and results:
                for op in after(results):
                    self._apply_op(conn, op)
            return results

        result: list[SweepResult] = await self._write(sweep)
        return result

    async def ensure_definition(self, name: str, version: int, code_hash: str,
                                *, now: datetime) -> str:
        def ensure(conn: sqlite3.Connection) -> str:
            conn.execute(
                "INSERT INTO workflow_definitions (id, workspace_id, env, name, version, "
                "code_hash, created_at) VALUES (?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (workspace_id, env, name, version) DO NOTHING",
                (str(uuid.uuid4()), self.workspace_id, self.env, name, version, code_hash,
                 format_ts(now)),
            )
            row = conn.execute(
                "SELECT id FROM workflow_definitions WHERE workspace_id = ? AND env = ? "
                "AND name = ? AND version = ?", (self.workspace_id, self.env, name, version),
            ).fetchone()
            return str(row[0])

        result: str = await self._write(ensure)
        return result

    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        row = await self._lookup(lambda conn: conn.execute(
            "SELECT id, name, version, code_hash, created_at FROM workflow_definitions "
            "WHERE id = ? AND workspace_id = ? AND env = ?",
            (definition_id, self.workspace_id, self.env)).fetchone())
        if row is None:
            return None
        return DefinitionRecord(id=row[0], name=row[1], version=row[2], code_hash=row[3],
                                created_at=parse_ts(row[4]))

    async def expire_session_vars(self, now: datetime) -> int:
        def gc(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "DELETE FROM workflow_session_vars WHERE workspace_id = ? AND env = ? "
                "AND keep_until IS NOT NULL AND keep_until <= ?",
                (self.workspace_id, self.env, format_ts(now)),
            )
            return int(cur.rowcount)

        result: int = await self._write(gc)
        return result

    async def get_secret(self, key_id: str, *, now: datetime, create: bool = True
                         ) -> str | None:
        def get(conn: sqlite3.Connection) -> str | None:
            row = conn.execute(
                "SELECT secret FROM starflow_keys WHERE workspace_id = ? AND env = ? "
                "AND key_id = ?", (self.workspace_id, self.env, key_id)).fetchone()
            if row is not None or not create:
                return row[0] if row else None
            import secrets

            conn.execute(
                "INSERT OR IGNORE INTO starflow_keys (workspace_id, env, key_id, secret, "
                "created_at) VALUES (?, ?, ?, ?, ?)",
                (self.workspace_id, self.env, key_id, secrets.token_hex(32), format_ts(now)),
            )
            row = conn.execute(
                "SELECT secret FROM starflow_keys WHERE workspace_id = ? AND env = ? "
                "AND key_id = ?", (self.workspace_id, self.env, key_id)).fetchone()
            return str(row[0])

        result: str | None = await self._write(get)
        return result

    # -- worker jobs -------------------------------------------------------------

    async def claim_jobs(self, worker_id: str, *, pool: str, now: datetime,
                         lease_until: datetime, limit: int = 1) -> list[JobRecord]:
        ts = format_ts(now)

        def claim(conn: sqlite3.Connection) -> list[JobRecord]:
            rows = conn.execute(
                "UPDATE worker_jobs SET status = 'claimed', attempts = attempts + 1, "
                "leased_by = ?, lease_until = ?, last_heartbeat = ? WHERE id IN ("
                "  SELECT id FROM worker_jobs WHERE workspace_id = ? AND env = ? AND pool = ?"
                "  AND (status = 'queued' OR (status = 'claimed' AND lease_until < ?))"
                "  ORDER BY created_at, id LIMIT ?"
                f") RETURNING {_JOB_COLUMNS}",
                (worker_id, format_ts(lease_until), ts, self.workspace_id, self.env, pool, ts,
                 int(limit)),
            ).fetchall()
            jobs = [_job(r) for r in rows]
            jobs.sort(key=lambda j: (j.created_at, j.id))
            return jobs

        result: list[JobRecord] = await self._write(claim)
        return result

    async def heartbeat_job(self, job_id: str, worker_id: str, *, now: datetime,
                            lease_until: datetime) -> bool:
        def beat(conn: sqlite3.Connection) -> bool:
            cur = conn.execute(
                "UPDATE worker_jobs SET lease_until = ?, last_heartbeat = ? WHERE id = ? "
                "AND workspace_id = ? AND env = ? AND status = 'claimed' AND leased_by = ?",
                (format_ts(lease_until), format_ts(now), job_id, self.workspace_id, self.env,
                 worker_id),
            )
            return cur.rowcount == 1

        result: bool = await self._write(beat)
        return result

    async def get_job(self, job_id: str) -> JobRecord | None:
        row = await self._lookup(lambda conn: conn.execute(
            f"SELECT {_JOB_COLUMNS} FROM worker_jobs WHERE id = ? AND workspace_id = ? "
            "AND env = ?", (job_id, self.workspace_id, self.env)).fetchone())
        return _job(row) if row else None

    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        where = ["workspace_id = ?", "env = ?"]
        args: list[Any] = [self.workspace_id, self.env]
        if run_id is not None:
            where.append("run_id = ?")
            args.append(run_id)
        if status is not None:
            where.append("status = ?")
            args.append(status)
        args.append(int(limit))
        sql = (f"SELECT {_JOB_COLUMNS} FROM worker_jobs WHERE {' AND '.join(where)} "
               "ORDER BY created_at, id LIMIT ?")
        return await self._call(lambda conn: [_job(r) for r in conn.execute(sql, args)])

    # -- the mirror outbox -------------------------------------------------------

    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        return await self._call(lambda conn: [
            OutboxRow(id=r[0], run_id=r[1], kind=r[2], payload=_json(r[3]),
                      created_at=parse_ts(r[4]))
            for r in conn.execute(
                "SELECT id, run_id, kind, payload, created_at FROM mirror_outbox "
                "WHERE workspace_id = ? AND env = ? AND applied_at IS NULL ORDER BY id LIMIT ?",
                (self.workspace_id, self.env, int(limit)))
        ])

    async def mark_outbox_applied(self, ids: Sequence[int], *, now: datetime) -> int:
        if not ids:
            return 0
        marks = ", ".join("?" for _ in ids)

        def mark(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                f"UPDATE mirror_outbox SET applied_at = ? WHERE id IN ({marks}) "
                "AND workspace_id = ? AND env = ? AND applied_at IS NULL",
                (format_ts(now), *(int(i) for i in ids), self.workspace_id, self.env),
            )
            return int(cur.rowcount)

        result: int = await self._write(mark)
        return result

    async def prune_outbox(self, applied_before: datetime) -> int:
        def prune(conn: sqlite3.Connection) -> int:
            cur = conn.execute(
                "DELETE FROM mirror_outbox WHERE workspace_id = ? AND env = ? "
                "AND applied_at IS NOT NULL AND applied_at < ?",
                (self.workspace_id, self.env, format_ts(applied_before)),
            )
            return int(cur.rowcount)

        result: int = await self._write(prune)
        return result

    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        cutoffs = [format_ts(now - timedelta(seconds=e)) for e in edges]
        buckets = "".join(", sum(CASE WHEN created_at <= ? THEN 1 ELSE 0 END)" for _ in cutoffs)
        row = await self._call(lambda conn: conn.execute(
            f"SELECT count(*), min(created_at){buckets} FROM mirror_outbox "
            "WHERE workspace_id = ? AND env = ? AND applied_at IS NULL",
            (*cutoffs, self.workspace_id, self.env)).fetchone())
        return OutboxLag(pending=int(row[0]), oldest_created_at=_ts(row[1]),
                         older_than=tuple(int(c or 0) for c in row[2:]))


_JOB_COLUMNS = (
    "id, run_id, node_id, pool, step_name, idempotency_key, input_json, status, attempts, "
    "max_attempts, leased_by, lease_until, last_heartbeat, result_json, error_json, "
    "created_at, completed_at"
)


def _storage_error(exc: sqlite3.Error, run_id: str | None) -> StorageError:
    """The StorageError for a failed write of ``run_id``'s unit (as PostgreSQL words it)."""
    if isinstance(exc, sqlite3.IntegrityError) and "workflow_runs.id" in str(exc):
        return StorageError(
            f"SQLite error: {exc}: run {run_id} already exists; run ids are unique across "
            "workspaces: start the run with a new id, or get_run() it first", run_id=run_id)
    return StorageError(f"SQLite error: {exc}", run_id=run_id)


@functools.cache
def _event_sql(leased: int, statuses: int) -> str:
    """An event INSERT that writes only if its run is in scope and, for a guard,
    leased by ``?`` (``leased``) with a status among ``statuses`` placeholders."""
    conditions = "id = ? AND workspace_id = ? AND env = ?"
    if leased:
        conditions += " AND leased_by = ?"
    if statuses:
        conditions += f" AND status IN ({', '.join(['?'] * statuses)})"
    return ("INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json, "
            f"created_at) SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM workflow_runs "
            f"WHERE {conditions})")


def _job(row: sqlite3.Row) -> JobRecord:
    return JobRecord(
        id=row[0], run_id=row[1], node_id=row[2], pool=row[3], step_name=row[4],
        idempotency_key=row[5], input=_json(row[6]), status=row[7], attempts=row[8],
        max_attempts=row[9], leased_by=row[10], lease_until=_ts(row[11]),
        last_heartbeat=_ts(row[12]), result=_json(row[13]), error=_json(row[14]),
        created_at=parse_ts(row[15]), completed_at=_ts(row[16]),
    )


def _wait(row: sqlite3.Row) -> WaitRecord:
    return WaitRecord(run_id=row[0], node_id=row[1], event=row[2], deadline=_ts(row[3]),
                      created_at=parse_ts(row[4]))


def _split_sql(script: str) -> list[str]:
    """Split a migration into statements (no semicolons inside our literals)."""
    lines = [ln for ln in script.splitlines() if not ln.strip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
