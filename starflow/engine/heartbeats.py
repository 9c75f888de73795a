"""One task that refreshes the lease of every run this runner executes.

The engines of a runner register here while their body runs; each is
refreshed ``heartbeat_interval`` after it started and after each refresh.
"""

from __future__ import annotations

import heapq
from datetime import datetime
from typing import Protocol

import anyio
import anyio.abc

from ..clock import Clock, wait_event
from ..config import StarflowConfig

__all__ = ["Heartbeats", "Leaseholder"]


class Leaseholder(Protocol):
    """What the heartbeat loop refreshes: an engine executing a run."""

    async def refresh_lease_once(self) -> bool:
        """One refresh; False once the lease is found lost (stop refreshing it)."""
        ...

    # Optional: ``async def after_refresh(self) -> None``, awaited at each heartbeat
    # once the next one is scheduled (so its time does not move the schedule): an
    # engine looks for a cancel request there.


class Heartbeats:
    """One task that refreshes the lease of every engine of a runner.

    Each engine is refreshed ``heartbeat_interval`` after it started and then
    after each refresh, exactly as with a task per engine, without the cost of
    starting and cancelling a task for every run execution. While no engine
    runs, the loop holds no timer (so a fake clock has nothing to skip to).
    """

    def __init__(self, clock: Clock, config: StarflowConfig) -> None:
        self._clock = clock
        self._interval = config.heartbeat_interval
        self._due: list[tuple[datetime, int, Leaseholder]] = []
        self._active: set[int] = set()
        self._seq = 0
        self._changed = anyio.Event()
        self.running = False

    def add(self, holder: Leaseholder) -> None:
        """Start refreshing ``holder``'s lease."""
        self._active.add(id(holder))
        self._schedule(holder)

    def remove(self, holder: Leaseholder) -> None:
        """Stop refreshing ``holder``'s lease (its entry is dropped when due)."""
        self._active.discard(id(holder))

    def _schedule(self, holder: Leaseholder) -> None:
        self._seq += 1
        entry = (self._clock.now() + self._interval, self._seq, holder)
        heapq.heappush(self._due, entry)
        # The task sleeps until the earliest entry: wake it only if this one is
        # now the earliest. With one interval for all, a new entry is never
        # earlier than a live one, so a run starting while others hold leases
        # costs the task nothing (waking it per run was a tenth of a short
        # run's CPU).
        if self._due[0] is entry:
            self._changed.set()

    async def run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
                  ) -> None:
        """Refresh due leases until cancelled (``await tg.start(heartbeats.run)``)."""
        self.running = True
        task_status.started()
        try:
            async with anyio.create_task_group() as tg:
                while True:
                    now = self._clock.now()
                    due = self._due
                    while due and (due[0][0] <= now or id(due[0][2]) not in self._active):
                        # Due, or of an holder that stopped: either way off the heap,
                        # so the task never sleeps until a run that is over.
                        _, _, holder = heapq.heappop(due)
                        if id(holder) in self._active:
                            tg.start_soon(self._refresh, holder)
                    changed = self._changed
                    delay = ((self._due[0][0] - now).total_seconds() if self._due else None)
                    await wait_event(self._clock, changed, delay)
                    if changed.is_set():
                        self._changed = anyio.Event()
        finally:
            self.running = False

    async def _refresh(self, holder: Leaseholder) -> None:
        if await holder.refresh_lease_once() and id(holder) in self._active:
            self._schedule(holder)
            after = getattr(holder, "after_refresh", None)
            if after is not None:
                await after()
