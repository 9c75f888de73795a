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
    DefinitionRecord,
    EventValue,
    JobRecord,
    OutboxRow,
    PoolLimits,
    RunEvent,
    RunInfo,
    ScheduleRecord,
    SignalRecord,
    StreamItem,
    SweepResult,
    WaitRecord,
)
from .dialect import POSTGRES, SQLITE, Dialect, require_uuid, uuid_or_none
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
    "OUTBOX_COLUMNS",
    "POSTGRES",
    "POSTGRES_QUERIES",
    "PRUNED_TABLES",
    "RUN_COLUMNS",
    "SCHEDULE_COLUMNS",
    "SCHEDULE_UPDATABLE",
    "SIGNAL_COLUMNS",
    "SQLITE",
    "SQLITE_QUERIES",
    "STREAM_ITEM_COLUMNS",
    "WAIT_COLUMNS",
    "Dialect",
    "Queries",
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
    "job_record",
    "op_sql",
    "outbox_row",
    "period_ms",
    "pool_limits",
    "prune_delete_sql",
    "prune_select_args",
    "prune_select_sql",
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
    "workflow_version, failure_json, parent_run_id, detached, deadline_at, continued_as"
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
STREAM_ITEM_COLUMNS = "run_id, key, seq, value_json, closed, node_id, created_at"

#: Flow-control columns (#18) an ``InsertRun`` may also name.
FLOW_RUN_COLUMNS = frozenset({"priority", "concurrency_key", "dedup_key", "debounce_key",
                              "not_before"})
#: Columns an ``InsertRun`` may name (besides id/workspace_id/env).
INSERTABLE_RUN_COLUMNS = UPDATABLE_RUN_COLUMNS | FLOW_RUN_COLUMNS | {
    "template_id", "started_at", "input_json", "start_mode", "max_claim_attempts",
    "workflow_version", "parent_run_id", "detached", "deadline_at",
}
#: Columns of ``starflow_schedules`` in the order they are selected.
SCHEDULE_COLUMNS = (
    "id", "workflow", "workflow_version", "definition_id", "input_json", "cron", "timezone",
    "overlap", "catchup_seconds", "pool", "paused", "next_fire_at", "due_at", "pending_tick",
    "buffered_tick", "last_tick", "last_run_id", "started", "skipped_missed",
    "skipped_overlap", "revision", "created_at", "updated_at",
)
_SCHEDULE_SELECT = ", ".join(SCHEDULE_COLUMNS)
#: Columns a schedule insert writes (besides workspace_id/env and the timestamps).
_SCHEDULE_INSERT = (
    "id", "workflow", "workflow_version", "definition_id", "input_json", "cron", "timezone",
    "overlap", "catchup_seconds", "pool", "paused", "next_fire_at", "due_at",
)
#: Columns a loop's compare-and-set may write (``revision`` and ``updated_at`` always move).
SCHEDULE_UPDATABLE = frozenset({
    "paused", "next_fire_at", "due_at", "pending_tick", "buffered_tick", "last_tick",
    "last_run_id", "started", "skipped_missed", "skipped_overlap",
})
#: Columns of ``starflow_pool_limits`` in the order they are selected.
LIMIT_COLUMNS = "pool, concurrency, rate_limit, rate_period_ms, key_concurrency, updated_at"
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
    )


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
                      created_at=d.at(row[6]))


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
    """The values of a schedule insert, in ``_SCHEDULE_INSERT`` order."""
    values = {
        "id": schedule.id, "workflow": schedule.workflow,
        "workflow_version": schedule.workflow_version, "definition_id": schedule.definition_id,
        "input_json": schedule.input, "cron": schedule.cron, "timezone": schedule.timezone,
        "overlap": schedule.overlap, "catchup_seconds": schedule.catchup.total_seconds(),
        "pool": schedule.pool, "paused": schedule.paused,
        "next_fire_at": schedule.next_fire_at, "due_at": schedule.due_at,
    }
    return tuple(schedule_value(d, c, values[c]) for c in _SCHEDULE_INSERT)


def pool_limits(row: Any, d: Dialect) -> PoolLimits:
    """A :data:`LIMIT_COLUMNS` row."""
    return PoolLimits(pool=row[0], concurrency=row[1], rate_limit=row[2],
                      rate_period=None if row[3] is None else timedelta(milliseconds=row[3]),
                      key_concurrency=row[4], updated_at=d.ts_out(row[5]))


def period_ms(limits: PoolLimits) -> int | None:
    """The rate limit's window in milliseconds (as stored)."""
    if limits.rate_period is None:
        return None
    return round(limits.rate_period.total_seconds() * 1000)


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
        # A replayed write finds its item there: exactly once per (run, key, seq).
        return ("INSERT INTO workflow_stream_items (run_id, workspace_id, env, key, seq, "
                f"value_json, closed, node_id, created_at) VALUES "
                f"({', '.join(p(i) for i in range(1, 10))}) "
                "ON CONFLICT (run_id, key, seq) DO NOTHING")
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
        return ("INSERT INTO worker_jobs (id, workspace_id, env, run_id, node_id, pool, "
                "step_name, idempotency_key, input_json, status, max_attempts, created_at) "
                f"VALUES ({', '.join(p(i) for i in range(1, 10))}, 'queued', {p(10)}, {p(11)}) "
                "ON CONFLICT DO NOTHING")
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
    sets = ", ".join(f"{c} = {d.p(i)}" for i, c in enumerate(columns, start=1))
    n = len(columns) + 1
    return f"UPDATE workflow_runs SET {sets} WHERE id = {d.p(n)} AND {d.key_tenant(n + 1)}"


@functools.lru_cache(maxsize=512)
def _insert_run_sql(d: Dialect, columns: tuple[str, ...]) -> str:
    names = ", ".join(("id", "workspace_id", "env", *columns))
    params = ", ".join(d.p(i) for i in range(1, len(columns) + 4))
    return f"INSERT INTO workflow_runs ({names}) VALUES ({params})"


def op_sql(d: Dialect, op: Op, ws: str, env: str) -> tuple[str, tuple[Any, ...]] | None:
    """The statement and arguments writing ``op`` in scope (None for a :class:`Mark`).

    Raises ConfigError (before anything is written) for a malformed id where
    the dialect types ids, and SerializationError for an unencodable value.
    """
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
                     d.flag(op.closed), op.node_id, d.ts(op.created_at))
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


# ---------------------------------------------------------------------------
# Data access
# ---------------------------------------------------------------------------


class Queries:
    """The data-access statements of one dialect (arguments in the order written)."""

    def __init__(self, d: Dialect) -> None:
        p, kt, t = d.p, d.key_tenant, d.tenant
        self.d = d
        #: (run_id, ws, env)
        self.get_run = f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE id = {p(1)} AND {kt(2)}"
        #: (run_id, ws, env, after_id)
        self.list_events = (
            f"SELECT {', '.join('e.' + c for c in EVENT_COLUMNS.split(', '))} "
            "FROM workflow_run_events e JOIN workflow_runs r ON r.id = e.run_id "
            f"WHERE e.run_id = {p(1)} AND {kt(2, 'r.')} AND e.id > {p(4)} ORDER BY e.id")
        #: (run_id, ws, env)
        self.list_waits = (f"SELECT {WAIT_COLUMNS} FROM workflow_waits WHERE run_id = {p(1)} "
                           f"AND {kt(2)} ORDER BY created_at")
        #: (ws, env, now, limit)
        self.due_waits = (f"SELECT {WAIT_COLUMNS} FROM workflow_waits WHERE {t(1)} "
                          f"AND deadline IS NOT NULL AND deadline <= {p(3)} "
                          f"ORDER BY deadline LIMIT {p(4)}")
        #: (ws, env)
        self.next_deadline = ("SELECT min(deadline) FROM workflow_waits WHERE "
                              f"{t(1)} AND deadline IS NOT NULL")
        #: (run_id, event, ws, env)
        self.find_signal = (f"SELECT {SIGNAL_COLUMNS} FROM workflow_signals WHERE "
                            f"run_id = {p(1)} AND event = {p(2)} AND {kt(3)} "
                            "ORDER BY id LIMIT 1")
        #: (run_id, ws, env, key)
        self.get_event_value = (f"SELECT {EVENT_VALUE_COLUMNS} FROM workflow_event_values "
                                f"WHERE run_id = {p(1)} AND {kt(2)} AND key = {p(4)}")
        #: (run_id, ws, env)
        self.list_event_values = (f"SELECT {EVENT_VALUE_COLUMNS} FROM workflow_event_values "
                                  f"WHERE run_id = {p(1)} AND {kt(2)} ORDER BY key")
        #: (run_id, ws, env, key, after_seq, limit)
        self.read_stream = (f"SELECT {STREAM_ITEM_COLUMNS} FROM workflow_stream_items "
                            f"WHERE run_id = {p(1)} AND {kt(2)} AND key = {p(4)} "
                            f"AND seq > {p(5)} ORDER BY seq LIMIT {p(6)}")
        #: (run_id, ws, env)
        self.list_stream_items = (f"SELECT {STREAM_ITEM_COLUMNS} FROM workflow_stream_items "
                                  f"WHERE run_id = {p(1)} AND {kt(2)} ORDER BY key, seq")
        #: (ws, env, session_id, key)
        self.session_get = ("SELECT value_json, keep_until FROM workflow_session_vars "
                            f"WHERE {t(1)} AND session_id = {p(3)} AND key = {p(4)}")
        #: (definition_id, ws, env)
        self.get_definition = (f"SELECT {DEFINITION_COLUMNS} FROM workflow_definitions "
                               f"WHERE id = {p(1)} AND {kt(2)}")
        #: (id, ws, env, name, version, code_hash, now)
        self.insert_definition = (
            "INSERT INTO workflow_definitions (id, workspace_id, env, name, version, "
            f"code_hash, created_at) VALUES ({', '.join(p(i) for i in range(1, 8))}) "
            "ON CONFLICT (workspace_id, env, name, version) DO NOTHING")
        #: (ws, env, name, version)
        self.definition_id = ("SELECT id FROM workflow_definitions WHERE "
                              f"{t(1)} AND name = {p(3)} AND version = {p(4)}")
        #: (ws, env, now)
        self.expire_session_vars = ("DELETE FROM workflow_session_vars WHERE "
                                    f"{t(1)} AND keep_until IS NOT NULL "
                                    f"AND keep_until <= {p(3)}")
        #: (ws, env, key_id)
        self.secret = f"SELECT secret FROM starflow_keys WHERE {t(1)} AND key_id = {p(3)}"
        #: (ws, env, key_id, secret, now)
        self.insert_secret = ("INSERT INTO starflow_keys (workspace_id, env, key_id, secret, "
                              f"created_at) VALUES ({', '.join(p(i) for i in range(1, 6))}) "
                              "ON CONFLICT DO NOTHING")
        #: (worker_id, lease_until, now, ws, env, pool, now, limit)
        self.claim_jobs = (
            f"UPDATE worker_jobs SET status = 'claimed', attempts = attempts + 1, "
            f"leased_by = {p(1)}, lease_until = {p(2)}, last_heartbeat = {p(3)} WHERE id IN ("
            f"  SELECT id FROM worker_jobs WHERE {t(4)} AND pool = {p(6)}"
            f"  AND (status = 'queued' OR (status = 'claimed' AND lease_until < {p(7)}))"
            f"  ORDER BY created_at, id LIMIT {p(8)}{d.skip_locked}"
            f") RETURNING {JOB_COLUMNS}")
        #: (lease_until, now, job_id, ws, env, worker_id)
        self.heartbeat_job = (
            f"UPDATE worker_jobs SET lease_until = {p(1)}, last_heartbeat = {p(2)} "
            f"WHERE id = {p(3)} AND {kt(4)} AND status = 'claimed' AND leased_by = {p(6)}")
        #: (job_id, ws, env)
        self.get_job = f"SELECT {JOB_COLUMNS} FROM worker_jobs WHERE id = {p(1)} AND {kt(2)}"
        #: (ws, env, limit)
        self.pending_outbox = (f"SELECT {OUTBOX_COLUMNS} FROM mirror_outbox WHERE {t(1)} "
                               f"AND applied_at IS NULL ORDER BY id LIMIT {p(3)}")
        #: (ws, env, applied_before)
        self.prune_outbox = ("DELETE FROM mirror_outbox WHERE "
                             f"{t(1)} AND applied_at IS NOT NULL AND applied_at < {p(3)}")

        # -- schedules (#18) ---------------------------------------------------
        sched = f"SELECT {_SCHEDULE_SELECT} FROM starflow_schedules WHERE {t(1)}"
        #: (ws, env, id)
        self.get_schedule = f"{sched} AND id = {p(3)}"
        #: (ws, env)
        self.list_schedules = f"{sched} ORDER BY id"
        #: (ws, env, now, limit)
        self.due_schedules = (f"{sched} AND {d.unset('paused')} AND due_at <= {p(3)} "
                              f"ORDER BY due_at LIMIT {p(4)}")
        #: (ws, env). ORDER BY … LIMIT 1, not min(): one index entry, whatever the
        #: planner's statistics (PostgreSQL answered min() by a scan of every schedule).
        self.next_schedule_due = ("SELECT due_at FROM starflow_schedules WHERE "
                                  f"{t(1)} AND {d.unset('paused')} AND due_at IS NOT NULL "
                                  "ORDER BY due_at LIMIT 1")
        #: (ws, env, id)
        self.delete_schedule = f"DELETE FROM starflow_schedules WHERE {t(1)} AND id = {p(3)}"
        #: (ws, env, *schedule_insert_args, created_at, updated_at)
        cols = ("workspace_id", "env", *_SCHEDULE_INSERT, "created_at", "updated_at")
        self.upsert_schedule = (
            f"INSERT INTO starflow_schedules ({', '.join(cols)}) "
            f"VALUES ({', '.join(p(i) for i in range(1, len(cols) + 1))}) "
            f"ON CONFLICT (workspace_id, env, id) DO UPDATE SET {_schedule_upsert_set()} "
            f"RETURNING {_SCHEDULE_SELECT}")

        # -- pool limits and flow control (#18) --------------------------------
        #: (ws, env, pool)
        self.get_pool_limits = (f"SELECT {LIMIT_COLUMNS} FROM starflow_pool_limits "
                                f"WHERE {t(1)} AND pool = {p(3)}")
        #: (ws, env, pool): the row locked until the transaction ends (a limited claim).
        self.lock_pool_limits = self.get_pool_limits + d.for_update
        #: (ws, env)
        self.list_pool_limits = (f"SELECT {LIMIT_COLUMNS} FROM starflow_pool_limits "
                                 f"WHERE {t(1)}")
        #: (ws, env, pool, concurrency, rate_limit, rate_period_ms, key_concurrency, now)
        self.set_pool_limits = (
            "INSERT INTO starflow_pool_limits (workspace_id, env, pool, concurrency, "
            "rate_limit, rate_period_ms, key_concurrency, updated_at) "
            f"VALUES ({', '.join(p(i) for i in range(1, 9))}) "
            "ON CONFLICT (workspace_id, env, pool) DO UPDATE SET "
            "concurrency = excluded.concurrency, rate_limit = excluded.rate_limit, "
            "rate_period_ms = excluded.rate_period_ms, "
            "key_concurrency = excluded.key_concurrency, updated_at = excluded.updated_at")
        #: (ws, env, pool)
        self.delete_pool_limits = (f"DELETE FROM starflow_pool_limits WHERE {t(1)} "
                                   f"AND pool = {p(3)}")
        #: (ws, env): per pool, runs queued and runs active.
        self.pool_counts = (
            "SELECT runner_pool, "
            "sum(CASE WHEN claim_state = 'queued' THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN {ACTIVE_RUN} THEN 1 ELSE 0 END) "
            f"FROM workflow_runs WHERE {t(1)} AND runner_pool IS NOT NULL "
            f"AND (claim_state = 'queued' OR ({ACTIVE_RUN})) GROUP BY runner_pool")
        #: (ws, env, pool)
        self.pool_active = (f"SELECT count(*) FROM workflow_runs WHERE {t(1)} "
                            f"AND runner_pool = {p(3)} AND {ACTIVE_RUN}")
        #: (ws, env, pool): active runs per concurrency key.
        self.key_active = (
            f"SELECT concurrency_key, count(*) FROM workflow_runs WHERE {t(1)} "
            f"AND runner_pool = {p(3)} AND {ACTIVE_RUN} AND concurrency_key IS NOT NULL "
            "GROUP BY concurrency_key")
        #: (ws, env, pool, since): the pool's claims in the rate window.
        self.pool_window = (f"SELECT count(*) FROM workflow_runs WHERE {t(1)} "
                            f"AND runner_pool = {p(3)} AND claimed_at > {p(4)}")
        #: (ws, env, pool or '', dedup_key)
        self.find_active_dedup = (
            f"SELECT id FROM workflow_runs WHERE {t(1)} "
            f"AND COALESCE(runner_pool, '') = {p(3)} AND dedup_key = {p(4)} "
            "AND status IN ('queued', 'running', 'paused')")
        #: (input, not_before, ws, env, pool or '', template_id, debounce_key)
        self.rearm_debounced = (
            f"UPDATE workflow_runs SET input_json = {p(1)}, not_before = {p(2)} "
            f"WHERE {t(3)} AND COALESCE(runner_pool, '') = {p(5)} "
            f"AND template_id = {p(6)} AND debounce_key = {p(7)} AND claim_state = 'queued' "
            "AND claim_attempts = 0 RETURNING id")

    def list_runs(self, status: bool, template_id: bool, since: bool,
                  attributes: int = 0, parent: bool = False) -> str:
        """Arguments: (ws, env, [status], [template_id], [since], [parent_run_id],
        ``attributes`` x (ws, env, key, value), limit)."""
        return _list_runs_sql(self.d, status, template_id, since, attributes, parent)

    def list_jobs(self, run_id: bool, status: bool) -> str:
        """Arguments: (ws, env, [run_id], [status], limit)."""
        return _list_jobs_sql(self.d, run_id, status)

    def mark_outbox_applied(self, count: int) -> str:
        """Arguments: (now, *d.many(ids), ws, env)."""
        return _mark_outbox_sql(self.d, count)

    def update_schedule(self, columns: tuple[str, ...]) -> str:
        """Compare-and-set ``columns`` (of :data:`SCHEDULE_UPDATABLE`).

        Arguments: (*values, now, ws, env, id, revision).
        """
        bad = [c for c in columns if c not in SCHEDULE_UPDATABLE]
        if bad:
            raise ValueError(f"update_schedule: not updatable: {sorted(bad)}")
        return _update_schedule_sql(self.d, columns)


def _schedule_upsert_set() -> str:
    """The ``DO UPDATE SET`` of a schedule upsert.

    The cursor survives an update that keeps the cron and the zone (ticks
    missed while the process was down still catch up); a decided tick keeps
    its ``due_at`` so it still starts. ``paused`` and the counters are kept.
    """
    t = "starflow_schedules"
    same = f"{t}.cron = excluded.cron AND {t}.timezone = excluded.timezone"
    return (
        "workflow = excluded.workflow, workflow_version = excluded.workflow_version, "
        "definition_id = excluded.definition_id, input_json = excluded.input_json, "
        "overlap = excluded.overlap, catchup_seconds = excluded.catchup_seconds, "
        "pool = excluded.pool, "
        f"next_fire_at = CASE WHEN {same} THEN {t}.next_fire_at "
        "ELSE excluded.next_fire_at END, "
        f"due_at = CASE WHEN ({same}) OR {t}.pending_tick IS NOT NULL THEN {t}.due_at "
        "ELSE excluded.due_at END, "
        "cron = excluded.cron, timezone = excluded.timezone, "
        f"revision = {t}.revision + 1, updated_at = excluded.updated_at"
    )


@functools.lru_cache(maxsize=128)
def _update_schedule_sql(d: Dialect, columns: tuple[str, ...]) -> str:
    sets = "".join(f"{c} = {d.p(i)}, " for i, c in enumerate(columns, start=1))
    n = len(columns) + 1
    return (f"UPDATE starflow_schedules SET {sets}revision = revision + 1, "
            f"updated_at = {d.p(n)} WHERE {d.tenant(n + 1)} AND id = {d.p(n + 3)} "
            f"AND revision = {d.p(n + 4)}")


@functools.cache
def _list_runs_sql(d: Dialect, status: bool, template_id: bool, since: bool,
                   attributes: int = 0, parent: bool = False) -> str:
    where = [d.tenant(1)]
    n = 3
    for clause, present, cast in (("status = ", status, ""),
                                  ("template_id = ", template_id, ""),
                                  ("started_at >= ", since, ""),
                                  # (a child's run ids: idx_workflow_runs_parent)
                                  ("parent_run_id = ", parent, "uuid")):
        if present:
            where.append(f"{clause}{d.p(n, cast)}")
            n += 1
    for _ in range(attributes):
        # One lookup per attribute on idx_workflow_run_attributes_lookup.
        where.append(f"id IN (SELECT run_id FROM workflow_run_attributes WHERE "
                     f"{d.tenant(n)} AND key = {d.p(n + 2)} AND value = {d.p(n + 3)})")
        n += 4
    # The order of the keyset-page indexes (026, 035): unfiltered, by status or
    # by workflow, the first page is one index range scan, with no sort.
    return (f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE {' AND '.join(where)} "
            f"ORDER BY started_at DESC, id DESC LIMIT {d.p(n)}")


@functools.cache
def _list_jobs_sql(d: Dialect, run_id: bool, status: bool) -> str:
    where = [d.tenant(1)]
    n = 3
    for clause, present in (("run_id = ", run_id), ("status = ", status)):
        if present:
            where.append(f"{clause}{d.p(n)}")
            n += 1
    return (f"SELECT {JOB_COLUMNS} FROM worker_jobs WHERE {' AND '.join(where)} "
            f"ORDER BY created_at, id LIMIT {d.p(n)}")


@functools.lru_cache(maxsize=64)
def _mark_outbox_sql(d: Dialect, count: int) -> str:
    n = 2 + d.width(count)
    return (f"UPDATE mirror_outbox SET applied_at = {d.p(1)} WHERE "
            f"{d.one_of('id', 2, count, 'bigint')} AND {d.tenant(n)} AND applied_at IS NULL")


# ---------------------------------------------------------------------------
# Retention: pruning ended runs
# ---------------------------------------------------------------------------

#: The statuses a prune may delete: a run in any other status is active.
ENDED_STATUSES = ("cancelled", "error", "success")
#: Every table whose rows belong to a run (a ``run_id`` column), deleted before
#: the run row itself (foreign keys point at ``workflow_runs``). The prune tests
#: enumerate the tables with a ``run_id`` column from the schema and fail if
#: one is missing here.
PRUNED_TABLES = ("workflow_run_events", "workflow_waits", "workflow_signals", "worker_jobs",
                 "mirror_outbox", "workflow_session_vars", "workflow_run_attributes",
                 "workflow_event_values", "workflow_stream_items")


@functools.cache
def prune_select_sql(d: Dialect, statuses: int, workflow: bool, ids: int | None, cursor: bool,
                     lock: bool) -> str:
    """The runs a :class:`~starflow.adapters.units.PruneRuns` batch deletes:
    ``(id, completed_at)`` rows, oldest end first. Arguments:
    :func:`prune_select_args`. A run whose parent or a child (``parent_run_id``,
    migration 033) is active is left out. ``lock``: lock the rows
    (skipping rows another pruner holds, where the dialect can)."""
    p = d.p
    ended = ", ".join(f"'{s}'" for s in ENDED_STATUSES)
    where = [d.tenant(1, "r."), d.one_of("r.status", 3, statuses),
             "r.completed_at IS NOT NULL"]
    n = 3 + d.width(statuses)
    where.append(f"r.completed_at < {p(n, 'timestamptz')}")
    n += 1
    if workflow:
        where.append(f"r.template_id = {p(n)}")
        n += 1
    if ids is not None:
        where.append(d.one_of("r.id", n, ids, "uuid"))
        n += d.width(ids)
    if cursor:
        where.append(f"(r.completed_at, r.id) > ({p(n, 'timestamptz')}, {p(n + 1, 'uuid')})")
        n += 2
    where.append("NOT EXISTS (SELECT 1 FROM workflow_runs k WHERE k.parent_run_id = r.id "
                 f"AND COALESCE(k.status, '') NOT IN ({ended}))")
    where.append("NOT EXISTS (SELECT 1 FROM workflow_runs k WHERE k.id = r.parent_run_id "
                 f"AND COALESCE(k.status, '') NOT IN ({ended}))")
    return (f"SELECT r.id, r.completed_at FROM workflow_runs r WHERE {' AND '.join(where)} "
            f"ORDER BY r.completed_at, r.id LIMIT {p(n)}{d.skip_locked if lock else ''}")


def prune_select_args(d: Dialect, command: Any, ws: str, env: str) -> tuple[Any, ...]:
    """The arguments of :func:`prune_select_sql` for a ``PruneRuns`` command."""
    args: tuple[Any, ...] = (ws, env, *d.many(command.statuses), d.ts(command.ended_before))
    if command.workflow is not None:
        args += (command.workflow,)
    if command.run_ids is not None:
        args += d.many([d.key(i, "run id") for i in command.run_ids])
    if command.cursor is not None:
        args += (d.ts(command.cursor[0]), d.key(command.cursor[1], "run id"))
    return (*args, int(command.limit))


@functools.lru_cache(maxsize=64)
def prune_delete_sql(d: Dialect, count: int) -> tuple[tuple[str, str], ...]:
    """``(table, statement)`` deleting the rows of ``count`` runs, the run rows
    last. Arguments: ``(*d.many(ids), now)`` for ``workflow_session_vars``
    (vars kept past ``now`` stay: they belong to their session until they
    expire), ``(*d.many(ids), ws, env)`` for ``workflow_runs``,
    ``d.many(ids)`` for the others."""
    ids = d.one_of("run_id", 1, count, "uuid")
    n = 1 + d.width(count)
    out = []
    for table in PRUNED_TABLES:
        sql = f"DELETE FROM {table} WHERE {ids}"
        if table == "workflow_session_vars":
            sql += f" AND (keep_until IS NULL OR keep_until <= {d.p(n, 'timestamptz')})"
        out.append((table, sql))
    out.append(("workflow_runs", f"DELETE FROM workflow_runs WHERE "
                f"{d.one_of('id', 1, count, 'uuid')} AND {d.key_tenant(n)}"))
    return tuple(out)


SQLITE_QUERIES = Queries(SQLITE)
POSTGRES_QUERIES = Queries(POSTGRES)
