"""A step's failed attempts are in the run's history and in the logs; a failed run logs once."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from starflow import RetryPolicy, step, workflow
from starflow.adapters import adapter_from_url
from starflow.engine.replay import Journal
from starflow_testing import WorkflowEnvironment

from .conftest import SpyAdapter

tries = {"n": 0}


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=2),
                        backoff_coefficient=3.0))
async def flaky_charge(order: str) -> str:
    tries["n"] += 1
    if tries["n"] < 3:
        raise ConnectionError(f"gateway down ({tries['n']})")
    return f"receipt-{order}"


@workflow(name="retry-history-flow")
async def charge_flow(order: str) -> str:
    return await flaky_charge(order)


@step(retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(seconds=1)))
async def always_broken() -> None:
    raise KeyError("b")


@workflow(name="retry-history-fails")
async def fails_flow() -> None:
    await always_broken()


@pytest.fixture
async def spy(db_url: str, workspace_id: str) -> SpyAdapter:
    return SpyAdapter(adapter_from_url(db_url, workspace_id=workspace_id))


@pytest.fixture
async def sf(spy: SpyAdapter) -> AsyncIterator[WorkflowEnvironment]:
    """A fake-clock environment: retry delays pass in fake time."""
    async with WorkflowEnvironment(spy) as env:
        yield env


class TestRetriesInHistory:
    """Every failed attempt that is retried is a node_retry event with its error and delay."""

    async def test_attempts_are_recorded(self, sf: WorkflowEnvironment, spy: SpyAdapter) -> None:
        """Three attempts: two node_retry events (attempt, error, traceback, delay), a complete."""
        tries["n"] = 0
        handle = await sf.run(charge_flow, "o-1")
        assert handle.status == "success" and handle.result == "receipt-o-1"
        events = [e for e in await sf.events(handle.run_id) if e.node_id == "step:flaky_charge#1"]
        assert [e.event_type for e in events] == ["node_start", "node_retry", "node_retry",
                                                  "node_complete"]
        first, second = events[1].payload, events[2].payload
        assert (first["attempt"], first["delay_ms"]) == (1, 2000)
        assert (second["attempt"], second["delay_ms"]) == (2, 6000)
        assert first["error"]["type"] == "builtins.ConnectionError"
        assert first["error"]["message"] == "gateway down (1)"
        assert "flaky_charge" in first["error"]["traceback"]
        assert second["error"]["message"] == "gateway down (2)"
        # One unit per failed attempt, between the node's start and its outcome (the
        # start may share its unit with the run's start, the outcome with the run's
        # end: StarflowConfig.fused_boundaries).
        first = next(i for i, u in enumerate(spy.units) if "on_node_start" in u)
        assert spy.units[first][-1] == "on_node_start"
        assert spy.units[first + 1:first + 3] == [["on_node_retry"], ["on_node_retry"]]
        assert spy.units[first + 3][0] == "on_node_complete"

    async def test_journal_ignores_retries(self, sf: WorkflowEnvironment) -> None:
        """Replay reads a step with node_retry events as its final outcome only."""
        tries["n"] = 0
        handle = await sf.run(charge_flow, "o-2")
        journal = Journal.from_events(await sf.events(handle.run_id))
        rec = journal.get("step:flaky_charge#1")
        assert rec is not None and rec.status == "complete" and rec.output == "receipt-o-2"

    async def test_failed_past_retries(self, sf: WorkflowEnvironment) -> None:
        """A step failing on every attempt: one node_retry, then node_error with attempts 2."""
        handle = await sf.run(fails_flow)
        assert handle.status == "error"
        types = [e.event_type for e in await sf.events(handle.run_id)
                 if e.node_id == "step:always_broken#1"]
        assert types == ["node_start", "node_retry", "node_error"]


class TestFailureLogs:
    """A failed run logs one `run failed` line at error; a retried attempt logs at warning."""

    async def test_retry_warning_and_run_failed_error(
            self, sf: WorkflowEnvironment, caplog: pytest.LogCaptureFixture) -> None:
        """The warning names attempt and delay; the error names run, workflow, node, type."""
        with caplog.at_level(logging.WARNING, logger="starflow"):
            handle = await sf.run(fails_flow)
        assert handle.status == "error"
        retries = [r for r in caplog.records if r.getMessage().startswith("step failed; retrying")]
        assert len(retries) == 1
        retry = retries[0]
        assert retry.levelno == logging.WARNING
        assert (retry.attempt, retry.delay_s) == (1, 1.0)  # type: ignore[attr-defined]
        assert retry.node_id == "step:always_broken#1"  # type: ignore[attr-defined]
        failed = [r for r in caplog.records if r.getMessage().startswith("run failed")]
        assert len(failed) == 1
        rec = failed[0]
        assert rec.levelno == logging.ERROR
        assert rec.run_id == handle.run_id  # type: ignore[attr-defined]
        assert rec.workflow == "retry-history-fails"  # type: ignore[attr-defined]
        assert rec.node_id == "step:always_broken#1"  # type: ignore[attr-defined]
        assert rec.error_type == "builtins.KeyError"  # type: ignore[attr-defined]

    async def test_success_logs_no_error(self, sf: WorkflowEnvironment,
                                         caplog: pytest.LogCaptureFixture) -> None:
        """A run that succeeds after retries logs warnings only, never `run failed`."""
        tries["n"] = 0
        with caplog.at_level(logging.WARNING, logger="starflow"):
            handle = await sf.run(charge_flow, "o-3")
        assert handle.status == "success"
        assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
        assert len([r for r in caplog.records if r.levelno == logging.WARNING]) == 2
