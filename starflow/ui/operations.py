"""What the operations page shows, read from an open Starflow (no HTTP here).

One read of everything an operator looks at when runs do not move: the
mirror outbox, runs per status, queued and running runs per pool, the runners
holding leases, runs whose lease has expired, and stuck runs.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ..adapters.pages import MAX_PAGE, RunPage, RunPageQuery
from ..errors import StarflowError
from ..records import RunInfo

if TYPE_CHECKING:
    from ..app import Starflow
    from ..warm.drainer import OutboxStatus

__all__ = ["Operations", "load_operations"]

#: Stuck runs the operations page lists (oldest first).
STUCK_SHOWN = 100


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
    expired: RunPage
    pools: dict[str, dict[str, int]]
    holders: dict[str, Holder]
    stuck: list[RunInfo]
    stuck_more: bool
    stuck_after: float
    counts: dict[str, int]
    sampled: int
    queued_more: bool
    running_more: bool

    def context(self) -> dict[str, Any]:
        """The fields by name (shallow: records stay records)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


async def load_operations(sf: Starflow) -> Operations:
    """Read the operations page's data from ``sf``'s workspace and env."""
    now = sf.clock.now()
    outbox = None
    outbox_error = None
    try:
        outbox = await sf.outbox_status()
    except StarflowError as exc:
        outbox_error = str(exc)
    expired = await sf.adapter.list_runs_page(
        RunPageQuery(lease_expired_at=now, limit=MAX_PAGE))
    queued = await sf.adapter.list_runs_page(RunPageQuery(status="queued", limit=MAX_PAGE,
                                                          counts=True))
    running = await sf.adapter.list_runs_page(RunPageQuery(status="running", limit=MAX_PAGE))
    stuck = await sf.stuck_runs()  # of the newest 1,000 queued runs
    pools: dict[str, dict[str, int]] = {}
    for run in [*queued.runs, *running.runs]:
        entry = pools.setdefault(run.runner_pool or "(any)", {"queued": 0, "running": 0})
        entry[run.status] = entry.get(run.status, 0) + 1
    holders: dict[str, Holder] = {}
    for run in running.runs:
        if run.leased_by:
            held = holders.get(run.leased_by, Holder(runs=0, heartbeat=None))
            beat = held.heartbeat
            if run.last_heartbeat is not None and (beat is None or run.last_heartbeat > beat):
                beat = run.last_heartbeat
            holders[run.leased_by] = Holder(runs=held.runs + 1, heartbeat=beat)
    return Operations(
        outbox=outbox, outbox_error=outbox_error, expired=expired, pools=pools,
        holders=holders, stuck=stuck[:STUCK_SHOWN], stuck_more=len(stuck) > STUCK_SHOWN,
        stuck_after=sf.config.stuck_after.total_seconds(), counts=queued.counts or {},
        sampled=MAX_PAGE, queued_more=queued.next is not None,
        running_more=running.next is not None)
