"""The wait/wake ordering invariant (ADR-045 §8): the checkpoint is durable before the wake.

Mirrors the state model's regression test ``wait-checkpoint-before-wake``: the
order of the six ``enterDurableWait`` steps, and fault injection at
``save_checkpoint``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

import starflow
from starflow import Starflow, step, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Unit, UpdateRun
from starflow.errors import StorageError


class OrderRecorder(DelegatingAdapter):
    """Records each unit's ops and what the run row looked like when the unit was submitted."""

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self.units: list[Unit] = []
        self.fail_save_checkpoint = 0

    async def execute(self, unit: Unit) -> bool:
        if self.fail_save_checkpoint and "save_checkpoint" in unit.methods:
            self.fail_save_checkpoint -= 1
            raise StorageError("injected: save_checkpoint failed")
        held = await self.inner.execute(unit)
        if held:
            self.units.append(unit)
        return held


@pytest.fixture
async def recorder(db_url: str, workspace_id: str) -> AsyncIterator[OrderRecorder]:
    yield OrderRecorder(adapter_from_url(db_url, workspace_id=workspace_id))


@step
async def prepare(order_id: str) -> str:
    return f"prepared-{order_id}"


@workflow(name="wait-order")
async def approval_flow(order_id: str) -> dict[str, Any]:
    prepared = await prepare(order_id)
    starflow.context().phase = "awaiting-approval"
    decision = await wait_for("approval")
    return {"prepared": prepared, "decision": decision}


class TestEnterDurableWaitOrder:
    """The six steps happen in the seed's order, and the wake is registered last."""

    async def test_six_steps_in_order(self, recorder: OrderRecorder) -> None:
        """Steps 1-2 in memory before step 3; 3, 4, 5, 6 in order, then clearLease."""
        async with Starflow(recorder, maintenance=False) as sf:
            handle = await sf.run(approval_flow, "o-1")
            assert handle.status == "paused"
            pause = recorder.units[-1]
            # Fused (the default), the step before the wait completes in the same unit,
            # first; enterDurableWait's order follows it unchanged.
            assert pause.methods[:-5] == (["on_node_complete"]
                                          if sf.config.fused_boundaries else [])
            assert pause.methods[-5:] == ["on_run_paused", "save_checkpoint",
                                          "record_phase_if_changed", "emit_wait_wake",
                                          "clear_lease"]
            # Steps 1-2: the checkpoint written at step 4 already holds the pending wait.
            save = next(op for op in pause.ops if op.method == "save_checkpoint")
            assert isinstance(save, UpdateRun)
            wait = save.values["checkpoint_json"]["variables"]["__celestialWait"]
            assert wait["status"] == "pending" and wait["node_id"] == "wait:approval#1"
            # The whole sequence is one guarded transaction: the wake cannot be visible
            # without the checkpoint.
            assert pause.guard is not None and pause.durable
            run = await sf.get_run(handle.run_id)
            assert run.status == "paused" and run.checkpoint_json is not None
            assert run.leased_by is None and run.lease_until is None
            waits = await recorder.list_waits(handle.run_id)
            assert [w.node_id for w in waits] == ["wait:approval#1"]

    async def test_save_checkpoint_failure_never_registers_the_wake(
        self, recorder: OrderRecorder
    ) -> None:
        """When save_checkpoint keeps failing, no wake, no paused-without-checkpoint."""
        recorder.fail_save_checkpoint = 100
        async with Starflow(recorder, maintenance=False) as sf:
            with pytest.raises(StorageError):
                await sf.run(approval_flow, "o-2")
            runs = await sf.list_runs()
            assert len(runs) == 1
            run = runs[0]
            assert run.status == "running"          # never paused...
            assert run.checkpoint_json is None      # ...so never paused without a checkpoint
            assert await recorder.list_waits(run.id) == []  # and the wake never registered
            assert run.leased_by is not None        # the sweep will recover it after the TTL

    async def test_transient_save_checkpoint_failure_is_retried(
        self, recorder: OrderRecorder
    ) -> None:
        """A blip at save_checkpoint is retried as a whole unit; the run pauses correctly."""
        recorder.fail_save_checkpoint = 1
        async with Starflow(recorder, maintenance=False) as sf:
            handle = await sf.run(approval_flow, "o-3")
            assert handle.status == "paused"
            run = await sf.get_run(handle.run_id)
            assert run.checkpoint_json is not None
            done = await sf.signal(handle.run_id, "approval", {"ok": True})
            assert done.status == "success"

    async def test_early_signal_never_meets_an_empty_checkpoint(
        self, recorder: OrderRecorder
    ) -> None:
        """A signal sent while the run is still running is kept, then delivered at the wait."""
        async with Starflow(recorder, maintenance=False) as sf:
            @step
            async def notify_self() -> None:
                ctx = starflow.context()
                handle = await sf.signal(ctx.run_id, "approval", {"early": True})
                assert handle.status == "running"  # queued in the inbox, nothing woken

            @workflow(name="wait-order-early")
            async def early() -> Any:
                await notify_self()
                return await wait_for("approval")

            handle = await sf.run(early)
            assert handle.status == "success" and handle.result == {"early": True}
            events = await sf.events(handle.run_id)
            assert "run_paused" not in [e.event_type for e in events]
