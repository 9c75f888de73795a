"""Workers: claim queued runs for a pool, drive them, drain on shutdown."""

from __future__ import annotations

from datetime import datetime

import anyio
import anyio.abc

from .. import observability
from ..clock import wait_event
from ..config import check_concurrency
from ..errors import (
    CodecError,
    ConfigError,
    StarflowError,
    StorageError,
    WorkflowDefinitionError,
)
from ..logs import get_logger
from ..records import RunInfo
from ..workflow.decorators import registry
from .driving import BusyScope
from .maintenance import Maintenance
from .runner import Runner

__all__ = ["Worker"]

log = get_logger("starflow.worker")


class Worker:
    """Claims runs queued for ``pool`` and drives up to ``concurrency`` at once.

    ``await worker.run()`` first runs one lease-sweep pass (boot-time orphan
    reconciliation), then claims and drives runs, plus the maintenance loops
    (sweep, timers) when it was given them. It only claims runs of workflows
    registered in this process; one whose version is not registered here is
    handed back to the queue for a worker that has it.

    ``worker.stop()`` (SIGTERM or SIGINT in ``starflow worker``) drains it: no
    new claims; each active run finishes, pauses, or is handed back to the
    queue at its next step boundary; whatever still runs after ``grace``
    seconds is cancelled and its lease released, so another worker takes over
    at once. ``await worker.drain()`` stops it and waits for that.

    Args:
        runner: The process's runner.
        pool: Claim runs queued for this pool (and runs with no pool).
        concurrency: Most runs driven at once.
        maintenance: Background loops to run alongside (lease sweep, timers).
        grace: Seconds a drain waits for active runs before cancelling them.
        fires_timers: Whether this process fires due timers (this worker's
            ``maintenance``, or the app's own). If not, :meth:`run` warns at start:
            sleeps and ``wait_for`` timeouts then wait for another process.
            Default: whether ``maintenance`` is given.
        metrics_interval: With Prometheus metrics enabled
            (``starflow.observability.enable_metrics``), read the queue per pool
            every this many seconds (one query) and publish it as
            ``starflow_queue_depth``, ``starflow_queue_oldest_age_seconds`` and
            ``starflow_runs_running``. Nothing is read without metrics.
    """

    def __init__(self, runner: Runner, *, pool: str | None = None, concurrency: int = 16,
                 maintenance: Maintenance | None = None, grace: float = 30.0,
                 fires_timers: bool | None = None, metrics_interval: float = 15.0) -> None:
        check_concurrency(concurrency)
        if grace < 0:
            raise ConfigError(f"grace must be >= 0 seconds: {grace!r}")
        if not metrics_interval > 0:
            raise ConfigError(f"metrics_interval must be > 0 seconds: {metrics_interval!r}")
        self.metrics_interval = float(metrics_interval)
        self.runner = runner
        self.pool = pool
        self.concurrency = concurrency
        self.maintenance = maintenance
        self.grace = float(grace)
        #: Whether due timers fire in this process (see ``fires_timers``).
        self.fires_timers = maintenance is not None if fires_timers is None else fires_timers
        self.active = 0
        self.completed = 0
        #: Runs this worker handed back to the queue (drain, unknown version).
        self.released = 0
        self._driving: set[str] = set()
        self._stopping = anyio.Event()
        self._hurry = anyio.Event()
        self._stopped = anyio.Event()
        self._running = False
        self._backoff = False
        #: When the grace period of a drain began (clock time), once it has.
        self.draining_since: datetime | None = None
        #: The earliest start time of a run started for later (#30) as last read,
        #: and when to look at those again (None: at the next claim).
        self.next_start: datetime | None = None
        self._starts_due_at: datetime | None = None
        self._log = log.bind(runner_id=runner.runner_id, pool=pool)

    @property
    def stopping(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stopping.is_set()

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming and drain; :meth:`run` returns once active runs are done.

        Safe to call from a signal handler task, and more than once: a second
        call may shorten the grace period (``stop(0)`` cancels active runs now).
        """
        if grace is not None:
            self.grace = max(0.0, float(grace))
        if self._stopping.is_set():
            self._hurry.set()
            self._hurry = anyio.Event()
        self._stopping.set()

    async def drain(self, grace: float | None = None) -> None:
        """:meth:`stop`, then wait until :meth:`run` has returned."""
        self.stop(grace)
        if self._running:
            await self._stopped.wait()

    # -- claiming ------------------------------------------------------------------

    async def claim_once(self, tg: anyio.abc.TaskGroup) -> int:
        """Claim as many runs as there are free slots and start driving them.

        First, when one may be due, the runs started for later whose time came
        are queued (:meth:`queue_due_starts`).
        """
        free = self.concurrency - self.active
        if free <= 0:
            return 0
        runner = self.runner
        now = runner.clock.now()
        if self._starts_due_at is None or now >= self._starts_due_at:
            await self.queue_due_starts(now)
        claimed = await runner.adapter.claim_runs(
            runner.runner_id, pool=self.pool, now=now,
            lease_until=now + runner.config.lease_ttl, limit=free,
            workflows=registry.names())
        for run in claimed:
            self.active += 1
            busy = runner.busy_scope()  # counted now: the process is not idle meanwhile
            self._driving.add(run.id)
            tg.start_soon(self._drive, run, busy)
        return len(claimed)

    async def queue_due_starts(self, now: datetime) -> None:
        """Queue the delayed starts due at ``now``; note when the next one is due.

        Looked at again at the next start time, at the latest one poll interval
        on (a start for earlier may have been written since), and after each
        idle wait (whatever woke the worker may be such a start).
        """
        due = await self.runner.adapter.queue_due_starts(now)
        if due.queued:
            self._log.debug("queued delayed starts", count=len(due.queued))
        self.next_start = due.next_start
        recheck = now + self.runner.config.poll_interval
        self._starts_due_at = recheck if due.next_start is None else min(due.next_start,
                                                                         recheck)

    async def _drive(self, run: RunInfo, busy: BusyScope) -> None:
        """Drive a claimed run; ``busy`` (counted at the claim) ends with it."""
        with busy:
            await self._drive_claimed(run)

    async def _drive_claimed(self, run: RunInfo) -> None:
        runner = self.runner
        try:
            await self._stop_stale_engine(run.id)
            if self._stopping.is_set():
                if await runner.release(run.id, "worker draining"):
                    self.released += 1
                return
            try:
                engine = await runner.prepare(run, should_yield=self._stopping.is_set)
            except StorageError as exc:
                await self._start_failed(run, exc)
                return
            try:
                handle = await runner.drive_engine(engine)
            except anyio.get_cancelled_exc_class():
                self.released += 1  # the engine handed the run back as it unwound
                raise
            if handle.status == "queued":
                self.released += 1
        except (WorkflowDefinitionError, CodecError) as exc:
            # Claimed by name, but this version is not registered here, or this
            # process's codec lacks the key the run's values were encrypted with
            # (a rolling deploy): hand it back so a worker that has it takes it.
            self._log.error("claimed a run this process cannot execute; releasing it",
                            run_id=run.id, workflow=run.template_id,
                            version=run.workflow_version, error=str(exc))
            self._backoff = True
            try:
                if await runner.release(run.id, "workflow not registered"):
                    self.released += 1
            except StarflowError as exc2:
                self._log.error("could not release the run; the sweep will", run_id=run.id,
                                error=str(exc2))
        except StarflowError as exc:
            if runner.stopped(exc):
                # Stopped by this process's owner (Runner.stop): not a failure and not
                # a takeover; the sweep recovers the run once its lease expires.
                self._log.info("execution stopped by its owner", run_id=run.id,
                               reason=str(exc))
            else:
                self._log.error("run failed to drive", run_id=run.id, error=str(exc))
        finally:
            self._driving.discard(run.id)
            self.active -= 1
            self.completed += 1
            runner.notify_settled()

    async def _start_failed(self, run: RunInfo, exc: StorageError) -> None:
        """A read between the claim and the engine start failed: hand the run back now.

        Logged once. The worker backs off a poll interval before claiming
        again, so it does not spin on a run whose reads keep failing.
        """
        self._backoff = True
        try:
            action = await self.runner.hand_back(run, exc)
        except StarflowError as exc2:
            self._log.error("could not start a claimed run nor hand it back; the sweep will "
                            "requeue it once its lease expires", run_id=run.id, error=str(exc),
                            hand_back_error=str(exc2))
            return
        if action == "requeued":
            self.released += 1
            self._log.warning("could not start a claimed run; handed it back to the queue",
                              run_id=run.id, error=str(exc),
                              claim_attempts=run.claim_attempts)
        elif action == "abandoned":
            self._log.error("could not start a claimed run and its claims are used up; "
                            "abandoned it", run_id=run.id, error=str(exc),
                            claim_attempts=run.claim_attempts)
        else:
            self._log.warning("could not start a claimed run, whose lease is gone already",
                              run_id=run.id, error=str(exc))

    async def _stop_stale_engine(self, run_id: str) -> None:
        """Stop an engine of this process still driving ``run_id`` from an older claim.

        The sweep requeued the run while that engine stalled, and this runner
        claimed it again: both would hold a lease with the same ``leased_by``,
        so the stale one must end (writing nothing more) before a new one starts.
        """
        runner = self.runner
        while (stale := runner.engines.get(run_id)) is not None:
            self._log.warning("stopping a stale execution of a reclaimed run", run_id=run_id)
            stale.kill()
            await runner.settled.wait()

    # -- the loop ------------------------------------------------------------------

    async def run(self) -> None:
        """Sweep once, then claim and drive runs until :meth:`stop`; then drain."""
        if self._running or self._stopped.is_set():
            raise StarflowError("a Worker runs once: create another one with sf.worker()")
        self._running = True
        self._log.info("worker started", concurrency=self.concurrency)
        if not self.fires_timers:
            self._log.warning(
                "this worker fires no durable timers (timers=False, starflow worker "
                "--no-timers) and this process runs no maintenance: runs paused on "
                "sleep() or a wait_for() timeout stay paused past their deadline unless "
                "a starflow server, a worker with timers or one with --maintenance runs "
                "against this database")
        try:
            await self._boot_sweep()
            async with anyio.create_task_group() as tg:
                if self.maintenance is not None:
                    tg.start_soon(self._maintenance, self.maintenance)
                if observability.current().metrics is not None:
                    tg.start_soon(self._queue_metrics)
                async with anyio.create_task_group() as runs:
                    while not self._stopping.is_set():
                        if self._backoff:
                            # Before the next claim: a run just handed back (a version
                            # not registered here, a failed start) is not re-claimed
                            # by this worker at once.
                            self._backoff = False
                            await self._pause(self.runner.config.poll_interval.total_seconds())
                            continue
                        # Taken before the claim: a run queued in this process after
                        # an empty claim wakes the idle wait below at once.
                        settled = self.runner.settled
                        try:
                            n = await self.claim_once(runs)
                        except StarflowError as exc:
                            self._log.error("claim failed", error=str(exc))
                            n = 0
                        if n == 0 and not self._backoff:
                            await self._idle(settled)
                    if self.active:
                        self._log.info("draining", active=self.active, grace=self.grace)
                        tg.start_soon(self._grace_period, runs.cancel_scope)
                tg.cancel_scope.cancel()
        finally:
            self._running = False
            self._stopped.set()
        self._log.info("worker stopped", completed=self.completed, released=self.released)

    async def _boot_sweep(self) -> None:
        try:
            if self.maintenance is not None:
                await self.maintenance.sweep_once()
            else:
                await self.runner.sweep()
        except StarflowError as exc:
            self._log.error("boot-time lease sweep failed", error=str(exc))

    @staticmethod
    async def _maintenance(maintenance: Maintenance) -> None:
        await maintenance.run(sweep_now=False)

    async def publish_queue_metrics(self) -> None:
        """Read the queue per pool once and set the queue gauges (with metrics on)."""
        now = self.runner.clock.now()
        stats = await self.runner.adapter.queue_stats(now)
        observability.set_queue_stats(stats, now)

    async def _queue_metrics(self) -> None:
        """Publish the queue gauges every ``metrics_interval`` until the worker stops."""
        while not self._stopping.is_set():
            try:
                await self.publish_queue_metrics()
            except StarflowError as exc:
                self._log.warning("reading the queue metrics failed", error=str(exc))
            await self._pause(self.metrics_interval)

    async def _grace_period(self, runs: anyio.CancelScope) -> None:
        """Cancel the runs still active ``grace`` seconds after the drain began."""
        clock = self.runner.clock
        began = self.draining_since = clock.now()
        while True:
            remaining = self.grace - (clock.now() - began).total_seconds()
            if remaining <= 0:
                break
            await wait_event(clock, self._hurry, remaining)
        self._log.warning("grace period over; cancelling active runs and releasing them",
                          active=sorted(self._driving))
        runs.cancel()

    async def _pause(self, seconds: float) -> None:
        """Sleep ``seconds`` of clock time unless the worker is stopped first."""
        await wait_event(self.runner.clock, self._stopping, seconds)

    async def _idle(self, settled: anyio.Event) -> None:
        # Until work is announced, or the next delayed start is due (#30).
        timeout = None
        if self.next_start is not None:
            timeout = max(0.0, (self.next_start - self.runner.clock.now()).total_seconds())
        await self.runner.wait_for_work(self._stopping, settled, timeout=timeout)
        self._starts_due_at = None
