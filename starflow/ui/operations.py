"""What the operations page shows, read from an open Starflow (no HTTP here).

One read of everything an operator looks at when runs do not move: the
mirror outbox, runs per status, each pool's limits and use (``sf.pools()``:
queued and executing runs, claims in the rate window), the cron schedules
(``sf.schedules()``) with their next tick and last run, durable timers overdue
(no worker nor maintenance process fires them), the runners holding leases,
runs whose lease has expired, and stuck runs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..adapters.pages import MAX_PAGE, RunPage, RunPageQuery
from ..errors import RunNotFound, StarflowError
from ..records import PoolUsage, RunInfo, ScheduleRecord
from ..runtime.schedules import ON_TIME
from .views import FoldedJSON, fold_json

if TYPE_CHECKING:
    from ..app import Starflow
    from ..warm.drainer import OutboxStatus

__all__ = ["Operations", "PoolRow", "ScheduleRow", "load_operations",
           "read_overdue_timers", "read_pools", "read_schedules"]

#: Stuck runs the operations page lists (oldest first).
STUCK_SHOWN = 100
#: Schedules the operations page lists (by id; ``starflow schedules list`` has them all).
SCHEDULES_SHOWN = 100
#: Overdue timers the operations page counts (past that: "1,000+").
TIMERS_COUNTED = 1000


@dataclass(frozen=True)
class PoolRow:
    """A pool's limits and use.

    Attributes:
        pool: The pool's name; None for runs queued for any pool (no ``pool=``).
        queued: Runs waiting to be claimed.
        executing: Runs claimed and executing (what ``concurrency`` caps).
        concurrency: The stored limit on ``executing``, across all workers.
        rate_limit: Claims allowed per ``rate_period`` (seconds);
            ``claimed_in_window`` the claims in the last period.
        key_concurrency: Runs with one ``concurrency_key`` executing at once.
        sampled: Counted from the newest queued and running runs, not by the
            database (runs for any pool have no limits and no count of their own).
    """

    pool: str | None
    queued: int
    executing: int
    concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: float | None = None
    claimed_in_window: int = 0
    key_concurrency: int | None = None
    sampled: bool = False
    #: Paused by an operator (``sf.pause_pool``): no claims of its runs.
    paused: bool = False
    #: Claims per ``key_rate_period`` (seconds) of runs with one concurrency key.
    key_rate_limit: int | None = None
    key_rate_period: float | None = None
    #: Claims go round robin across concurrency keys, weighted by ``key_weights``.
    fair: bool = False
    key_weights: dict[str, int] | None = None
    #: Paused runs keep their slot; ``kept``: how many hold one now.
    keep_slot: bool = False
    kept: int = 0

    @property
    def at_concurrency(self) -> bool:
        """Whether no run of the pool can be claimed until one ends."""
        return self.concurrency is not None and self.executing >= self.concurrency

    @property
    def at_rate(self) -> bool:
        """Whether the rate limit holds back claims until the window moves on."""
        return self.rate_limit is not None and self.claimed_in_window >= self.rate_limit

    @classmethod
    def of(cls, usage: PoolUsage) -> PoolRow:
        lim = usage.limits
        return cls(pool=usage.pool, queued=usage.queued, executing=usage.active,
                   concurrency=lim.concurrency if lim else None,
                   rate_limit=lim.rate_limit if lim else None,
                   rate_period=lim.rate_period.total_seconds()
                   if lim and lim.rate_period else None,
                   claimed_in_window=usage.claimed_in_window,
                   key_concurrency=lim.key_concurrency if lim else None,
                   paused=bool(lim and lim.paused),
                   key_rate_limit=lim.key_rate_limit if lim else None,
                   key_rate_period=lim.key_rate_period.total_seconds()
                   if lim and lim.key_rate_period else None,
                   fair=bool(lim and lim.fair),
                   key_weights=dict(lim.key_weights) if lim and lim.key_weights else None,
                   keep_slot=bool(lim and lim.keep_slot), kept=usage.kept)


@dataclass(frozen=True)
class ScheduleRow:
    """A cron schedule as the operations page shows it.

    Attributes:
        schedule: The stored record (settings, cursor, counters).
        late: Seconds its next decision is overdue, when no maintenance loop
            has made it (None: on time, or paused).
        last_run_status: The status of its last run (None: none yet, or pruned).
        arguments: Its runs' arguments, folded and scrubbed like a run's input.
    """

    schedule: ScheduleRecord
    late: float | None
    last_run_status: str | None
    arguments: FoldedJSON


@dataclass(frozen=True)
class Holder:
    """A runner holding leases: how many running runs, its newest heartbeat."""

    runs: int
    heartbeat: datetime | None


@dataclass(frozen=True)
class Operations:
    """The operations page's data; :meth:`context` is what its template reads."""

    outbox: OutboxStatus | None
    outbox_error: str | None
    counts: dict[str, int]
    pools: list[PoolRow]
    pools_error: str | None
    #: Runs for any pool were counted from the newest ``sampled`` queued and running runs.
    any_pool_sampled: bool
    sampled: int
    schedules: list[ScheduleRow]
    schedules_total: int
    schedules_paused: int
    schedules_late: int
    schedules_error: str | None
    #: Timers (waits' deadlines, queued runs' deadlines) overdue past ``timers_slack``
    #: seconds: no process fires timers (every worker and maintenance loop would).
    timers_overdue: int
    #: More than :data:`TIMERS_COUNTED` are overdue (``timers_overdue`` is that bound).
    timers_overdue_more: bool
    timers_slack: float
    timers_error: str | None
    holders: dict[str, Holder]
    expired: RunPage
    stuck: list[RunInfo]
    stuck_more: bool
    stuck_after: float

    def context(self) -> dict[str, Any]:
        """The fields by name (shallow: records stay records)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


async def load_operations(sf: Starflow) -> Operations:
    """Read the operations page's data from ``sf``'s workspace and env.

    A part that cannot be read (the outbox of a database without one, say) is
    reported in its own ``*_error`` field; the rest of the page still shows.
    """
    now = sf.clock.now()
    outbox = None
    outbox_error = None
    try:
        outbox = await sf.outbox_status()
    except StarflowError as exc:
        outbox_error = str(exc)
    expired = await sf.list_runs_page(RunPageQuery(lease_expired_at=now, limit=MAX_PAGE))
    queued = await sf.list_runs_page(RunPageQuery(status="queued", limit=MAX_PAGE,
                                                  counts=True))
    running = await sf.list_runs_page(RunPageQuery(status="running", limit=MAX_PAGE))
    stuck = await sf.stuck_runs()  # of the newest 1,000 queued runs
    pools, pools_error = await read_pools(sf, queued, running)
    schedules, records, schedules_error = await read_schedules(sf, now)
    overdue, timers_error = await read_overdue_timers(sf, now)
    return Operations(
        outbox=outbox, outbox_error=outbox_error, counts=queued.counts or {},
        pools=pools, pools_error=pools_error,
        any_pool_sampled=queued.next is not None or running.next is not None,
        sampled=MAX_PAGE, schedules=schedules, schedules_total=len(records),
        schedules_paused=sum(1 for r in records if r.paused),
        schedules_late=sum(1 for r in records if _late(sf, r, now) is not None),
        schedules_error=schedules_error,
        timers_overdue=min(overdue, TIMERS_COUNTED), timers_overdue_more=overdue > TIMERS_COUNTED,
        timers_slack=_slack(sf).total_seconds(), timers_error=timers_error,
        holders=_holders(running), expired=expired,
        stuck=stuck[:STUCK_SHOWN], stuck_more=len(stuck) > STUCK_SHOWN,
        stuck_after=sf.config.stuck_after.total_seconds())


async def read_pools(sf: Starflow, queued: RunPage, running: RunPage
                 ) -> tuple[list[PoolRow], str | None]:
    """Every named pool with limits or with queued or executing runs (counted by the
    database), then runs for any pool (counted from the newest queued and running)."""
    rows: list[PoolRow] = []
    error = None
    try:
        rows = [PoolRow.of(usage) for usage in await sf.pools()]
    except StarflowError as exc:
        error = str(exc)
    waiting = sum(1 for r in queued.runs if r.runner_pool is None)
    executing = sum(1 for r in running.runs if r.runner_pool is None)
    if waiting or executing:
        rows.append(PoolRow(pool=None, queued=waiting, executing=executing, sampled=True))
    return rows, error


def _slack(sf: Starflow) -> timedelta:
    """How late a tick or timer may be before the page says nothing fires it: a
    loop handles what is due within a poll; well past that, none runs."""
    return max(ON_TIME, 2 * sf.config.poll_interval)


async def read_overdue_timers(sf: Starflow, now: datetime) -> tuple[int, str | None]:
    """How many timers are overdue past :func:`_slack` (at most
    :data:`TIMERS_COUNTED` + 1 counted), or an error reading them."""
    before = now - _slack(sf)
    try:
        return await sf.count_due_timers(before, limit=TIMERS_COUNTED + 1), None
    except StarflowError as exc:
        return 0, str(exc)


def _late(sf: Starflow, rec: ScheduleRecord, now: datetime) -> float | None:
    """Seconds a schedule's next decision is overdue, if no maintenance loop made it."""
    due = rec.due_at if rec.due_at is not None else rec.next_fire_at
    slack = _slack(sf)
    if rec.paused or due is None or now - due <= slack:
        return None
    return (now - due).total_seconds()


async def read_schedules(sf: Starflow, now: datetime
                     ) -> tuple[list[ScheduleRow], list[ScheduleRecord], str | None]:
    """The first :data:`SCHEDULES_SHOWN` schedules by id, with their last run's status;
    every schedule's record (for the counts); an error reading them, if any."""
    try:
        records = await sf.schedules()
    except StarflowError as exc:
        return [], [], str(exc)
    rows = []
    for rec in records[:SCHEDULES_SHOWN]:
        rows.append(ScheduleRow(schedule=rec, late=_late(sf, rec, now),
                                last_run_status=await _status_of(sf, rec.last_run_id),
                                arguments=fold_json(rec.input)))
    return rows, records, None


async def _status_of(sf: Starflow, run_id: str | None) -> str | None:
    """A run's status, or None for no run or one no longer stored (pruned)."""
    if run_id is None:
        return None
    try:
        return (await sf.get_run(run_id)).status
    except RunNotFound:
        return None


def _holders(running: RunPage) -> dict[str, Holder]:
    """The runners holding leases on running runs, with their newest heartbeat."""
    holders: dict[str, Holder] = {}
    for run in running.runs:
        if run.leased_by:
            held = holders.get(run.leased_by, Holder(runs=0, heartbeat=None))
            beat = held.heartbeat
            if run.last_heartbeat is not None and (beat is None or run.last_heartbeat > beat):
                beat = run.last_heartbeat
            holders[run.leased_by] = Holder(runs=held.runs + 1, heartbeat=beat)
    return holders
