"""Schedules and flow control: the records and the claim rule both SQL dialects share.

The adapters store schedules (``starflow_schedules``) and pool limits
(``starflow_pool_limits``); what a claim of a limited pool may take is decided
here once, by :func:`pick_claims`, inside each dialect's claim transaction
(PostgreSQL: with the pool's limits row locked ``FOR UPDATE``; SQLite: inside
the writer's ``BEGIN IMMEDIATE``), so a limit is never checked in one
transaction and spent in another.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import msgspec

__all__ = [
    "SCHEDULE_COLUMNS",
    "SCHEDULE_UPDATABLE",
    "Candidate",
    "PoolLimits",
    "PoolUsage",
    "ScheduleRecord",
    "full_keys",
    "has_limits",
    "period_ms",
    "pick_claims",
    "room_left",
    "scan_size",
    "schedule_from_row",
    "schedule_insert_values",
    "schedule_upsert_sql",
]


class ScheduleRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A ``starflow_schedules`` row.

    Attributes:
        id: The schedule's name, unique in its workspace.
        workflow: The workflow's name; ``workflow_version`` and ``definition_id``
            the definition registered when the schedule was written (a process
            that has a newer version registered starts that one).
        input: The encoded arguments (``{"args": [...], "kwargs": {...}}``).
        cron: The cron expression; ``timezone`` the IANA zone it is read in.
        overlap: ``skip``, ``buffer_one`` or ``allow``.
        catchup: How far back missed ticks still start after downtime.
        pool: The pool its runs are queued for.
        paused: Whether ticks are skipped (no catch-up on resume).
        next_fire_at: The earliest tick not yet handled (UTC).
        due_at: When a maintenance loop must look at the row again.
        pending_tick: A tick decided to start whose run may not exist yet.
        buffered_tick: ``buffer_one``: the tick waiting for the active run to end.
        last_tick: The last tick a run was started for; ``last_run_id`` its run.
        started: Runs started by ticks (not by ``trigger``).
        skipped_missed: Ticks skipped because they were older than ``catchup``.
        skipped_overlap: Ticks skipped because the previous run was still active.
        revision: Grows by one with every write (compare-and-set).
    """

    id: str
    workflow: str
    workflow_version: int
    definition_id: str | None
    input: Any
    cron: str
    timezone: str
    overlap: str
    catchup: timedelta
    pool: str | None
    paused: bool = False
    next_fire_at: datetime | None = None
    due_at: datetime | None = None
    pending_tick: datetime | None = None
    buffered_tick: datetime | None = None
    last_tick: datetime | None = None
    last_run_id: str | None = None
    started: int = 0
    skipped_missed: int = 0
    skipped_overlap: int = 0
    revision: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None


#: Columns of ``starflow_schedules`` in the order the adapters select them.
SCHEDULE_COLUMNS = (
    "id", "workflow", "workflow_version", "definition_id", "input_json", "cron", "timezone",
    "overlap", "catchup_seconds", "pool", "paused", "next_fire_at", "due_at", "pending_tick",
    "buffered_tick", "last_tick", "last_run_id", "started", "skipped_missed",
    "skipped_overlap", "revision", "created_at", "updated_at",
)
#: Columns a loop's compare-and-set may write (``revision`` and ``updated_at`` always move).
SCHEDULE_UPDATABLE = frozenset({
    "paused", "next_fire_at", "due_at", "pending_tick", "buffered_tick", "last_tick",
    "last_run_id", "started", "skipped_missed", "skipped_overlap",
})
#: Timestamp columns of ``starflow_schedules``.
SCHEDULE_TIMES = frozenset({
    "next_fire_at", "due_at", "pending_tick", "buffered_tick", "last_tick", "created_at",
    "updated_at",
})


def schedule_from_row(values: Sequence[Any], *, ts: Any, json: Any) -> ScheduleRecord:
    """Build a record from a row in :data:`SCHEDULE_COLUMNS` order.

    ``ts`` and ``json`` decode the dialect's timestamps and JSON.
    """
    row = dict(zip(SCHEDULE_COLUMNS, values, strict=True))
    return ScheduleRecord(
        id=row["id"], workflow=row["workflow"], workflow_version=int(row["workflow_version"]),
        definition_id=None if row["definition_id"] is None else str(row["definition_id"]),
        input=json(row["input_json"]), cron=row["cron"], timezone=row["timezone"],
        overlap=row["overlap"], catchup=timedelta(seconds=float(row["catchup_seconds"])),
        pool=row["pool"], paused=bool(row["paused"]),
        next_fire_at=ts(row["next_fire_at"]), due_at=ts(row["due_at"]),
        pending_tick=ts(row["pending_tick"]), buffered_tick=ts(row["buffered_tick"]),
        last_tick=ts(row["last_tick"]),
        last_run_id=None if row["last_run_id"] is None else str(row["last_run_id"]),
        started=int(row["started"]), skipped_missed=int(row["skipped_missed"]),
        skipped_overlap=int(row["skipped_overlap"]), revision=int(row["revision"]),
        created_at=ts(row["created_at"]), updated_at=ts(row["updated_at"]),
    )


class PoolLimits(msgspec.Struct, frozen=True, kw_only=True):
    """A pool's stored limits (``None``: no limit of that kind).

    Attributes:
        pool: The pool.
        concurrency: Runs of the pool executing at once, across every worker.
        rate_limit: Claims of runs of the pool per ``rate_period``.
        rate_period: The rate limit's sliding window.
        key_concurrency: Runs with one ``concurrency_key`` executing at once.
    """

    pool: str
    concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: timedelta | None = None
    key_concurrency: int | None = None
    updated_at: datetime | None = None


class PoolUsage(msgspec.Struct, frozen=True, kw_only=True):
    """What a pool uses now (``starflow pools``)."""

    pool: str
    limits: PoolLimits | None
    queued: int
    active: int
    claimed_in_window: int


class Candidate(msgspec.Struct, frozen=True):
    """A queued run a limited claim considers (in claim order)."""

    id: str
    runner_pool: str | None
    concurrency_key: str | None


def pick_claims(candidates: Sequence[Candidate], limits: PoolLimits, *, limit: int,
                active: int, claimed_in_window: int, key_active: Mapping[str, int]
                ) -> list[str]:
    """The ids a claim takes from ``candidates`` (highest priority first, FIFO within).

    Runs queued for any pool (``runner_pool`` NULL) are not the pool's and are
    taken freely; runs of the limited pool only while the pool's concurrency,
    its rate limit and their key's concurrency leave room. A run that does not
    fit is passed over, not a barrier: a run of another key behind it may go.

    Args:
        candidates: Queued runs, in claim order.
        limits: The pool's limits.
        limit: Most runs to take.
        active: Runs of the pool executing now.
        claimed_in_window: Runs of the pool claimed within the rate window.
        key_active: Runs executing now per concurrency key.
    """
    budget = room_left(limits, active, claimed_in_window)
    keys = dict(key_active)
    taken: list[str] = []
    for cand in candidates:
        if len(taken) >= limit:
            break
        if cand.runner_pool is None:
            taken.append(cand.id)
            continue
        if budget is not None and budget <= 0:
            continue
        key = cand.concurrency_key
        if key is not None and limits.key_concurrency is not None:
            if keys.get(key, 0) >= limits.key_concurrency:
                continue
            keys[key] = keys.get(key, 0) + 1
        if budget is not None:
            budget -= 1
        taken.append(cand.id)
    return taken


def room_left(limits: PoolLimits, active: int, claimed_in_window: int) -> int | None:
    """How many more runs of the pool may be claimed now (None: unbounded)."""
    room: int | None = None
    if limits.concurrency is not None:
        room = limits.concurrency - active
    if limits.rate_limit is not None:
        left = limits.rate_limit - claimed_in_window
        room = left if room is None else min(room, left)
    return room


def full_keys(limits: PoolLimits, key_active: Mapping[str, int]) -> list[str]:
    """Concurrency keys already at ``key_concurrency`` (their runs are not candidates)."""
    if limits.key_concurrency is None:
        return []
    return sorted(k for k, n in key_active.items() if n >= limits.key_concurrency)


def scan_size(limit: int, limits: PoolLimits) -> int:
    """Candidates a limited claim reads: more than ``limit`` when keys may pass some over."""
    return limit if limits.key_concurrency is None else max(limit * 4, 32)


def has_limits(limits: PoolLimits) -> bool:
    return any(v is not None for v in (limits.concurrency, limits.rate_limit,
                                       limits.key_concurrency))


def period_ms(limits: PoolLimits) -> int | None:
    if limits.rate_period is None:
        return None
    return round(limits.rate_period.total_seconds() * 1000)


def schedule_insert_values(schedule: ScheduleRecord) -> dict[str, Any]:
    """The columns a schedule upsert writes (dialect values still to convert)."""
    return {
        "id": schedule.id, "workflow": schedule.workflow,
        "workflow_version": schedule.workflow_version, "definition_id": schedule.definition_id,
        "input_json": schedule.input, "cron": schedule.cron, "timezone": schedule.timezone,
        "overlap": schedule.overlap, "catchup_seconds": schedule.catchup.total_seconds(),
        "pool": schedule.pool, "paused": schedule.paused,
        "next_fire_at": schedule.next_fire_at, "due_at": schedule.due_at,
    }


def schedule_upsert_sql(excluded: str) -> str:
    """The ``ON CONFLICT … DO UPDATE SET`` list of a schedule upsert.

    The cursor survives an update that keeps the cron and the zone (ticks
    missed while the process was down still catch up); a decided tick keeps
    its ``due_at`` so it still starts. ``paused`` and the counters are kept.
    """
    t = "starflow_schedules"
    same = f"{t}.cron = {excluded}.cron AND {t}.timezone = {excluded}.timezone"
    return (
        f"workflow = {excluded}.workflow, workflow_version = {excluded}.workflow_version, "
        f"definition_id = {excluded}.definition_id, input_json = {excluded}.input_json, "
        f"overlap = {excluded}.overlap, catchup_seconds = {excluded}.catchup_seconds, "
        f"pool = {excluded}.pool, "
        f"next_fire_at = CASE WHEN {same} THEN {t}.next_fire_at "
        f"ELSE {excluded}.next_fire_at END, "
        f"due_at = CASE WHEN ({same}) OR {t}.pending_tick IS NOT NULL THEN {t}.due_at "
        f"ELSE {excluded}.due_at END, "
        f"cron = {excluded}.cron, timezone = {excluded}.timezone, "
        f"revision = {t}.revision + 1, updated_at = {excluded}.updated_at"
    )
