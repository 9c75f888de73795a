"""``SqlAdapter``: the port's reads and commands, written once for both SQL databases.

A read or a command is a *script*: a generator that yields statements
(:class:`Rows`, :class:`One`, :class:`Count`, :class:`Each`, :class:`After`)
and is sent back what each returned. It never touches a driver, so the same
script runs on aiosqlite's thread (synchronously, inside SQLite's single
writer, whose group commit may run it again) and on an asyncpg connection
(awaited). A dialect (:mod:`starflow.adapters.sqlite`,
:mod:`starflow.adapters.postgres`) supplies only the two hooks that run a
script, :meth:`SqlAdapter._run_read` and :meth:`SqlAdapter._run_write`, plus
what genuinely differs: connecting and pooling, the unit write path, the claim
of runs (a fair pool's round robin is a shared script,
:meth:`SqlAdapter._fair_round`, that each claim runs inside its own
transaction), the lease sweep and due starts, error mapping, migrations, the
caller's transaction and notification.

A new read touches, on the SQL side, its statement in :mod:`.queries` and its
method here; the port declares it in :mod:`starflow.adapters.base` (and the
null and delegating adapters, which implement every port method, answer or
forward it).
"""

from __future__ import annotations

import abc
import secrets
import uuid
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Generic, TypeAlias, TypeVar

from ... import serde
from ...errors import StorageError
from ...records import (
    ChildWait,
    DefinitionRecord,
    EventValue,
    JobRecord,
    OutboxLag,
    OutboxRow,
    PoolLimits,
    PoolUsage,
    PrunedBatch,
    QueuedRun,
    QueueStats,
    RunEvent,
    RunInfo,
    ScheduleRecord,
    SignalRecord,
    StreamItem,
    WaitRecord,
)
from .._flow import NO_KEY, KeyHead, Queued, fair_keys, fair_pick, merge_claims
from ..base import WorkflowStateAdapter
from ..pages import RunPage, RunPageQuery, make_page, page_sql
from ..seam import BusyTracking
from ..units import (
    ClaimJobs,
    CommandHandler,
    DeleteSchedule,
    EnsureDefinition,
    ExpireSessionVars,
    GetSecret,
    HeartbeatJob,
    MarkOutboxApplied,
    Op,
    PruneOutbox,
    PruneRuns,
    RearmDebounced,
    SetPoolLimits,
    SetPoolPaused,
    UpdateSchedule,
    UpsertSchedule,
)
from .dialect import Dialect
from .pools import PoolCounts, PoolSql
from .queries import Queries, queue_stats_of
from .shared import (
    claimed_jobs,
    definition_record,
    event_value,
    job_record,
    limit_args,
    outbox_row,
    pool_limits,
    prune_delete_sql,
    prune_select_args,
    prune_select_sql,
    queued_run,
    run_event,
    run_info,
    schedule_insert_args,
    schedule_record,
    schedule_value,
    signal_record,
    stream_item,
    wait_record,
)

__all__ = ["After", "Count", "Each", "MakeScript", "One", "Rows", "Script", "SqlAdapter",
           "Statement", "Walk"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class _Sql:
    """A statement and its arguments."""

    sql: str
    args: tuple[Any, ...]


class Rows(_Sql):
    """Every row ``sql`` returns (a list)."""

    __slots__ = ()


class One(_Sql):
    """The first row ``sql`` returns, or None."""

    __slots__ = ()


class Count(_Sql):
    """The number of rows ``sql`` changed."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Each:
    """Run ``sql`` once for each argument tuple of ``rows`` (one batch); returns None."""

    sql: str
    rows: list[tuple[Any, ...]]


@dataclass(frozen=True, slots=True)
class After:
    """Write ``ops`` (a command's follow-up, e.g. the mirror's outbox rows) in
    the script's own transaction; returns None."""

    ops: list[Op]


Statement: TypeAlias = Rows | One | Count | Each | After
#: A read or a command: yields statements, is sent each one's result, returns ``T``.
Script: TypeAlias = Generator[Statement, Any, T]
#: Makes a fresh script: a dialect may run one again from the start (SQLite
#: re-applies a group-commit batch with a savepoint per unit if one fails).
MakeScript: TypeAlias = Callable[[], Script[T]]


class Walk(Generic[T]):
    """Steps a dialect through a script: iterate it for the statements, set
    :attr:`sent` to each one's result, read :attr:`value` at the end::

        walk = Walk(script)
        for statement in walk:
            walk.sent = run(statement)
        return walk.value
    """

    def __init__(self, script: Script[T]) -> None:
        self._script = script
        #: What the statement just yielded returned (sent back into the script).
        self.sent: Any = None
        self.value: T

    def __iter__(self) -> Walk[T]:
        return self

    def __next__(self) -> Statement:
        sent, self.sent = self.sent, None
        try:
            return self._script.send(sent)
        except StopIteration as stop:
            self.value = stop.value
            raise StopIteration from None


def _single(statement: Statement) -> Script[Any]:
    result = yield statement
    return result


def _pruned(d: Dialect, rows: Sequence[Any], counts: dict[str, int]) -> PrunedBatch:
    """A prune batch's outcome from its selected ``(id, completed_at)`` rows."""
    return PrunedBatch(run_ids=[str(r[0]) for r in rows],
                       cursor=(d.at(rows[-1][1]), str(rows[-1][0])) if rows else None,
                       rows=counts)


class SqlAdapter(BusyTracking, WorkflowStateAdapter, CommandHandler):
    """The state model on a SQL database: every read and the common commands,
    once; a dialect subclass supplies the driver (see the module docstring)."""

    #: How the database spells what the shared SQL needs.
    d: ClassVar[Dialect]
    #: The data-access statements in that spelling.
    Q: ClassVar[Queries]
    #: The statements of fair pools in that spelling.
    PC: ClassVar[PoolCounts]

    # -- the driver: what a dialect implements ----------------------------------

    @abc.abstractmethod
    async def _run_read(self, action: str, make: MakeScript[T], *, run_id: str | None = None,
                    point: bool = False) -> T:
        """Run a read-only script. ``point``: a lookup of a few rows by key
        (SQLite runs it on the loop's thread when the connection is free);
        ``action`` and ``run_id`` name the call in a :class:`StorageError`."""

    @abc.abstractmethod
    async def _run_write(self, action: str, make: MakeScript[T], *, atomic: bool = True) -> T:
        """Run a script that writes, in one transaction. ``atomic=False``: each
        of its statements stands alone (one statement, or statements that are
        each right on their own), so a driver whose transactions cost round
        trips may run them without one."""

    # -- helpers -------------------------------------------------------------------

    @property
    def _scope(self) -> tuple[str, str]:
        return self.workspace_id, self.env

    async def _rows(self, action: str, sql: str, args: tuple[Any, ...], *,
                    run_id: str | None = None, point: bool = False) -> list[Any]:
        rows: list[Any] = await self._run_read(action, lambda: _single(Rows(sql, args)),
                                           run_id=run_id, point=point)
        return rows

    async def _one(self, action: str, sql: str, args: tuple[Any, ...], *,
                   run_id: str | None = None, point: bool = False) -> Any:
        return await self._run_read(action, lambda: _single(One(sql, args)), run_id=run_id,
                                point=point)

    # -- reads -----------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunInfo | None:
        rid = self.d.id_or_none(run_id)
        if rid is None:
            return None
        row = await self._one("get_run", self.Q.get_run, (rid, *self._scope), run_id=run_id,
                              point=True)
        return run_info(row, self.d) if row is not None else None

    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50,
                        attributes: Mapping[str, str] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        pairs = list((attributes or {}).items())
        if parent_run_id is not None and self.d.id_or_none(parent_run_id) is None:
            return []  # not a run id: no run has it as its parent
        sql = self.Q.list_runs(status is not None, template_id is not None, since is not None,
                               len(pairs), parent_run_id is not None)
        args = (*self._scope,
                *(v for v in (status, template_id, self.d.ts(since), parent_run_id)
                  if v is not None),
                *(v for k, val in pairs for v in (*self._scope, k, val)),
                int(limit))
        return [run_info(r, self.d) for r in await self._rows("list_runs", sql, args)]

    async def list_queued_runs(self, limit: int) -> list[QueuedRun]:
        rows = await self._rows("list_queued_runs", self.Q.queued_runs,
                                (*self._scope, int(limit)))
        return [queued_run(r, self.d) for r in rows]

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        query.check()
        sql = page_sql(self.d, query, workspace_id=self.workspace_id, env=self.env)
        if sql is None:
            return make_page([], query, {} if query.counts else None)

        def page() -> Script[tuple[list[Any], list[Any] | None]]:
            rows = yield Rows(sql.select, tuple(sql.select_args))
            counts = None if sql.count is None else (
                yield Rows(sql.count, tuple(sql.count_args)))
            return rows, counts

        rows, counts = await self._run_read("list_runs_page", page)
        return make_page([run_info(r, self.d) for r in rows], query,
                         None if counts is None else {r[0]: r[1] for r in counts})

    async def _run_rows(self, action: str, sql: str, run_id: str, *more: Any,
                        point: bool = False) -> list[Any]:
        """The rows of ``sql`` for one run (none for an id no run can have)."""
        rid = self.d.id_or_none(run_id)
        if rid is None:
            return []
        return await self._rows(action, sql, (rid, *self._scope, *more), run_id=run_id,
                                point=point)

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        rows = await self._run_rows("list_events", self.Q.list_events, run_id, after_id)
        return [run_event(r, self.d) for r in rows]

    async def get_run_attributes(self, run_id: str) -> dict[str, str]:
        rows = await self._run_rows("get_run_attributes", self.Q.get_run_attributes, run_id)
        return {r[0]: r[1] for r in rows}

    async def get_event_value(self, run_id: str, key: str) -> EventValue | None:
        rid = self.d.id_or_none(run_id)
        if rid is None:
            return None
        row = await self._one("get_event_value", self.Q.get_event_value,
                              (rid, *self._scope, key), run_id=run_id, point=True)
        return event_value(row, self.d) if row is not None else None

    async def list_event_values(self, run_id: str) -> list[EventValue]:
        rows = await self._run_rows("list_event_values", self.Q.list_event_values, run_id)
        return [event_value(r, self.d) for r in rows]

    async def read_stream(self, run_id: str, key: str, *, after_seq: int = 0,
                          after_sub: int = 0, limit: int = 500) -> list[StreamItem]:
        rows = await self._run_rows("read_stream", self.Q.read_stream, run_id, key,
                                    int(after_seq), int(after_seq), int(after_sub), int(limit))
        return [stream_item(r, self.d) for r in rows]

    async def list_stream_items(self, run_id: str) -> list[StreamItem]:
        rows = await self._run_rows("list_stream_items", self.Q.list_stream_items, run_id)
        return [stream_item(r, self.d) for r in rows]

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        rows = await self._run_rows("list_waits", self.Q.list_waits, run_id, point=True)
        return [wait_record(r, self.d) for r in rows]

    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        rows = await self._rows("due_waits", self.Q.due_waits,
                                (*self._scope, self.d.ts(now), int(limit)))
        return [wait_record(r, self.d) for r in rows]

    async def next_deadline(self) -> datetime | None:
        row = await self._one("next_deadline", self.Q.next_deadline, self._scope * 2)
        return self.d.ts_out(row[0]) if row is not None else None

    async def due_run_deadlines(self, now: datetime, *, limit: int = 100) -> list[RunInfo]:
        rows = await self._rows("due_run_deadlines", self.Q.due_run_deadlines,
                                (*self._scope, self.d.ts(now), int(limit)))
        return [run_info(r, self.d) for r in rows]

    async def child_waits(self, *, after: str | None, limit: int = 1000) -> list[ChildWait]:
        start = self.d.id_or_none(after) if after is not None else None
        rows = await self._rows("child_waits", self.Q.child_waits,
                                (*self._scope, start or self.d.lowest_id, int(limit),
                                 *self._scope * 3))
        return [ChildWait(run_id=str(r[0]), child_run_id=str(r[1]),
                          ended_run_id=None if r[2] is None else str(r[2])) for r in rows]

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        rid = self.d.id_or_none(run_id)
        if rid is None:
            return None
        row = await self._one("find_signal", self.Q.find_signal, (rid, event, *self._scope),
                              run_id=run_id, point=True)
        return signal_record(row, self.d) if row is not None else None

    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        row = await self._one("session_get", self.Q.session_get,
                              (*self._scope, session_id, key), point=True)
        if row is None:
            return None
        if now is not None and row[1] is not None:
            expires = self.d.ts_out(row[1])
            if expires is not None and expires <= now:
                return None
        return self.d.json_out(row[0])

    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        did = self.d.id_or_none(definition_id)
        if did is None:
            return None
        row = await self._one("get_definition", self.Q.get_definition, (did, *self._scope),
                              point=True)
        return definition_record(row, self.d) if row is not None else None

    # -- read-modify-writes ------------------------------------------------------

    async def _ensure_definition(self, c: EnsureDefinition) -> str:
        scope = (*self._scope, c.name, c.version)

        def ensure() -> Script[str | None]:
            for _ in range(3):
                row = yield One(self.Q.insert_definition + " RETURNING id", (
                    str(uuid.uuid4()), *scope, c.code_hash, self.d.ts(c.now)))
                if row is not None:
                    return str(row[0])
                # A separate statement: its snapshot sees a row that a concurrent
                # ensure_definition committed while our insert waited on it.
                row = yield One(self.Q.definition_id, scope)
                if row is not None:
                    return str(row[0])
            return None

        found: str | None = await self._run_write(c.method, ensure, atomic=False)
        if found is None:
            raise StorageError(f"could not record workflow definition {c.name!r} v{c.version}")
        return found

    async def _get_secret(self, c: GetSecret) -> str | None:
        key = (*self._scope, c.key_id)

        def get() -> Script[str | None]:
            row = yield One(self.Q.secret, key)
            if row is None and c.create:
                row = yield One(self.Q.insert_secret + " RETURNING secret",
                                (*key, secrets.token_hex(32), self.d.ts(c.now)))
                if row is None:  # another process created it first: theirs wins
                    row = yield One(self.Q.secret, key)
            return None if row is None else str(row[0])

        secret: str | None = await self._run_write(c.method, get, atomic=False)
        return secret

    # -- worker jobs -------------------------------------------------------------

    async def _claim_jobs(self, c: ClaimJobs) -> list[JobRecord]:
        now = self.d.ts(c.now)
        sql, args = self.Q.claim_jobs, (c.worker_id, self.d.ts(c.lease_until), now,
                                        *self._scope, c.pool, now, c.limit)
        rows: list[Any] = await self._run_write(c.method, lambda: _single(Rows(sql, args)),
                                            atomic=False)
        return claimed_jobs(rows, self.d)

    async def _heartbeat_job(self, c: HeartbeatJob) -> bool:
        jid = self.d.id_or_none(c.job_id)
        if jid is None:
            return False
        args = (self.d.ts(c.lease_until), self.d.ts(c.now), jid, *self._scope, c.worker_id)
        count: int = await self._run_write(
            c.method, lambda: _single(Count(self.Q.heartbeat_job, args)), atomic=False)
        return count == 1

    async def get_job(self, job_id: str) -> JobRecord | None:
        jid = self.d.id_or_none(job_id)
        if jid is None:
            return None
        row = await self._one("get_job", self.Q.get_job, (jid, *self._scope), point=True)
        return job_record(row, self.d) if row is not None else None

    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        rid = None
        if run_id is not None:
            rid = self.d.id_or_none(run_id)
            if rid is None:
                return []
        sql = self.Q.list_jobs(rid is not None, status is not None)
        rows = await self._rows("list_jobs", sql, (
            *self._scope, *(v for v in (rid, status) if v is not None), int(limit)))
        return [job_record(r, self.d) for r in rows]

    # -- the mirror outbox -------------------------------------------------------

    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        rows = await self._rows("pending_outbox", self.Q.pending_outbox,
                                (*self._scope, int(limit)))
        return [outbox_row(r, self.d) for r in rows]

    async def _count(self, action: str, sql: str, args: tuple[Any, ...]) -> int:
        """Run one changing statement; the rows it changed."""
        count: int = await self._run_write(action, lambda: _single(Count(sql, args)), atomic=False)
        return count

    async def _mark_outbox_applied(self, c: MarkOutboxApplied) -> int:
        if not c.ids:
            return 0
        return await self._count(c.method, self.Q.mark_outbox_applied(len(c.ids)),
                                 (self.d.ts(c.now), *self.d.many(c.ids), *self._scope))

    async def _prune_outbox(self, c: PruneOutbox) -> int:
        return await self._count(c.method, self.Q.prune_outbox,
                                 (*self._scope, self.d.ts(c.applied_before)))

    async def _expire_session_vars(self, c: ExpireSessionVars) -> int:
        return await self._count(c.method, self.Q.expire_session_vars,
                                 (*self._scope, self.d.ts(c.now)))

    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        cutoffs = [self.d.ts(now - timedelta(seconds=e)) for e in edges]
        row = await self._one("outbox_lag", self.Q.outbox_lag(len(cutoffs)),
                              (*cutoffs, *self._scope))
        return OutboxLag(pending=int(row[0]), oldest_created_at=self.d.ts_out(row[1]),
                         older_than=tuple(int(c or 0) for c in row[2:]))

    # -- retention -----------------------------------------------------------------

    async def _prune_runs(self, c: PruneRuns) -> PrunedBatch:
        ws, env = self._scope
        select = prune_select_sql(self.d, len(c.statuses), c.workflow is not None,
                                  None if c.run_ids is None else len(c.run_ids),
                                  c.cursor is not None, not c.dry_run)
        args = prune_select_args(self.d, c, ws, env)
        if c.dry_run:
            return _pruned(self.d, await self._rows(c.method, select, args), {})
        after = c.after

        def prune() -> Script[tuple[list[Any], dict[str, int]]]:
            # One short transaction per batch: the selected run rows stay locked
            # until commit (PostgreSQL: FOR UPDATE, re-checked against concurrent
            # updates; SQLite: its one writer makes the select and the deletes
            # one atomic step against every other writer).
            rows = yield Rows(select, args)
            counts: dict[str, int] = {}
            if rows:
                ids = [r[0] for r in rows]
                for table, sql in prune_delete_sql(self.d, len(ids)):
                    extra: tuple[Any, ...] = ()
                    if table == "workflow_session_vars":
                        extra = (self.d.ts(c.now),)
                    elif table == "workflow_runs":
                        extra = (ws, env)
                    counts[table] = yield Count(sql, (*self.d.many(ids), *extra))
                if after is not None:
                    yield After(list(after([str(i) for i in ids])))
            return rows, counts

        rows, counts = await self._run_write(c.method, prune)
        return _pruned(self.d, rows, counts)

    # -- fair pools (#30) ----------------------------------------------------------

    def _fair_round(self, limits: PoolLimits, sql: PoolSql, args: tuple[Any, ...], pool: str,
                    *, room: int | None, limit: int, key_active: Mapping[str, int],
                    key_recent: Mapping[str, int]) -> Script[list[str]]:
        """The ids a fair claim takes (:func:`~starflow.adapters._flow.fair_pick`
        over each key's first runs, merged with runs queued for any pool), its
        passes and virtual time written in the same transaction: a script a
        dialect runs inside its claim's transaction, under its pool lock."""
        scope = (*self._scope, pool)
        others = [Queued(str(r[0]), r[1], r[2])
                  for r in (yield Rows(sql.any_pool, (*args, limit)))]
        fair: list[Queued] = []
        if limit > 0 and (room is None or room > 0):
            state = yield Rows(self.PC.fair_state, scope)
            vtime = float(state[0][0]) if state else 0.0
            passes = {r[1]: float(r[2]) for r in state if r[1] is not None}
            heads = [KeyHead(NO_KEY if r[0] is None else r[0], r[1], r[2])
                     for r in (yield Rows(sql.heads, args))]
            keys = fair_keys(heads, limits, vtime=vtime, passes=passes, key_active=key_active,
                             key_recent=key_recent, limit=limit)
            queued: dict[str, list[Queued]] = {}
            named = [k for k in keys if k != NO_KEY]
            if named and sql.keys_runs:  # PostgreSQL: every key's first runs at once
                for r in (yield Rows(sql.keys_runs, (*args, named, [limit] * len(named)))):
                    queued.setdefault(r[0], []).append(Queued(str(r[1]), r[2], r[3]))
            else:
                for key in named:
                    queued[key] = [Queued(str(r[0]), r[1], r[2])
                                   for r in (yield Rows(sql.key_runs, (*args, key, limit)))]
            if NO_KEY in keys:
                queued[NO_KEY] = [Queued(str(r[0]), r[1], r[2])
                                  for r in (yield Rows(sql.null_runs, (*args, limit)))]
            pick = fair_pick(queued, keys, limits, vtime=vtime, passes=passes,
                             key_active=key_active, key_recent=key_recent, budget=room,
                             limit=limit)
            fair = pick.runs
            if fair:
                yield Each(self.PC.set_pass, [(*scope, k, p) for k, p in pick.passes.items()])
                yield Count(self.PC.set_vtime, (*scope, pick.vtime))
                yield Count(self.PC.trim, (*scope, pick.vtime))
        return merge_claims(fair, others, limit)

    # -- schedules and flow control (#18) ----------------------------------------

    async def _upsert_schedule(self, c: UpsertSchedule) -> ScheduleRecord:
        now = self.d.ts(c.now)
        args = (*self._scope, *schedule_insert_args(self.d, c.schedule), now, now)
        row = await self._run_write(c.method, lambda: _single(One(self.Q.upsert_schedule, args)),
                                atomic=False)
        return schedule_record(row, self.d)

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        row = await self._one("get_schedule", self.Q.get_schedule, (*self._scope, schedule_id),
                              point=True)
        return None if row is None else schedule_record(row, self.d)

    async def list_schedules(self) -> list[ScheduleRecord]:
        rows = await self._rows("list_schedules", self.Q.list_schedules, self._scope)
        return [schedule_record(r, self.d) for r in rows]

    async def _delete_schedule(self, c: DeleteSchedule) -> bool:
        return await self._count(c.method, self.Q.delete_schedule,
                                 (*self._scope, c.schedule_id)) > 0

    async def _update_schedule(self, c: UpdateSchedule) -> bool:
        cols = tuple(sorted(c.values))
        args = (*(schedule_value(self.d, col, c.values[col]) for col in cols),
                self.d.ts(c.now), *self._scope, c.schedule_id, c.revision)
        return await self._count(c.method, self.Q.update_schedule(cols), args) > 0

    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        # A point read: usually none or a few rows, by index.
        rows = await self._rows("due_schedules", self.Q.due_schedules,
                                (*self._scope, self.d.ts(now), int(limit)), point=True)
        return [schedule_record(r, self.d) for r in rows]

    async def next_schedule_due(self) -> datetime | None:
        row = await self._one("next_schedule_due", self.Q.next_schedule_due, self._scope,
                              point=True)
        return None if row is None else self.d.ts_out(row[0])

    async def _set_pool_limits(self, c: SetPoolLimits) -> None:
        lim = c.limits
        scope = (*self._scope, lim.pool)

        def store() -> Script[None]:
            # The upsert leaves ``paused`` as it is; a row left with neither a
            # limit nor a pause is dropped.
            yield Count(self.Q.set_pool_limits,
                        (*scope, *limit_args(lim, self.d), self.d.ts(c.now)))
            yield Count(self.Q.delete_pool_limits, scope)
            if not lim.fair:  # a fair pool starts its round robin afresh
                yield Count(self.PC.clear, scope)

        await self._run_write(c.method, store)

    async def _set_pool_paused(self, c: SetPoolPaused) -> None:
        scope = (*self._scope, c.pool)

        def store() -> Script[None]:
            yield Count(self.Q.set_pool_paused, (*scope, self.d.flag(c.paused),
                                                 self.d.ts(c.now)))
            yield Count(self.Q.delete_pool_limits, scope)

        await self._run_write(c.method, store)

    async def get_pool_limits(self, pool: str) -> PoolLimits | None:
        row = await self._one("get_pool_limits", self.Q.get_pool_limits, (*self._scope, pool),
                              point=True)
        return None if row is None else pool_limits(row, self.d)

    async def pool_usage(self, now: datetime) -> list[PoolUsage]:
        scope = self._scope

        def usage() -> Script[list[PoolUsage]]:
            limits = {r[0]: pool_limits(r, self.d)
                      for r in (yield Rows(self.Q.list_pool_limits, scope))}
            counts = {r[0]: (int(r[1] or 0), int(r[2] or 0))
                      for r in (yield Rows(self.Q.pool_counts, scope))}
            out = []
            for pool in sorted(set(limits) | set(counts)):
                lim = limits.get(pool)
                window = 0
                if lim is not None and lim.rate_period is not None:
                    row = yield One(self.Q.pool_window,
                                    (*scope, pool, self.d.ts(now - lim.rate_period)))
                    window = int(row[0])
                kept = 0
                if lim is not None and lim.keep_slot:
                    kept = int((yield One(self.PC.pool_kept, (*scope, pool)))[0])
                queued, active = counts.get(pool, (0, 0))
                out.append(PoolUsage(pool=pool, limits=lim, queued=queued, active=active,
                                     claimed_in_window=window, kept=kept))
            return out

        return await self._run_read("pool_usage", usage)

    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        ws, env = self._scope
        rows = await self._rows("queue_stats", self.Q.queue_stats,
                                (ws, env, self.d.ts(now), ws, env), point=True)
        return queue_stats_of(rows, self.d)

    async def find_active_dedup(self, pool: str | None, dedup_key: str) -> str | None:
        row = await self._one("find_active_dedup", self.Q.find_active_dedup,
                              (*self._scope, pool or "", dedup_key), point=True)
        return None if row is None else str(row[0])

    async def _rearm_debounced(self, c: RearmDebounced) -> str | None:
        serde.encode(c.input, what="input_json")  # SerializationError before any write
        args = (self.d.json(c.input, what="input_json"), self.d.ts(c.not_before),
                *self._scope, c.pool or "", c.template_id, c.debounce_key)
        after = c.after

        def rearm() -> Script[str | None]:
            row = yield One(self.Q.rearm_debounced, args)
            if row is None:
                return None
            run_id = str(row[0])
            if after is not None:
                yield After(list(after(run_id)))
            return run_id

        result: str | None = await self._run_write(c.method, rearm, atomic=after is not None)
        return result
