"""wait_for(type=...): the expected type is recorded with the wait and checked before a write."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import msgspec
import pytest

import starflow
from starflow import SerializationError, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow.workflow.context import checkpoint_wait
from starflow_testing import WorkflowEnvironment


class Order(msgspec.Struct):
    sku: str
    qty: int


@workflow(name="typed-wait")
async def typed(n: int) -> int:
    order = await wait_for("order", type=Order)
    return order.qty * n


@workflow(name="typed-wait-late")
async def typed_late() -> int:
    await starflow.sleep(timedelta(seconds=5))
    order = await wait_for("order", type=Order)
    return order.qty


@workflow(name="sleep-zero")
async def sleeps_zero() -> str:
    await starflow.sleep(timedelta(0))
    return "done"


@pytest.fixture
async def sf(db_url: str, workspace_id: str) -> AsyncIterator[WorkflowEnvironment]:
    async with WorkflowEnvironment(adapter_from_url(db_url, workspace_id=workspace_id)) as env:
        yield env


class TestTypedWaits:
    """The payload is checked against the wait's type; a mismatch never fails the run."""

    async def test_type_is_recorded_with_the_wait(self, sf: WorkflowEnvironment) -> None:
        """The checkpoint's wait names the expected type."""
        handle = await sf.run(typed, 2)
        run = await sf.get_run(handle.run_id)
        wait = checkpoint_wait(run.checkpoint_json)
        assert wait is not None and wait.payload_type == f"{__name__}:Order"

    async def test_signal_mismatch_refused_before_any_write(self, sf: WorkflowEnvironment) -> None:
        """A payload missing a field: SerializationError naming it; run and inbox untouched."""
        handle = await sf.run(typed, 2)
        before = await sf.events(handle.run_id)
        with pytest.raises(SerializationError) as info:
            await sf.signal(handle.run_id, "order", {"sku": "a"})
        assert "qty" in str(info.value) and info.value.run_id == handle.run_id
        assert await sf.events(handle.run_id) == before
        assert (await sf.get_run(handle.run_id)).status == "paused"
        assert await sf.adapter.find_signal(handle.run_id, "order") is None
        done = await sf.signal(handle.run_id, "order", {"sku": "a", "qty": 3})
        assert done.status == "success" and done.result == 6

    async def test_resume_mismatch_refused_before_any_write(self, sf: WorkflowEnvironment) -> None:
        """The same check for a wake token."""
        handle = await sf.run(typed, 2)
        assert handle.wake_token is not None
        before = await sf.events(handle.run_id)
        with pytest.raises(SerializationError) as info:
            await sf.resume(handle.wake_token, {"sku": "a", "qty": "many"})
        assert "qty" in str(info.value)
        assert await sf.events(handle.run_id) == before
        done = await sf.resume(handle.wake_token, {"sku": "a", "qty": 1})
        assert done.status == "success" and done.result == 2

    async def test_early_signal_mismatch_fails_only_the_wait(self, sf: WorkflowEnvironment) -> None:
        """A bad payload sent before the wait is rejected there; the run pauses and says why."""
        handle = await sf.run(typed_late)
        assert handle.status == "paused"
        # Not yet at the typed wait: the signal is kept in the inbox unchecked.
        await sf.signal(handle.run_id, "order", {"sku": "a"})
        await sf.run_until_idle()  # the sleep's timer fires; the run reaches the wait
        run = await sf.get_run(handle.run_id)
        assert run.status == "paused"
        events = await sf.events(handle.run_id)
        rejected = [e for e in events if e.event_type == "signal_rejected"]
        assert len(rejected) == 1 and rejected[0].node_id == "wait:order#1"
        assert "qty" in rejected[0].payload["error"]
        assert await sf.adapter.find_signal(handle.run_id, "order") is None
        done = await sf.signal(handle.run_id, "order", {"sku": "a", "qty": 4})
        assert done.status == "success" and done.result == 4

    async def test_sleep_zero_does_not_pause(self, sf: WorkflowEnvironment) -> None:
        """sleep(timedelta(0)) returns at once: no pause, no wait."""
        handle = await sf.run(sleeps_zero)
        assert handle.status == "success" and handle.result == "done"
        types = [e.event_type for e in await sf.events(handle.run_id)]
        assert "run_paused" not in types


@workflow(name="late-signal-rule")
async def two_waits() -> list[object]:
    got: list[object] = []
    try:
        got.append(await wait_for("answer", timeout=timedelta(minutes=5)))
    except starflow.WaitTimeout:
        got.append("timed out")
    got.append(await wait_for("answer"))
    return got


class TestSignalThatLosesTheRace:
    """A signal that loses to its wait's timeout is kept for the next wait of that name."""

    async def test_kept_for_the_next_wait(self, sf: WorkflowEnvironment) -> None:
        """The timeout wins the wake; the signal stays in the inbox; the next wait returns it."""
        handle = await sf.run(two_waits)
        # The signal lands in the inbox at the instant the timer is due, before either
        # wakes the run: the timer wins (the wake is one guarded unit, exactly one wins).
        async with sf.adapter.unit() as unit:
            await sf.adapter.enqueue_signal(handle.run_id, "answer", {"v": 1}, now=sf.now())
        assert unit.held
        result = await sf.result(handle.run_id)
        assert result == ["timed out", {"v": 1}]
        events = await sf.events(handle.run_id)
        first = [e.event_type for e in events if e.node_id == "wait:answer#1"]
        second = [e for e in events if e.node_id == "wait:answer#2"]
        assert first == ["node_error"]
        assert second[-1].event_type == "node_complete"
        assert second[-1].payload["output"] == {"v": 1}
