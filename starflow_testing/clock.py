"""``FakeClock``: time that only moves when a test (or the environment) moves it.

It implements :class:`starflow.Clock`, so the engine's heartbeat, step retry
delays, the lease sweep, durable timers and workers all sleep on it. Each
:class:`~starflow_testing.WorkflowEnvironment` owns one; there is no global
fake time.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import anyio
import anyio.lowlevel

from starflow.workflow.context import current_engine

from ._quiesce import wait_all_tasks_blocked

__all__ = ["DEFAULT_START", "FakeClock"]

#: Where a :class:`FakeClock` starts unless told otherwise.
DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC)


@dataclass(order=True)
class _Sleeper:
    deadline: datetime
    seq: int
    event: anyio.Event = field(compare=False)
    #: Registered by a running engine outside its heartbeat: a step's retry
    #: delay or a storage-retry backoff. Time may skip to it while a run executes.
    backoff: bool = field(compare=False, default=False)
    done: bool = field(compare=False, default=False)


def _is_backoff() -> bool:
    if current_engine.get() is None:
        return False
    try:
        name = anyio.get_current_task().name or ""
    except RuntimeError:  # pragma: no cover - outside an event loop
        return False
    return "_heartbeat" not in name and "heartbeat:" not in name


class FakeClock:
    """A :class:`starflow.Clock` whose time moves only through :meth:`advance`.

    Sleepers registered with :meth:`sleep` / :meth:`sleep_until` wake when
    time reaches their deadline, earliest first.

    Args:
        start: The initial time (timezone-aware; default 2030-01-01 UTC).
        settle: Awaited after each group of sleepers is woken, before time moves
            on: it should return once the woken tasks have done their work. The
            default waits until every other task is blocked; a
            :class:`~starflow_testing.WorkflowEnvironment` installs one that also
            waits for in-flight database calls.

    Example::

        clock = FakeClock()
        async with Starflow.open("memory://", clock=clock) as sf:
            await clock.advance(timedelta(seconds=30))
    """

    def __init__(self, start: datetime | None = None, *,
                 settle: Callable[[], Awaitable[None]] | None = None) -> None:
        start = DEFAULT_START if start is None else start
        if start.tzinfo is None:
            raise ValueError(f"FakeClock start must be timezone-aware (UTC): {start!r}")
        self._now = start.astimezone(UTC)
        self._sleepers: list[_Sleeper] = []
        self._seq = itertools.count()
        self.settle: Callable[[], Awaitable[None]] = settle or wait_all_tasks_blocked
        self._listeners: list[Callable[[datetime], None]] = []
        self._changed: anyio.Event | None = None

    # -- the Clock protocol --------------------------------------------------------

    def now(self) -> datetime:
        """The current fake time (timezone-aware UTC)."""
        return self._now

    async def sleep(self, seconds: float) -> None:
        """Suspend until ``seconds`` of fake time have passed (at once if <= 0)."""
        await self.sleep_until(self._now + timedelta(seconds=max(0.0, seconds)))

    async def sleep_until(self, deadline: datetime) -> None:
        """Suspend until fake time reaches ``deadline`` (at once if it has)."""
        if deadline <= self._now:
            await anyio.lowlevel.checkpoint()
            return
        sleeper = _Sleeper(deadline, next(self._seq), anyio.Event(), backoff=_is_backoff())
        heapq.heappush(self._sleepers, sleeper)
        self._notify()
        try:
            await sleeper.event.wait()
        finally:
            sleeper.done = True

    # -- moving time -----------------------------------------------------------------

    def next_deadline(self) -> datetime | None:
        """The earliest deadline any task sleeps until, or None if none sleeps."""
        head = self._head()
        return head.deadline if head is not None else None

    def has_backoff_sleeper(self) -> bool:
        """Whether a running engine sleeps on this clock (a retry delay, not a heartbeat)."""
        return any(s.backoff and not s.done for s in self._sleepers)

    def next_backoff(self) -> datetime | None:
        """When the earliest retry delay a running engine sleeps through ends, if any."""
        due = [s.deadline for s in self._sleepers if s.backoff and not s.done]
        return min(due) if due else None

    async def advance(self, delta: timedelta | float) -> None:
        """Move time forward by ``delta``, waking sleepers in deadline order.

        For each deadline reached in turn, time is set to it, the sleepers due
        are woken and :attr:`settle` is awaited (their work, database writes
        included, finishes) before time moves on. So a heartbeat due at +10 s
        runs before a sweep due at +30 s, each seeing its own time.
        """
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        if seconds < 0:
            raise ValueError(f"FakeClock.advance needs a non-negative delta: {seconds:g} s")
        await self.advance_to(self._now + timedelta(seconds=seconds))

    async def advance_to(self, when: datetime) -> None:
        """Like :meth:`advance`, up to the absolute time ``when``."""
        if when.tzinfo is None:
            raise ValueError(f"advance_to needs a timezone-aware time: {when!r}")
        # What is runnable now runs first and sets its timers: a task woken
        # just before (a heartbeat re-arming for a run that just started) must
        # be stepped through like one that slept all along.
        await self.settle()
        while True:
            head = self._head()
            if head is None or head.deadline > when:
                break
            self._set(max(self._now, head.deadline))
            self._wake_due()
            await self.settle()
        self._set(max(self._now, when))
        await self.settle()

    async def step(self) -> bool:
        """Advance to the earliest sleeper's deadline only; False if nobody sleeps."""
        nxt = self.next_deadline()
        if nxt is None:
            return False
        await self.advance_to(nxt)
        return True

    async def jump_to(self, when: datetime) -> None:
        """Set time to ``when`` at once, waking every sleeper due by then once.

        Unlike :meth:`advance_to`, periodic sleepers (polls, sweeps) are not
        stepped through: a 30-day jump wakes each of them once, at the end.
        Used by the environment's automatic time skipping.
        """
        if when > self._now:
            self._set(when)
        self._wake_due()
        await self.settle()

    # -- observers -----------------------------------------------------------------

    def on_change(self, listener: Callable[[datetime], None]) -> Callable[[], None]:
        """Call ``listener(now)`` whenever time moves; returns a function that unsubscribes."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove

    def changed(self) -> anyio.Event:
        """An event set the next time a sleeper registers or time moves."""
        if self._changed is None:
            self._changed = anyio.Event()
        return self._changed

    # -- internals -----------------------------------------------------------------

    def _head(self) -> _Sleeper | None:
        while self._sleepers and self._sleepers[0].done:
            heapq.heappop(self._sleepers)
        return self._sleepers[0] if self._sleepers else None

    def _wake_due(self) -> None:
        while True:
            head = self._head()
            if head is None or head.deadline > self._now:
                return
            heapq.heappop(self._sleepers)
            head.done = True
            head.event.set()

    def _set(self, when: datetime) -> None:
        if when != self._now:
            self._now = when
            for listener in list(self._listeners):
                listener(when)
            self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def __repr__(self) -> str:
        return f"FakeClock(now={self._now.isoformat()}, sleepers={len(self._sleepers)})"
