"""``PostgresWorkflowStateAdapter``: the state model on PostgreSQL through asyncpg.

Supabase is PostgreSQL, so this is also the cloud adapter. asyncpg is imported
in :meth:`PostgresWorkflowStateAdapter.open`, never at module import.

Writes: every :class:`Unit` is one transaction on a pooled connection. The
guard locks the run row (``SELECT … FOR NO KEY UPDATE``) before any op runs,
so two runners or two wakes are serialized on it; consecutive ops with the
same SQL go out as one pipelined ``executemany``. A unit that is a single
unguarded durable op is one statement and one round trip. Non-durable units
(``node_start``) commit with ``SET LOCAL synchronous_commit = off``.

The engine's hot units (``node_start``, ``node_complete``, run start and end,
lease refresh) are fused into one statement, one round trip: the guard is a
``FOR NO KEY UPDATE`` CTE and every write a data-modifying CTE conditioned on
it (see :func:`_fuse`); a non-durable one sets ``synchronous_commit`` off with
``set_config(..., true)``, for its own implicit transaction only. Writes to one
run row within a unit are merged first (a statement cannot update a row twice).

Concurrent units are not merged into one transaction (as the SQLite adapter
does): PostgreSQL already flushes the WAL of concurrent commits together, and
merging on one connection serializes every round trip behind a single
backend. Measured with 50 concurrent units, per-unit transactions from the
pool were faster; see ``docs/guides/postgres.md``.

Claimable work is announced with ``pg_notify`` in the transaction that creates
it, on one channel per (workspace, env); :meth:`wait_for_work` listens on a
dedicated connection.

Session settings ``starflow.workspace_id`` / ``starflow.env`` are sent when
each connection starts, so the Row Level Security policies of migration 021
apply to the adapter's own connections when it logs in as a per-workspace role.
"""

from __future__ import annotations

import functools
import hashlib
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Collection, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from .. import serde
from ..clock import Clock
from ..errors import ConfigError, SerializationError, StarflowError, StorageError
from ..logs import get_logger
from ..migrations import load_migrations
from ..urls import normalize_scheme
from .base import (
    JSON_RUN_COLUMNS,
    UPDATABLE_RUN_COLUMNS,
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
    import asyncpg

__all__ = ["PostgresWorkflowStateAdapter"]

#: Seconds a worker's LISTEN connection may take to open (shielded from cancellation).
LISTEN_CONNECT_TIMEOUT = 10.0

log = get_logger("starflow.adapters.postgres")

SYNCHRONOUS_COMMIT_LEVELS = frozenset({"on", "off", "local", "remote_write", "remote_apply"})

#: ``pg_advisory_xact_lock`` key serializing concurrent ``migrate()`` calls.
MIGRATION_LOCK_KEY = 0x5F_57A2_F10E_0001

_RUN_COLUMNS = (
    "id, template_id, workspace_id, env, status, started_at, completed_at, duration_ms, "
    "checkpoint_json, error, claim_state, runner_pool, leased_by, lease_until, last_heartbeat, "
    "claim_attempts, definition_id, input_json, result_json, start_mode, max_claim_attempts, "
    "workflow_version"
)
#: Columns an ``InsertRun`` may name (besides id/workspace_id/env).
_INSERTABLE_RUN_COLUMNS = UPDATABLE_RUN_COLUMNS | {
    "template_id", "started_at", "input_json", "start_mode", "max_claim_attempts",
    "workflow_version",
}
def _tenant(first: int, table: str = "") -> str:
    """The tenant check of a lookup by key, on parameters ``$first`` and ``$first + 1``.

    Written with ``IS NOT DISTINCT FROM`` (the same as ``=`` on these NOT NULL
    columns) because the planner cannot serve it from an index: with stale or
    missing statistics it otherwise picks an index led by (workspace_id, env)
    over the primary key and filters a whole workspace's rows on every
    boundary (tests/adapters/test_postgres.py, TestHotPathPlans). Listing
    queries keep the indexable ``=``.
    """
    return f"({table}workspace_id, {table}env) IS NOT DISTINCT FROM (${first}, ${first + 1})"


_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")

# The claim path (ADR-047): one statement. The candidate select matches the
# partial index idx_workflow_runs_claim_pool (claim_state = 'queued') and skips
# rows another claimer has locked, so N claimers never wait on each other and
# each queued run is returned to exactly one of them.
CLAIM_SQL = f"""
WITH picked AS (
    SELECT id FROM workflow_runs
    WHERE claim_state = 'queued'
      AND (runner_pool IS NULL OR runner_pool = $3)
      AND workspace_id = $1 AND env = $2
      AND ($8::text[] IS NULL OR template_id = ANY($8::text[]))
    ORDER BY started_at
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE workflow_runs r SET
    claim_state = 'claimed',
    status = 'running',
    claim_attempts = r.claim_attempts + 1,
    leased_by = $5,
    lease_until = $6,
    last_heartbeat = $7
FROM picked
WHERE r.id = picked.id
RETURNING {", ".join("r." + c.strip() for c in _RUN_COLUMNS.split(","))}
"""

# The lease sweep: one statement per pass. Candidates come from the partial
# index idx_workflow_runs_lease_until; SKIP LOCKED lets concurrent sweepers
# (and a runner refreshing its lease right now) pass each other. Requeued runs
# are announced on the workspace channel in the same transaction.
SWEEP_SQL = """
WITH expired AS (
    SELECT id FROM workflow_runs
    WHERE lease_until IS NOT NULL AND lease_until < $4
      AND status IN ('running', 'paused')
      AND workspace_id = $1 AND env = $2
    FOR UPDATE SKIP LOCKED
), swept AS (
    UPDATE workflow_runs r SET
        status = CASE WHEN r.claim_attempts < r.max_claim_attempts
            THEN 'queued' ELSE 'error' END,
        claim_state = CASE WHEN r.claim_attempts < r.max_claim_attempts
            THEN 'queued' ELSE 'abandoned' END,
        error = CASE WHEN r.claim_attempts < r.max_claim_attempts THEN r.error ELSE $3 END,
        completed_at = CASE WHEN r.claim_attempts < r.max_claim_attempts
            THEN r.completed_at ELSE $4 END,
        lease_until = CASE WHEN r.claim_attempts < r.max_claim_attempts
            THEN NULL ELSE r.lease_until END
    FROM expired
    WHERE r.id = expired.id
    RETURNING r.id, r.leased_by, r.claim_state, r.started_at
), lost AS (
    INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json, created_at)
    SELECT id, 'runner_lost', NULL,
           jsonb_build_object(
               'action', CASE WHEN claim_state = 'queued' THEN 'requeued' ELSE 'abandoned' END,
               'leased_by', leased_by,
               'reason', $3::text),
           $4
    FROM swept
)
SELECT id, leased_by, claim_state,
       CASE WHEN claim_state = 'queued' THEN pg_notify($5, '') END AS notified
FROM swept
ORDER BY started_at, id
"""


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _jsonb_encode(value: Any) -> bytes:
    # jsonb's binary wire format: a version byte, then the JSON text.
    return b"\x01" + serde.encode(value)


def _jsonb_decode(data: bytes) -> Any:
    # jsonb does not keep the key order it was given: restore the sorted one.
    return serde.decode(data[1:], sort_keys=True)


def _uuid_or_none(value: str) -> str | None:
    """The canonical form of a uuid string, or None if it is not one."""
    if not isinstance(value, str):
        return None
    return _canonical_uuid(value)


@functools.lru_cache(maxsize=4096)
def _canonical_uuid(value: str) -> str | None:
    # Cached: every unit of a run checks the same run id (a few µs each time).
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def _require_uuid(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    canonical = _uuid_or_none(value)
    if canonical is None:
        raise ConfigError(
            f"{what} must be a UUID on PostgreSQL (the column is uuid): got {value!r}; "
            "pass str(uuid.uuid4()) or let starflow generate the id",
            run_id=value if what == "run id" else None,
        )
    return canonical


def channel_name(workspace_id: str, env: str) -> str:
    """The LISTEN/NOTIFY channel announcing claimable work in one (workspace, env)."""
    digest = hashlib.sha256(f"{workspace_id}\0{env}".encode()).hexdigest()[:40]
    return f"starflow_work_{digest}"


def _redact(url: str) -> str:
    """``url`` without its password, for messages."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable URL>"
    host = parts.hostname or "localhost"
    port = f":{parts.port}" if parts.port else ""
    user = f"{parts.username}@" if parts.username else ""
    return f"{parts.scheme}://{user}{host}{port}{parts.path}"


def _is_driver_error(exc: BaseException) -> bool:
    return isinstance(exc, OSError) or type(exc).__module__.startswith("asyncpg")


def _run(row: Any) -> RunInfo:
    return RunInfo(
        id=row[0],
        template_id=row[1],
        workspace_id=row[2],
        env=row[3],
        status=row[4],
        started_at=row[5],
        completed_at=row[6],
        duration_ms=row[7],
        checkpoint_json=row[8],
        error=row[9],
        claim_state=row[10],
        runner_pool=row[11],
        leased_by=row[12],
        lease_until=row[13],
        last_heartbeat=row[14],
        claim_attempts=row[15],
        definition_id=row[16],
        input_json=row[17],
        result_json=row[18],
        start_mode=row[19],
        max_claim_attempts=row[20],
        workflow_version=row[21],
    )


_JOB_COLUMNS = (
    "id, run_id, node_id, pool, step_name, idempotency_key, input_json, status, attempts, "
    "max_attempts, leased_by, lease_until, last_heartbeat, result_json, error_json, "
    "created_at, completed_at"
)


def _job(row: Any) -> JobRecord:
    return JobRecord(
        id=row[0], run_id=row[1], node_id=row[2], pool=row[3], step_name=row[4],
        idempotency_key=row[5], input=row[6], status=row[7], attempts=row[8],
        max_attempts=row[9], leased_by=row[10], lease_until=row[11], last_heartbeat=row[12],
        result=row[13], error=row[14], created_at=row[15], completed_at=row[16],
    )


def _wait(row: Any) -> WaitRecord:
    return WaitRecord(run_id=row[0], node_id=row[1], event=row[2], deadline=row[3],
                      created_at=row[4])


class _Statement:
    """One SQL text and the argument tuples it runs with (one, or several pipelined)."""

    __slots__ = ("args", "sql")

    def __init__(self, sql: str, args: tuple[Any, ...]) -> None:
        self.sql = sql
        self.args = [args]


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Pool release hook: the adapter leaves no session state behind.

    asyncpg still rolls back an open transaction before calling this. Skipping
    the default ``RESET ALL; UNLISTEN *; …`` saves a round trip per unit and
    keeps the ``starflow.*`` session settings sent at connect time.
    """


# ---------------------------------------------------------------------------
# The adapter
# ---------------------------------------------------------------------------


class PostgresWorkflowStateAdapter(WorkflowStateAdapter):
    """PostgreSQL state adapter (self-hosted or Supabase; many workers, many nodes).

    Args:
        url: ``postgresql://user[:password]@host[:port]/database`` (libpq-style
            query parameters such as ``sslmode`` are accepted).
        workspace_id: Tenant scope of every query (and of Row Level Security).
        env: Environment scope of every query.
        synchronous_commit: PostgreSQL ``synchronous_commit`` for durable
            units; non-durable ones (``node_start``) always commit with ``off``.
        min_size: Connections the pool keeps open.
        max_size: Most connections the pool opens (plus one for ``LISTEN``
            once a worker waits for work).
    """

    def __init__(
        self,
        url: str,
        *,
        workspace_id: str = "celestial",
        env: str = "prod",
        synchronous_commit: str = "on",
        min_size: int = 1,
        max_size: int = 10,
    ) -> None:
        super().__init__(workspace_id=workspace_id, env=env)
        url = normalize_scheme(url)
        if not url.startswith(("postgresql://", "postgres://")):
            raise ConfigError(
                f"not a PostgreSQL URL: {_redact(url)!r} (use postgresql://user@host/db)"
            )
        level = synchronous_commit.lower()
        if level not in SYNCHRONOUS_COMMIT_LEVELS:
            raise ConfigError(
                f"synchronous_commit must be one of {sorted(SYNCHRONOUS_COMMIT_LEVELS)}: "
                f"{synchronous_commit!r}"
            )
        if min_size < 0 or max_size < 1 or min_size > max_size:
            raise ConfigError(
                f"pool sizes must satisfy 0 <= min_size <= max_size and max_size >= 1: "
                f"min_size={min_size}, max_size={max_size}"
            )
        self.url = url
        self.synchronous_commit = level
        self.min_size = min_size
        self.max_size = max_size
        self.channel = channel_name(workspace_id, env)
        self._pool: asyncpg.Pool | None = None
        self._listener: asyncpg.Connection | None = None
        self._listen_lock = anyio.Lock()
        self._work = anyio.Event()
        # Connections kept checked out of the pool between calls (see _connection).
        self._spare: list[Any] = []
        self._inflight = 0
        self._idle_event: anyio.Event | None = None

    # -- connection ----------------------------------------------------------

    @property
    def _server_settings(self) -> dict[str, str]:
        # Sent in the startup packet: they are the session defaults, so they
        # survive RESET ALL and cost no round trip.
        return {
            "starflow.workspace_id": self.workspace_id,
            "starflow.env": self.env,
            "synchronous_commit": self.synchronous_commit,
            "application_name": "starflow",
        }

    async def _init_connection(self, conn: asyncpg.Connection) -> None:
        await conn.set_type_codec("jsonb", schema="pg_catalog", encoder=_jsonb_encode,
                                  decoder=_jsonb_decode, format="binary")
        # Text format: ids go in and come out as canonical lowercase strings.
        await conn.set_type_codec("uuid", schema="pg_catalog", encoder=str, decoder=str,
                                  format="text")

    async def open(self) -> None:
        if self._pool is not None:
            return
        import asyncpg

        with self._translate("connect"):
            self._pool = await asyncpg.create_pool(
                self.url,
                min_size=self.min_size,
                max_size=self.max_size,
                init=self._init_connection,
                reset=_no_reset,
                server_settings=self._server_settings,
            )
        try:
            self.applied_migrations = tuple(await self.migrate())
        except BaseException:
            await self.close()
            raise

    async def close(self) -> None:
        listener, self._listener = self._listener, None
        pool, self._pool = self._pool, None
        spare, self._spare = self._spare, []
        with anyio.CancelScope(shield=True):
            if pool is not None:
                for conn in spare:  # the pool's close() waits for every connection
                    try:
                        await pool.release(conn)
                    except Exception as exc:
                        if not _is_driver_error(exc):
                            raise
            if listener is not None:
                try:
                    await listener.close()
                except Exception as exc:  # closing a broken connection: nothing to keep
                    if not _is_driver_error(exc):
                        raise
                    listener.terminate()
            if pool is not None:
                try:
                    await pool.close()
                except Exception as exc:
                    if not _is_driver_error(exc):
                        raise
                    pool.terminate()

    @contextmanager
    def _translate(self, action: str | Unit, run_id: str | None = None) -> Iterator[None]:
        """Turn driver and socket errors into :class:`StorageError`."""
        try:
            yield
        except StarflowError:
            raise
        except Exception as exc:
            if not _is_driver_error(exc):
                raise
            if isinstance(exc.__cause__, SerializationError):
                # A value our jsonb codec could not encode: the same error as SQLite.
                raise exc.__cause__  # noqa: B904 - keeps the encoder's own cause
            raise self._storage_error(exc, action, run_id) from exc

    def _storage_error(self, exc: BaseException, action: str | Unit, run_id: str | None
                       ) -> StorageError:
        if not isinstance(action, str):
            action = _describe(action)
        where = _redact(self.url)
        sqlstate = getattr(exc, "sqlstate", None)
        if sqlstate is None and isinstance(exc, OSError | ConnectionError):
            return StorageError(
                f"cannot reach PostgreSQL at {where} ({action}): {exc}. Check that the "
                "server is running and that the URL (or $STARFLOW_DATABASE_URL) names its "
                "host and port",
                run_id=run_id,
            )
        if sqlstate == "23505":
            return StorageError(
                f"{action}: a row with this key already exists "
                f"({getattr(exc, 'constraint_name', None) or exc}); run ids are unique across "
                "workspaces: start the run with a new id, or get_run() it first",
                run_id=run_id,
            )
        if sqlstate in ("28000", "28P01", "3D000", "42501"):
            return StorageError(
                f"PostgreSQL at {where} refused {action}: {exc}. Check the user, password, "
                "database name and the role's grants (docs/guides/postgres.md)",
                run_id=run_id,
            )
        name = type(exc).__name__
        return StorageError(f"PostgreSQL error during {action} ({name}): {exc}", run_id=run_id)

    @asynccontextmanager
    async def _connection(self, action: str | Unit, run_id: str | None = None
                          ) -> AsyncIterator[asyncpg.Connection]:
        """A connection for one call; driver errors become StorageError naming ``action``
        (a unit is described only if one is raised)."""
        pool = self._pool
        if pool is None:
            raise StorageError(
                "the PostgreSQL adapter is not open: use `async with Starflow.open()` "
                "or `await adapter.open()`"
            )
        self._busy_enter()
        try:
            with self._translate(action, run_id):
                # asyncpg's acquire/release cost ~60 us (release runs in a shielded
                # task): up to max_size - 1 healthy connections stay checked out
                # here between calls, so a unit usually skips both. One is always
                # left in the pool for callers that acquire from it directly.
                conn = self._spare.pop() if self._spare else await pool.acquire()
                reuse = False
                try:
                    yield conn
                    reuse = not conn.is_closed() and not conn.is_in_transaction()
                finally:
                    if reuse and len(self._spare) < self.max_size - 1:
                        self._spare.append(conn)
                    else:
                        await pool.release(conn)
        finally:
            self._busy_exit()

    # A task awaiting a query looks blocked to the event loop (it waits on a
    # socket); this counter tells test harnesses driving a fake clock otherwise.
    def _busy_enter(self) -> None:
        self._inflight += 1

    def _busy_exit(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._idle_event is not None:
            self._idle_event.set()
            self._idle_event = None

    async def idle(self) -> None:
        """Return once no query is in flight (at once, without yielding, if none is)."""
        while self._inflight > 0:
            # Made on demand: most queries have nobody waiting for idleness.
            if self._idle_event is None:
                self._idle_event = anyio.Event()
            await self._idle_event.wait()

    # -- migrations ----------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied.

        Safe with several processes migrating at once: the work happens under
        a transaction-scoped advisory lock, and versions are re-read after it
        is taken. An up-to-date database costs two queries and no lock.
        """
        async with self._connection("migrate") as conn:
            return await _migrate(conn)

    # -- writes ---------------------------------------------------------------

    def _plan(self, unit: Unit) -> list[_Statement]:
        """The unit's statements, consecutive identical SQL merged for pipelining.

        Raises ConfigError (before anything is written) for a malformed run id.
        """
        plan: list[_Statement] = []
        for op in _merge_run_writes(unit.ops):
            sql, args = self._op_sql(op)
            if plan and plan[-1].sql == sql:
                plan[-1].args.append(args)
            else:
                plan.append(_Statement(sql, args))
        return plan

    def _op_sql(self, op: Op) -> tuple[str, tuple[Any, ...]]:
        ws, env = self.workspace_id, self.env
        if isinstance(op, InsertEvent):
            return (
                "INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json, "
                "created_at) SELECT $1::uuid, $2::text, $3::text, $4::jsonb, $5::timestamptz "
                "WHERE EXISTS (SELECT 1 FROM workflow_runs WHERE id = $1::uuid "
                f"AND {_tenant(6)})",
                (_require_uuid(op.run_id, "run id"), op.event_type, op.node_id, op.payload,
                 op.created_at, ws, env),
            )
        if isinstance(op, UpdateRun):
            cols = _columns(op.values, UPDATABLE_RUN_COLUMNS)
            sets = ", ".join(f"{c} = ${i}" for i, c in enumerate(cols, start=4))
            args = (_require_uuid(op.run_id, "run id"), ws, env,
                    *(self._value(c, op.values[c]) for c in cols))
            sql = (f"UPDATE workflow_runs SET {sets} "
                   f"WHERE id = $1 AND {_tenant(2)}")
            if op.values.get("claim_state") == "queued":
                return self._notifying(sql, args)
            return sql, args
        if isinstance(op, InsertRun):
            cols = _columns(op.values, _INSERTABLE_RUN_COLUMNS)
            names = ", ".join(("id", "workspace_id", "env", *cols))
            params = ", ".join(f"${i}" for i in range(1, len(cols) + 4))
            args = (_require_uuid(op.run_id, "run id"), ws, env,
                    *(self._value(c, op.values[c]) for c in cols))
            sql = f"INSERT INTO workflow_runs ({names}) VALUES ({params})"
            if "queued" in (op.values.get("claim_state"), op.values.get("status")):
                return self._notifying(sql, args)
            return sql, args
        if isinstance(op, InsertWait):
            return (
                "INSERT INTO workflow_waits (run_id, node_id, workspace_id, env, event, "
                "deadline, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                "ON CONFLICT (run_id, node_id) DO UPDATE SET workspace_id = excluded.workspace_id,"
                " env = excluded.env, event = excluded.event, deadline = excluded.deadline, "
                "created_at = excluded.created_at",
                (_require_uuid(op.run_id, "run id"), op.node_id, ws, env, op.event,
                 op.deadline, op.created_at),
            )
        if isinstance(op, DeleteWaits):
            return (
                "DELETE FROM workflow_waits WHERE run_id = $1 "
                f"AND {_tenant(2)}",
                (_require_uuid(op.run_id, "run id"), ws, env),
            )
        if isinstance(op, InsertSignal):
            return (
                "INSERT INTO workflow_signals (run_id, workspace_id, env, event, payload_json, "
                "created_at) VALUES ($1, $2, $3, $4, $5, $6)",
                (_require_uuid(op.run_id, "run id"), ws, env, op.event, op.payload,
                 op.created_at),
            )
        if isinstance(op, DeleteSignal):
            return (
                "DELETE FROM workflow_signals WHERE id = $1 "
                f"AND {_tenant(2)}",
                (op.signal_id, ws, env),
            )
        if isinstance(op, UpsertSessionVar):
            return (
                "INSERT INTO workflow_session_vars (workspace_id, env, session_id, key, "
                "value_json, run_id, keep_until, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7,"
                " $8) ON CONFLICT (workspace_id, env, session_id, key) DO UPDATE SET "
                "value_json = excluded.value_json, run_id = excluded.run_id, "
                "keep_until = excluded.keep_until, updated_at = excluded.updated_at",
                (ws, env, op.session_id, op.key, op.value, _require_uuid(op.run_id, "run id"),
                 op.keep_until, op.updated_at),
            )
        if isinstance(op, DeleteSessionVars):
            return (
                "DELETE FROM workflow_session_vars WHERE "
                f"{_tenant(1)} "
                "AND run_id = $3 AND keep_until IS NULL",
                (ws, env, _require_uuid(op.run_id, "run id")),
            )
        if isinstance(op, InsertJob):
            job = op.job
            # Announces work too: job workers of the pool wait on the same channel.
            return self._notifying(
                "INSERT INTO worker_jobs (id, workspace_id, env, run_id, node_id, pool, "
                "step_name, idempotency_key, input_json, status, max_attempts, created_at) "
                "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'queued', $10, $11) "
                "ON CONFLICT DO NOTHING",
                (_require_uuid(job.id, "job id"), ws, env, _require_uuid(job.run_id, "run id"),
                 job.node_id, job.pool, job.step_name, job.idempotency_key, job.input,
                 job.max_attempts, op.created_at),
            )
        if isinstance(op, FinishJob):
            return (
                "UPDATE worker_jobs SET status = $1, result_json = $2, error_json = $3, "
                "completed_at = $4, leased_by = NULL, lease_until = NULL "
                f"WHERE id = $5 AND {_tenant(6)} "
                "AND status IN ('queued', 'claimed')",
                (op.status, op.result, op.error, op.completed_at,
                 _require_uuid(op.job_id, "job id"), ws, env),
            )
        if isinstance(op, FailRunJobs):
            return (
                "UPDATE worker_jobs SET status = 'failed', error_json = $1, completed_at = $2, "
                "leased_by = NULL, lease_until = NULL "
                f"WHERE run_id = $3 AND {_tenant(4)} "
                "AND status IN ('queued', 'claimed')",
                (op.error, op.completed_at, _require_uuid(op.run_id, "run id"), ws, env),
            )
        if isinstance(op, InsertOutbox):
            return (
                "INSERT INTO mirror_outbox (run_id, kind, payload, created_at, workspace_id, env)"
                " VALUES ($1, $2, $3, $4, $5, $6)",
                (_require_uuid(op.run_id, "run id"), op.kind, op.payload, op.created_at, ws,
                 env),
            )
        raise TypeError(f"the PostgreSQL adapter cannot apply {type(op).__name__}")

    def _notifying(self, sql: str, args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        """Wrap a write so that, if it touched a row, it also announces work.

        The notification is part of the transaction: delivered on commit,
        dropped on rollback (of the unit or of its savepoint).
        """
        n = len(args) + 1
        return (f"WITH w AS ({sql} RETURNING 1) SELECT pg_notify(${n}, '') FROM w",
                (*args, self.channel))

    @staticmethod
    def _value(column: str, value: Any) -> Any:
        if column in ("definition_id",):
            return _require_uuid(value, "definition_id")
        if column in JSON_RUN_COLUMNS and value is not None:
            # Validate here so a bad value raises SerializationError itself.
            serde.encode(value, what=column)
        return value

    async def execute(self, unit: Unit) -> bool:
        guard = unit.guard
        if guard is not None and _uuid_or_none(guard.run_id) is None:
            return False  # no such row can exist: the guard fails, nothing is written
        plan = self._plan(unit)
        if not plan and guard is None:
            return True
        run_id = unit.run_id
        fused = None if guard is not None and (
            guard.wait_node is not None or guard.no_signal is not None) else _fuse(
            plan, guard, unit.durable, self.workspace_id, self.env)
        async with self._connection(unit, run_id) as conn:
            if guard is None and len(plan) == 1 and unit.durable:
                # One statement (even pipelined) is its own atomic transaction.
                await _run_statement(conn, plan[0])
                return True
            if fused is not None:
                # Guard, writes and (non-durable) synchronous_commit in one
                # statement: one round trip, its own implicit transaction.
                return bool(await conn.fetchval(fused.sql, *fused.args[0]))
            await conn.execute("BEGIN" if unit.durable
                               else "BEGIN; SET LOCAL synchronous_commit TO off")
            try:
                held = guard is None or await self._check_guard(conn, guard)
                if held:
                    for statement in plan:
                        await _run_statement(conn, statement)
                await conn.execute("COMMIT" if held else "ROLLBACK")
            except Exception:
                # Cancellation is left to the pool, which rolls back on release.
                if not conn.is_closed():
                    with anyio.CancelScope(shield=True):
                        try:
                            await conn.execute("ROLLBACK")
                        except Exception:  # the error that got us here matters more
                            conn.terminate()
                raise
            return held

    async def _check_guard(self, conn: asyncpg.Connection, guard: Guard) -> bool:
        # FOR NO KEY UPDATE: serializes the unit with every other guarded unit
        # on this run, without blocking foreign-key checks of event inserts.
        row = await conn.fetchrow(
            "SELECT leased_by, status FROM workflow_runs "
            f"WHERE id = $1 AND {_tenant(2)} FOR NO KEY UPDATE",
            guard.run_id, self.workspace_id, self.env,
        )
        if row is None:
            return False
        if guard.leased_by is not None and row[0] != guard.leased_by:
            return False
        if guard.status_in is not None and row[1] not in guard.status_in:
            return False
        if guard.wait_node is not None:
            # A separate statement on purpose: under READ COMMITTED it takes a
            # fresh snapshot after the row lock is held, so a wake that
            # committed (and deleted the wait) while we waited is seen.
            exists = await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM workflow_waits WHERE run_id = $1 AND node_id = $2)",
                guard.run_id, guard.wait_node,
            )
            if not exists:
                return False
        if guard.no_signal is not None:
            # Likewise a fresh snapshot: a signal another guarded unit queued for
            # this run while we waited for the row lock is seen.
            queued = await conn.fetchval(
                "SELECT EXISTS (SELECT 1 FROM workflow_signals WHERE run_id = $1 AND event = $2 "
                f"AND {_tenant(3)})",
                guard.run_id, guard.no_signal, self.workspace_id, self.env,
            )
            if queued:
                return False
        return True

    # -- reads -----------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunInfo | None:
        rid = _uuid_or_none(run_id)
        if rid is None:
            return None
        async with self._connection("get_run", run_id) as conn:
            row = await conn.fetchrow(
                f"SELECT {_RUN_COLUMNS} FROM workflow_runs "
                f"WHERE id = $1 AND {_tenant(2)}",
                rid, self.workspace_id, self.env,
            )
        return _run(row) if row is not None else None

    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50) -> list[RunInfo]:
        where = ["workspace_id = $1", "env = $2"]
        args: list[Any] = [self.workspace_id, self.env]
        for clause, value in (("status = ", status), ("template_id = ", template_id),
                              ("started_at >= ", since)):
            if value is not None:
                args.append(value)
                where.append(f"{clause}${len(args)}")
        args.append(int(limit))
        # started_at DESC matches idx_workflow_runs_workspace_started.
        sql = (f"SELECT {_RUN_COLUMNS} FROM workflow_runs WHERE {' AND '.join(where)} "
               f"ORDER BY started_at DESC, id LIMIT ${len(args)}")
        async with self._connection("list_runs") as conn:
            rows = await conn.fetch(sql, *args)
        return [_run(r) for r in rows]

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        query.check()
        if query.after is not None and _uuid_or_none(query.after.id) is None:
            raise StarflowError(f"list_runs_page: after.id must be a run id (a UUID on "
                                f"PostgreSQL): {query.after.id!r}")
        args: list[Any] = []

        def param(value: Any) -> str:
            args.append(value)
            return f"${len(args)}"

        built = page_sql(query, workspace_id=self.workspace_id, env=self.env,
                         columns=_RUN_COLUMNS, param=param, ts=lambda t: t, uuid_ids=True)
        if built is None:
            return make_page([], query, {} if query.counts else None)
        select, count_sql, shared = built
        async with self._connection("list_runs_page") as conn:
            rows = await conn.fetch(select, *args)
            counts = (None if count_sql is None else
                      {r[0]: r[1] for r in await conn.fetch(count_sql, *args[:shared])})
        return make_page([_run(r) for r in rows], query, counts)

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        rid = _uuid_or_none(run_id)
        if rid is None:
            return []
        async with self._connection("list_events", run_id) as conn:
            rows = await conn.fetch(
                "SELECT e.id, e.run_id, e.event_type, e.node_id, e.payload_json, e.created_at "
                "FROM workflow_run_events e JOIN workflow_runs r ON r.id = e.run_id "
                "WHERE e.run_id = $1 "
                f"AND {_tenant(2, 'r.')} AND e.id > $4 "
                "ORDER BY e.id",
                rid, self.workspace_id, self.env, after_id,
            )
        return [RunEvent(id=r[0], run_id=r[1], event_type=r[2], node_id=r[3],
                         payload_json=r[4], created_at=r[5]) for r in rows]

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        rid = _uuid_or_none(run_id)
        if rid is None:
            return []
        async with self._connection("list_waits", run_id) as conn:
            rows = await conn.fetch(
                "SELECT run_id, node_id, event, deadline, created_at FROM workflow_waits "
                "WHERE run_id = $1 "
                f"AND {_tenant(2)} ORDER BY created_at",
                rid, self.workspace_id, self.env,
            )
        return [_wait(r) for r in rows]

    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        async with self._connection("due_waits") as conn:
            rows = await conn.fetch(
                "SELECT run_id, node_id, event, deadline, created_at FROM workflow_waits "
                "WHERE workspace_id = $1 AND env = $2 AND deadline IS NOT NULL "
                "AND deadline <= $3 ORDER BY deadline LIMIT $4",
                self.workspace_id, self.env, now, int(limit),
            )
        return [_wait(r) for r in rows]

    async def next_deadline(self) -> datetime | None:
        async with self._connection("next_deadline") as conn:
            value: datetime | None = await conn.fetchval(
                "SELECT min(deadline) FROM workflow_waits WHERE workspace_id = $1 AND env = $2 "
                "AND deadline IS NOT NULL", self.workspace_id, self.env,
            )
        return value

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        rid = _uuid_or_none(run_id)
        if rid is None:
            return None
        async with self._connection("find_signal", run_id) as conn:
            row = await conn.fetchrow(
                "SELECT id, run_id, event, payload_json, created_at FROM workflow_signals "
                "WHERE run_id = $1 AND event = $2 "
                f"AND {_tenant(3)} "
                "ORDER BY id LIMIT 1", rid, event, self.workspace_id, self.env,
            )
        if row is None:
            return None
        return SignalRecord(id=row[0], run_id=row[1], event=row[2], payload=row[3],
                            created_at=row[4])

    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        async with self._connection("session_get") as conn:
            row = await conn.fetchrow(
                "SELECT value_json, keep_until FROM workflow_session_vars "
                "WHERE workspace_id = $1 AND env = $2 AND session_id = $3 AND key = $4",
                self.workspace_id, self.env, session_id, key,
            )
        if row is None:
            return None
        if now is not None and row[1] is not None and row[1] <= now:
            return None
        return row[0]

    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        did = _uuid_or_none(definition_id)
        if did is None:
            return None
        async with self._connection("get_definition") as conn:
            row = await conn.fetchrow(
                "SELECT id, name, version, code_hash, created_at FROM workflow_definitions "
                f"WHERE id = $1 AND {_tenant(2)}",
                did, self.workspace_id, self.env,
            )
        if row is None:
            return None
        return DefinitionRecord(id=row[0], name=row[1], version=row[2], code_hash=row[3],
                                created_at=row[4])

    # -- read-modify-writes ----------------------------------------------------

    async def claim_runs(self, runner_id: str, *, pool: str | None, now: datetime,
                         lease_until: datetime, limit: int = 1,
                         workflows: Collection[str] | None = None,
                         after: AfterClaim | None = None) -> list[RunInfo]:
        names = sorted(set(workflows)) if workflows is not None else None
        if names is not None and not names:
            return []
        args = (self.workspace_id, self.env, pool, int(limit), runner_id, lease_until, now,
                names)
        async with self._connection("claim_runs") as conn:
            if after is None:
                rows = await conn.fetch(CLAIM_SQL, *args)
                runs = _claimed(rows)
            else:
                async with conn.transaction():
                    runs = _claimed(await conn.fetch(CLAIM_SQL, *args))
                    await self._apply_after(conn, after(runs) if runs else [])
        return runs

    async def _apply_after(self, conn: asyncpg.Connection, ops: list[Op]) -> None:
        """Write ``ops`` on ``conn`` inside the caller's transaction."""
        for statement in self._plan(Unit(ops=ops)):
            await _run_statement(conn, statement)

    async def expire_old_leases(self, now: datetime, reason: str = "runner_lost",
                                *, after: AfterSweep | None = None) -> list[SweepResult]:
        args = (self.workspace_id, self.env, reason, now, self.channel)
        async with self._connection("expire_old_leases") as conn:
            if after is None:
                return _swept(await conn.fetch(SWEEP_SQL, *args))
            async with conn.transaction():
                results = _swept(await conn.fetch(SWEEP_SQL, *args))
                await self._apply_after(conn, after(results) if results else [])
        return results

    async def ensure_definition(self, name: str, version: int, code_hash: str,
                                *, now: datetime) -> str:
        async with self._connection("ensure_definition") as conn:
            for _ in range(3):
                inserted: str | None = await conn.fetchval(
                    "INSERT INTO workflow_definitions (id, workspace_id, env, name, version, "
                    "code_hash, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7) "
                    "ON CONFLICT (workspace_id, env, name, version) DO NOTHING RETURNING id",
                    str(uuid.uuid4()), self.workspace_id, self.env, name, version, code_hash,
                    now,
                )
                if inserted is not None:
                    return inserted
                # A separate statement: its snapshot sees a row that a concurrent
                # ensure_definition committed while our insert waited on it.
                existing: str | None = await conn.fetchval(
                    "SELECT id FROM workflow_definitions WHERE workspace_id = $1 AND env = $2 "
                    "AND name = $3 AND version = $4", self.workspace_id, self.env, name, version,
                )
                if existing is not None:
                    return existing
        raise StorageError(f"could not record workflow definition {name!r} v{version}")

    async def expire_session_vars(self, now: datetime) -> int:
        async with self._connection("expire_session_vars") as conn:
            status: str = await conn.execute(
                "DELETE FROM workflow_session_vars WHERE workspace_id = $1 AND env = $2 "
                "AND keep_until IS NOT NULL AND keep_until <= $3",
                self.workspace_id, self.env, now,
            )
        return int(status.rsplit(" ", 1)[-1])

    async def get_secret(self, key_id: str, *, now: datetime, create: bool = True
                         ) -> str | None:
        select = ("SELECT secret FROM starflow_keys WHERE workspace_id = $1 AND env = $2 "
                  "AND key_id = $3")
        async with self._connection("get_secret") as conn:
            secret: str | None = await conn.fetchval(select, self.workspace_id, self.env, key_id)
            if secret is not None or not create:
                return secret
            secret = await conn.fetchval(
                "INSERT INTO starflow_keys (workspace_id, env, key_id, secret, created_at) "
                "VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING RETURNING secret",
                self.workspace_id, self.env, key_id, secrets.token_hex(32), now,
            )
            if secret is None:  # another process created it first: theirs wins
                secret = await conn.fetchval(select, self.workspace_id, self.env, key_id)
        return secret

    # -- worker jobs -------------------------------------------------------------

    async def claim_jobs(self, worker_id: str, *, pool: str, now: datetime,
                         lease_until: datetime, limit: int = 1) -> list[JobRecord]:
        async with self._connection("claim_jobs") as conn:
            rows = await conn.fetch(
                "UPDATE worker_jobs SET status = 'claimed', attempts = attempts + 1, "
                "leased_by = $1, lease_until = $2, last_heartbeat = $3 WHERE id IN ("
                "  SELECT id FROM worker_jobs WHERE workspace_id = $4 AND env = $5 "
                "  AND pool = $6 AND (status = 'queued' OR (status = 'claimed' "
                "  AND lease_until < $3)) ORDER BY created_at, id LIMIT $7 "
                "  FOR UPDATE SKIP LOCKED"
                f") RETURNING {_JOB_COLUMNS}",
                worker_id, lease_until, now, self.workspace_id, self.env, pool, int(limit),
            )
        jobs = [_job(r) for r in rows]
        jobs.sort(key=lambda j: (j.created_at, j.id))
        return jobs

    async def heartbeat_job(self, job_id: str, worker_id: str, *, now: datetime,
                            lease_until: datetime) -> bool:
        jid = _uuid_or_none(job_id)
        if jid is None:
            return False
        async with self._connection("heartbeat_job") as conn:
            status: str = await conn.execute(
                "UPDATE worker_jobs SET lease_until = $1, last_heartbeat = $2 WHERE id = $3 "
                f"AND {_tenant(4)} "
                "AND status = 'claimed' AND leased_by = $6",
                lease_until, now, jid, self.workspace_id, self.env, worker_id,
            )
        return status.rsplit(" ", 1)[-1] == "1"

    async def get_job(self, job_id: str) -> JobRecord | None:
        jid = _uuid_or_none(job_id)
        if jid is None:
            return None
        async with self._connection("get_job") as conn:
            row = await conn.fetchrow(
                f"SELECT {_JOB_COLUMNS} FROM worker_jobs WHERE id = $1 AND {_tenant(2)}",
                jid, self.workspace_id, self.env)
        return _job(row) if row is not None else None

    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        where = ["workspace_id = $1", "env = $2"]
        args: list[Any] = [self.workspace_id, self.env]
        if run_id is not None:
            rid = _uuid_or_none(run_id)
            if rid is None:
                return []
            args.append(rid)
            where.append(f"run_id = ${len(args)}")
        if status is not None:
            args.append(status)
            where.append(f"status = ${len(args)}")
        args.append(int(limit))
        async with self._connection("list_jobs") as conn:
            rows = await conn.fetch(
                f"SELECT {_JOB_COLUMNS} FROM worker_jobs WHERE {' AND '.join(where)} "
                f"ORDER BY created_at, id LIMIT ${len(args)}", *args)
        return [_job(r) for r in rows]

    # -- the mirror outbox -------------------------------------------------------

    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        async with self._connection("pending_outbox") as conn:
            rows = await conn.fetch(
                "SELECT id, run_id, kind, payload, created_at FROM mirror_outbox "
                "WHERE workspace_id = $1 AND env = $2 AND applied_at IS NULL "
                "ORDER BY id LIMIT $3",
                self.workspace_id, self.env, int(limit),
            )
        return [OutboxRow(id=r[0], run_id=r[1], kind=r[2], payload=r[3], created_at=r[4])
                for r in rows]

    async def mark_outbox_applied(self, ids: Sequence[int], *, now: datetime) -> int:
        if not ids:
            return 0
        async with self._connection("mark_outbox_applied") as conn:
            status: str = await conn.execute(
                "UPDATE mirror_outbox SET applied_at = $1 WHERE id = ANY($2::bigint[]) "
                "AND workspace_id = $3 AND env = $4 AND applied_at IS NULL",
                now, [int(i) for i in ids], self.workspace_id, self.env,
            )
        return int(status.rsplit(" ", 1)[-1])

    async def prune_outbox(self, applied_before: datetime) -> int:
        async with self._connection("prune_outbox") as conn:
            status: str = await conn.execute(
                "DELETE FROM mirror_outbox WHERE workspace_id = $1 AND env = $2 "
                "AND applied_at IS NOT NULL AND applied_at < $3",
                self.workspace_id, self.env, applied_before,
            )
        return int(status.rsplit(" ", 1)[-1])

    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        buckets = "".join(
            f", count(*) FILTER (WHERE created_at <= $3::timestamptz "
            f"- make_interval(secs => ${i + 4}::float8))"
            for i in range(len(edges)))
        async with self._connection("outbox_lag") as conn:
            row = await conn.fetchrow(
                f"SELECT count(*), min(created_at){buckets} FROM mirror_outbox "
                "WHERE workspace_id = $1 AND env = $2 AND applied_at IS NULL",
                self.workspace_id, self.env, *((now, *map(float, edges)) if edges else ()),
            )
        assert row is not None
        return OutboxLag(pending=int(row[0]), oldest_created_at=row[1],
                         older_than=tuple(int(c) for c in row[2:]))

    # -- waiting for work ------------------------------------------------------

    async def wait_for_work(self, clock: Clock, timeout: float) -> None:
        """Return on a NOTIFY of claimable work in this scope, or after ``timeout``.

        A notification that arrived since the previous call makes this return
        at once, so work announced between a worker's empty claim and its
        wait is not slept through. If LISTEN is unavailable this degrades to
        polling (the claim that follows reports a broken database).
        """
        await self._ensure_listener()
        work = self._work
        if not work.is_set():
            async with anyio.create_task_group() as tg:

                async def timer() -> None:
                    await clock.sleep(timeout)
                    tg.cancel_scope.cancel()

                tg.start_soon(timer)
                await work.wait()
                tg.cancel_scope.cancel()
        if work.is_set() and self._work is work:
            self._work = anyio.Event()

    async def _ensure_listener(self) -> None:
        if self._listener is not None and not self._listener.is_closed():
            return
        if self._pool is None:
            raise StorageError("the PostgreSQL adapter is not open: call open() first")
        async with self._listen_lock:
            if self._listener is not None and not self._listener.is_closed():
                return
            import asyncpg

            self._busy_enter()
            try:
                # Shielded (and bounded): asyncpg cancelled half-way through a connect
                # or a LISTEN leaks the socket and reports connection_lost errors.
                with anyio.CancelScope(shield=True):
                    conn = await asyncpg.connect(self.url, server_settings=self._server_settings,
                                                 timeout=LISTEN_CONNECT_TIMEOUT)
                    try:
                        await conn.add_listener(self.channel, self._on_notify)
                    except BaseException:
                        conn.terminate()
                        raise
            except Exception as exc:
                if not _is_driver_error(exc):
                    raise
                log.warning("postgres_listen_failed", error=str(exc), channel=self.channel)
                return
            finally:
                self._busy_exit()
            conn.add_termination_listener(self._on_listener_lost)
            self._listener = conn
            # Anything committed before LISTEN took effect may have been missed.
            self._work.set()

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        self._work.set()

    def _on_listener_lost(self, conn: object) -> None:
        if self._listener is conn:
            self._listener = None
        self._work.set()  # wake waiters so they poll (and reconnect) at once


# ---------------------------------------------------------------------------
# Module helpers
# ---------------------------------------------------------------------------


def _columns(values: dict[str, Any], allowed: frozenset[str] | set[str]) -> list[str]:
    cols = list(values)
    bad = [c for c in cols if c not in allowed or not _IDENT.match(c)]
    if bad:
        raise ValueError(f"not writable workflow_runs columns: {sorted(bad)}")
    return cols


def _merge_run_writes(ops: Sequence[Op]) -> list[Op]:
    """The unit's ops with writes to one run row merged, ``Mark`` ops dropped.

    An ``UpdateRun`` of a run is folded into the earlier ``InsertRun`` or
    ``UpdateRun`` of the same run (later values win) when no op in between
    writes ``workflow_runs``: the other ops only test that the row exists, so
    the result is the same, with one statement fewer, and the unit can become
    one statement (a statement cannot update a row twice).
    """
    merged: list[Op] = []
    row: dict[str, int] = {}  # run id -> index in merged of its pending row write
    for op in ops:
        if isinstance(op, Mark):  # a boundary call with nothing to write
            continue
        if isinstance(op, UpdateRun):
            at = row.get(op.run_id)
            if at is not None:
                prev = merged[at]
                assert isinstance(prev, InsertRun | UpdateRun)
                merged[at] = type(prev)(method=prev.method, run_id=prev.run_id,
                                        values={**prev.values, **op.values})
                continue
        if isinstance(op, InsertRun | UpdateRun):
            row = {op.run_id: len(merged)}
        merged.append(op)
    return merged


#: Statements that can take ``AND EXISTS (SELECT 1 FROM g)`` at their end.
_FUSABLE = re.compile(r"^(UPDATE (\w+) SET |DELETE FROM (\w+) |INSERT INTO (workflow_run_events) "
                      r"\(.*\) SELECT .* WHERE EXISTS \(SELECT 1 FROM workflow_runs .*\)$)",
                      re.DOTALL)
_PARAM = re.compile(r"\$(\d+)")


def _fuse(plan: Sequence[_Statement], guard: Guard | None, durable: bool, workspace_id: str,
          env: str) -> _Statement | None:
    """One statement doing the guard and every write of the plan, or None if it cannot.

    ``WITH g AS (SELECT … FOR NO KEY UPDATE)`` locks the run row and rechecks
    the guard on its newest version (READ COMMITTED re-evaluation); each write
    becomes a data-modifying CTE that runs only ``WHERE EXISTS (SELECT 1 FROM
    g)``; the result is whether the guard held. A non-durable unit sets
    ``synchronous_commit`` off with ``set_config(…, true)``: for its own
    transaction only. Writes of one statement share a snapshot and run in no
    defined order, so only plans that write each table once, one row set each,
    are fused (no pipelined ``executemany``, no notifying writes).
    """
    if not plan or any(len(st.args) != 1 for st in plan):
        return None
    leased = guard is not None and guard.leased_by is not None
    status = guard is not None and guard.status_in is not None
    key = (tuple(st.sql for st in plan), guard is not None, leased, status, durable)
    sql = _FUSED.get(key, "")
    if sql == "":
        sql = _fused_sql(plan, guard is not None, leased, status, durable)
        if len(_FUSED) >= 1024:  # shapes are few; this only bounds a pathological caller
            _FUSED.clear()
        _FUSED[key] = sql
    if sql is None:
        return None
    args: list[Any] = []
    if guard is not None:
        args = [guard.run_id, workspace_id, env]
        if leased:
            args.append(guard.leased_by)
        if status:
            args.append(list(guard.status_in or ()))
    for st in plan:
        args.extend(st.args[0])
    return _Statement(sql, tuple(args))


#: Fused SQL by plan shape (``None``: that shape cannot be fused).
_FUSED: dict[tuple[Any, ...], str | None] = {}


def _fused_sql(plan: Sequence[_Statement], guarded: bool, leased: bool, status: bool,
               durable: bool) -> str | None:
    tables: set[str] = set()
    for st in plan:
        m = _FUSABLE.match(st.sql)
        if m is None:
            return None
        table = m.group(2) or m.group(3) or m.group(4)
        if table in tables:
            return None
        tables.add(table)
    ctes: list[str] = []
    cond = ""
    n = 0
    if guarded:
        where = ["id = $1", _tenant(2)]
        n = 3
        if leased:
            n += 1
            where.append(f"leased_by = ${n}")
        if status:
            n += 1
            where.append(f"status = ANY(${n}::text[])")
        ctes.append(f"g AS (SELECT 1 FROM workflow_runs WHERE {' AND '.join(where)} "
                    "FOR NO KEY UPDATE)")
        cond = " AND EXISTS (SELECT 1 FROM g)"
    for i, st in enumerate(plan):
        offset = n

        def shift(m: re.Match[str], offset: int = offset) -> str:
            return f"${int(m.group(1)) + offset}"

        ctes.append(f"w{i} AS ({_PARAM.sub(shift, st.sql)}{cond})")
        n += len(st.args[0])
    result = "(SELECT count(*) FROM g)" if guarded else "1"
    sync = "" if durable else ", set_config('synchronous_commit', 'off', true)"
    return f"WITH {', '.join(ctes)} SELECT {result}{sync}"


def _describe(unit: Unit) -> str:
    return "execute(" + ", ".join(dict.fromkeys(unit.methods)) + ")"


async def _run_statement(conn: asyncpg.Connection, statement: _Statement) -> None:
    if len(statement.args) == 1:
        await conn.execute(statement.sql, *statement.args[0])
    else:
        await conn.executemany(statement.sql, statement.args)


async def _migrate(conn: asyncpg.Connection) -> list[int]:
    migrations = load_migrations("postgres")
    if await conn.fetchval("SELECT to_regclass('starflow_migrations')") is not None:
        done = {r[0] for r in await conn.fetch("SELECT version FROM starflow_migrations")}
        if all(m.version in done for m in migrations):
            return []
    applied: list[int] = []
    async with conn.transaction():
        # Everything below is one transaction under one lock: a concurrent
        # migrate() waits here, then finds the versions recorded and does nothing.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS starflow_migrations ("
            "version int PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {r[0] for r in await conn.fetch("SELECT version FROM starflow_migrations")}
        for mig in migrations:
            if mig.version in done:
                continue
            await conn.execute(mig.sql)
            await conn.execute("INSERT INTO starflow_migrations (version, name) VALUES ($1, $2)",
                               mig.version, mig.name)
            applied.append(mig.version)
    return applied


def _claimed(rows: Sequence[asyncpg.Record]) -> list[RunInfo]:
    runs = [_run(r) for r in rows]
    # UPDATE … RETURNING has no order; hand runs out oldest first, like SQLite.
    runs.sort(key=lambda r: (r.started_at is not None, r.started_at, r.id))
    return runs


def _swept(rows: Sequence[asyncpg.Record]) -> list[SweepResult]:
    return [SweepResult(run_id=r[0], leased_by=r[1],
                        action="requeued" if r[2] == "queued" else "abandoned")
            for r in rows]
