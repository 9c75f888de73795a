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

Behind a transaction pooler (``pooler="transaction"``: PgBouncer in
``pool_mode = transaction``, Supabase's port-6543 pooler) a client's
statements may reach a different server connection in every transaction, so
the adapter sends no startup settings (PgBouncer refuses unknown ones),
disables asyncpg's statement cache, sets the tenant settings (and a
non-default ``synchronous_commit``) with ``set_config(..., true)`` inside each
call's transaction when Row Level Security applies to its role, and takes
wake-ups from ``listen_url`` (a direct or session-mode connection) or polls.
"""

from __future__ import annotations

import hashlib
import re
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import anyio

from .. import serde
from ..clock import Clock
from ..errors import (
    ConfigError,
    ForeignConnection,
    NotInTransaction,
    SerializationError,
    StarflowError,
    StorageError,
)
from ..logs import get_logger
from ..migrations import (
    SEED_INDEXES,
    SEED_TABLES,
    STARFLOW_TABLES,
    MigrationPlan,
    load_migrations,
    seed_versions,
)
from ..records import DueStarts, PoolLimits, RunInfo, SweepResult
from ..urls import normalize_scheme
from ._flow import (
    Candidate,
    Queued,
    pick_claims,
    room_left,
    scan_size,
    take_holders,
)
from .base import RunWatch
from .caller import CallerConnection, CallerTransaction
from .sql.adapter import After, Count, Each, MakeScript, One, Rows, Script, SqlAdapter, Walk
from .sql.dialect import POSTGRES_CALLER
from .sql.pools import SLOT_KEPT, pool_counts, pool_sql, scope_args
from .sql.queries import POSTGRES_QUERIES as Q
from .sql.shared import (
    ACTIVE_RUN,
    CLAIM_ORDER,
    LIMIT_COLUMNS,
    LIMIT_WIDTH,
    POSTGRES,
    RUN_COLUMNS,
    announces_run_change,
    announces_work,
    claim_ids_sql,
    claim_set,
    claimable,
    claimed_runs,
    event_sql,
    guard_args,
    guard_shape,
    guard_sql,
    held_sql,
    merge_run_writes,
    op_sql,
    pool_limits,
    run_conditions,
    signal_queued_sql,
    sweep_set,
    swept,
    uuid_or_none,
    wait_exists_sql,
)
from .sweep import ABANDONED, REQUEUED
from .units import (
    ClaimRuns,
    Guard,
    Op,
    QueueDueStarts,
    SweepLeases,
    Unit,
)

if TYPE_CHECKING:
    import asyncpg

__all__ = ["PostgresWorkflowStateAdapter"]

T = TypeVar("T")

PC = pool_counts(POSTGRES)



#: Seconds a worker's LISTEN connection may take to open (shielded from cancellation).
LISTEN_CONNECT_TIMEOUT = 10.0

log = get_logger("starflow.adapters.postgres")

SYNCHRONOUS_COMMIT_LEVELS = frozenset({"on", "off", "local", "remote_write", "remote_apply"})

#: Suffix of the ``starflow_migrations.name`` of a state-model migration found in
#: place (an adopted database), read by migration 029.
ADOPTED_MARK = "(adopted)"

#: ``pg_advisory_xact_lock`` key serializing concurrent ``migrate()`` calls.
MIGRATION_LOCK_KEY = 0x5F_57A2_F10E_0001

# The claim path (ADR-047): one statement. The candidate select matches the
# partial index idx_workflow_runs_claim_pool (claim_state = 'queued') and skips
# rows another claimer has locked, so N claimers never wait on each other and
# each queued run is returned to exactly one of them.
#
# Flow control (#18): highest priority first; a debounced run waits for its
# not_before; a pool with stored limits is claimed by _claim_limited instead
# (its limits row locked), so this statement leaves that pool's runs alone.
CLAIM_SQL = f"""
WITH picked AS (
    SELECT id FROM workflow_runs
    WHERE claim_state = 'queued'
      AND (runner_pool IS NULL OR runner_pool = $3)
      AND workspace_id = $1 AND env = $2
      -- "|| ''" (same result, NULL included) keeps the planner off
      -- idx_workflow_runs_template_page (035), which holds a workflow's whole
      -- history: queued runs come from the claim indexes.
      AND ($9::text[] IS NULL OR template_id || '' = ANY($9::text[]))
      AND {claimable(POSTGRES, 7)}
      AND (runner_pool IS NULL OR NOT EXISTS (
          SELECT 1 FROM starflow_pool_limits l
          WHERE l.workspace_id = $1 AND l.env = $2 AND l.pool = workflow_runs.runner_pool))
    ORDER BY {CLAIM_ORDER}
    LIMIT $4
    FOR UPDATE SKIP LOCKED
)
UPDATE workflow_runs r SET {claim_set(POSTGRES, 5)}
FROM picked
WHERE r.id = picked.id
RETURNING {", ".join("r." + c.strip() for c in RUN_COLUMNS.split(","))}
"""

# The lease sweep: one statement per pass. Candidates come from the partial
# index idx_workflow_runs_lease_until; SKIP LOCKED lets concurrent sweepers
# (and a runner refreshing its lease right now) pass each other. Requeued runs
# are announced on the workspace channel in the same transaction.
def _sweep_sql(requeue: bool) -> str:
    return f"""
WITH expired AS (
    SELECT id
    FROM workflow_runs
    WHERE lease_until IS NOT NULL AND lease_until < $4
      AND status IN ('running', 'paused')
      AND workspace_id = $1 AND env = $2
    FOR UPDATE SKIP LOCKED
), swept AS (
    UPDATE workflow_runs r SET {sweep_set("r.", "$3", "$4", requeue=requeue)}
    FROM expired
    WHERE r.id = expired.id
    RETURNING r.id, r.leased_by, r.claim_state, r.started_at
), lost AS (
    INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json, created_at)
    SELECT id, 'runner_lost', NULL,
           jsonb_build_object(  -- sweep.lost_payload, built in SQL
               'action', CASE WHEN claim_state = 'queued' THEN '{REQUEUED}' ELSE '{ABANDONED}'
                         END,
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


#: The sweep's statement, by ``requeue`` (``StarflowConfig.lost_runs``).
#: Delayed starts (#30), one statement: queue the runs whose start time came
#: (announced on the workspace channel, $4, like any queued run) and read the
#: earliest start still ahead, both from idx_workflow_runs_scheduled (042). The
#: read sees the table as the statement began, so it skips the due rows by time.
QUEUE_DUE_STARTS_SQL = f"""
WITH due AS ({Q.queue_due_starts})
SELECT (SELECT array_agg(id::text) FROM due) AS ids, ({Q.next_start}) AS next_start,
       CASE WHEN EXISTS (SELECT 1 FROM due) THEN pg_notify($4, '') END AS notified
"""

SWEEP_SQL = {requeue: _sweep_sql(requeue) for requeue in (True, False)}


# ---------------------------------------------------------------------------
# Helpers
# ---------------------------------------------------------------------------


def _jsonb_encode(value: Any) -> bytes:
    # jsonb's binary wire format: a version byte, then the JSON text.
    return b"\x01" + serde.encode(value)


def _jsonb_decode(data: bytes) -> Any:
    # jsonb does not keep the key order it was given: restore the sorted one.
    return serde.decode(data[1:], sort_keys=True)


def channel_name(workspace_id: str, env: str, kind: str = "work") -> str:
    """The LISTEN/NOTIFY channel of one (workspace, env): ``work`` announces
    claimable work, ``runs`` a run's change (its payload is the run id)."""
    digest = hashlib.sha256(f"{workspace_id}\0{env}".encode()).hexdigest()[:40]
    return f"starflow_{kind}_{digest}"



#: The values of ``pooler=`` (the URL parameter and the adapter argument).
POOLER_MODES = frozenset({"transaction", "session", "none"})


def _pooler_options(url: str, pooler: str | None, listen_url: str | None
                    ) -> tuple[str, str, str | None]:
    """``url`` without starflow's own query parameters, the pooler mode and the
    ``LISTEN`` URL (arguments win over the URL's ``pooler=`` / ``listen_url=``).

    asyncpg would send unknown query parameters to the server as settings, so
    ``pooler`` and ``listen_url`` are taken out here.
    """
    from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"not a valid PostgreSQL URL: {_redact(url)!r} ({exc})") from None
    query = parse_qsl(parts.query, keep_blank_values=True)
    own = {k: v for k, v in query if k in ("pooler", "listen_url")}
    rest = [(k, v) for k, v in query if k not in ("pooler", "listen_url")]
    if own:
        url = urlunsplit(parts._replace(query=urlencode(rest)))
    mode = pooler if pooler is not None else own.get("pooler")
    if mode is None:
        # Supabase's shared pooler (Supavisor) runs transaction mode on 6543.
        host = (parts.hostname or "").lower()
        mode = "transaction" if host.endswith(".pooler.supabase.com") and port == 6543 \
            else "none"
    mode = mode.lower()
    if mode not in POOLER_MODES:
        raise ConfigError(f"pooler must be one of {sorted(POOLER_MODES)}: got {mode!r} "
                          "(use ?pooler=transaction behind PgBouncer or Supabase's port 6543)")
    listen = listen_url if listen_url is not None else own.get("listen_url")
    if listen is not None:
        listen = normalize_scheme(listen)
        if not listen.startswith(("postgresql://", "postgres://")):
            raise ConfigError(f"listen_url is not a PostgreSQL URL: {_redact(listen)!r} "
                              "(give a direct or session-mode postgresql:// URL)")
    return url, mode, listen


def _literal(value: str) -> str:
    """``value`` as an SQL string literal (standard_conforming_strings is on)."""
    return "'" + value.replace("'", "''") + "'"


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


class _Statement:
    """One SQL text and the argument tuples it runs with (one, or several pipelined)."""

    __slots__ = ("args", "sql")

    def __init__(self, sql: str, args: tuple[Any, ...]) -> None:
        self.sql = sql
        self.args = [args]


class _Stale:
    """A limited claim by version found the pool changed since its read: pick again."""


_STALE = _Stale()


@dataclass(frozen=True, slots=True)
class _LimitedRead:
    """What a limited claim read, and the ids it picked (see ``_LIMITED_CANDIDATES``)."""

    limits: PoolLimits | None  # the row as read (None: removed)
    version: str | None  # its xmin
    ids: list[str]
    active: int = 0  # runs of the pool executing (or keeping their slot)
    recent: int = 0  # claims of the pool within the rate window
    key_active: dict[str, int] = field(default_factory=dict)
    key_recent: dict[str, int] = field(default_factory=dict)


async def _connect_to_the_end(*args: Any, **kwargs: Any) -> asyncpg.Connection:
    """The pool's connect hook: ``asyncpg.connect`` that a cancelled caller cannot
    cut half-way.

    A pool opens connections lazily, inside whichever call acquires one. asyncpg
    cancelled in the middle of its TLS negotiation leaves a future failed with
    ``ConnectionError('unexpected connection_lost() call')`` that nothing
    retrieves (the event loop reports it; anyio's test runner raises it). Here
    the connect runs in a task of its own: the caller's cancellation returns at
    once, and the connection, once made, is closed.
    """
    import asyncio

    import asyncpg

    connecting = asyncio.ensure_future(asyncpg.connect(*args, **kwargs))
    try:
        return await asyncio.shield(connecting)
    except asyncio.CancelledError:
        connecting.add_done_callback(_drop_orphan_connection)
        raise


def _drop_orphan_connection(connecting: Any) -> None:
    """Close a connection whose caller was cancelled while it was being made."""
    if connecting.cancelled():
        return
    if connecting.exception() is None:  # (retrieved, so never reported as lost)
        connecting.result().terminate()


async def _no_reset(conn: asyncpg.Connection) -> None:
    """Pool release hook: the adapter leaves no session state behind.

    asyncpg still rolls back an open transaction before calling this. Skipping
    the default ``RESET ALL; UNLISTEN *; …`` saves a round trip per unit and
    keeps the ``starflow.*`` session settings sent at connect time.
    """


# ---------------------------------------------------------------------------
# The adapter
# ---------------------------------------------------------------------------


class PostgresWorkflowStateAdapter(SqlAdapter):
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
        pooler: ``"transaction"`` when ``url`` points at a transaction-mode
            pooler (PgBouncer, Supabase port 6543), ``"session"`` or
            ``"none"`` otherwise. Default: the URL's ``?pooler=`` parameter,
            else ``"transaction"`` for a ``*.pooler.supabase.com:6543``
            host, else ``"none"``.
        listen_url: Where to ``LISTEN`` for work announcements behind a
            transaction pooler (a direct or session-mode URL); default: the
            URL's ``?listen_url=`` parameter (percent-encoded). Without one,
            workers poll every ``StarflowConfig.poll_interval``.
    """

    d = POSTGRES
    Q = Q
    PC = PC

    #: The start and an event in one statement would not see each other's rows
    #: (one snapshot), and unfused they cost a transaction of several round trips:
    #: the start stays its own statement, the first ``node_start`` its own.
    fuses_run_start = False

    def __init__(self, url: str, *, workspace_id: str = "celestial", env: str = "prod",
                 synchronous_commit: str = "on", min_size: int = 1, max_size: int = 10,
                 pooler: str | None = None, listen_url: str | None = None) -> None:
        super().__init__(workspace_id=workspace_id, env=env)
        url, self.pooler, self.listen_url = _pooler_options(normalize_scheme(url), pooler,
                                                            listen_url)
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
        self.runs_channel = channel_name(workspace_id, env, "runs")
        self._pool: asyncpg.Pool | None = None
        #: Pools seen with stored limits (#18), with those limits as last read: their
        #: claims skip the unlimited statement.
        self._limited_pools: dict[str, PoolLimits] = {}
        #: Limited claims by version (two round trips); False: the limits row is
        #: locked first (five; bench/flow_control.py measures both).
        self.versioned_claims = True
        self._listener: asyncpg.Connection | None = None
        self._listen_lock = anyio.Lock()
        self._work = anyio.Event()
        #: Callers waiting for a run's change announced on ``runs_channel``.
        self._run_watches: dict[str, set[RunWatch]] = {}
        # Connections kept checked out of the pool between calls (see _connection).
        self._spare: list[Any] = []
        # Transaction pooler: the set_config() query each call's transaction
        # starts with ("" when nothing needs setting); decided in open().
        self._tx_settings = ""
        #: (current_database(), pg_postmaster_start_time()) of the pool's server, once read.
        self._identity: tuple[Any, ...] | None = None
        #: Callers' connections found to reach this database (``caller_transaction``),
        #: each with whether Row Level Security applies to its role.
        self._callers_checked: weakref.WeakKeyDictionary[Any, bool] = \
            weakref.WeakKeyDictionary()

    # -- connection ----------------------------------------------------------

    @property
    def _server_settings(self) -> dict[str, str]:
        if self.pooler == "transaction":
            # PgBouncer refuses unknown startup parameters; see _tx_settings.
            return {"application_name": "starflow"}
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
                connect=_connect_to_the_end,
                server_settings=self._server_settings,
                # A transaction pooler hands each transaction any server
                # connection: named prepared statements would not be there.
                **({"statement_cache_size": 0} if self.pooler == "transaction" else {}),
            )
        try:
            self.applied_migrations = tuple(await self.migrate())
            if self.pooler == "transaction":
                self._tx_settings = await self._transaction_settings()
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
        if sqlstate == "23505" and getattr(exc, "constraint_name", None) == \
                "idx_workflow_session_vars_key":
            return StorageError(
                f"{action}: this session id and key are already used in another workspace. "
                "This database was adopted from the state model, whose engine keys session "
                "variables by (session_id, key) alone (migration 029): use session ids that "
                "are unique across workspaces, e.g. prefixed with the workspace",
                run_id=run_id)
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
        if "unsupported startup parameter" in str(exc):  # PgBouncer, Supabase's pooler
            return StorageError(
                f"{where} refused starflow's connection settings ({action}): {exc}. This is "
                "a connection pooler: add ?pooler=transaction to the URL "
                "(docs/guides/postgres.md, PgBouncer)", run_id=run_id)
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
                    if self._tx_settings:
                        # Transaction pooler: session settings do not follow the
                        # client, so the call is one transaction that sets them.
                        async with conn.transaction():
                            await conn.execute(self._tx_settings)
                            yield conn
                    else:
                        yield conn
                    reuse = not conn.is_closed() and not conn.is_in_transaction()
                finally:
                    if reuse and len(self._spare) < self.max_size - 1:
                        self._spare.append(conn)
                    else:
                        await pool.release(conn)
        finally:
            self._busy_exit()

    # -- the caller's transaction (#30) ----------------------------------------

    async def caller_transaction(self, connection: object) -> CallerTransaction:
        import asyncpg
        from asyncpg.pool import PoolConnectionProxy

        where = _redact(self.url)
        if not isinstance(connection, asyncpg.Connection | PoolConnectionProxy):
            raise ForeignConnection(
                f"connection= must be an asyncpg connection (or a pool's) for this "
                f"PostgreSQL app ({where}): got {type(connection).__name__}. Nothing was "
                "written")
        if connection.is_closed():
            raise ForeignConnection(f"connection= is closed: pass an open asyncpg "
                                    f"connection to {where}. Nothing was written")
        if not connection.is_in_transaction():
            raise NotInTransaction(
                "connection= has no open transaction, so the run would not commit with "
                "your rows: start it inside `async with conn.transaction():`. Nothing was "
                "written")
        # A pool's proxy is made anew by each acquire: what is checked is its connection.
        raw = getattr(connection, "_con", None) or connection
        rls = self._callers_checked.get(raw)
        if rls is None:
            rls = self._callers_checked[raw] = await self._check_caller(connection)
        caller = _CallerConnection(self, connection, tenant_settings=rls)
        return CallerTransaction(caller, workspace_id=self.workspace_id, env=self.env)

    async def _check_caller(self, connection: Any) -> bool:
        """Refuse a connection to another database (or another server's of that name);
        whether Row Level Security applies to the connection's role."""
        identity = "SELECT current_database(), pg_postmaster_start_time()"
        with self._translate("caller_transaction"):
            row = await connection.fetchrow(
                f"{identity}, "
                "COALESCE(row_security_active(to_regclass('workflow_runs')), false)")
        theirs = (row[0], row[1])
        if theirs == self._identity:
            return bool(row[2])
        async with self._connection("caller_transaction") as conn:
            ours = await conn.fetchrow(identity)
        self._identity = (ours[0], ours[1])
        if theirs != self._identity:
            raise ForeignConnection(
                f"connection= reaches database {theirs[0]!r} of a server started at "
                f"{theirs[1]}, but this app's is {ours[0]!r} of a server started at "
                f"{ours[1]} ({_redact(self.url)}): pass a connection to the app's "
                "database. Nothing was written")
        return bool(row[2])

    # -- migrations ----------------------------------------------------------

    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied.

        Safe with several processes migrating at once: the work happens under
        a transaction-scoped advisory lock, and versions are re-read after it
        is taken. An up-to-date database costs two queries and no lock.
        """
        async with self._connection("migrate") as conn:
            return await _migrate(conn)

    async def migration_plan(self) -> MigrationPlan:
        """What :meth:`migrate` would do, changing nothing (``starflow migrate
        --dry-run``). Needs no :meth:`open` (which migrates): uses a connection
        of its own.

        Raises:
            StorageError: the schema is neither starflow's, the state model's nor
                empty (the message lists what differs), or the server is unreachable.
        """
        import asyncpg

        with self._translate("migration plan"):
            conn = await asyncpg.connect(self.url, server_settings=self._server_settings,
                                         **({"statement_cache_size": 0}
                                            if self.pooler == "transaction" else {}))
            try:
                return await _migration_plan(conn)
            finally:
                await conn.close()

    async def _transaction_settings(self) -> str:
        """Behind a transaction pooler: the ``set_config(…, true)`` query each call's
        transaction must start with, or ``""`` when none is needed (Row Level
        Security does not apply to this role and ``synchronous_commit`` is ``on``),
        which keeps single statements at one round trip."""
        async with self._connection("open") as conn:
            rls = bool(await conn.fetchval("SELECT row_security_active('workflow_runs')"))
        settings = {"synchronous_commit": self.synchronous_commit} \
            if self.synchronous_commit != "on" else {}
        if rls:
            settings |= {"starflow.workspace_id": self.workspace_id, "starflow.env": self.env}
        return ("SELECT " + ", ".join(f"set_config({_literal(k)}, {_literal(v)}, true)"
                                      for k, v in settings.items())) if settings else ""

    # -- writes ---------------------------------------------------------------

    def _plan(self, unit: Unit) -> list[_Statement]:
        """The unit's statements, consecutive identical SQL merged for pipelining.

        Raises ConfigError (before anything is written) for a malformed run id.
        """
        plan: list[_Statement] = []
        ws, env = self.workspace_id, self.env
        for op in merge_run_writes(unit.ops):
            statement = op_sql(POSTGRES, op, ws, env)
            assert statement is not None  # Mark ops are merged away
            sql, args = statement
            if announces_work(op):
                sql, args = _notifying(sql, args, [(self.channel, "")])
            if plan and plan[-1].sql == sql:
                plan[-1].args.append(args)
            else:
                plan.append(_Statement(sql, args))
        return plan

    async def execute(self, unit: Unit) -> bool:
        guard = unit.guard
        if guard is not None and uuid_or_none(guard.run_id) is None:
            return False  # no such row can exist: the guard fails, nothing is written
        plan = self._plan(unit)
        if not plan and guard is None:
            return True
        run_id = unit.run_id
        # Runs whose end (or update answer) this unit writes: announced on
        # commit to callers waiting in other processes (watch_run).
        changes = [(self.runs_channel, r) for r in dict.fromkeys(
            announces_run_change(op) for op in unit.ops) if r is not None]
        fused = None if guard is not None and (
            guard.wait_node is not None or guard.no_signal is not None
            or guard.not_held or guard.held) else _fuse(
            plan, guard, unit.durable, self.workspace_id, self.env, changes)
        async with self._connection(unit, run_id) as conn:
            if guard is None and len(plan) == 1 and unit.durable and not changes:
                # One statement (even pipelined) is its own atomic transaction.
                await _run_statement(conn, plan[0])
                return True
            if fused is not None:
                # Guard, writes and (non-durable) synchronous_commit in one
                # statement: one round trip, its own implicit transaction.
                return bool(await conn.fetchval(fused.sql, *fused.args[0]))
            if conn.is_in_transaction():
                # Transaction pooler: _connection already began the call's
                # transaction (with the tenant settings); it commits or rolls back.
                if not unit.durable:
                    await conn.execute("SET LOCAL synchronous_commit TO off")
                held = guard is None or await self._check_guard(conn, guard)
                if held:
                    for statement in plan:
                        await _run_statement(conn, statement)
                    await _announce(conn, changes)
                return held
            await conn.execute("BEGIN" if unit.durable
                               else "BEGIN; SET LOCAL synchronous_commit TO off")
            try:
                held = guard is None or await self._check_guard(conn, guard)
                if held:
                    for statement in plan:
                        await _run_statement(conn, statement)
                    await _announce(conn, changes)
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
        # on this run, without blocking foreign-key checks of event inserts; the
        # lease/status condition is rechecked on the row's newest version.
        if await conn.fetchval(
                guard_sql(POSTGRES, *guard_shape(guard), " FOR NO KEY UPDATE"),
                guard.run_id, self.workspace_id, self.env, *guard_args(POSTGRES, guard)) is None:
            return False
        # Separate statements on purpose: under READ COMMITTED each takes a fresh
        # snapshot after the row lock is held, so a wake that committed (and
        # deleted the wait) or a signal another guarded unit queued while we
        # waited is seen.
        if guard.wait_node is not None and not await conn.fetchval(
                wait_exists_sql(POSTGRES), guard.run_id, guard.wait_node):
            return False
        if (guard.not_held or guard.held) and bool(await conn.fetchval(
                held_sql(POSTGRES), guard.run_id)) != guard.held:
            return False
        return guard.no_signal is None or not await conn.fetchval(
            signal_queued_sql(POSTGRES), guard.run_id, guard.no_signal, self.workspace_id,
            self.env)

    # -- running scripts (the shared reads and commands of SqlAdapter) ----------

    async def _run_read(self, action: str, make: MakeScript[T], *, run_id: str | None = None,
                        point: bool = False) -> T:
        async with self._connection(action, run_id) as conn:
            return await self._drive(conn, make())

    async def _run_write(self, action: str, make: MakeScript[T], *, atomic: bool = True) -> T:
        async with self._connection(action) as conn:
            if not atomic:  # one statement: atomic as it is, and one round trip
                return await self._drive(conn, make())
            async with conn.transaction():
                return await self._drive(conn, make())

    async def _drive(self, conn: asyncpg.Connection, script: Script[T]) -> T:
        walk = Walk(script)
        for statement in walk:
            match statement:
                case Rows(sql, args):
                    walk.sent = await conn.fetch(sql, *args)
                case One(sql, args):
                    walk.sent = await conn.fetchrow(sql, *args)
                case Count(sql, args):
                    status: str = await conn.execute(sql, *args)
                    walk.sent = int(status.rsplit(" ", 1)[-1])
                case Each(sql, rows):
                    await conn.executemany(sql, rows)
                case After(ops):
                    await self._apply_after(conn, ops)
        return walk.value

    # -- read-modify-writes ----------------------------------------------------

    async def _claim_runs(self, c: ClaimRuns) -> list[RunInfo]:
        names, after = c.workflows, c.after
        if names is not None and not names:
            return []
        args = (self.workspace_id, self.env, c.pool, c.limit, c.runner_id, c.lease_until, c.now,
                c.now, list(names) if names is not None else None)
        async with self._connection("claim_runs") as conn:
            if c.pool is not None and c.pool in self._limited_pools:
                # #18: a pool seen with limits goes straight to the limited claim
                # (which also takes runs queued for any pool); None: limits removed.
                limited = await self._claim_limited_pool(conn, c, c.limit, known=True)
                if limited is not None:
                    return limited
            if after is None:
                runs = claimed_runs(await conn.fetch(CLAIM_SQL, *args), POSTGRES)
            else:
                async with conn.transaction():
                    runs = claimed_runs(await conn.fetch(CLAIM_SQL, *args), POSTGRES)
                    await self._apply_after(conn, after(runs) if runs else [])
            if c.pool is not None and len(runs) < c.limit:
                # Flow control (#18): CLAIM_SQL leaves a limited pool's runs alone;
                # they are claimed here, with the pool's limits row locked FOR UPDATE
                # in this transaction (never check-then-claim). (Only this first claim
                # of a limited pool in a process may take runs of any pool ahead of
                # the pool's own older ones; later claims order them together.)
                more = await self._claim_limited_pool(conn, c, c.limit - len(runs)) or []
                if more:
                    runs = sorted([*runs, *more],
                                  key=lambda r: (r.started_at is not None, r.started_at, r.id))
        return runs

    async def _claim_limited_pool(self, conn: asyncpg.Connection, c: ClaimRuns, limit: int,
                                  *, known: bool = False) -> list[RunInfo] | None:
        """Claim up to ``limit`` runs for ``c.pool`` under its stored limits; None if it
        has none.

        Unless ``known`` (the pool had limits at an earlier claim), one read
        first tells whether it has any, so an unlimited pool's claim pays no
        transaction. Then a claim by version: a read, then one statement that
        claims if no other claim of the pool (and no change of its limits)
        committed since (``_LIMITED_CLAIM``); if one did, again, and after
        :data:`VERSIONED_TRIES` the locked claim: the limits row locked (and
        written), then the read and the claim, until commit.
        """
        pool = c.pool
        assert pool is not None
        scope = (self.workspace_id, self.env, pool)
        if not known:
            row = await conn.fetchrow(Q.get_pool_limits, *scope)
            if row is None:
                return None
            self._limited_pools[pool] = pool_limits(row, POSTGRES)
        known_limits = self._limited_pools[pool]
        # A fair pool writes its round robin's state with every claim, and a kept
        # slot's claim reads apart: both claim under the row lock only.
        versioned = not (known_limits.fair or known_limits.keep_slot)
        if c.after is None and self.versioned_claims and versioned:
            for _ in range(VERSIONED_TRIES):
                got = await self._claim_versioned(conn, c, limit)
                if got is None:  # removed meanwhile: CLAIM_SQL takes its runs
                    self._limited_pools.pop(pool, None)
                    return None
                if not isinstance(got, _Stale):
                    return claimed_runs(got, POSTGRES)
                changed = self._limited_pools[pool]
                if changed.fair or changed.keep_slot:  # made fair meanwhile: locked claim
                    break
        async with conn.transaction():
            row = await conn.fetchrow(_LOCK_POOL_LIMITS, *scope)
            if row is None:
                self._limited_pools.pop(pool, None)
                return None
            limits = self._limited_pools[pool] = pool_limits(row, POSTGRES)
            if limits.fair or limits.keep_slot:
                ids = await self._pick_locked(conn, limits, c, limit)
            else:
                ids = (await self._limited_read(conn, limits, c, limit)).ids
            runs = claimed_runs(await self._claim_ids(conn, c, ids), POSTGRES)
            if c.after is not None and runs:
                await self._apply_after(conn, c.after(runs))
        return runs

    async def _limited_read(self, conn: asyncpg.Connection, limits: PoolLimits,
                            c: ClaimRuns, limit: int, *, recent_more: int = 0,
                            key_recent_more: Mapping[str, int] | None = None
                            ) -> _LimitedRead:
        """The pool's counts, its limits row as it is now, and the ids the claim
        rule (:func:`pick_claims`) takes from the queued candidates under ``limits``
        (``*_more``: claims already picked by this claim, of kept slots)."""
        since = c.now - limits.rate_period if limits.rate_period is not None else None
        key_since = (c.now - limits.key_rate_period
                     if limits.key_rate_period is not None else None)
        names = list(c.workflows) if c.workflows is not None else None
        keyed = limits.key_concurrency is not None
        args = (self.workspace_id, self.env, c.pool, since, keyed, names, c.now,
                scan_size(limit, limits))
        rest = (limits.key_concurrency or 0, limits.keep_slot, key_since,
                limits.key_rate_limit or 0)
        rows = await conn.fetch(_LIMITED_CANDIDATES, *args, False, *rest)
        head = rows[0]
        active, recent = int(head[0]), int(head[1]) + recent_more
        now = (None if head[6] is None
               else pool_limits(tuple(head)[6:6 + LIMIT_WIDTH], POSTGRES))
        key_active: dict[str, int] = {k: int(n) for k, n in (head[2] or {}).items()}
        key_recent: dict[str, int] = {k: int(n) for k, n in (head["key_recent"] or {}).items()}
        for k, n in (key_recent_more or {}).items():
            key_recent[k] = key_recent.get(k, 0) + n
        room = room_left(limits, active, recent)
        if room is not None and room <= 0 and any(r[4] is not None for r in rows):
            # The pool is at its limit: only runs queued for any pool can go, and
            # the pool's own may have filled the candidates; look at those alone.
            rows = await conn.fetch(_LIMITED_CANDIDATES, *args, True, *rest)
        cands = [Candidate(str(r[3]), r[4], r[5]) for r in rows if r[3] is not None]
        ids = pick_claims(cands, limits, limit=limit, active=active, claimed_in_window=recent,
                          key_active=key_active, key_recent=key_recent)
        return _LimitedRead(limits=now, version=head[6 + LIMIT_WIDTH], ids=ids,
                            active=active, recent=recent, key_active=key_active,
                            key_recent=key_recent)

    async def _pick_locked(self, conn: asyncpg.Connection, limits: PoolLimits, c: ClaimRuns,
                           limit: int) -> list[str]:
        """The ids a claim of a fair or ``keep_slot`` pool takes, under the pool's
        limits row lock (its round robin's state written in the same transaction)."""
        pool = c.pool
        assert pool is not None
        scope = (self.workspace_id, self.env, pool)
        sql = pool_sql(POSTGRES, None, limits.keep_slot)
        args = scope_args(POSTGRES, *scope, c.now, c.workflows)
        rows = (await conn.fetch(sql.holders, *args, limit)) if limits.keep_slot else []
        read = await self._limited_read(conn, limits, c, limit)
        key_recent = dict(read.key_recent)
        holders, recent = take_holders(
            [(Queued(str(r[0]), r[1], r[2]), r[3]) for r in rows], limits,
            recent=read.recent, key_recent=key_recent)
        rest = limit - len(holders)
        if not limits.fair:
            if holders:
                more = {k: n - read.key_recent.get(k, 0) for k, n in key_recent.items()}
                read = await self._limited_read(conn, limits, c, rest,
                                                recent_more=len(holders), key_recent_more=more)
            return [h.id for h in holders] + read.ids[:rest]
        room = room_left(limits, read.active, recent)
        fair = await self._drive(conn, self._fair_round(
            limits, sql, args, pool, room=room, limit=rest, key_active=read.key_active,
            key_recent=key_recent))
        return [h.id for h in holders] + fair

    async def _claim_ids(self, conn: asyncpg.Connection, c: ClaimRuns, ids: list[str]
                         ) -> list[asyncpg.Record]:
        if not ids:
            return []
        claimed: list[asyncpg.Record] = await conn.fetch(
            claim_ids_sql(POSTGRES, len(ids)), c.runner_id, c.lease_until, c.now, c.now,
            *POSTGRES.many(ids))
        return claimed

    async def _claim_versioned(self, conn: asyncpg.Connection, c: ClaimRuns, limit: int
                               ) -> list[asyncpg.Record] | _Stale | None:
        """One try of a limited claim by version (``_LIMITED_CLAIM``): the claimed
        rows, :data:`_STALE` if the pool changed since the read (nothing claimed),
        None if it has no limits."""
        pool = c.pool
        assert pool is not None
        limits = self._limited_pools[pool]
        read = await self._limited_read(conn, limits, c, limit)
        if read.limits is None:
            return None
        if read.limits != limits:  # changed since this process last read them
            self._limited_pools[pool] = read.limits
            return _STALE
        if not read.ids:
            return []
        rows = await conn.fetch(_LIMITED_CLAIM, self.workspace_id, self.env, pool, read.version,
                                c.runner_id, c.lease_until, c.now, c.now, read.ids)
        if not rows[0]["valid"]:
            return _STALE
        return [r for r in rows if r[0] is not None]

    async def _apply_after(self, conn: asyncpg.Connection, ops: list[Op]) -> None:
        """Write ``ops`` on ``conn`` inside the caller's transaction."""
        for statement in self._plan(Unit(ops=ops)):
            await _run_statement(conn, statement)

    async def _expire_old_leases(self, c: SweepLeases) -> list[SweepResult]:
        after = c.after
        args = (self.workspace_id, self.env, c.reason, c.now, self.channel)
        async with self._connection("expire_old_leases") as conn:
            if after is None:
                return swept(await conn.fetch(SWEEP_SQL[c.requeue], *args))
            async with conn.transaction():
                results = swept(await conn.fetch(SWEEP_SQL[c.requeue], *args))
                await self._apply_after(conn, after(results) if results else [])
        return results

    # -- schedules and flow control (#18) ----------------------------------------

    async def _queue_due_starts(self, c: QueueDueStarts) -> DueStarts:
        args = (self.workspace_id, self.env, c.now, self.channel)
        async with self._connection("queue_due_starts") as conn:
            if c.after is None:
                row = await conn.fetchrow(QUEUE_DUE_STARTS_SQL, *args)
            else:
                async with conn.transaction():
                    row = await conn.fetchrow(QUEUE_DUE_STARTS_SQL, *args)
                    if row["ids"]:
                        await self._apply_after(conn, c.after(list(row["ids"])))
        return DueStarts(queued=tuple(row["ids"] or ()), next_start=row["next_start"])

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
        if self.pooler == "transaction" and self.listen_url is None:
            return  # LISTEN does not survive a transaction pooler: poll instead
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
                    conn = await asyncpg.connect(
                        self.listen_url or self.url, timeout=LISTEN_CONNECT_TIMEOUT,
                        server_settings=self._server_settings if self.listen_url is None
                        else {"application_name": "starflow"})
                    try:
                        await conn.add_listener(self.channel, self._on_notify)
                        await conn.add_listener(self.runs_channel, self._on_run_notify)
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
            self._wake_watches()

    def _on_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        self._work.set()

    def _on_run_notify(self, conn: object, pid: int, channel: str, payload: object) -> None:
        for watch in self._run_watches.get(str(payload), ()):
            watch.changed.set()

    def _wake_watches(self) -> None:
        for watches in self._run_watches.values():
            for watch in watches:
                watch.changed.set()

    def _on_listener_lost(self, conn: object) -> None:
        if self._listener is conn:
            self._listener = None
        self._work.set()  # wake waiters so they poll (and reconnect) at once
        self._wake_watches()

    @asynccontextmanager
    async def watch_run(self, run_id: str) -> AsyncIterator[RunWatch | None]:
        """Announcements of ``run_id``'s end, update answers, events and stream
        items, by LISTEN.

        None behind a transaction pooler without ``listen_url`` (LISTEN does not
        survive it) or when the listening connection cannot be opened: the
        caller polls.
        """
        await self._ensure_listener()
        if self._listener is None:
            yield None
            return
        watch = RunWatch(run_id)
        watches = self._run_watches.setdefault(run_id, set())
        watches.add(watch)
        try:
            yield watch
        finally:
            watches.discard(watch)
            if not watches and self._run_watches.get(run_id) is watches:
                del self._run_watches[run_id]


# ---------------------------------------------------------------------------
# Module helpers
# ---------------------------------------------------------------------------


class _CallerConnection(CallerConnection):
    """The caller's asyncpg connection (with its own codecs: see ``POSTGRES_CALLER``).

    The tenant settings Row Level Security reads (021) are set on it, for the
    rest of the caller's transaction (``set_config(..., true)``), before its
    first statement (in the same round trip when that takes no arguments: the
    savepoint of the writes).
    """

    def __init__(self, adapter: PostgresWorkflowStateAdapter, conn: Any, *,
                 tenant_settings: bool) -> None:
        super().__init__(POSTGRES_CALLER)
        self._adapter = adapter
        self._conn = conn
        self._settings = (f"SELECT set_config('starflow.workspace_id', "
                          f"{_literal(adapter.workspace_id)}, true), "
                          f"set_config('starflow.env', {_literal(adapter.env)}, true)")
        #: Nothing to set where Row Level Security does not apply to the role.
        self._settled = not tenant_settings

    def needs_savepoint(self, refusable: bool) -> bool:
        # A failed statement aborts a PostgreSQL transaction: a start the database
        # cannot refuse in a way the caller acts on (no run id, no dedup key) needs
        # no savepoint to stay all-or-nothing. Two round trips fewer.
        return refusable

    async def execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        if not self._settled and not args:
            sql = f"{self._settings}; {sql}"  # simple protocol: several statements
        elif not self._settled:
            await self.execute(self._settings)
        with self._adapter._translate("start in the caller's transaction"):
            await self._conn.execute(sql, *args)
        self._settled = True

    async def fetchrow(self, sql: str, args: Sequence[Any] = ()) -> Sequence[Any] | None:
        if not self._settled:
            await self.execute(self._settings)
        with self._adapter._translate("start in the caller's transaction"):
            row: Sequence[Any] | None = await self._conn.fetchrow(sql, *args)
            return row

    def announcing(self, op: Op, sql: str, args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        # NOTIFY is transactional: the workers hear of the run at the caller's commit.
        if announces_work(op):
            return _notifying(sql, args, [(self._adapter.channel, "")])
        return sql, args



def _notifying(sql: str, args: tuple[Any, ...], announce: Sequence[tuple[str, str]]
               ) -> tuple[str, tuple[Any, ...]]:
    """Wrap a write so that, if it touched a row, it also sends each
    ``(channel, payload)`` of ``announce``.

    The notifications are part of the transaction: delivered on commit,
    dropped on rollback (of the unit or of its savepoint).
    """
    n = len(args)
    calls = ", ".join(f"pg_notify(${n + 2 * i + 1}, ${n + 2 * i + 2})"
                      for i in range(len(announce)))
    return (f"WITH w AS ({sql} RETURNING 1) SELECT {calls} FROM w",
            (*args, *(v for pair in announce for v in pair)))


#: A limited claim's read: the counts (repeated on every row; one row of NULL
#: candidates when none is queued), up to $8 queued candidates in claim order,
#: and the pool's limits row as it is now (NULL: removed) with its version
#: (``xmin``: every claim of the pool writes the row). $9: runs of any pool
#: only; $5 and $10: keys are limited, to $10 executing runs each (full keys'
#: runs skipped). Under the limits row lock (the locked claim) or before it (a
#: claim by version, ``_LIMITED_CLAIM``).
_LIMITED_CANDIDATES = f"""
WITH a AS (
    SELECT concurrency_key FROM workflow_runs
    WHERE workspace_id = $1 AND env = $2 AND runner_pool = $3 AND {ACTIVE_RUN}
    UNION ALL  -- keep_slot ($11): paused runs and runs queued again keep their slot
    SELECT concurrency_key FROM workflow_runs
    WHERE $11::bool AND workspace_id = $1 AND env = $2 AND runner_pool = $3 AND {SLOT_KEPT}
), kr AS (  -- claims per key within the key rate window ($12; NULL: no key rate limit)
    SELECT concurrency_key AS k, count(*) AS n FROM workflow_runs
    WHERE $12::timestamptz IS NOT NULL AND workspace_id = $1 AND env = $2
      AND runner_pool = $3 AND claimed_at > $12 AND concurrency_key IS NOT NULL
    GROUP BY concurrency_key
), counts AS (
    SELECT (SELECT count(*) FROM a) AS active,
           CASE WHEN $4::timestamptz IS NULL THEN 0 ELSE (
               SELECT count(*) FROM workflow_runs WHERE workspace_id = $1 AND env = $2
                 AND runner_pool = $3 AND claimed_at > $4) END AS recent,
           CASE WHEN $5 THEN (
               SELECT COALESCE(jsonb_object_agg(k, n), '{{}}'::jsonb) FROM (
                   SELECT concurrency_key AS k, count(*) AS n FROM a
                   WHERE concurrency_key IS NOT NULL GROUP BY concurrency_key) g) END AS keys,
           (SELECT COALESCE(jsonb_object_agg(k, n), '{{}}'::jsonb) FROM kr) AS key_recent
), lim AS (
    SELECT {LIMIT_COLUMNS}, xmin::text AS version FROM starflow_pool_limits
    WHERE workspace_id = $1 AND env = $2 AND pool = $3
), cand AS (
    SELECT id, runner_pool, concurrency_key, priority, started_at FROM workflow_runs
    WHERE claim_state = 'queued' AND workspace_id = $1 AND env = $2
      AND (runner_pool IS NULL OR (runner_pool = $3 AND NOT $9::bool))
      AND ($6::text[] IS NULL OR template_id || '' = ANY($6::text[]))  -- not 035's index
      AND {claimable(POSTGRES, 7)}
      AND (NOT $5 OR runner_pool IS NULL OR concurrency_key IS NULL
           OR concurrency_key NOT IN (SELECT concurrency_key FROM a
               WHERE concurrency_key IS NOT NULL
               GROUP BY concurrency_key HAVING count(*) >= $10::int))
      AND ($12::timestamptz IS NULL OR runner_pool IS NULL OR concurrency_key IS NULL
           OR concurrency_key NOT IN (SELECT k FROM kr WHERE n >= $13::int))
      AND (NOT $11 OR runner_pool IS NULL OR claimed_at IS NULL)  -- holders: apart
    ORDER BY {CLAIM_ORDER}
    LIMIT $8
    FOR UPDATE SKIP LOCKED
)
SELECT counts.active, counts.recent, counts.keys,
       cand.id, cand.runner_pool, cand.concurrency_key, lim.*, counts.key_recent
FROM counts LEFT JOIN lim ON true LEFT JOIN cand ON true
ORDER BY cand.priority DESC, cand.started_at
"""

#: A limited claim by version (#18), one statement after the read: it writes
#: the pool's limits row (``updated_at = updated_at``: a new row version, the
#: values unchanged) only if the row is still the version $4 the read saw, and
#: claims the picked ids $9 only if it did. Every claim of a limited pool
#: writes that row (here, or ``_LOCK_POOL_LIMITS`` in the locked claim), and
#: ``set_pool_limits`` writes it too, so an unchanged version means no claim
#: of the pool committed since the read and its limits are the same: the counts
#: the pick was made on still hold (runs that ended since only leave more
#: room). A claim that commits meanwhile holds the row until it does; this
#: statement then re-checks the row's newest version (READ COMMITTED), finds
#: another and claims nothing (``valid`` false): the caller reads again. The
#: row stays locked until this statement commits, so the next claim waits.
_LIMITED_CLAIM = f"""
WITH bump AS (
    UPDATE starflow_pool_limits SET updated_at = updated_at
    WHERE workspace_id = $1 AND env = $2 AND pool = $3 AND xmin::text = $4
    RETURNING 1
), claimed AS (
    UPDATE workflow_runs SET {claim_set(POSTGRES, 5)}
    WHERE id = ANY($9::uuid[]) AND claim_state = 'queued' AND EXISTS (SELECT 1 FROM bump)
    RETURNING {RUN_COLUMNS}
)
SELECT claimed.*, EXISTS (SELECT 1 FROM bump) AS valid
FROM (SELECT 1) one LEFT JOIN claimed ON true
"""

#: The locked claim's first statement: lock the pool's limits row and give it a
#: new version (so a claim by version that read before this one sees it changed).
_LOCK_POOL_LIMITS = f"""
UPDATE starflow_pool_limits SET updated_at = updated_at
WHERE workspace_id = $1 AND env = $2 AND pool = $3
RETURNING {LIMIT_COLUMNS}
"""

#: A claim by version that found the pool changed is retried this many times,
#: then the claim takes the limits row lock first (it cannot be overtaken).
VERSIONED_TRIES = 2


#: Statements that can take ``AND EXISTS (SELECT 1 FROM g)`` at their end.
_FUSABLE = re.compile(r"^(UPDATE (\w+) SET |DELETE FROM (\w+) |INSERT INTO (workflow_run_events) "
                      r"\(.*\) SELECT .* WHERE EXISTS \(SELECT 1 FROM workflow_runs .*\)"
                      r"( ORDER BY o)?$)", re.DOTALL)
_ORDER = " ORDER BY o"
_PARAM = re.compile(r"\$(\d+)")


def _fuse(plan: Sequence[_Statement], guard: Guard | None, durable: bool, workspace_id: str,
          env: str, announce: Sequence[tuple[str, str]] = ()) -> _Statement | None:
    """One statement doing the guard and every write of the plan, or None if it cannot.

    ``WITH g AS (SELECT … FOR NO KEY UPDATE)`` locks the run row and rechecks
    the guard on its newest version (READ COMMITTED re-evaluation); each write
    becomes a data-modifying CTE that runs only ``WHERE EXISTS (SELECT 1 FROM
    g)``; the result is whether the guard held. A non-durable unit sets
    ``synchronous_commit`` off with ``set_config(…, true)``: for its own
    transaction only. Writes of one statement share a snapshot and run in no
    defined order, so only plans that write each table once, one row set each,
    are fused (no pipelined ``executemany``, no work-announcing writes). Each
    ``(channel, payload)`` of ``announce`` is sent if the guard held.
    """
    plan = _events_as_one(plan)
    if not plan or any(len(st.args) != 1 for st in plan):
        return None
    leased = guard is not None and guard.leased_by is not None
    status = guard is not None and guard.status_in is not None
    key = (tuple(st.sql for st in plan), guard is not None, leased, status, durable,
           len(announce))
    sql = _FUSED.get(key, "")
    if sql == "":
        sql = _fused_sql(plan, guard is not None, leased, status, durable, len(announce))
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
    for pair in announce:
        args.extend(pair)
    return _Statement(sql, tuple(args))


_EVENT_SQL = event_sql(POSTGRES)


def _events_as_one(plan: Sequence[_Statement]) -> Sequence[_Statement]:
    """The plan with its event inserts of one run as one multi-row insert, where the first was.

    A fused unit (a step's ``node_complete`` with the next ``node_start``, or
    with the pause or the run's end) inserts several events; a statement may
    write each table only once, so they become one ``INSERT … SELECT … FROM
    (VALUES …) ORDER BY``: ids are drawn in the order written. Only the
    events' order among themselves is observable (the unit commits as one).
    """
    rows = [args for st in plan if st.sql == _EVENT_SQL for args in st.args]
    if len(rows) < 2 or any(r[5:] != rows[0][5:] for r in rows):
        return plan
    values = ", ".join(
        f"(${5 * i + 1}::uuid, ${5 * i + 2}::text, ${5 * i + 3}::text, ${5 * i + 4}::jsonb, "
        f"${5 * i + 5}::timestamptz, {i})" for i in range(len(rows)))
    merged = _Statement(
        "INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json, "
        f"created_at) SELECT r, t, n, p, c FROM (VALUES {values}) AS v (r, t, n, p, c, o) "
        "WHERE EXISTS (SELECT 1 FROM workflow_runs WHERE "
        f"{run_conditions(POSTGRES, 5 * len(rows) + 1, False, None)}) ORDER BY o",
        (*(a for r in rows for a in r[:5]), *rows[0][5:]))
    out: list[_Statement] = []
    for st in plan:
        if st.sql != _EVENT_SQL:
            out.append(st)
        elif merged not in out:
            out.append(merged)
    return out


#: Fused SQL by plan shape (``None``: that shape cannot be fused).
_FUSED: dict[tuple[Any, ...], str | None] = {}


def _fused_sql(plan: Sequence[_Statement], guarded: bool, leased: bool, status: bool,
               durable: bool, announcements: int = 0) -> str | None:
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
        n = 3 + leased + status
        ctes.append(f"g AS ({guard_sql(POSTGRES, leased, 1 if status else None)} "
                    "FOR NO KEY UPDATE)")
        cond = " AND EXISTS (SELECT 1 FROM g)"
    for i, st in enumerate(plan):
        offset = n

        def shift(m: re.Match[str], offset: int = offset) -> str:
            return f"${int(m.group(1)) + offset}"

        sql = _PARAM.sub(shift, st.sql)
        order = _ORDER if sql.endswith(_ORDER) else ""  # the guard goes before it
        ctes.append(f"w{i} AS ({sql[:len(sql) - len(order)]}{cond}{order})")
        n += len(st.args[0])
    result = "(SELECT count(*) FROM g)" if guarded else "1"
    sync = "" if durable else ", set_config('synchronous_commit', 'off', true)"
    notify = "".join(
        f", CASE WHEN EXISTS (SELECT 1 FROM g) THEN pg_notify(${n + 2 * i + 1}, "
        f"${n + 2 * i + 2}) END" if guarded else
        f", pg_notify(${n + 2 * i + 1}, ${n + 2 * i + 2})" for i in range(announcements))
    return f"WITH {', '.join(ctes)} SELECT {result}{sync}{notify}"


def _describe(unit: Unit) -> str:
    return "execute(" + ", ".join(dict.fromkeys(unit.methods)) + ")"


async def _announce(conn: asyncpg.Connection, announce: Sequence[tuple[str, str]]) -> None:
    """Send each ``(channel, payload)`` with the open transaction's commit."""
    if announce:
        calls = ", ".join(f"pg_notify(${2 * i + 1}, ${2 * i + 2})" for i in range(len(announce)))
        await conn.execute(f"SELECT {calls}", *(v for pair in announce for v in pair))


async def _run_statement(conn: asyncpg.Connection, statement: _Statement) -> None:
    if len(statement.args) == 1:
        await conn.execute(statement.sql, *statement.args[0])
    else:
        await conn.executemany(statement.sql, statement.args)


async def _migration_plan(conn: asyncpg.Connection) -> MigrationPlan:
    """What migrating would do; reads only. A database without
    ``starflow_migrations`` holding the state model's tables is adopted (issue #20):
    its versions are recognised by tables, columns and types, not trusted."""
    migrations = load_migrations("postgres")
    # A catalog query under the statement's snapshot (not to_regclass, whose name
    # lookup may not see a table another migrate() committed while we waited
    # for the lock).
    if await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_tables WHERE tablename = "
            "'starflow_migrations' AND schemaname = current_schema())"):
        done = {r[0] for r in await conn.fetch("SELECT version FROM starflow_migrations")}
        return MigrationPlan(adopt=(), apply=tuple(m for m in migrations
                                                   if m.version not in done))
    rows = await conn.fetch(
        "SELECT table_name::text, column_name::text, data_type::text "
        "FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND table_name = ANY($1::text[])", [*SEED_TABLES, *STARFLOW_TABLES])
    found: dict[str, dict[str, str]] = {}
    for table, column, kind in rows:
        found.setdefault(table, {})[column] = kind
    indexes = [r[0] for r in await conn.fetch(
        "SELECT indexname::text FROM pg_catalog.pg_indexes WHERE schemaname = current_schema() "
        "AND indexname = ANY($1::text[])", list(SEED_INDEXES))]
    try:
        seed = set(seed_versions(found, indexes))
    except ValueError as exc:
        raise StorageError(f"refusing to migrate: {exc}. Nothing was changed") from None
    return MigrationPlan(adopt=tuple(m for m in migrations if m.version in seed),
                         apply=tuple(m for m in migrations if m.version not in seed))


async def _migrate(conn: asyncpg.Connection) -> list[int]:
    if await conn.fetchval("SELECT to_regclass('starflow_migrations')") is not None:
        done = {r[0] for r in await conn.fetch("SELECT version FROM starflow_migrations")}
        if all(m.version in done for m in load_migrations("postgres")):
            return []
    applied: list[int] = []
    async with conn.transaction():
        # Everything below is one transaction under one lock: a concurrent
        # migrate() waits here, then finds the versions recorded and does nothing.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY)
        plan = await _migration_plan(conn)  # raises, changing nothing, on a foreign schema
        await conn.execute(
            "CREATE TABLE IF NOT EXISTS starflow_migrations ("
            "version int PRIMARY KEY, name text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for mig in plan.adopt:  # found in place: recorded, not run (029 reads the marker)
            await conn.execute("INSERT INTO starflow_migrations (version, name) VALUES ($1, $2)",
                               mig.version, f"{mig.name} {ADOPTED_MARK}")
            log.warning("adopted the state model's migration", version=mig.version,
                        name=mig.name)
        for mig in plan.apply:
            await conn.execute(mig.sql)
            await conn.execute("INSERT INTO starflow_migrations (version, name) VALUES ($1, $2)",
                               mig.version, mig.name)
            applied.append(mig.version)
    return applied
