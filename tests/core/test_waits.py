"""Waits as the workflow author sees them: pauses that user code cannot swallow, waits
called where they cannot work, and signals that must reach a wait."""

from __future__ import annotations

import uuid

from starflow import Starflow, wait_for, workflow


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
