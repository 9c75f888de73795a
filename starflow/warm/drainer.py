"""The outbox drainer, the lag gauge and the drift sweep (ADR-045 §5).

* **Drainer.** Continuous: woken by every commit that wrote outbox rows (and
  polling for other processes' rows), it reads unapplied ``mirror_outbox``
  rows in id order (so in order per run), applies them to the warm tier in
  one batch, then marks them applied. When the warm tier fails it retries
  the same batch with exponential backoff; cold writes never wait for it.
  Applied rows are pruned after ``config.outbox_retention``.
* **Lag gauge.** ``count(mirror_outbox WHERE applied_at IS NULL)`` by age
  bucket (:func:`outbox_status`). Past 2 s of lag the drainer logs a warning,
  past 30 s an error (page).
* **Drift sweep.** Every ``config.drift_sweep_interval``: hash the cold rows
  of recent and live runs (paused ones included, however old) and compare
  with the warm tier's hashes; a run that differs and has nothing pending in
  the outbox is reset from cold. When a run ends, the same compare-and-fix
  runs for it alone (end-of-run reconciliation, the per-run net).

The sweep and the drainer share a lock, so a correction can never overwrite
a newer projection this process is applying.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..adapters.base import WorkflowStateAdapter
from ..clock import Clock, wait_event
from ..config import StarflowConfig
from ..errors import StarflowError, StorageError, WarmTierError
from ..logs import get_logger
from ..observability import set_outbox_lag
from ..records import OutboxRow
from .base import Projection, event_row, is_terminal, run_columns, state_hash

if TYPE_CHECKING:
    from .mirror import MirroringWorkflowStateAdapter

__all__ = [
    "LAG_BUCKETS",
    "PAGE_LAG_SECONDS",
    "WARN_LAG_SECONDS",
    "OutboxDrainer",
    "OutboxStatus",
    "outbox_status",
]

log = get_logger("starflow.warm")

#: Lag above which the drainer logs a warning (the state model's "alert at >2s").
WARN_LAG_SECONDS = 2.0
#: Lag above which the drainer logs an error (the state model's "page at >30s").
PAGE_LAG_SECONDS = 30.0
#: Age buckets of the lag gauge: (label, lower edge in seconds), ascending.
LAG_BUCKETS: tuple[tuple[str, float], ...] = (
    ("lt_1s", 0.0),
    ("1s_2s", 1.0),
    ("2s_30s", 2.0),
    ("gt_30s", 30.0),
)

BATCH_SIZE = 500
DRAIN_POLL_SECONDS = 0.25
MAX_BACKOFF_SECONDS = 5.0
LAG_CHECK_SECONDS = 1.0
LAG_REPEAT_SECONDS = 30.0
PRUNE_EVERY_SECONDS = 60.0
SWEEP_LIMIT = 1000


class OutboxStatus(msgspec.Struct, frozen=True, kw_only=True):
    """The outbox lag gauge and the drainer's counters.

    Attributes:
        pending: Unapplied outbox rows in this workspace/env.
        oldest_age_seconds: Age of the oldest unapplied row (0 when none).
        buckets: Unapplied rows by age bucket (see :data:`LAG_BUCKETS`; the same
            labels as ``starflow.observability.OUTBOX_AGE_BUCKETS``).
        level: ``ok``, ``warn`` (lag > 2 s) or ``page`` (lag > 30 s).
        warm: The warm tier's URL (no credentials), if this process has one.
        warm_healthy: Whether the last drain attempt reached the warm tier
            (``None`` before the first attempt or without a drainer).
        last_error: The last warm-tier or storage error the drainer saw.
        applied: Rows this process's drainer applied since it started.
        drift_corrections: Runs whose warm projection the sweep or end-of-run
            reconciliation reset from cold.
        drift_sweeps: Completed drift-sweep passes.
        last_applied_at: When the drainer last applied a batch.
    """

    pending: int
    oldest_age_seconds: float
    buckets: dict[str, int]
    level: str
    warm: str | None = None
    warm_healthy: bool | None = None
    last_error: str | None = None
    applied: int = 0
    drift_corrections: int = 0
    drift_sweeps: int = 0
    last_applied_at: datetime | None = None


def lag_level(age: float) -> str:
    """``ok``, ``warn`` or ``page`` for an oldest-pending age in seconds."""
    if age > PAGE_LAG_SECONDS:
        return "page"
    if age > WARN_LAG_SECONDS:
        return "warn"
    return "ok"


async def outbox_status(adapter: WorkflowStateAdapter, now: datetime,
                        drainer: OutboxDrainer | None = None, *, warm: str | None = None
                        ) -> OutboxStatus:
    """Read the lag gauge (one query) and add the drainer's counters."""
    edges = [edge for _, edge in LAG_BUCKETS[1:]]
    lag = await adapter.outbox_lag(now, edges)
    older = (lag.pending, *lag.older_than, 0)
    buckets = {label: older[i] - older[i + 1] for i, (label, _) in enumerate(LAG_BUCKETS)}
    age = 0.0
    if lag.oldest_created_at is not None:
        age = max(0.0, (now - lag.oldest_created_at).total_seconds())
    extra: dict[str, Any] = {}
    if drainer is not None:
        extra = {"warm": drainer.warm.url, "warm_healthy": drainer.warm_healthy,
                 "last_error": drainer.last_error, "applied": drainer.applied,
                 "drift_corrections": drainer.corrections, "drift_sweeps": drainer.sweeps,
                 "last_applied_at": drainer.last_applied_at}
    elif warm is not None:
        extra = {"warm": warm}
    return OutboxStatus(pending=lag.pending, oldest_age_seconds=age, buckets=buckets,
                        level=lag_level(age), **extra)


def _projection(row: OutboxRow) -> Projection:
    payload = row.payload if isinstance(row.payload, dict) else {"value": row.payload}
    return Projection(seq=row.id, kind=row.kind, run_id=row.run_id, payload=payload)


class OutboxDrainer:
    """Drains one mirror's outbox into its warm tier, and keeps the two in step.

    Args:
        mirror: The mirroring adapter (its cold adapter holds the outbox).
        clock: The runtime's clock (all waits and timestamps).
        config: ``outbox_retention`` and ``drift_sweep_interval``.
    """

    def __init__(self, mirror: MirroringWorkflowStateAdapter, *, clock: Clock,
                 config: StarflowConfig, batch_size: int = BATCH_SIZE) -> None:
        self.mirror = mirror
        self.adapter: WorkflowStateAdapter = mirror.inner
        self.warm = mirror.warm
        self.clock = clock
        self.config = config
        self.batch_size = batch_size
        self.applied = 0
        self.corrections = 0
        self.sweeps = 0
        self.warm_healthy: bool | None = None
        self.last_error: str | None = None
        self.last_applied_at: datetime | None = None
        self._lock = anyio.Lock()
        self._wake: anyio.Event | None = None
        self._level = "ok"
        self._level_logged_at: datetime | None = None
        self._lag_checked_at: datetime | None = None
        self._pruned_at: datetime | None = None

    @property
    def _log(self) -> Any:
        return log.bind(workspace=self.adapter.workspace_id, env=self.adapter.env,
                        warm=self.warm.url)

    # -- loops -----------------------------------------------------------------

    async def run(self) -> None:
        """Drain continuously and sweep periodically until cancelled."""
        self._wake = anyio.Event()

        def wake() -> None:
            if self._wake is not None:
                self._wake.set()

        remove = self.mirror.on_commit(wake)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._drain_loop)
                tg.start_soon(self._sweep_loop)
        finally:
            remove()

    async def _drain_loop(self) -> None:
        backoff = 0.0
        while True:
            assert self._wake is not None
            wake = self._wake
            drained = 0
            try:
                drained = await self.drain_once()
            except (WarmTierError, StorageError) as exc:
                backoff = min(MAX_BACKOFF_SECONDS, max(0.1, backoff * 2))
                if self.last_error != str(exc):
                    self._log.warning("outbox drain failed; retrying with backoff",
                                      error=str(exc), backoff=backoff)
                self.last_error = str(exc)
            else:
                if backoff:
                    self._log.info("outbox drain recovered")
                backoff = 0.0
            await self._housekeeping()
            if backoff:
                await self.clock.sleep(backoff)
            elif drained < self.batch_size:
                if wake.is_set():
                    self._wake = anyio.Event()
                else:
                    await self._wait(wake, DRAIN_POLL_SECONDS)
                    self._wake = anyio.Event()

    async def _wait(self, event: anyio.Event, seconds: float) -> None:
        await wait_event(self.clock, event, seconds)

    async def _sweep_loop(self) -> None:
        interval = self.config.drift_sweep_interval.total_seconds()
        while True:
            await self.clock.sleep(interval)
            try:
                await self.sweep_once()
            except (WarmTierError, StorageError) as exc:
                self._log.warning("drift sweep failed", error=str(exc))

    async def _housekeeping(self) -> None:
        now = self.clock.now()
        if self._lag_checked_at is None or (
                now - self._lag_checked_at).total_seconds() >= LAG_CHECK_SECONDS:
            self._lag_checked_at = now
            try:
                await self.check_lag()
            except StarflowError as exc:
                self._log.warning("outbox lag check failed", error=str(exc))
        if self._pruned_at is None or (
                now - self._pruned_at).total_seconds() >= PRUNE_EVERY_SECONDS:
            self._pruned_at = now
            try:
                await self.prune()
            except StarflowError as exc:
                self._log.warning("outbox prune failed", error=str(exc))

    # -- one step each (public for tests and tools) ------------------------------

    async def drain_once(self) -> int:
        """Apply one batch of pending rows to the warm tier; return how many.

        Raises:
            WarmTierError: the warm tier failed (nothing marked applied).
            StorageError: the cold tier failed.
        """
        async with self._lock:
            rows = await self.adapter.pending_outbox(limit=self.batch_size)
            if not rows:
                return 0
            batch = [_projection(r) for r in rows]
            try:
                await self.warm.apply(batch)
            except WarmTierError:
                self.warm_healthy = False
                raise
            self.warm_healthy = True
            now = self.clock.now()
            await self.adapter.mark_outbox_applied([r.id for r in rows], now=now)
            self.applied += len(rows)
            self.last_applied_at = now
            self.last_error = None
            ended = [p.run_id for p in batch if p.kind == "run" and p.run_id is not None
                     and is_terminal(p.payload.get("columns", {}).get("status"))]
            if ended:
                # End-of-run reconciliation: the per-run safety net.
                await self._compare_and_fix(dict.fromkeys(ended), source="end_of_run")
            return len(rows)

    async def drain(self, *, max_batches: int = 1000) -> int:
        """Drain until nothing is pending (or ``max_batches``); return rows applied."""
        total = 0
        for _ in range(max_batches):
            n = await self.drain_once()
            total += n
            if n < self.batch_size:
                break
        return total

    async def prune(self) -> int:
        """Delete applied rows older than ``config.outbox_retention``."""
        removed = await self.adapter.prune_outbox(self.clock.now() - self.config.outbox_retention)
        if removed:
            self._log.debug("applied outbox rows pruned", count=removed)
        return removed

    async def status(self) -> OutboxStatus:
        """The lag gauge plus this drainer's counters."""
        return await outbox_status(self.adapter, self.clock.now(), self)

    async def check_lag(self) -> OutboxStatus:
        """Read the gauge and log: warning past 2 s of lag, error (page) past 30 s."""
        status = await self.status()
        set_outbox_lag(status.buckets)  # the Prometheus gauge, when metrics are enabled
        now = self.clock.now()
        level = status.level
        repeat = self._level_logged_at is None or (
            now - self._level_logged_at).total_seconds() >= LAG_REPEAT_SECONDS
        if level != self._level or (level != "ok" and repeat):
            fields = {"pending": status.pending, "lag_seconds": round(status.oldest_age_seconds, 3),
                      "buckets": status.buckets, "last_error": status.last_error}
            if level == "page":
                self._log.error("outbox lag past 30 s: warm tier is drifting (page)", **fields)
            elif level == "warn":
                self._log.warning("outbox lag past 2 s: warm tier is behind", **fields)
            elif self._level != "ok":
                self._log.info("outbox lag back under 2 s", **fields)
            self._level = level
            self._level_logged_at = now
        return status

    async def sweep_once(self) -> int:
        """One drift-sweep pass; returns how many runs it corrected."""
        async with self._lock:
            now = self.clock.now()
            window = self.config.drift_sweep_interval * 2
            ids: dict[str, None] = {}
            for status in ("queued", "running", "paused"):
                for run in await self.adapter.list_runs(status=status, limit=SWEEP_LIMIT):
                    ids[run.id] = None
            for run in await self.adapter.list_runs(since=now - window, limit=SWEEP_LIMIT):
                ids[run.id] = None
            # Runs the warm tier shows as live although cold may have ended or lost them.
            for state in await self.warm.live_runs():
                run_id = state.get("id")
                if isinstance(run_id, str):
                    ids[run_id] = None
            fixed = await self._compare_and_fix(ids, source="sweep")
            self.sweeps += 1
            return fixed

    async def reconcile(self, run_id: str) -> bool:
        """Compare one run's warm projection with cold and fix it; True if it was wrong."""
        async with self._lock:
            return await self._compare_and_fix({run_id: None}, source="reconcile") > 0

    # -- compare and fix (called with the lock held) -----------------------------

    async def _cold_projection(self, run_id: str
                               ) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        run = await self.adapter.get_run(run_id)
        if run is None:
            return None, []
        events = await self.adapter.list_events(run_id)
        return run_columns(run), [event_row(e) for e in events]

    async def _compare_and_fix(self, run_ids: Iterable[str], *, source: str) -> int:
        ids = list(run_ids)
        if not ids:
            return 0
        # Cold first, then the outbox: a write that commits after the cold read
        # has a pending row, so its run is skipped (lag, not drift).
        cold = {run_id: await self._cold_projection(run_id) for run_id in ids}
        pending = await self.adapter.pending_outbox(limit=SWEEP_LIMIT * 10)
        if len(pending) >= SWEEP_LIMIT * 10:
            self._log.info("drift check skipped: outbox backlog", pending=len(pending))
            return 0
        busy = {r.run_id for r in pending}
        ids = [i for i in ids if i not in busy]
        warm = await self.warm.hashes(ids)
        fixes: list[Projection] = []
        for run_id in ids:
            columns, events = cold[run_id]
            if state_hash(columns, events) == warm.get(run_id):
                continue
            fixes.append(Projection(seq=0, kind="reset", run_id=run_id,
                                    payload={"run_id": run_id, "columns": columns,
                                             "events": events}))
        if fixes:
            await self.warm.apply(fixes)
            self.corrections += len(fixes)
            for p in fixes:
                self._log.warning("warm projection drifted from cold; corrected",
                                  run_id=p.run_id, source=source)
        return len(fixes)

