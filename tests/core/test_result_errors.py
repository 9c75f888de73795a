"""``sf.result`` of a failed run raises a WorkflowFailed that carries its cause."""

from __future__ import annotations

import contextlib
import pickle
from datetime import timedelta

import pytest

from starflow import (
    RetryPolicy,
    Starflow,
    StepFailed,
    WorkflowFailed,
    step,
    wait_for,
    workflow,
)
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres


@step(name="result-errors-charge",
      retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(0)))
async def charge(cents: int) -> int:
    if cents > 100:
        raise ValueError(f"card declined for {cents}")
    return cents


@workflow(name="result-errors-fails-after-a-wait")
async def fails_after_a_wait() -> int:
    ok = await charge(1)
    await wait_for("go")
    return ok + await charge(500)


@workflow(name="result-errors-caught-then-fails")
async def caught_then_fails() -> int:
    with contextlib.suppress(StepFailed):
        await charge(200)
    return await charge(300)


@workflow(name="result-errors-body-fails")
async def body_fails() -> int:
    try:
        await charge(200)
    except StepFailed:
        raise RuntimeError("compensation failed too") from None
    return 0


@workflow(name="result-errors-wait-times-out")
async def wait_times_out() -> object:
    return await wait_for("approval", timeout=timedelta(hours=1))


class TestWorkflowFailedCarriesTheCause:
    """The error of sf.result names the run, the failing node and the cause's type."""

    async def test_a_step_failure_after_a_replay(self, sf: Starflow) -> None:
        """A step that failed past its retries: its node id, the original type and
        message and the attempts, read from the recorded node_error."""
        handle = await sf.run(fails_after_a_wait)
        done = await sf.signal(handle.run_id, "go")
        assert done.status == "error"
        with pytest.raises(WorkflowFailed) as info:
            await sf.result(handle.run_id)
        err = info.value
        assert err.run_id == handle.run_id and err.status == "error"
        assert err.node_id == "step:result-errors-charge#2"
        assert err.error_type == "builtins.ValueError"
        assert err.error_message == "card declined for 500"
        assert err.attempts == 2
        assert err.error == (await sf.get_run(handle.run_id)).error
        text = str(err)
        assert handle.run_id in text and "step:result-errors-charge#2" in text
        assert "builtins.ValueError: card declined for 500" in text
        assert "sf.events" in text  # what to do
        clone = pickle.loads(pickle.dumps(err))
        assert (clone.node_id, clone.error_type, clone.attempts) == (
            err.node_id, err.error_type, err.attempts)

    async def test_the_step_that_ended_the_run(self, sf: Starflow) -> None:
        """A step failure the workflow caught is not the cause; the one it did not is."""
        handle = await sf.run(caught_then_fails)
        with pytest.raises(WorkflowFailed) as info:
            await sf.result(handle.run_id)
        err = info.value
        assert err.node_id == "step:result-errors-charge#2"
        assert err.error_message == "card declined for 300"

    async def test_an_exception_in_the_workflow_body(self, sf: Starflow) -> None:
        """An exception raised by the workflow itself: no node, its type and message."""
        handle = await sf.run(body_fails)
        with pytest.raises(WorkflowFailed) as info:
            await sf.result(handle.run_id)
        err = info.value
        assert err.run_id == handle.run_id and err.node_id is None
        assert err.error_type == "RuntimeError"
        assert err.error_message == "compensation failed too"
        assert err.attempts is None
        assert "sf.retry" in str(err)

    async def test_a_wait_that_timed_out(self, adapter_kind: str) -> None:
        """A wait_for timeout the workflow did not catch: the wait's node id."""
        if adapter_kind == "postgres":
            require_postgres()
        async with WorkflowEnvironment(adapter=adapter_kind) as env:
            handle = await env.run(wait_times_out)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle.run_id)
        err = info.value
        assert err.node_id == "wait:approval#1"
        assert err.error_type == "starflow.errors.WaitTimeout"
        assert err.run_id == handle.run_id
