"""Server background tasks: the lease sweep, durable timers, cron schedules,
session-var GC, and (with a warm tier) the outbox drainer and drift sweep.

The state model's starflow-server runs the sweep once at boot and then every
``sweep_interval``; starflow runs these loops in ``Starflow.open`` (unless
``maintenance=False``), in ``starflow server``, or in a worker started with
``maintenance=True``. Every action is guarded in the database, so several
processes may run maintenance against one database at once.
"""

from __future__ import annotations

import anyio

from .adapters.mirroring import find_mirror
from .clock import wait_event
from .errors import StarflowError
from .logs import get_logger
from .runner import Runner
from .schedules import ScheduleLoop
from .warm.drainer import OutboxDrainer

__all__ = ["Maintenance"]

log = get_logger("starflow.maintenance")


class Maintenance:
    """The background loops of one process.

    Args:
        runner: The process's runner.
        poll: Whether to poll the database for timers registered by other
            processes (off for a private in-memory database).
    """

    def __init__(self, runner: Runner, *, poll: bool = True) -> None:
        self.runner = runner
        self.poll = poll
        self._firing: set[tuple[str, str]] = set()
        self.sweeps = 0
        #: Starts the due ticks of cron schedules (#18).
        self.schedules = ScheduleLoop(runner, poll=poll)
        #: The outbox drainer and drift sweep, when the adapter mirrors to a warm tier.
        self.drainer: OutboxDrainer | None = None
        mirror = find_mirror(runner.adapter)
        if mirror is not None:
            self.drainer = OutboxDrainer(mirror, clock=runner.clock, config=runner.config)

    async def run(self, *, sweep_now: bool = True) -> None:
        """Run every loop until cancelled.

        Args:
            sweep_now: Run the boot-time sweep pass first (False when the caller,
                a worker, just ran it before claiming).
        """
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._sweep_loop, sweep_now)
            tg.start_soon(self._timer_loop)
            tg.start_soon(self._session_gc_loop)
            tg.start_soon(self.schedules.run)
            if self.drainer is not None:
                tg.start_soon(self.drainer.run)

    async def sweep_once(self) -> int:
        self.runner.busy += 1
        try:
            return await self.runner.sweep()
        finally:
            self.runner.busy -= 1
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

    async def fire_due(self, tg: anyio.abc.TaskGroup) -> int:
        """Start a wake for every due timer not already being fired."""
        due = await self.runner.due_timers()
        started = 0
        for wait in due:
            key = (wait.run_id, wait.node_id)
            if key in self._firing:
                continue
            self._firing.add(key)
            self.runner.busy += 1
            started += 1
            tg.start_soon(self._fire, wait, key)
        return started

    async def _fire(self, wait: object, key: tuple[str, str]) -> None:
        from .adapters.base import WaitRecord

        assert isinstance(wait, WaitRecord)
        try:
            await self.runner.fire_timer(wait)
        except StarflowError as exc:
            log.error("timer wake failed", run_id=wait.run_id, node_id=wait.node_id,
                      error=str(exc))
        finally:
            self._firing.discard(key)
            self.runner.busy -= 1
            self.runner.notify_timers()

    async def _timer_loop(self) -> None:
        runner = self.runner
        clock = runner.clock
        poll = runner.config.poll_interval.total_seconds()
        async with anyio.create_task_group() as tg:
            while True:
                changed = runner.timers_changed
                try:
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

