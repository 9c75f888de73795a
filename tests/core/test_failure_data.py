"""A run's failure is recorded as data (``failure_json``) and read back as such."""

from __future__ import annotations

import traceback
from datetime import timedelta

import pytest

from starflow import RunFailure, Starflow, WorkflowFailed, step, wait_for, workflow
from starflow.failure import MAX_TRACEBACK_CHARS, MAX_TRACEBACK_FRAMES, format_traceback
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres

#: A message shaped like the engine's own wording, with colons and "Error: " in it.
TRICKY = ("StepFailed: step step:other#9 failed after 7 attempt(s): Error: x: y\n"
          "WaitTimeout: run r: wait wait:w#1 timed out")


@step(name="failure-data-lookup")
async def lookup_missing(key: str) -> str:
    table: dict[str, str] = {}
    return table[key]


@workflow(name="failure-data-step-raises")
async def step_raises(key: str) -> str:
    return await lookup_missing(key)


@workflow(name="failure-data-body-raises")
async def body_raises() -> str:
    raise ValueError(TRICKY)


@workflow(name="failure-data-wait-times-out")
async def wait_times_out() -> object:
    return await wait_for("approval", timeout=timedelta(minutes=5))


class TestFailureIsData:
    """WorkflowFailed and RunInfo.failure come from the recorded failure, not the text."""

    async def test_a_step_raising_key_error(self, sf: Starflow) -> None:
        """Node id, qualified type, message, attempts and a traceback naming the step."""
        handle = await sf.run(step_raises, "missing")
        assert handle.status == "error"
        with pytest.raises(WorkflowFailed) as info:
            await sf.result(handle.run_id)
        err = info.value
        assert err.node_id == "step:failure-data-lookup#1"
        assert err.error_type == "builtins.KeyError"
        assert err.error_message == "'missing'"
        assert err.attempts == 1
        assert err.traceback is not None
        assert "lookup_missing" in err.traceback and "KeyError" in err.traceback
        run = await sf.get_run(handle.run_id)
        assert run.failure == RunFailure(type="builtins.KeyError", message="'missing'",
                                         node_id="step:failure-data-lookup#1", attempts=1,
                                         traceback=err.traceback)
        # The seed's error column keeps its readable text.
        assert run.error is not None and run.error.startswith("StepFailed: step ")

    async def test_a_message_shaped_like_the_engines_wording(self, sf: Starflow) -> None:
        """Colons, "Error: " and the engine's own phrases in a message change nothing."""
        handle = await sf.run(body_raises)
        with pytest.raises(WorkflowFailed) as info:
            await sf.result(handle.run_id)
        err = info.value
        assert (err.node_id, err.error_type, err.attempts) == (None, "ValueError", None)
        assert err.error_message == TRICKY
        assert err.traceback is not None and "body_raises" in err.traceback
        run = await sf.get_run(handle.run_id)
        assert run.error == f"ValueError: {TRICKY}"
        assert run.failure is not None and run.failure.message == TRICKY

    async def test_retry_clears_the_failure(self, sf: Starflow) -> None:
        """A retried run has no failure until it fails again."""
        handle = await sf.run(body_raises)
        assert (await sf.get_run(handle.run_id)).failure is not None
        again = await sf.retry(handle.run_id)
        assert again.status == "error"  # the same code fails the same way
        run = await sf.get_run(handle.run_id)
        assert run.failure is not None and run.failure.type == "ValueError"

    async def test_a_cancelled_run_has_no_failure(self, sf: Starflow) -> None:
        handle = await sf.run(wait_times_out)
        await sf.cancel(handle.run_id)
        run = await sf.get_run(handle.run_id)
        assert run.status == "cancelled" and run.failure is None and run.failure_json is None

    async def test_a_wait_that_timed_out(self, adapter_kind: str) -> None:
        """The wait's node id and the recorded WaitTimeout."""
        if adapter_kind == "postgres":
            require_postgres()
        async with WorkflowEnvironment(adapter=adapter_kind) as env:
            handle = await env.run(wait_times_out)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle.run_id)
            run = await env.get_run(handle.run_id)
        err = info.value
        assert (err.node_id, err.error_type, err.error_message, err.attempts) == (
            "wait:approval#1", "starflow.errors.WaitTimeout", "wait:approval#1 timed out", None)
        assert run.failure is not None and run.failure.node_id == "wait:approval#1"
        assert err.traceback is not None and "wait_times_out" in err.traceback


def _recurse(n: int) -> None:
    if n == 0:
        raise RuntimeError("deep " + "x" * 12_000)
    _bounce(n - 1)  # two functions in turn: Python folds only identical repeated frames


def _bounce(n: int) -> None:
    _recurse(n)


def _deep_frames_innermost(n: int) -> None:
    try:
        _recurse(n)
    except RuntimeError as exc:
        raise KeyError("outer " + "y" * 3000) from exc


class TestTracebackBounds:
    """A stored traceback keeps the innermost frames and at most 16 KiB."""

    def test_frames_are_capped_and_the_raise_point_kept(self) -> None:
        try:
            _recurse(300)
        except RuntimeError as exc:
            full = "".join(traceback.format_exception(exc))
            text = format_traceback(exc)
        assert full.count("in _recurse") > 300
        assert text.count("in _recurse") + text.count("in _bounce") == MAX_TRACEBACK_FRAMES
        assert "RuntimeError: deep" in text

    def test_size_is_capped_keeping_both_ends(self) -> None:
        try:
            _deep_frames_innermost(300)
        except KeyError as exc:
            text = format_traceback(exc)
        assert len(text) <= MAX_TRACEBACK_CHARS + 100
        assert "characters cut" in text
        assert text.startswith("Traceback") and "in _recurse" in text[:MAX_TRACEBACK_CHARS // 2]
        assert text.rstrip().endswith("y'") and "KeyError" in text[-MAX_TRACEBACK_CHARS // 2:]

    def test_unreadable_json_is_no_failure(self) -> None:
        assert RunFailure.from_json(None) is None
        assert RunFailure.from_json({"type": 3}) is None
        assert RunFailure.from_json({"type": "T", "message": "m"}) == RunFailure(
            type="T", message="m")
