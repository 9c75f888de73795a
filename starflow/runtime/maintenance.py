"""Server background tasks: the lease sweep, durable timers, cron schedules,
session-var GC, and (with a warm tier) the outbox drainer and drift sweep.

The state model's starflow-server runs the sweep once at boot and then every
``sweep_interval``; starflow runs these loops in ``starflow server``, in a
worker started with ``maintenance=True`` (``starflow worker --maintenance``),
or in an app opened with ``Starflow.open(maintenance=True)``. Every other
worker runs the timer loop alone (``timers_only``): a plain ``starflow
worker`` fires due timers. An app opened without them fires only its own
inline runs' timers (:class:`InlineTimers`). Every action is guarded in the
database, so several processes may run maintenance (or timers) against one
database at once: of several processes firing one timer, exactly one wake
holds its guard (the run still paused at that wait), the others write nothing.
"""

from __future__ import annotations

import random
from datetime import datetime

import anyio

from ..admin.retention import prune_runs
from ..clock import wait_event
from ..errors import StarflowError
from ..logs import get_logger
from ..records import RunInfo, WaitRecord
from ..warm.drainer import OutboxDrainer
from ..warm.mirror import find_mirror
from .driving import BusyScope
from .runner import Runner
from .schedules import ScheduleLoop

__all__ = ["InlineTimers", "Maintenance"]

log = get_logger("starflow.maintenance")

#: The second half of the ``firing`` key of a queued run being ended at its
#: deadline (the first is the run id; a node id never reads so).
DEADLINE_KEY = "deadline"


class Maintenance:
    """The background loops of one process.

    Args:
        runner: The process's runner.
        poll: Whether to poll the database for timers registered by other
            processes (off for a private in-memory database).
        full: Run the server's loops (sweep, every run's timers, session-var
            GC). False, a client's share: only the timers of the inline runs
            this process paused (:attr:`inline_timers`).
        drain: Run the outbox drainer when the adapter mirrors to a warm tier
            (False when another Maintenance of the process drains it already).
        firing: The (run id, node id) of the timers being fired, shared with
            another Maintenance of the process so that one timer is fired once.
        timers_only: Run only the timer loop (every run's due timers, queued
            runs past their deadline): a worker's share, ``sf.worker()``'s
            default. No sweep loop, schedules, session-var GC nor drainer.
    """

    def __init__(self, runner: Runner, *, poll: bool = True, full: bool = True,
                 drain: bool = True, firing: set[tuple[str, str]] | None = None,
                 timers_only: bool = False) -> None:
        self.runner = runner
        self.poll = poll
        self.full = full
        self.timers_only = timers_only
        if timers_only:
            full, drain = True, False
        #: Timers being fired now (shared by the process's timer loops).
        self.firing: set[tuple[str, str]] = firing if firing is not None else set()
        self.sweeps = 0
        #: A client's timers (``full=False``): its own inline runs'.
        self.inline_timers: InlineTimers | None = (
            None if full else InlineTimers(runner, firing=self.firing))
        #: Starts the due ticks of cron schedules (#18): a server's loop only.
        self.schedules: ScheduleLoop | None = (
            ScheduleLoop(runner, poll=poll) if full and not timers_only else None)
        #: The outbox drainer and drift sweep, when the adapter mirrors to a warm tier.
        self.drainer: OutboxDrainer | None = None
        mirror = find_mirror(runner.adapter)
        if mirror is not None and drain:
            self.drainer = OutboxDrainer(mirror, clock=runner.clock, config=runner.config)

    async def run(self, *, sweep_now: bool = True) -> None:
        """Run every loop until cancelled.

        Args:
            sweep_now: Run the boot-time sweep pass first (False when the caller,
                a worker, just ran it before claiming).
        """
        async with anyio.create_task_group() as tg:
            if self.inline_timers is not None:
                tg.start_soon(self.inline_timers.run)
            elif self.timers_only:
                tg.start_soon(self._timer_loop)
            else:
                tg.start_soon(self._sweep_loop, sweep_now)
                tg.start_soon(self._stuck_loop)
                tg.start_soon(self._timer_loop)
                tg.start_soon(self._session_gc_loop)
                if self.runner.config.retention is not None:
                    tg.start_soon(self._prune_loop)
            if self.schedules is not None:
                tg.start_soon(self.schedules.run)
            if self.drainer is not None:
                tg.start_soon(self.drainer.run)

    async def sweep_once(self) -> int:
        try:
            with self.runner.busy_scope():
                return await self.runner.sweep()
        finally:
            self.sweeps += 1

    async def _sweep_loop(self, sweep_now: bool = True) -> None:
        interval = self.runner.config.sweep_interval.total_seconds()
        if not sweep_now:
            await self.runner.clock.sleep(interval)
        while True:
            try:
                await self.sweep_once()
            except StarflowError as exc:
                log.error("lease sweep failed", error=str(exc))
            await self.runner.clock.sleep(interval)

    async def _stuck_loop(self) -> None:
        """At the sweep interval, warn about queued runs no worker claims (issue #20),
        and wake paused parents whose awaited child has ended (#17: the child's
        runner died between the child's end and the wake).

        A loop of its own, so the sweep pass stays one write and its timing is
        unchanged."""
        interval = self.runner.config.sweep_interval.total_seconds()
        while True:
            await self.runner.clock.sleep(interval)
            try:
                await self.runner.warn_stuck()
            except StarflowError as exc:
                log.error("stuck-run check failed", error=str(exc))
            await self.runner.wake_stranded_parents()

    async def fire_due(self, tg: anyio.abc.TaskGroup) -> int:
        """Start a wake for every due timer not already being fired, and end every
        queued run past its deadline (no worker has to claim it first)."""
        due = await self.runner.due_timers()
        if self.timers_only and len(due) > 1:
            # Every worker reads the same earliest-first list: each takes it in its
            # own order, so workers mostly fire different timers instead of queueing
            # on the same run rows (the losers' guarded units write nothing anyway).
            random.shuffle(due)
        started = 0
        for wait in due:
            key = (wait.run_id, wait.node_id)
            if key in self.firing:
                continue
            self.firing.add(key)
            started += 1
            tg.start_soon(self._fire, wait, key, self.runner.busy_scope())
        for run in await self.runner.due_run_deadlines():
            key = (run.id, DEADLINE_KEY)
            if key in self.firing:
                continue
            self.firing.add(key)
            started += 1
            tg.start_soon(self._time_out, run, key, self.runner.busy_scope())
        return started

    async def _time_out(self, run: RunInfo, key: tuple[str, str], busy: BusyScope) -> None:
        try:
            with busy:
                await self.runner.time_out(run)
        except StarflowError as exc:
            log.error("ending a queued run past its deadline failed", run_id=run.id,
                      error=str(exc))
        finally:
            self.firing.discard(key)
            self.runner.notify_timers()

    async def _fire(self, wait: WaitRecord, key: tuple[str, str], busy: BusyScope) -> None:
        try:
            with busy:
                await self.runner.fire_timer(wait)
        except StarflowError as exc:
            log.error("timer wake failed", run_id=wait.run_id, node_id=wait.node_id,
                      error=str(exc))
        finally:
            self.firing.discard(key)
            self.runner.notify_timers()

    async def _timer_loop(self) -> None:
        runner = self.runner
        clock = runner.clock
        poll = runner.config.poll_interval.total_seconds()
        async with anyio.create_task_group() as tg:
            while True:
                changed = runner.timers_changed
                try:
                    # One indexed read per pass while nothing is due (each worker
                    # runs this loop): the due lists are read only when a timer is.
                    nxt = await runner.adapter.next_deadline()
                    if nxt is not None and nxt <= clock.now():
                        await self.fire_due(tg)
                        nxt = await runner.adapter.next_deadline()
                except StarflowError as exc:
                    log.error("timer pass failed", error=str(exc))
                    nxt = None
                now = clock.now()
                delay: float | None = None
                if nxt is not None:
                    delay = max(0.0, (nxt - now).total_seconds())
                if self.poll:
                    delay = poll if delay is None else min(delay, poll)
                if delay is not None and delay <= 0 and nxt is not None and nxt <= now:
                    # Everything due is in flight; wait for a change instead of spinning.
                    delay = poll if self.poll else None
                await self._sleep_or_change(changed, delay)

    async def _sleep_or_change(self, changed: anyio.Event, delay: float | None) -> None:
        await wait_event(self.runner.clock, changed, delay)

    async def _session_gc_loop(self) -> None:
        interval = self.runner.config.session_var_gc_interval.total_seconds()
        while True:
            await self.runner.clock.sleep(interval)
            try:
                removed = await self.runner.adapter.expire_session_vars(self.runner.clock.now())
            except StarflowError as exc:
                log.error("session-var GC failed", error=str(exc))
                continue
            if removed:
                log.info("expired session vars removed", count=removed)


    async def prune_once(self) -> int:
        """One retention pass (``StarflowConfig.retention``): how many runs it deleted."""
        retention = self.runner.config.retention
        if retention is None:
            return 0
        report = await prune_runs(self.runner.adapter, now=self.runner.clock.now(),
                                  older_than=retention)
        return report.runs

    async def _prune_loop(self) -> None:
        """Prune at boot, then every ``prune_interval`` (issue #24). Batches are
        short transactions, so the loop never holds the tables active runs use."""
        interval = self.runner.config.prune_interval.total_seconds()
        while True:
            try:
                await self.prune_once()
            except StarflowError as exc:
                log.error("retention prune failed", error=str(exc))
            await self.runner.clock.sleep(interval)


class InlineTimers:
    """Fires the durable timers of the inline runs this process paused.

    A process that runs no maintenance (``Starflow.open()``'s default: a web
    worker, a one-shot script) still sees its own inline runs through their
    sleeps and ``wait_for`` timeouts while it stays open: ``await sf.run(wf)``
    then ``await sf.result(run_id)`` finishes a workflow that sleeps five
    seconds. It watches only the runs :meth:`track` was given (paused handles
    of ``run``, ``signal``, ``resume``, ``retry`` here), reads only their waits,
    and forgets a run once it has no timed wait left. Once the process closes,
    the timers of runs still paused are fired by a process that runs
    maintenance (``starflow server``, ``starflow worker --maintenance``).
    Firing is guarded in the database, so both may try.
    """

    def __init__(self, runner: Runner, *, firing: set[tuple[str, str]] | None = None) -> None:
        self.runner = runner
        self._runs: set[str] = set()
        self._firing: set[tuple[str, str]] = firing if firing is not None else set()
        self._changed = anyio.Event()

    @property
    def tracked(self) -> frozenset[str]:
        """The run ids watched now."""
        return frozenset(self._runs)

    def track(self, run_id: str, status: str) -> None:
        """Watch ``run_id``'s timers if it is paused (again: its wait may be a new one)."""
        if status == "paused":
            self._runs.add(run_id)
            self._changed.set()

    async def run(self) -> None:
        """Fire due timers of the tracked runs until cancelled."""
        clock = self.runner.clock
        poll = self.runner.config.poll_interval.total_seconds()
        async with anyio.create_task_group() as tg:
            while True:
                self._changed = changed = anyio.Event()
                try:
                    nearest = await self._fire_due(tg)
                except StarflowError as exc:
                    log.error("inline timer pass failed", error=str(exc))
                    await clock.sleep(poll)
                    continue
                delay = (None if nearest is None
                         else max(0.0, (nearest - clock.now()).total_seconds()))
                await wait_event(clock, changed, delay)

    async def _fire_due(self, tg: anyio.abc.TaskGroup) -> datetime | None:
        """Start a wake for each due timer; return the nearest deadline not yet due."""
        now = self.runner.clock.now()
        nearest: datetime | None = None
        for run_id in list(self._runs):
            timed = [w for w in await self.runner.adapter.list_waits(run_id)
                     if w.deadline is not None]
            if not timed:
                self._runs.discard(run_id)  # ended, or only a signal can wake it
                continue
            for wait in timed:
                assert wait.deadline is not None
                key = (wait.run_id, wait.node_id)
                if wait.deadline <= now:
                    if key not in self._firing:
                        self._firing.add(key)
                        tg.start_soon(self._fire, wait, key, self.runner.busy_scope())
                elif nearest is None or wait.deadline < nearest:
                    nearest = wait.deadline
        return nearest

    async def _fire(self, wait: WaitRecord, key: tuple[str, str], busy: BusyScope) -> None:
        try:
            with busy:
                handle = await self.runner.fire_timer(wait)
        except StarflowError as exc:
            log.error("timer wake failed", run_id=wait.run_id, node_id=wait.node_id,
                      error=str(exc))
            handle = None
        finally:
            self._firing.discard(key)
            self.runner.notify_timers()
        self._runs.discard(wait.run_id)
        if handle is not None:
            self.track(handle.run_id, handle.status)
        else:
            self._changed.set()
