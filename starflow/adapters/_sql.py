"""The SQL both SQL adapters share, written once; the dialect is the only difference.

:mod:`starflow.adapters.sqlite` and :mod:`starflow.adapters.postgres` keep
their own write engines (SQLite group commit; PostgreSQL one fused statement
per unit) and connection handling. What they mean by each write and read is
here: the column lists, the row mappers (row → :class:`RunInfo` …), the
lease/status guard, the claim and sweep assignments, the op-to-SQL mapping of
:class:`Unit` ops, and the data-access statements.

A :class:`~starflow.adapters.dialect.Dialect` says how to write what differs
(placeholders, tenant checks, "one of these values", codecs). Placeholders
are numbered in the order they occur in the text, so one argument tuple fits
both dialects.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..records import (
    HELD,
    DefinitionRecord,
    EventValue,
    JobRecord,
    OutboxRow,
    PoolLimits,
    QueuedRun,
    RunEvent,
    RunInfo,
    ScheduleRecord,
    SignalRecord,
    StreamItem,
    SweepResult,
    WaitRecord,
)
from .dialect import POSTGRES, SQLITE, Dialect, require_uuid, uuid_or_none
from .pruning import (
    ENDED_STATUSES,
    PRUNED_TABLES,
    prune_delete_sql,
    prune_select_args,
    prune_select_sql,
)
from .sweep import ABANDONED, NOW, OUTCOME, REASON, REQUEUED
from .units import (
    UPDATABLE_RUN_COLUMNS,
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
    InsertStreamItem,
    InsertWait,
    Mark,
    Op,
    UpdateRun,
    UpsertAttribute,
    UpsertEventValue,
    UpsertSessionVar,
)

__all__ = [
    "ACTIVE_RUN",
    "CLAIM_ORDER",
    "DEFINITION_COLUMNS",
    "ENDED_STATUSES",
    "EVENT_COLUMNS",
    "EVENT_VALUE_COLUMNS",
    "FLOW_RUN_COLUMNS",
    "INSERTABLE_RUN_COLUMNS",
    "JOB_COLUMNS",
    "LIMIT_COLUMNS",
    "LIMIT_WIDTH",
    "OUTBOX_COLUMNS",
    "POSTGRES",
    "PRUNED_TABLES",
    "RUN_COLUMNS",
    "SCHEDULE_COLUMNS",
    "SCHEDULE_INSERT",
    "SCHEDULE_SELECT",
    "SCHEDULE_UPDATABLE",
    "SIGNAL_COLUMNS",
    "SQLITE",
    "STREAM_ITEM_COLUMNS",
    "WAIT_COLUMNS",
    "Dialect",
    "announces_run_change",
    "announces_work",
    "claim_ids_sql",
    "claim_set",
    "claimable",
    "claimed_jobs",
    "claimed_runs",
    "definition_record",
    "event_args",
    "event_sql",
    "event_value",
    "guard_args",
    "guard_shape",
    "guard_sql",
    "held_sql",
    "job_record",
    "limit_args",
    "merge_run_writes",
    "op_sql",
    "outbox_row",
    "period_ms",
    "pool_limits",
    "prune_delete_sql",
    "prune_select_args",
    "prune_select_sql",
    "queued_run",
    "require_uuid",
    "run_conditions",
    "run_event",
    "run_info",
    "schedule_insert_args",
    "schedule_record",
    "schedule_value",
    "signal_queued_sql",
    "signal_record",
    "stream_item",
    "sweep_set",
    "swept",
    "uuid_or_none",
    "wait_exists_sql",
    "wait_record",
]

# ---------------------------------------------------------------------------
# Columns
# ---------------------------------------------------------------------------

RUN_COLUMNS = (
    "id, template_id, workspace_id, env, status, started_at, completed_at, duration_ms, "
    "checkpoint_json, error, claim_state, runner_pool, leased_by, lease_until, last_heartbeat, "
    "claim_attempts, definition_id, input_json, result_json, start_mode, max_claim_attempts, "
    "workflow_version, failure_json, parent_run_id, detached, deadline_at, continued_as, "
    "phase, not_before, run_key"
)
JOB_COLUMNS = (
    "id, run_id, node_id, pool, step_name, idempotency_key, input_json, status, attempts, "
    "max_attempts, leased_by, lease_until, last_heartbeat, result_json, error_json, "
    "created_at, completed_at"
)
EVENT_COLUMNS = "id, run_id, event_type, node_id, payload_json, created_at"
WAIT_COLUMNS = "run_id, node_id, event, deadline, created_at"
SIGNAL_COLUMNS = "id, run_id, event, payload_json, created_at"
DEFINITION_COLUMNS = "id, name, version, code_hash, created_at"
OUTBOX_COLUMNS = "id, run_id, kind, payload, created_at"
EVENT_VALUE_COLUMNS = "run_id, key, value_json, node_id, updated_at"
STREAM_ITEM_COLUMNS = "run_id, key, seq, value_json, closed, node_id, created_at, sub"

#: Flow-control columns (#18) an ``InsertRun`` may also name.
FLOW_RUN_COLUMNS = frozenset({"priority", "concurrency_key", "dedup_key", "debounce_key",
                              "not_before"})
#: Columns an ``InsertRun`` may name (besides id/workspace_id/env).
INSERTABLE_RUN_COLUMNS = UPDATABLE_RUN_COLUMNS | FLOW_RUN_COLUMNS | {
    "template_id", "started_at", "input_json", "start_mode", "max_claim_attempts",
    "workflow_version", "parent_run_id", "detached", "deadline_at", "run_key",
}
#: Columns of ``starflow_schedules`` in the order they are selected.
SCHEDULE_COLUMNS = (
    "id", "workflow", "workflow_version", "definition_id", "input_json", "cron", "timezone",
    "overlap", "catchup_seconds", "pool", "paused", "next_fire_at", "due_at", "pending_tick",
    "buffered_tick", "last_tick", "last_run_id", "started", "skipped_missed",
    "skipped_overlap", "revision", "created_at", "updated_at",
)
SCHEDULE_SELECT = ", ".join(SCHEDULE_COLUMNS)
#: Columns a schedule insert writes (besides workspace_id/env and the timestamps).
SCHEDULE_INSERT = (
    "id", "workflow", "workflow_version", "definition_id", "input_json", "cron", "timezone",
    "overlap", "catchup_seconds", "pool", "paused", "next_fire_at", "due_at",
)
#: Columns a loop's compare-and-set may write (``revision`` and ``updated_at`` always move).
SCHEDULE_UPDATABLE = frozenset({
    "paused", "next_fire_at", "due_at", "pending_tick", "buffered_tick", "last_tick",
    "last_run_id", "started", "skipped_missed", "skipped_overlap",
})
#: Columns of ``starflow_pool_limits`` in the order they are selected.
LIMIT_COLUMNS = ("pool, concurrency, rate_limit, rate_period_ms, key_concurrency, updated_at, "
                 "paused, key_rate_limit, key_rate_period_ms, fair, key_weights, keep_slot")
#: How many columns :data:`LIMIT_COLUMNS` names.
LIMIT_WIDTH = 12
#: A run of a pool that counts against its concurrency: claimed or executing.
ACTIVE_RUN = "status = 'running' AND claim_state IN ('claimed', 'running')"
#: The order a claim takes queued runs in: highest priority first, FIFO within one.
CLAIM_ORDER = "priority DESC, started_at"
_IDENT = re.compile(r"^[a-z_][a-z0-9_]*$")


@functools.lru_cache(maxsize=256)
def _columns(names: tuple[str, ...], allowed: frozenset[str]) -> tuple[str, ...]:
    bad = [c for c in names if c not in allowed or not _IDENT.match(c)]
    if bad:
        raise ValueError(f"not writable workflow_runs columns: {sorted(bad)}")
    return names


# ---------------------------------------------------------------------------
# Row mappers
# ---------------------------------------------------------------------------


def run_info(row: Any, d: Dialect) -> RunInfo:
    """A ``RUN_COLUMNS`` row."""
    ts, js = d.ts_out, d.json_out
    return RunInfo(
        id=row[0],
        template_id=row[1],
        workspace_id=row[2],
        env=row[3],
        status=row[4],
        started_at=ts(row[5]),
        completed_at=ts(row[6]),
        duration_ms=row[7],
        checkpoint_json=js(row[8]),
        error=row[9],
        claim_state=row[10],
        runner_pool=row[11],
        leased_by=row[12],
        lease_until=ts(row[13]),
        last_heartbeat=ts(row[14]),
        claim_attempts=row[15],
        definition_id=row[16],
        input_json=js(row[17]),
        result_json=js(row[18]),
        start_mode=row[19],
        max_claim_attempts=row[20],
        workflow_version=row[21],
        failure_json=js(row[22]),
        parent_run_id=row[23],
        detached=bool(row[24]),
        deadline_at=ts(row[25]),
        continued_as=None if row[26] is None else str(row[26]),
        phase=js(row[27]),
        not_before=ts(row[28]),
        run_key=row[29],
    )


def queued_run(row: Any, d: Dialect) -> QueuedRun:
    """A ``Queries.queued_runs`` row: ``RUN_COLUMNS``, then the newest event's time."""
    return QueuedRun(run=run_info(row, d), last_event_at=d.ts_out(row[_RUN_WIDTH]))


#: How many columns ``RUN_COLUMNS`` selects.
_RUN_WIDTH = len(RUN_COLUMNS.split(", "))


def claimed_runs(rows: Sequence[Any], d: Dialect) -> list[RunInfo]:
    """Runs a claim returned, oldest first (``UPDATE … RETURNING`` has no order)."""
    runs = [run_info(r, d) for r in rows]
    runs.sort(key=lambda r: (r.started_at is not None, r.started_at, r.id))
    return runs


def job_record(row: Any, d: Dialect) -> JobRecord:
    """A ``JOB_COLUMNS`` row."""
    ts, js = d.ts_out, d.json_out
    return JobRecord(
        id=row[0], run_id=row[1], node_id=row[2], pool=row[3], step_name=row[4],
        idempotency_key=row[5], input=js(row[6]), status=row[7], attempts=row[8],
        max_attempts=row[9], leased_by=row[10], lease_until=ts(row[11]),
        last_heartbeat=ts(row[12]), result=js(row[13]), error=js(row[14]),
        created_at=d.at(row[15]), completed_at=ts(row[16]),
    )


def claimed_jobs(rows: Sequence[Any], d: Dialect) -> list[JobRecord]:
    """Jobs a claim returned, oldest first."""
    jobs = [job_record(r, d) for r in rows]
    jobs.sort(key=lambda j: (j.created_at, j.id))
    return jobs


def run_event(row: Any, d: Dialect) -> RunEvent:
    """An ``EVENT_COLUMNS`` row."""
    return RunEvent(id=row[0], run_id=row[1], event_type=row[2], node_id=row[3],
                    payload_json=d.json_out(row[4]), created_at=d.at(row[5]))


def wait_record(row: Any, d: Dialect) -> WaitRecord:
    """A ``WAIT_COLUMNS`` row."""
    return WaitRecord(run_id=row[0], node_id=row[1], event=row[2], deadline=d.ts_out(row[3]),
                      created_at=d.at(row[4]))


def signal_record(row: Any, d: Dialect) -> SignalRecord:
    """A ``SIGNAL_COLUMNS`` row."""
    return SignalRecord(id=row[0], run_id=row[1], event=row[2], payload=d.json_out(row[3]),
                        created_at=d.at(row[4]))


def event_value(row: Any, d: Dialect) -> EventValue:
    """An ``EVENT_VALUE_COLUMNS`` row."""
    return EventValue(run_id=str(row[0]), key=row[1], value=d.json_out(row[2]),
                      node_id=row[3], updated_at=d.at(row[4]))


def stream_item(row: Any, d: Dialect) -> StreamItem:
    """A ``STREAM_ITEM_COLUMNS`` row."""
    return StreamItem(run_id=str(row[0]), key=row[1], seq=int(row[2]),
                      value=d.json_out(row[3]), closed=bool(row[4]), node_id=row[5],
                      created_at=d.at(row[6]), sub=int(row[7]))


def definition_record(row: Any, d: Dialect) -> DefinitionRecord:
    """A ``DEFINITION_COLUMNS`` row."""
    return DefinitionRecord(id=row[0], name=row[1], version=row[2], code_hash=row[3],
                            created_at=d.at(row[4]))


def outbox_row(row: Any, d: Dialect) -> OutboxRow:
    """An ``OUTBOX_COLUMNS`` row."""
    return OutboxRow(id=row[0], run_id=row[1], kind=row[2], payload=d.json_out(row[3]),
                     created_at=d.at(row[4]))


def schedule_record(row: Any, d: Dialect) -> ScheduleRecord:
    """A :data:`SCHEDULE_COLUMNS` row."""
    ts = d.ts_out
    r = dict(zip(SCHEDULE_COLUMNS, tuple(row), strict=True))
    return ScheduleRecord(
        id=r["id"], workflow=r["workflow"], workflow_version=int(r["workflow_version"]),
        definition_id=None if r["definition_id"] is None else str(r["definition_id"]),
        input=d.json_out(r["input_json"]), cron=r["cron"], timezone=r["timezone"],
        overlap=r["overlap"], catchup=timedelta(seconds=float(r["catchup_seconds"])),
        pool=r["pool"], paused=bool(r["paused"]),
        next_fire_at=ts(r["next_fire_at"]), due_at=ts(r["due_at"]),
        pending_tick=ts(r["pending_tick"]), buffered_tick=ts(r["buffered_tick"]),
        last_tick=ts(r["last_tick"]),
        last_run_id=None if r["last_run_id"] is None else str(r["last_run_id"]),
        started=int(r["started"]), skipped_missed=int(r["skipped_missed"]),
        skipped_overlap=int(r["skipped_overlap"]), revision=int(r["revision"]),
        created_at=ts(r["created_at"]), updated_at=ts(r["updated_at"]),
    )


def schedule_value(d: Dialect, column: str, value: Any) -> Any:
    """A ``starflow_schedules`` column's value for the database."""
    if column == "input_json":
        return d.json(value, null=True, what="schedule input")
    if value is None:
        return None
    if column in ("definition_id", "last_run_id"):
        return d.key(value, column)
    if column == "paused":
        return d.flag(value)
    if isinstance(value, datetime):
        return d.ts(value)
    return value


def schedule_insert_args(d: Dialect, schedule: ScheduleRecord) -> tuple[Any, ...]:
    """The values of a schedule insert, in ``SCHEDULE_INSERT`` order."""
    values = {
        "id": schedule.id, "workflow": schedule.workflow,
        "workflow_version": schedule.workflow_version, "definition_id": schedule.definition_id,
        "input_json": schedule.input, "cron": schedule.cron, "timezone": schedule.timezone,
        "overlap": schedule.overlap, "catchup_seconds": schedule.catchup.total_seconds(),
        "pool": schedule.pool, "paused": schedule.paused,
        "next_fire_at": schedule.next_fire_at, "due_at": schedule.due_at,
    }
    return tuple(schedule_value(d, c, values[c]) for c in SCHEDULE_INSERT)


def pool_limits(row: Any, d: Dialect) -> PoolLimits:
    """A :data:`LIMIT_COLUMNS` row."""
    weights = d.json_out(row[10]) if row[10] is not None else None
    return PoolLimits(pool=row[0], concurrency=row[1], rate_limit=row[2],
                      rate_period=None if row[3] is None else timedelta(milliseconds=row[3]),
                      key_concurrency=row[4], updated_at=d.ts_out(row[5]),
                      paused=bool(row[6]), key_rate_limit=row[7],
                      key_rate_period=None if row[8] is None else timedelta(milliseconds=row[8]),
                      fair=bool(row[9]), key_weights=weights, keep_slot=bool(row[11]))


def period_ms(limits: PoolLimits) -> int | None:
    """The rate limit's window in milliseconds (as stored)."""
    if limits.rate_period is None:
        return None
    return round(limits.rate_period.total_seconds() * 1000)


def limit_args(limits: PoolLimits, d: Dialect) -> tuple[Any, ...]:
    """The values ``Queries.set_pool_limits`` stores after (ws, env, pool)."""
    key_ms = (None if limits.key_rate_period is None
              else round(limits.key_rate_period.total_seconds() * 1000))
    weights = d.json(limits.key_weights) if limits.key_weights else None
    return (limits.concurrency, limits.rate_limit, period_ms(limits), limits.key_concurrency,
            limits.key_rate_limit, key_ms, d.flag(limits.fair), weights,
            d.flag(limits.keep_slot))


def swept(rows: Sequence[Any]) -> list[SweepResult]:
    """``(id, leased_by, claim_state)`` rows of a sweep → its results."""
    return [SweepResult(run_id=r[0], leased_by=r[1],
                        action=REQUEUED if r[2] == "queued" else ABANDONED)
            for r in rows]


# ---------------------------------------------------------------------------
# The lease/status guard
# ---------------------------------------------------------------------------


@functools.cache
def run_conditions(d: Dialect, n: int, leased: bool, statuses: int | None) -> str:
    """The guard's condition on its run row, from placeholder ``n`` on.

    The row is the run (``id``) in scope; with ``leased``, leased by the next
    placeholder; unless ``statuses`` is None, in one of that many values
    (none: the condition fails). Arguments:
    ``(run_id, workspace_id, env, *guard_args(d, guard))``.
    """
    sql = f"id = {d.p(n)} AND {d.key_tenant(n + 1)}"
    n += 3
    if leased:
        sql += f" AND leased_by = {d.p(n)}"
        n += 1
    if statuses is not None:
        sql += f" AND {d.one_of('status', n, statuses)}"
    return sql


def guard_shape(guard: Guard | None) -> tuple[bool, int | None]:
    """``(leased, statuses)`` of :func:`run_conditions` for ``guard``."""
    if guard is None:
        return False, None
    statuses = guard.status_in
    return guard.leased_by is not None, None if statuses is None else len(statuses)


@functools.lru_cache(maxsize=1024)
def guarded_event(d: Dialect, guard: Guard) -> tuple[str, tuple[Any, ...]]:
    """The guarded event INSERT for ``guard`` and the guard's arguments, built once per
    guard (an execution writes every boundary under the same one)."""
    return event_sql(d, *guard_shape(guard)), guard_args(d, guard)


def guard_args(d: Dialect, guard: Guard | None) -> tuple[Any, ...]:
    """The arguments of the guard's optional conditions (lease holder, statuses)."""
    if guard is None:
        return ()
    args: tuple[Any, ...] = ()
    if guard.leased_by is not None:
        args = (guard.leased_by,)
    if guard.status_in is not None:
        args += d.many(guard.status_in)
    return args


@functools.cache
def guard_sql(d: Dialect, leased: bool, statuses: int | None, lock: str = "") -> str:
    """Select the guarded run row if the guard's lease/status condition holds."""
    return f"SELECT 1 FROM workflow_runs WHERE {run_conditions(d, 1, leased, statuses)}{lock}"


@functools.cache
def wait_exists_sql(d: Dialect) -> str:
    """Whether the run still has the wait a ``wait_node`` guard needs."""
    return ("SELECT EXISTS (SELECT 1 FROM workflow_waits "
            f"WHERE run_id = {d.p(1)} AND node_id = {d.p(2)})")


@functools.cache
def held_sql(d: Dialect) -> str:
    """Whether the run is paused by an operator (a ``not_held`` guard fails then)."""
    return (f"SELECT EXISTS (SELECT 1 FROM workflow_runs WHERE id = {d.p(1)} "
            f"AND claim_state = '{HELD}')")


@functools.cache
def signal_queued_sql(d: Dialect) -> str:
    """Whether a signal a ``no_signal`` guard forbids is queued for the run."""
    return ("SELECT EXISTS (SELECT 1 FROM workflow_signals WHERE "
            f"run_id = {d.p(1)} AND event = {d.p(2)} AND {d.key_tenant(3)})")


# ---------------------------------------------------------------------------
# Claims and sweeps
# ---------------------------------------------------------------------------


def claim_set(d: Dialect, n: int) -> str:
    """The assignments of a run claim: lease (placeholders ``n``..``n + 3``:
    holder, until, heartbeat, and the claim time ``claimed_at`` the rate limit
    counts, #18), status running, one more attempt."""
    return ("claim_state = 'claimed', status = 'running', "
            "claim_attempts = claim_attempts + 1, "
            f"leased_by = {d.p(n)}, lease_until = {d.p(n + 1)}, last_heartbeat = {d.p(n + 2)}, "
            f"claimed_at = {d.p(n + 3)}")


def claimable(d: Dialect, n: int) -> str:
    """A queued run may be claimed at placeholder ``n``'s time (a debounced run waits, #18)."""
    return f"(not_before IS NULL OR not_before <= {d.p(n, 'timestamptz')})"


@functools.lru_cache(maxsize=64)
def claim_ids_sql(d: Dialect, count: int) -> str:
    """Claim the picked queued runs (a limited claim): arguments
    ``(holder, until, now, now, *d.many(ids))``."""
    return (f"UPDATE workflow_runs SET {claim_set(d, 1)} WHERE "
            f"{d.one_of('id', 5, count, 'uuid')} AND claim_state = 'queued' "
            f"RETURNING {RUN_COLUMNS}")


def lost_attempts(alias: str) -> str:
    """The claim attempts a swept run has used, the lost execution included.

    A claimed run's claim counted when it was taken; an inline run (started by
    ``sf.run``) never claimed since it last made progress (``claim_attempts``
    0) counts one, so ``max_claim_attempts`` bounds inline runs too.
    """
    return (f"({alias}claim_attempts + CASE WHEN {alias}start_mode = 'inline' "
            f"AND {alias}claim_attempts = 0 THEN 1 ELSE 0 END)")


def sweep_set(alias: str, reason: str, now: str, *, requeue: bool = True) -> str:
    """The assignments of the lease sweep, generated from :data:`sweep.OUTCOME`.

    ``reason`` and ``now`` are the SQL of the sweep's reason and time;
    ``alias`` prefixes the row's own columns (``"r."`` or ``""``). A run is
    requeued while :func:`lost_attempts` is below its ``max_claim_attempts``,
    unless ``requeue`` is false (``StarflowConfig.lost_runs="fail"``: every
    lost run is abandoned, as the state model's sweep does).
    """
    requeued, abandoned = OUTCOME[REQUEUED], OUTCOME[ABANDONED]
    lost = lost_attempts(alias)
    below = (f"{lost} < {alias}max_claim_attempts" if requeue else "FALSE")

    def sql(column: str, value: Any) -> str:
        if value is REASON:
            return reason
        if value is NOW:
            return now
        return "NULL" if value is None else f"'{value}'"

    parts = []
    for column in dict.fromkeys([*requeued, *abandoned]):
        keep = f"{alias}{column}"
        then = sql(column, requeued[column]) if column in requeued else keep
        other = sql(column, abandoned[column]) if column in abandoned else keep
        parts.append(f"{column} = CASE WHEN {below} THEN {then} ELSE {other} END")
    parts.append(f"claim_attempts = {lost}")
    return ", ".join(parts)


# ---------------------------------------------------------------------------
# Unit ops → SQL
# ---------------------------------------------------------------------------


def announces_work(op: Op) -> bool:
    """Whether ``op`` makes work claimable (a queued run, a requeue, a job)."""
    if isinstance(op, UpdateRun):
        return op.values.get("claim_state") == "queued"
    if isinstance(op, InsertRun):
        return "queued" in (op.values.get("claim_state"), op.values.get("status"))
    return isinstance(op, InsertJob)


def announces_run_change(op: Op) -> str | None:
    """The run whose change ``op`` makes that callers may be waiting for (the run
    ending, the answer to an update recorded, an event or stream item written),
    or None."""
    if isinstance(op, UpdateRun):
        return op.run_id if op.values.get("status") in ENDED_STATUSES else None
    if (isinstance(op, InsertEvent) and op.event_type == "node_complete"
            and op.node_id is not None and op.node_id.startswith("reply:")):
        return op.run_id
    if isinstance(op, UpsertEventValue | InsertStreamItem):
        return op.run_id  # what get_event / read_stream wait for (#17)
    return None


@functools.cache
def event_sql(d: Dialect, leased: bool = False, statuses: int | None = None) -> str:
    """An event INSERT that writes only if its run is in scope (and, for a guard,
    leased and in a status): arguments ``event_args`` then :func:`guard_args`."""
    return ("INSERT INTO workflow_run_events (run_id, event_type, node_id, payload_json, "
            f"created_at) SELECT {d.p(1, 'uuid')}, {d.p(2, 'text')}, {d.p(3, 'text')}, "
            f"{d.p(4, 'jsonb')}, {d.p(5, 'timestamptz')} WHERE EXISTS (SELECT 1 FROM "
            f"workflow_runs WHERE {run_conditions(d, 6, leased, statuses)})")


def event_args(d: Dialect, op: InsertEvent, ws: str, env: str) -> tuple[Any, ...]:
    run_id = d.key(op.run_id, "run id")
    return (run_id, op.event_type, op.node_id, d.json(op.payload, null=True),
            d.ts(op.created_at), run_id, ws, env)


@functools.cache
def _static_sql(d: Dialect, kind: type[Op]) -> str:
    p, kt = d.p, d.key_tenant
    if kind is InsertWait:
        return ("INSERT INTO workflow_waits (run_id, node_id, workspace_id, env, event, "
                f"deadline, created_at) VALUES ({', '.join(p(i) for i in range(1, 8))}) "
                "ON CONFLICT (run_id, node_id) DO UPDATE SET workspace_id = "
                "excluded.workspace_id, env = excluded.env, event = excluded.event, "
                "deadline = excluded.deadline, created_at = excluded.created_at")
    if kind is DeleteWaits:
        return f"DELETE FROM workflow_waits WHERE run_id = {p(1)} AND {kt(2)}"
    if kind is InsertSignal:
        return ("INSERT INTO workflow_signals (run_id, workspace_id, env, event, payload_json, "
                f"created_at) VALUES ({', '.join(p(i) for i in range(1, 7))})")
    if kind is DeleteSignal:
        return f"DELETE FROM workflow_signals WHERE id = {p(1)} AND {kt(2)}"
    if kind is UpsertAttribute:
        return ("INSERT INTO workflow_run_attributes (run_id, workspace_id, env, key, value, "
                f"updated_at) VALUES ({', '.join(p(i) for i in range(1, 7))}) "
                "ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, "
                "updated_at = excluded.updated_at")
    if kind is UpsertEventValue:
        return ("INSERT INTO workflow_event_values (run_id, workspace_id, env, key, value_json, "
                f"node_id, updated_at) VALUES ({', '.join(p(i) for i in range(1, 8))}) "
                "ON CONFLICT (run_id, key) DO UPDATE SET value_json = excluded.value_json, "
                "node_id = excluded.node_id, updated_at = excluded.updated_at")
    if kind is InsertStreamItem:
        # A replayed write finds its item there: exactly once per (run, key, seq, sub).
        # A step's write (sub NULL) takes the next sub of its seq: the engine writes
        # one step item of a run at a time, under the run's lease.
        return ("INSERT INTO workflow_stream_items (run_id, workspace_id, env, key, seq, "
                f"value_json, closed, node_id, created_at, sub) VALUES "
                f"({', '.join(p(i) for i in range(1, 10))}, COALESCE(CAST({p(10)} AS INTEGER), "
                "(SELECT COALESCE(MAX(s.sub), 0) + 1 FROM workflow_stream_items s "
                f"WHERE s.run_id = {p(11)} AND s.key = {p(12)} AND s.seq = {p(13)}))) "
                "ON CONFLICT (run_id, key, seq, sub) DO NOTHING")
    if kind is UpsertSessionVar:
        return ("INSERT INTO workflow_session_vars (workspace_id, env, session_id, key, "
                f"value_json, run_id, keep_until, updated_at) VALUES "
                f"({', '.join(p(i) for i in range(1, 9))}) "
                "ON CONFLICT (workspace_id, env, session_id, key) DO UPDATE SET "
                "value_json = excluded.value_json, run_id = excluded.run_id, "
                "keep_until = excluded.keep_until, updated_at = excluded.updated_at")
    if kind is DeleteSessionVars:
        return (f"DELETE FROM workflow_session_vars WHERE {kt(1)} "
                f"AND run_id = {p(3)} AND keep_until IS NULL")
    if kind is InsertJob:
        # One job per (run, node): its id is derived from the idempotency key, so a
        # replayed dispatch finds its job and leaves it be. A dispatch that finds
        # the job finished is a retried run's (sf.retry): the node's outcome was
        # superseded, so the job is queued again, under the same key.
        return ("INSERT INTO worker_jobs (id, workspace_id, env, run_id, node_id, pool, "
                "step_name, idempotency_key, input_json, status, max_attempts, created_at) "
                f"VALUES ({', '.join(p(i) for i in range(1, 10))}, 'queued', {p(10)}, {p(11)}) "
                "ON CONFLICT (id) DO UPDATE SET status = 'queued', attempts = 0, "
                "input_json = excluded.input_json, max_attempts = excluded.max_attempts, "
                "leased_by = NULL, lease_until = NULL, last_heartbeat = NULL, "
                "result_json = NULL, error_json = NULL, completed_at = NULL, "
                "created_at = excluded.created_at "
                "WHERE worker_jobs.status IN ('complete', 'failed')")
    if kind is FinishJob:
        return (f"UPDATE worker_jobs SET status = {p(1)}, result_json = {p(2)}, "
                f"error_json = {p(3)}, completed_at = {p(4)}, leased_by = NULL, "
                f"lease_until = NULL WHERE id = {p(5)} AND {kt(6)} "
                "AND status IN ('queued', 'claimed')")
    if kind is FailRunJobs:
        return (f"UPDATE worker_jobs SET status = 'failed', error_json = {p(1)}, "
                f"completed_at = {p(2)}, leased_by = NULL, lease_until = NULL "
                f"WHERE run_id = {p(3)} AND {kt(4)} AND status IN ('queued', 'claimed')")
    if kind is InsertOutbox:
        return ("INSERT INTO mirror_outbox (run_id, kind, payload, created_at, workspace_id, "
                f"env) VALUES ({', '.join(p(i) for i in range(1, 7))})")
    raise TypeError(f"no SQL for {kind.__name__}")  # pragma: no cover


@functools.lru_cache(maxsize=512)
def _update_run_sql(d: Dialect, columns: tuple[str, ...]) -> str:
    sets = ", ".join(f"{c} = {d.run_p(i, c)}" for i, c in enumerate(columns, start=1))
    n = len(columns) + 1
    return f"UPDATE workflow_runs SET {sets} WHERE id = {d.p(n)} AND {d.key_tenant(n + 1)}"


@functools.lru_cache(maxsize=512)
def _insert_run_sql(d: Dialect, columns: tuple[str, ...]) -> str:
    names = ", ".join(("id", "workspace_id", "env", *columns))
    params = ", ".join((d.p(1), d.p(2), d.p(3), *(d.run_p(i, c) for i, c in
                                                    enumerate(columns, start=4))))
    return f"INSERT INTO workflow_runs ({names}) VALUES ({params})"


def merge_run_writes(ops: Sequence[Op]) -> list[Op]:
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


@functools.lru_cache(maxsize=512)
def _run_write_plan(d: Dialect, insert: bool, names: tuple[str, ...]
                    ) -> tuple[str, tuple[str, ...]]:
    """The statement of a run row write of these columns (checked), and the columns."""
    if insert:
        cols = _columns(names, INSERTABLE_RUN_COLUMNS)
        return _insert_run_sql(d, cols), cols
    cols = _columns(names, UPDATABLE_RUN_COLUMNS)
    return _update_run_sql(d, cols), cols


def op_sql(d: Dialect, op: Op, ws: str, env: str) -> tuple[str, tuple[Any, ...]] | None:
    """The statement and arguments writing ``op`` in scope (None for a :class:`Mark`).

    Raises ConfigError (before anything is written) for a malformed id where
    the dialect types ids, and SerializationError for an unencodable value.
    """
    kind = type(op)
    # The ops of every run's boundaries first, by exact type; one cached plan per
    # shape of run row write (its statement and checked columns).
    if kind is InsertEvent:
        return event_sql(d), event_args(d, op, ws, env)  # type: ignore[arg-type]
    if kind is UpdateRun:
        values = op.values  # type: ignore[attr-defined]
        sql, cols = _run_write_plan(d, False, tuple(values))
        rv = d.run_value
        return sql, (*[rv(c, values[c]) for c in cols],
                     d.key(op.run_id, "run id"), ws, env)  # type: ignore[attr-defined]
    if kind is InsertRun:
        values = op.values  # type: ignore[attr-defined]
        sql, cols = _run_write_plan(d, True, tuple(values))
        rv = d.run_value
        return sql, (d.key(op.run_id, "run id"), ws, env,  # type: ignore[attr-defined]
                     *[rv(c, values[c]) for c in cols])
    if isinstance(op, InsertEvent):
        return event_sql(d), event_args(d, op, ws, env)
    if isinstance(op, UpdateRun):
        cols = _columns(tuple(op.values), UPDATABLE_RUN_COLUMNS)
        return _update_run_sql(d, cols), (
            *(d.run_value(c, op.values[c]) for c in cols), d.key(op.run_id, "run id"), ws, env)
    if isinstance(op, InsertRun):
        cols = _columns(tuple(op.values), INSERTABLE_RUN_COLUMNS)
        return _insert_run_sql(d, cols), (
            d.key(op.run_id, "run id"), ws, env, *(d.run_value(c, op.values[c]) for c in cols))
    if isinstance(op, Mark):
        return None
    sql = _static_sql(d, type(op))
    if isinstance(op, InsertWait):
        return sql, (d.key(op.run_id, "run id"), op.node_id, ws, env, op.event,
                     d.ts(op.deadline), d.ts(op.created_at))
    if isinstance(op, DeleteWaits):
        return sql, (d.key(op.run_id, "run id"), ws, env)
    if isinstance(op, InsertSignal):
        return sql, (d.key(op.run_id, "run id"), ws, env, op.event, d.json(op.payload),
                     d.ts(op.created_at))
    if isinstance(op, DeleteSignal):
        return sql, (op.signal_id, ws, env)
    if isinstance(op, UpsertAttribute):
        return sql, (d.key(op.run_id, "run id"), ws, env, op.key, op.value,
                     d.ts(op.updated_at))
    if isinstance(op, UpsertEventValue):
        return sql, (d.key(op.run_id, "run id"), ws, env, op.key,
                     d.json(op.value, what=f"event {op.key!r}"), op.node_id,
                     d.ts(op.updated_at))
    if isinstance(op, InsertStreamItem):
        return sql, (d.key(op.run_id, "run id"), ws, env, op.key, op.seq,
                     d.json(op.value, null=op.closed, what=f"stream {op.key!r} item"),
                     d.flag(op.closed), op.node_id, d.ts(op.created_at), op.sub,
                     d.key(op.run_id, "run id"), op.key, op.seq)
    if isinstance(op, UpsertSessionVar):
        return sql, (ws, env, op.session_id, op.key, d.json(op.value),
                     d.key(op.run_id, "run id"), d.ts(op.keep_until), d.ts(op.updated_at))
    if isinstance(op, DeleteSessionVars):
        return sql, (ws, env, d.key(op.run_id, "run id"))
    if isinstance(op, InsertJob):
        job = op.job
        return sql, (d.key(job.id, "job id"), ws, env, d.key(job.run_id, "run id"),
                     job.node_id, job.pool, job.step_name, job.idempotency_key,
                     d.json(job.input), job.max_attempts, d.ts(op.created_at))
    if isinstance(op, FinishJob):
        return sql, (op.status, d.json(op.result), d.json(op.error, null=True),
                     d.ts(op.completed_at), d.key(op.job_id, "job id"), ws, env)
    if isinstance(op, FailRunJobs):
        return sql, (d.json(op.error), d.ts(op.completed_at), d.key(op.run_id, "run id"),
                     ws, env)
    if isinstance(op, InsertOutbox):
        return sql, (d.key(op.run_id, "run id"), op.kind, d.json(op.payload),
                     d.ts(op.created_at), ws, env)
    raise TypeError(f"the {d.name} adapter cannot apply {type(op).__name__}")  # pragma: no cover
