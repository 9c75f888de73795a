"""FakeClock: ordering, sleeps, skipping, and one clock per environment."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import pytest

from starflow import Clock
from starflow_testing import FakeClock, WorkflowEnvironment

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class TestFakeClock:
    """The Clock protocol on fake time."""

    def test_is_a_clock(self) -> None:
        """FakeClock satisfies the runtime's Clock protocol."""
        assert isinstance(FakeClock(), Clock)

    def test_rejects_naive_start(self) -> None:
        """A naive start time is refused."""
        with pytest.raises(ValueError, match="timezone-aware"):
            FakeClock(datetime(2030, 1, 1))

    async def test_advance_wakes_in_deadline_order(self) -> None:
        """Sleepers wake earliest first, each seeing its own deadline as now."""
        clock = FakeClock(T0)
        woke: list[tuple[str, datetime]] = []

        async def sleeper(name: str, seconds: float) -> None:
            await clock.sleep(seconds)
            woke.append((name, clock.now()))

        async with anyio.create_task_group() as tg:
            tg.start_soon(sleeper, "c", 30)
            tg.start_soon(sleeper, "a", 10)
            tg.start_soon(sleeper, "b", 20)
            await anyio.wait_all_tasks_blocked()
            assert clock.next_deadline() == T0 + timedelta(seconds=10)
            await clock.advance(timedelta(seconds=25))
            assert woke == [("a", T0 + timedelta(seconds=10)), ("b", T0 + timedelta(seconds=20))]
            assert clock.now() == T0 + timedelta(seconds=25)
            await clock.advance(5)
        assert woke[-1] == ("c", T0 + timedelta(seconds=30))
        assert clock.next_deadline() is None

    async def test_periodic_sleeper_steps_through_each_tick(self) -> None:
        """advance() lets a periodic loop run once per period, in order."""
        clock = FakeClock(T0)
        ticks: list[datetime] = []

        async def loop() -> None:
            while True:
                await clock.sleep(10)
                ticks.append(clock.now())

        async with anyio.create_task_group() as tg:
            tg.start_soon(loop)
            await anyio.wait_all_tasks_blocked()
            await clock.advance(timedelta(seconds=35))
            tg.cancel_scope.cancel()
        assert ticks == [T0 + timedelta(seconds=s) for s in (10, 20, 30)]

    async def test_jump_wakes_each_sleeper_once(self) -> None:
        """jump_to() does not step through a periodic loop's ticks."""
        clock = FakeClock(T0)
        ticks: list[datetime] = []

        async def loop() -> None:
            while True:
                await clock.sleep(1)
                ticks.append(clock.now())

        async with anyio.create_task_group() as tg:
            tg.start_soon(loop)
            await anyio.wait_all_tasks_blocked()
            await clock.jump_to(T0 + timedelta(days=30))
            tg.cancel_scope.cancel()
        assert ticks == [T0 + timedelta(days=30)]

    async def test_past_deadline_returns_at_once(self) -> None:
        """sleep(0) and a deadline in the past do not register a sleeper."""
        clock = FakeClock(T0)
        await clock.sleep(0)
        await clock.sleep_until(T0 - timedelta(seconds=1))
        assert clock.next_deadline() is None

    async def test_cancelled_sleeper_is_forgotten(self) -> None:
        """A sleeper whose task is cancelled no longer counts as a deadline."""
        clock = FakeClock(T0)
        with anyio.move_on_after(0):
            await clock.sleep(5)
        assert clock.next_deadline() is None

    async def test_negative_advance_is_refused(self) -> None:
        """Time never goes backwards."""
        with pytest.raises(ValueError, match="non-negative"):
            await FakeClock(T0).advance(-1)


class TestOneClockPerEnvironment:
    """Environments never share time."""

    async def test_two_environments_keep_their_own_time(self) -> None:
        """Advancing one environment's clock leaves the other's alone."""
        async with WorkflowEnvironment(patch_time=False) as a, \
                WorkflowEnvironment(start=T0 + timedelta(days=1), patch_time=False) as b:
            assert a.clock is not b.clock
            await a.advance(timedelta(hours=5))
            assert a.now() == T0 + timedelta(hours=5)
            assert b.now() == T0 + timedelta(days=1)

    async def test_wall_clock_follows_the_environment(self) -> None:
        """datetime.now() and time.time() see the fake time and are restored after."""
        import time

        async with WorkflowEnvironment() as env:
            await env.advance(timedelta(minutes=3))
            assert datetime.now(UTC) == T0 + timedelta(minutes=3)
            assert time.time() == (T0 + timedelta(minutes=3)).timestamp()
        assert datetime.now(UTC).year < 2029


async def test_wait_event_deadline_is_fixed_when_called() -> None:
    """wait_event's limit counts from the call, even if the clock jumps before its
    sleeping task starts (the shared heartbeat loop missed beats that way)."""
    from datetime import timedelta

    import anyio
    import anyio.lowlevel

    from starflow.clock import wait_event
    from starflow_testing import FakeClock

    clock = FakeClock()
    start = clock.now()
    event = anyio.Event()
    fired: list[object] = []

    async def waiter() -> None:
        fired.append(await wait_event(clock, event, 4.0))
        fired.append(clock.now())

    with anyio.fail_after(5):  # real-time safety net: the bug left the waiter asleep
        async with anyio.create_task_group() as tg:
            tg.start_soon(waiter)
            # The waiter runs and calls wait_event; its limit task is scheduled after
            # us. (advance() would let it start first; jump_to moves time at once.)
            await anyio.lowlevel.checkpoint()
            await clock.jump_to(start + timedelta(seconds=6))
    assert fired == [False, start + timedelta(seconds=6)]
