"""Waits as the workflow author sees them: pauses that user code cannot swallow, waits
called where they cannot work, and signals that must reach a wait."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from starflow import Starflow, StepFailed, sleep, step, wait_for, workflow


def unique(prefix: str) -> str:
    """A workflow or step name no other test registers (the registry is process-wide)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class TestPauseCannotBeSwallowed:
    """A wait pauses the run even when user code catches BaseException around it."""

    async def test_return_from_except_base_exception(self, sf: Starflow) -> None:
        """Returning from the handler neither ends the run nor skips the wait."""

        @workflow(name=unique("swallow-return"))
        async def wf() -> str:
            try:
                decision = await wait_for("go")
            except BaseException as exc:  # what a careless user writes
                return f"swallowed {type(exc).__name__}"
            return f"got {decision}"

        handle = await sf.run(wf)
        assert (handle.status, handle.waiting_for) == ("paused", "go")
        assert handle.result is None
        done = await sf.signal(handle.run_id, "go", "yes")
        assert (done.status, done.result) == ("success", "got yes")

    async def test_raise_from_except_base_exception(self, sf: Starflow) -> None:
        """Raising another exception from the handler does not fail the run."""

        @workflow(name=unique("swallow-raise"))
        async def wf() -> str:
            try:
                decision = await wait_for("go")
            except BaseException as exc:
                raise RuntimeError("cleanup failed") from exc
            return f"got {decision}"

        handle = await sf.run(wf)
        assert (handle.status, handle.waiting_for) == ("paused", "go")
        done = await sf.signal(handle.run_id, "go", "yes")
        assert (done.status, done.result) == ("success", "got yes")


class TestWaitInsideAStep:
    """wait_for and sleep inside a step fail the step clearly instead of pausing mid-step."""

    @pytest.mark.parametrize("kind", ["wait_for", "sleep"])
    async def test_wait_in_step_is_a_clear_error(self, sf: Starflow, kind: str) -> None:
        """The step fails at once (its code before the wait ran once), naming run and node."""
        effects: list[str] = []

        @step(name=unique("waits-in-step"))
        async def sends_and_waits() -> None:
            effects.append("sent")
            if kind == "wait_for":
                await wait_for("reply")
            else:
                await sleep(timedelta(seconds=1))

        @workflow(name=unique("wait-in-step"))
        async def wf() -> str:
            try:
                await sends_and_waits()
            except StepFailed as exc:
                return exc.error_message
            return "no error"

        handle = await sf.run(wf)
        assert handle.status == "success", handle
        message = str(handle.result)
        nid = f"step:{sends_and_waits.__starflow_step__.name}#1"
        assert f"{kind}() called inside step {nid} of run {handle.run_id}" in message
        assert "from the @workflow function" in message
        assert effects == ["sent"]
        assert await sf.adapter.list_waits(handle.run_id) == []


class TestDurationsPastTheCalendar:
    """A timeout or sleep too long to store fails with InvalidArgument naming the node."""

    @pytest.mark.parametrize("kind", ["sleep", "wait_for"])
    async def test_overlong_duration(self, sf: Starflow, kind: str) -> None:
        """Not a bare OverflowError('date value out of range'); nothing is registered."""

        @workflow(name=unique("overlong"))
        async def wf() -> None:
            if kind == "sleep":
                await sleep(timedelta.max)
            else:
                await wait_for("x", timeout=timedelta.max)

        handle = await sf.run(wf)
        assert handle.status == "error"
        nid = "sleep#1" if kind == "sleep" else "wait:x#1"
        param = "duration" if kind == "sleep" else "timeout"
        assert (handle.error or "").startswith(
            f"InvalidArgument: run {handle.run_id}: {nid}: {param} must be at most 36500 "
            "days (100 years)"), handle.error
        assert "use a shorter one" in (handle.error or "")
        assert await sf.adapter.list_waits(handle.run_id) == []
