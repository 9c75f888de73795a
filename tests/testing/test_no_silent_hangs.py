"""The environment says why instead of hanging on a retry delay or skipping past a timeout."""

from __future__ import annotations

from datetime import timedelta

import anyio
import pytest

from starflow import (
    RetryPolicy,
    StarflowError,
    WaitTimeout,
    sleep,
    step,
    wait_for,
    workflow,
)
from starflow_testing import WorkflowEnvironment, capture_logs

failures = {"left": 0}


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(minutes=10),
                        maximum_interval=timedelta(hours=1)))
async def slow_retry() -> str:
    if failures["left"] > 0:
        failures["left"] -= 1
        raise ConnectionError("down")
    return "ok"


@workflow(name="no-hang-retry")
async def retrying() -> str:
    return await slow_retry()


@workflow(name="no-hang-timeout")
async def times_out() -> str:
    await sleep(timedelta(minutes=1))
    try:
        await wait_for("approval", timeout=timedelta(hours=1))
    except WaitTimeout:
        return "timed out"
    return "approved"


class TestWithoutTimeSkipping:
    """time_skipping=False: a retry delay nobody advances fails with a message, never hangs."""

    async def test_run_on_a_retry_backoff_fails_with_why(self) -> None:
        """env.run raises a StarflowError naming the run, the delay's end and what to do."""
        failures["left"] = 1
        async with WorkflowEnvironment(time_skipping=False) as env:
            with anyio.fail_after(30), pytest.raises(StarflowError) as info:
                await env.run(retrying)
            message = str(info.value)
            assert "retry delay until 2030-01-01T00:10:00" in message
            assert "time_skipping=False" in message and "env.advance" in message

    async def test_an_advance_from_another_task_still_works(self) -> None:
        """A test that advances the clock itself is not interrupted."""
        failures["left"] = 1
        async with WorkflowEnvironment(time_skipping=False) as env:
            handles = []
            async with anyio.create_task_group() as tg:
                async def run() -> None:
                    handles.append(await env.run(retrying))

                tg.start_soon(run)
                await env.advance(timedelta(minutes=10))
            assert handles[0].status == "success" and handles[0].result == "ok"


class TestRunUntilIdle:
    """run_until_idle skips sleeps but stops at a wait_for's timeout, and says so."""

    async def test_stops_at_the_wait(self) -> None:
        """The one-minute sleep passes; the one-hour timeout does not fire."""
        async with WorkflowEnvironment() as env:
            handle = await env.start(times_out)
            with capture_logs() as logs:
                await env.run_until_idle()
            run = await env.get_run(handle.run_id)
            assert run.status == "paused"
            stopped = [e for e in logs if e["event"].startswith("run_until_idle stopped")]
            assert stopped and stopped[0]["node_id"] == "wait:approval#1"
            await env.advance(timedelta(hours=1))
            assert await env.result(handle.run_id) == "timed out"
