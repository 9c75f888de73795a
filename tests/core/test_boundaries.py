"""The exact adapter calls of real runs, compared with the state model's write-boundary table."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import starflow
from starflow import RetryPolicy, Starflow, StarflowConfig, step, wait_for, workflow

from .conftest import SpyAdapter

# The state model's table, per lifecycle moment. A list is one unit (one transaction).
RUN_START = ["on_run_start", "write_lease"]          # onRunStart, then writeLease right after
NODE_START = ["on_node_start"]                         # before the step handler
NODE_COMPLETE = ["on_node_complete"]                   # after it resolves
NODE_ERROR = ["on_node_error"]                         # after it rejects past the last retry
# Not in the seed's table (its engine retries in memory): one failed attempt that will
# be retried, recorded before the backoff. A reader of the events must tolerate it.
NODE_RETRY = ["on_node_retry"]
RUN_COMPLETE = ["on_run_complete", "clear_lease"]      # finalizeRun, success path
RUN_ERROR = ["on_run_error", "clear_lease"]            # finalizeRun, failure path
# enterDurableWait 3-6, then finalizeRun's clearLease
PAUSE = ["on_run_paused", "save_checkpoint", "record_phase_if_changed", "emit_wait_wake",
         "clear_lease"]
# continuePausedWaitNode: record the wake payload, resume, re-acquire the lease
RESUME = ["consume_signal", "on_node_complete", "clear_waits", "on_run_resumed", "write_lease"]


@step
async def add(a: int, b: int) -> int:
    return a + b


@step
async def double(x: int) -> int:
    return 2 * x


@workflow(name="boundaries-two-steps")
async def two_steps(a: int) -> int:
    return await double(await add(a, 1))


@workflow(name="boundaries-wait")
async def with_wait(a: int) -> int:
    x = await add(a, 1)
    decision = await wait_for("go")
    return await double(x + decision["n"])


attempts = {"n": 0}


@step(retry=RetryPolicy(max_attempts=2, initial_interval=__import__("datetime").timedelta(0)))
async def flaky() -> None:
    attempts["n"] += 1
    raise ValueError("boom")


@workflow(name="boundaries-fail")
async def failing() -> None:
    await flaky()


def fused(units: list[list[str]], start: bool = True) -> list[list[str]]:
    """The seed's units as ``StarflowConfig.fused_boundaries`` commits them: an inline
    run's start and a step's ``node_complete`` each open the run's next unit; every
    call and its order kept. ``start``: the adapter fuses a run's start
    (``fuses_run_start``; PostgreSQL does not)."""
    out: list[list[str]] = []
    carry: list[str] = []
    for unit in units:
        if unit == NODE_COMPLETE or (start and unit == RUN_START):
            carry += unit
            continue
        out.append(carry + unit)
        carry = []
    return out + ([carry] if carry else [])


@pytest.fixture(params=[False, True], ids=["separate", "fused"])
async def sf(request: pytest.FixtureRequest, spy: SpyAdapter) -> AsyncIterator[Starflow]:
    """The app over the spy, with each step's outcome in a commit of its own or fused."""
    config = StarflowConfig(fused_boundaries=request.param)
    async with Starflow(spy, maintenance=False, config=config) as app:
        yield app


def expect(sf: Starflow, units: list[list[str]]) -> list[list[str]]:
    return (fused(units, sf.adapter.fuses_run_start) if sf.config.fused_boundaries
            else units)


class TestBoundarySequences:
    """Each lifecycle moment writes exactly the seed's calls, in order: one unit each, or
    (fused) a step's ``node_complete`` in one unit with the run's next boundary."""

    def test_fused_keeps_calls_and_order(self) -> None:
        """Fusing only regroups: the calls, in order, are the seed's."""
        seed = [RUN_START, NODE_START, NODE_COMPLETE, NODE_START, NODE_COMPLETE, PAUSE]
        assert fused(seed) == [RUN_START + NODE_START, NODE_COMPLETE + NODE_START,
                               NODE_COMPLETE + PAUSE]
        assert [m for u in fused(seed) for m in u] == [m for u in seed for m in u]

    async def test_two_step_run(self, sf: Starflow, spy: SpyAdapter) -> None:
        """A two-step run: start+lease, two node start/complete pairs, complete+clear."""
        handle = await sf.run(two_steps, 2)
        assert handle.status == "success" and handle.result == 6
        assert spy.units == expect(sf, [RUN_START, NODE_START, NODE_COMPLETE, NODE_START,
                                        NODE_COMPLETE, RUN_COMPLETE])

    async def test_pause_resume_complete(self, sf: Starflow, spy: SpyAdapter) -> None:
        """Pause writes enterDurableWait's steps in order; resume re-acquires the lease."""
        handle = await sf.run(with_wait, 1)
        assert handle.status == "paused" and handle.waiting_for == "go"
        assert spy.units == expect(sf, [RUN_START, NODE_START, NODE_COMPLETE, PAUSE])
        spy.units.clear()
        done = await sf.signal(handle.run_id, "go", {"n": 3})
        assert done.status == "success" and done.result == 10
        assert spy.units == expect(sf, [["enqueue_signal"], RESUME, NODE_START, NODE_COMPLETE,
                                        RUN_COMPLETE])

    async def test_step_fails_past_retries(self, sf: Starflow, spy: SpyAdapter) -> None:
        """One node_start, a node_retry per retried attempt, one node_error, then run error."""
        attempts["n"] = 0
        handle = await sf.run(failing)
        assert handle.status == "error"
        assert "StepFailed" in (handle.error or "") and "boom" in (handle.error or "")
        assert attempts["n"] == 2
        assert spy.units == expect(sf, [RUN_START, NODE_START, NODE_RETRY, NODE_ERROR,
                                        RUN_ERROR])
        events = await sf.events(handle.run_id)
        err = next(e for e in events if e.event_type == "node_error")
        assert err.payload["error"]["attempts"] == 2

    async def test_phase_changes_are_recorded_once(self, sf: Starflow, spy: SpyAdapter) -> None:
        """Setting the phase emits one phase event at the next boundary, not one per write."""

        @workflow(name="boundaries-phase")
        async def phased() -> None:
            starflow.context().phase = "one"
            await add(1, 1)
            await add(1, 2)
            starflow.context().phase = "two"

        handle = await sf.run(phased)
        assert handle.status == "success"
        events = await sf.events(handle.run_id)
        phases = [e.payload for e in events if e.event_type == "phase"]
        assert phases == [{"phase": "one", "previous": None}, {"phase": "two", "previous": "one"}]
        first = next(u for u in spy.units if "on_node_start" in u)
        assert first[first.index("on_node_start") - 1:] == ["record_phase_if_changed",
                                                            "on_node_start"]


@pytest.mark.parametrize("adapter_kind", ["memory"])
async def test_null_adapter_runs_steps_without_storing(adapter_kind: str) -> None:
    """The null adapter executes workflows but keeps nothing."""
    async with Starflow.open("null://") as sf:
        handle = await sf.run(two_steps, 1)
        assert handle.status == "success" and handle.result == 4
        assert await sf.list_runs() == []
