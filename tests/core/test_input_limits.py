"""Durations too long to add to the clock and time zones zoneinfo cannot read get
the library's own error, naming the parameter, its value and the limit, and
nothing is written (issue #29)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

import starflow
from starflow import (
    ConfigError,
    InvalidArgument,
    RetryPolicy,
    Starflow,
    StarflowConfig,
    WorkflowDefinitionError,
    sleep,
    step,
    wait_for,
    wait_for_any,
    workflow,
)
from starflow.clock import parse_age, parse_when
from starflow.limits import MAX_DURATION

from .conftest import SpyAdapter

#: Longer than starflow can add to any time it stores (but a valid ``timedelta``).
HUGE = [timedelta(days=999_999_999), timedelta.max, MAX_DURATION + timedelta(microseconds=1)]


def too_long(param: str, value: object = None) -> str:
    """The message's pattern: the parameter, the limit and (if given) the value."""
    pattern = re.escape(f"{param} must be at most 36500 days (100 years), the longest "
                        "duration starflow can add to a time it stores")
    return pattern if value is None else pattern + ".*" + re.escape(repr(value))


@workflow(name="input-limits-echo")
async def echo(value: object = None) -> object:
    return value


class TestDefinitions:
    """A timeout or retry interval too long is refused when the function is decorated."""

    @pytest.mark.parametrize("huge", HUGE)
    def test_workflow_timeout(self, huge: timedelta) -> None:
        with pytest.raises(WorkflowDefinitionError, match=too_long("timeout", huge)):
            @workflow(name="input-limits-timeout", timeout=huge)
            async def slow() -> None: ...

    @pytest.mark.parametrize("huge", HUGE)
    def test_step_timeout(self, huge: timedelta) -> None:
        with pytest.raises(WorkflowDefinitionError, match=too_long("timeout", huge)):
            @step(timeout=huge)
            async def slow() -> None: ...

    @pytest.mark.parametrize("name", ["initial_interval", "maximum_interval"])
    def test_retry_intervals(self, name: str) -> None:
        with pytest.raises(WorkflowDefinitionError, match=too_long(name)):
            RetryPolicy(max_attempts=3, **{name: timedelta.max})

    def test_retry_delay_of_a_huge_coefficient(self) -> None:
        """1e200 ** 2 raises OverflowError in float arithmetic: the delay is the maximum."""
        policy = RetryPolicy(max_attempts=10, backoff_coefficient=1e200,
                             maximum_interval=timedelta(seconds=5))
        assert [policy.delay(a) for a in (1, 2, 3, 9)] == [1.0, 5.0, 5.0, 5.0]

    def test_the_limit_itself_is_accepted(self) -> None:
        @workflow(name="input-limits-longest", timeout=MAX_DURATION)
        async def longest() -> None: ...

        assert RetryPolicy(maximum_interval=MAX_DURATION).maximum_interval == MAX_DURATION


class TestConfig:
    """A config interval too long to add to the clock fails at construction."""

    @pytest.mark.parametrize("name", ["lease_ttl", "wake_token_ttl", "stuck_after",
                                      "outbox_retention", "retention"])
    def test_interval(self, name: str) -> None:
        extra = {"heartbeat_interval": timedelta(days=1)} if name == "lease_ttl" else {}
        with pytest.raises(ConfigError, match=too_long(name, timedelta(days=999_999_999))):
            StarflowConfig(**{name: timedelta(days=999_999_999)}, **extra)  # type: ignore[arg-type]


class TestCalls:
    """Each call that takes a duration refuses one too long, and writes nothing."""

    @pytest.mark.parametrize("huge", HUGE)
    async def test_options_timeout(self, sf: Starflow, spy: SpyAdapter, huge: timedelta
                                   ) -> None:
        with pytest.raises(ConfigError, match=too_long("timeout", huge)):
            await sf.options(timeout=huge).start(echo, 1)
        with pytest.raises(ConfigError, match=too_long("timeout")):
            await sf.options(timeout=huge).run(echo, 1)
        assert spy.calls == []
        assert await sf.list_runs() == []

    @pytest.mark.parametrize("huge", HUGE)
    async def test_debounce(self, sf: Starflow, spy: SpyAdapter, huge: timedelta) -> None:
        with pytest.raises(ConfigError, match=too_long("debounce", huge)):
            await sf.options(debounce=huge, debounce_key="k").start(echo, 1)
        assert spy.calls == []
        assert await sf.list_runs() == []

    @pytest.mark.parametrize("huge", HUGE)
    async def test_prune_older_than(self, sf: Starflow, huge: timedelta) -> None:
        done = await sf.run(echo, 1)
        with pytest.raises(InvalidArgument, match=too_long("older_than", huge)):
            await sf.prune(older_than=huge)
        assert (await sf.get_run(done.run_id)).status == "success"

    @pytest.mark.parametrize("huge", HUGE)
    async def test_rate_limit_period(self, sf: Starflow, huge: timedelta) -> None:
        with pytest.raises(ConfigError, match=too_long("rate_limit period", huge)):
            await sf.set_pool_limits("p", concurrency=2, rate_limit=(5, huge))
        assert await sf.adapter.get_pool_limits("p") is None

    @pytest.mark.parametrize("huge", HUGE)
    async def test_schedule_catchup(self, sf: Starflow, spy: SpyAdapter, huge: timedelta
                                    ) -> None:
        with pytest.raises(ConfigError, match=too_long("catchup", huge)):
            await sf.schedule("nightly", echo, cron="0 3 * * *", catchup=huge)
        assert await sf.schedules() == []
        assert spy.calls == []

    @pytest.mark.parametrize("zone", ["x" * 5000, "Europe/" + "x" * 300, "America"])
    async def test_schedule_timezone_zoneinfo_cannot_read(
            self, sf: Starflow, spy: SpyAdapter, zone: str) -> None:
        """zoneinfo raises OSError for these (file name too long, a directory)."""
        with pytest.raises(ConfigError, match="timezone: unknown time zone") as info:
            await sf.schedule("nightly", echo, cron="0 3 * * *", timezone=zone)
        assert "use an IANA name such as 'UTC'" in str(info.value)
        assert len(str(info.value)) < 300  # the name is cut, not repeated in full
        assert await sf.schedules() == []
        assert spy.calls == []

    async def test_longest_duration_is_stored(self, sf: Starflow) -> None:
        """The limit itself is accepted and round-trips."""
        await sf.set_pool_limits("p", rate_limit=(5, MAX_DURATION))
        limits = await sf.adapter.get_pool_limits("p")
        assert limits is not None and limits.rate_period == MAX_DURATION
        rec = await sf.schedule("nightly", echo, cron="0 3 * * *", catchup=MAX_DURATION)
        assert rec.catchup == MAX_DURATION
        handle = await sf.options(timeout=MAX_DURATION).start(echo, 1)
        assert (await sf.get_run(handle.run_id)).status == "queued"


@workflow(name="input-limits-waits")
async def waits(kind: str, days: int, micros: int) -> object:
    duration = timedelta(days=days, microseconds=micros)
    if kind == "wait_for":
        return await wait_for("go", timeout=duration)
    if kind == "sleep":
        return await sleep(duration)
    if kind == "wait_for_any":
        return await wait_for_any("go", "stop", timeout=duration)
    if kind == "receive":
        return await starflow.receive("ask", timeout=duration)
    return starflow.wake_token("go", timeout=duration)


class TestWaits:
    """A wait's timeout (or a sleep) too long fails the run with InvalidArgument naming
    the node, before the wait is written."""

    @pytest.mark.parametrize(("kind", "node", "param"), [
        ("wait_for", "wait:go#1", "timeout"), ("sleep", "sleep#1", "duration"),
        ("wait_for_any", "any:go|stop#1", "timeout"), ("receive", "receive:ask#1", "timeout"),
        ("wake_token", "wait:go#1", "timeout")])
    @pytest.mark.parametrize("huge", [timedelta(days=999_999_999), MAX_DURATION + timedelta(1)])
    async def test_too_long(self, sf: Starflow, kind: str, node: str, param: str,
                            huge: timedelta) -> None:
        handle = await sf.run(waits, kind, huge.days, huge.microseconds)
        assert handle.status == "error"
        assert (handle.error or "").startswith(
            f"InvalidArgument: run {handle.run_id}: {node}: {param} must be at most 36500 "
            "days (100 years)")
        assert repr(huge) in (handle.error or "")
        assert await sf.adapter.list_waits(handle.run_id) == []
        assert "run_paused" not in [e.event_type for e in await sf.events(handle.run_id)]

    async def test_the_limit_pauses(self, sf: Starflow) -> None:
        handle = await sf.run(waits, "wait_for", MAX_DURATION.days, 0)
        assert handle.status == "paused"
        [wait] = await sf.adapter.list_waits(handle.run_id)
        assert wait.deadline is not None


class TestAges:
    """The CLI's and the page's ages (``30m``, ``3d``) are bounded the same way."""

    @pytest.mark.parametrize("text", ["99999999d", "999999999999999d", "9" * 400 + "w",
                                      "36501d"])
    def test_too_long(self, text: str) -> None:
        with pytest.raises(InvalidArgument, match=r"is longer than 36500d \(100 years\)"):
            parse_age(text)
        with pytest.raises(ValueError, match="longer than 36500d"):
            parse_when(text, datetime(2026, 1, 1, tzinfo=UTC))

    def test_the_limit(self) -> None:
        assert parse_age("36500d") == MAX_DURATION

    @pytest.mark.parametrize("text", ["9999-12-31T23:00:00-05:00", "0001-01-01T00:00:00+05:00"])
    def test_instant_outside_the_years_datetime_holds(self, text: str) -> None:
        with pytest.raises(ValueError, match="outside the years 1 to 9999"):
            parse_when(text, datetime(2026, 1, 1, tzinfo=UTC))

    def test_age_before_the_year_1(self) -> None:
        with pytest.raises(InvalidArgument, match="before the year 1"):
            parse_when("30d", datetime(1, 1, 2, tzinfo=UTC))
