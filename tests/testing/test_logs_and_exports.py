"""capture_logs and the public surface of starflow_testing."""

from __future__ import annotations

import starflow_testing
from starflow import step, workflow
from starflow_testing import WorkflowEnvironment, capture_logs


@step
async def t_log_step() -> int:
    return 1


@workflow(name="t_log_flow")
async def log_flow() -> int:
    return await t_log_step()


class TestCaptureLogs:
    """structlog events of the runtime can be asserted on."""

    async def test_captures_runtime_events_with_run_id(self) -> None:
        """Debug events of the runner are captured, bound to the run id."""
        async with WorkflowEnvironment() as env:
            with capture_logs() as logs:
                handle = await env.run(log_flow)
        started = [e for e in logs if e["event"] == "run started"]
        assert started and started[0]["run_id"] == handle.run_id
        assert started[0]["log_level"] == "debug"

    async def test_restores_the_level(self) -> None:
        """starflow's own level is back to what it was after the block."""
        from starflow import logs as starflow_logs

        before = starflow_logs.get_level()
        with capture_logs("info"):
            assert starflow_logs.get_level() != before or before == 20
        assert starflow_logs.get_level() == before


def test_exports_are_pinned() -> None:
    """starflow_testing exports exactly the harness names."""
    assert starflow_testing.__all__ == [
        "FakeClock",
        "FaultInjectingAdapter",
        "ReplayResult",
        "Replayer",
        "RunHistory",
        "RunnerKilled",
        "WorkflowEnvironment",
        "capture_logs",
        "export_run",
        "load_history",
        "read_history",
    ]
