"""The one seam through which the runtime reads time.

Nothing else in ``starflow`` calls ``time.time()``, ``datetime.now()`` or
``anyio.sleep()``: the engine, heartbeat, sweep and timers all go through a
:class:`Clock`, so tests can substitute ``starflow_testing.FakeClock``.
"""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable

import anyio

from .errors import InvalidArgument
from .limits import MAX_DURATION

__all__ = ["Clock", "SystemClock", "format_ts", "monotonic", "parse_age", "parse_ts", "parse_when"]


@runtime_checkable
class Clock(Protocol):
    """Source of time for the runtime."""

    def now(self) -> datetime:
        """Current time, timezone-aware UTC."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the calling task for ``seconds`` of this clock's time."""
        ...

    async def sleep_until(self, deadline: datetime) -> None:
        """Suspend the calling task until ``deadline`` on this clock."""
        ...


class SystemClock:
    """Wall-clock time and real sleeps."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))

    async def sleep_until(self, deadline: datetime) -> None:
        await anyio.sleep(max(0.0, (deadline - self.now()).total_seconds()))


def format_ts(ts: datetime) -> str:
    """Render a timestamp in the one fixed text format used for SQLite and payloads.

    Always UTC, always microseconds, so text order is time order.
    """
    tz = ts.tzinfo
    if tz is None:
        raise ValueError(f"naive datetime {ts!r}: starflow stores timezone-aware UTC times only")
    if tz is not UTC:
        ts = ts.astimezone(UTC)
    # The text strftime("%Y-%m-%dT%H:%M:%S.%fZ") gives, in less than half its
    # time (every boundary formats several timestamps).
    return "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ" % (  # noqa: UP031 (twice as fast as an f-string)
        ts.year, ts.month, ts.day, ts.hour, ts.minute, ts.second, ts.microsecond)


def parse_ts(text: str) -> datetime:
    """Parse a timestamp written by :func:`format_ts` (or any ISO-8601 string)."""
    parsed = datetime.fromisoformat(text)  # C, and reads the "Z" of format_ts (3.11+)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


_AGE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_age(text: str) -> timedelta | None:
    """An age like ``90s``, ``30m``, ``12h``, ``3d``, ``2w`` (what the CLI's and
    the web page's filters take), or None if ``text`` is not one.

    Raises:
        InvalidArgument: (a ``ValueError``) the age is longer than
            :data:`~starflow.limits.MAX_DURATION`.
    """
    match = _AGE.match(text.strip().lower())
    if match is None:
        return None
    seconds = float(match.group(1)) * _AGE_UNITS[match.group(2)]
    if seconds > MAX_DURATION.total_seconds():
        raise InvalidArgument(
            f"the age {text.strip()[:40]!r} is longer than {MAX_DURATION.days}d (100 years), "
            "the longest starflow takes: give a shorter one")
    return timedelta(seconds=seconds)


def parse_when(text: str, now: datetime) -> datetime:
    """A time filter: an ISO date/time (naive means UTC) or an age (:func:`parse_age`)
    before ``now``.

    Raises:
        ValueError: with a message naming the text (an :class:`InvalidArgument`
            for an age too long).
    """
    age = parse_age(text)
    if age is not None:
        try:
            return now - age
        except OverflowError:  # a clock near the year 1 (a test's fake clock)
            raise InvalidArgument(f"the age {text.strip()[:40]!r} reaches before the year 1: "
                                  "give a shorter age") from None
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(f"not an ISO date/time or an age like 30m, 2h, 3d: {text!r}") from None
    try:
        return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:00-05:00 is past the year 9999 in UTC
        raise ValueError(f"{text.strip()[:40]!r} is outside the years 1 to 9999 in UTC: "
                         "give a date within them") from None


def seconds(delta: timedelta | float) -> float:
    """A duration in seconds, accepting a ``timedelta`` or a number."""
    return delta.total_seconds() if isinstance(delta, timedelta) else float(delta)


def monotonic() -> float:
    """Real elapsed-time seconds for measuring latency (metrics), never for runtime decisions.

    Deliberately not a :class:`Clock` method: a step's measured latency is
    real even under ``FakeClock``.
    """
    return time.perf_counter()


async def wait_event(clock: Clock, event: anyio.Event, seconds: float | None,
                     *more: anyio.Event) -> bool:
    """Wait until ``event`` (or any of ``more``) is set or ``seconds`` of ``clock``
    time pass.

    Args:
        seconds: The limit; ``None`` waits for the events only.

    Returns:
        Whether an event was set.
    """
    events = (event, *more)
    if seconds is None and not more:
        await event.wait()
        return True
    # The deadline is fixed now, in the caller's task: the task that sleeps starts
    # later, and a clock that jumps meanwhile (a test's fake clock) must not push
    # the limit past the time the caller meant.
    deadline = None if seconds is None else clock.now() + timedelta(seconds=max(0.0, seconds))
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as tg:
            async def limit() -> None:
                assert deadline is not None
                await clock.sleep_until(deadline)
                scope.cancel()

            async def either(other: anyio.Event) -> None:
                await other.wait()
                scope.cancel()

            if deadline is not None:
                tg.start_soon(limit)
            for other in more:
                tg.start_soon(either, other)
            await event.wait()
            tg.cancel_scope.cancel()
    return any(e.is_set() for e in events)
