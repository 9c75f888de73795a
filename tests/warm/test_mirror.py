"""The mirror: one outbox row per state change, in the cold write's transaction."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import msgspec
import pytest

from starflow import Starflow
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import (
    DeleteSessionVars,
    Guard,
    InsertEvent,
    InsertOutbox,
    InsertRun,
    Op,
    Unit,
    UpdateRun,
    UpsertSessionVar,
)
from starflow.errors import StorageError
from starflow.warm.base import REDACTED
from starflow.warm.mirror import MirroringWorkflowStateAdapter, mirror
from starflow.workflow.context import WorkflowContext

from .conftest import FakeClock
from .flows import approval_flow, sum_flow

T0 = datetime(2030, 1, 1, tzinfo=UTC)


class Boom(Op, frozen=True, kw_only=True):
    """An op no adapter knows: applying it raises inside the unit's transaction."""


class Recorder(DelegatingAdapter):
    """Sits under the mirror: sees the units the cold adapter executes.

    With ``fault_between`` set, it inserts a failing op between the cold writes
    and the outbox rows of the next unit that has both (fault injection at the
    seam, between the two halves the mirror promises are atomic).
    """

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self.units: list[Unit] = []
        self.fault_between = False

    async def execute(self, unit: Unit) -> bool:
        if self.fault_between and any(isinstance(op, InsertOutbox) for op in unit.ops):
            self.fault_between = False
            first = next(i for i, op in enumerate(unit.ops) if isinstance(op, InsertOutbox))
            unit = Unit(ops=[*unit.ops[:first], Boom(method="fault"), *unit.ops[first:]],
                        guard=unit.guard, durable=unit.durable)
        self.units.append(unit)
        return await self.inner.execute(unit)


@pytest.fixture
async def recorder(db_url: str, workspace_id: str) -> AsyncIterator[Recorder]:
    yield Recorder(adapter_from_url(db_url, workspace_id=workspace_id))


@pytest.fixture
async def mirrored(recorder: Recorder, clock: FakeClock
                   ) -> AsyncIterator[MirroringWorkflowStateAdapter]:
    m = mirror(recorder, "memory://", clock=clock)
    await m.open()
    try:
        yield m
    finally:
        await m.close()


async def _outbox_count(adapter: WorkflowStateAdapter) -> int:
    return (await adapter.outbox_lag(T0)).pending


async def _new_run(m: MirroringWorkflowStateAdapter) -> str:
    run_id = str(uuid.uuid4())
    async with m.unit() as u:
        await m.on_run_start(run_id, WorkflowContext(run_id=run_id, workflow="w"), now=T0)
        await m.write_lease(run_id, "me", T0, now=T0)
    assert u.held
    return run_id


class TestOneRowPerChange:
    """Every run / event / session-var change gets its projection in the same unit."""

    async def test_workflow_units_carry_their_outbox_rows(
            self, recorder: Recorder, clock: FakeClock) -> None:
        """Each executed unit ends with one outbox row per run/event op it holds."""
        async with Starflow(mirror(recorder, "memory://", clock=clock), clock=clock,
                            maintenance=False) as sf:
            handle = await sf.run(sum_flow, 2, 3)
            assert handle.status == "success"
            units = [u for u in recorder.units if any(isinstance(o, InsertOutbox)
                                                      for o in u.ops)]
            assert units, "no unit carried an outbox row"
            for unit in recorder.units:
                state = [o for o in unit.ops if isinstance(
                    o, InsertRun | UpdateRun | InsertEvent | UpsertSessionVar | DeleteSessionVars)]
                rows = [o for o in unit.ops if isinstance(o, InsertOutbox)]
                assert len(rows) == len(state), unit.methods
                assert unit.ops[len(unit.ops) - len(rows):] == rows  # appended last
                for op, row in zip(state, rows, strict=True):
                    kind = ("event" if isinstance(op, InsertEvent) else "run"
                            if isinstance(op, InsertRun | UpdateRun) else "session_var")
                    assert row.kind == kind and row.run_id == handle.run_id
            pending = await sf.adapter.pending_outbox(limit=1000)
            assert len(pending) == sum(
                1 for u in recorder.units for o in u.ops if isinstance(o, InsertOutbox))
            first = pending[0]
            assert first.kind == "run" and first.payload["op"] == "insert"
            assert first.payload["columns"]["id"] == handle.run_id
            assert first.payload["columns"]["workspace_id"] == sf.adapter.workspace_id
            assert first.created_at == clock.now()

    async def test_session_vars_are_mirrored(self, mirrored: MirroringWorkflowStateAdapter
                                             ) -> None:
        """session_set and the end-of-run drop of run-scoped vars enqueue session_var rows."""
        run_id = await _new_run(mirrored)
        await mirrored.session_set("s1", "k", {"v": 1}, now=T0, run_id=run_id)
        await mirrored.execute(Unit(ops=[]))
        rows = [r for r in await mirrored.pending_outbox() if r.kind == "session_var"]
        assert [r.payload["op"] for r in rows] == ["set"]
        assert rows[0].payload["value"] == {"v": 1}
        async with mirrored.unit():
            await mirrored.on_run_complete(run_id, WorkflowContext(run_id=run_id, workflow="w"),
                                           5, now=T0)
        rows = [r for r in await mirrored.pending_outbox() if r.kind == "session_var"]
        assert [r.payload["op"] for r in rows] == ["set", "delete_run"]


class TestAtomicity:
    """Outbox row and cold write commit together, or neither does."""

    async def test_failed_guard_writes_neither(self, mirrored: MirroringWorkflowStateAdapter
                                               ) -> None:
        """A unit whose lease guard fails leaves no event and no outbox row."""
        run_id = await _new_run(mirrored)
        before = await _outbox_count(mirrored)
        events_before = await mirrored.list_events(run_id)
        async with mirrored.unit(guard=Guard(run_id=run_id, leased_by="someone-else")) as u:
            await mirrored.on_node_complete(run_id, "step:x#1", {"output": 1}, now=T0)
        assert u.held is False
        assert await _outbox_count(mirrored) == before
        assert await mirrored.list_events(run_id) == events_before

    async def test_fault_between_cold_write_and_outbox_row_writes_neither(
            self, mirrored: MirroringWorkflowStateAdapter, recorder: Recorder) -> None:
        """An op failing after the cold write, before the outbox row, rolls both back."""
        run_id = await _new_run(mirrored)
        before = await _outbox_count(mirrored)
        recorder.fault_between = True
        with pytest.raises((StorageError, TypeError)):
            async with mirrored.unit(guard=Guard(run_id=run_id, leased_by="me")):
                await mirrored.on_node_complete(run_id, "step:x#1", {"output": 1}, now=T0)
                await mirrored.update_run(run_id, "test", error="should not stick")
        ops = [type(o).__name__ for o in recorder.units[-1].ops]
        assert ops.index("Boom") < ops.index("InsertOutbox")  # the fault was in between
        assert await _outbox_count(mirrored) == before
        assert await mirrored.list_events(run_id) == []
        run = await mirrored.get_run(run_id)
        assert run is not None and run.error is None
        # The adapter is still usable: the next unit writes both halves.
        async with mirrored.unit(guard=Guard(run_id=run_id, leased_by="me")) as u:
            await mirrored.on_node_complete(run_id, "step:x#1", {"output": 1}, now=T0)
        assert u.held
        assert await _outbox_count(mirrored) == before + 1
        assert len(await mirrored.list_events(run_id)) == 1

    async def test_failed_cold_write_writes_no_outbox_row(
            self, mirrored: MirroringWorkflowStateAdapter) -> None:
        """A cold write that raises (duplicate run id) leaves no outbox row."""
        run_id = await _new_run(mirrored)
        before = await _outbox_count(mirrored)
        with pytest.raises(StorageError):
            await mirrored.on_run_start(run_id, WorkflowContext(run_id=run_id, workflow="w"),
                                        now=T0)
        assert await _outbox_count(mirrored) == before


class TestRedaction:
    """Wake tokens never reach the outbox (nor, therefore, the warm tier)."""

    async def test_wake_token_redacted_from_pause_projections(
            self, recorder: Recorder, clock: FakeClock) -> None:
        """The run_paused payload and the checkpoint's __celestialWait lose their token."""
        async with Starflow(mirror(recorder, "memory://", clock=clock), clock=clock,
                            maintenance=False) as sf:
            handle = await sf.run(approval_flow, "o-1")
            assert handle.status == "paused" and handle.wake_token
            token = handle.wake_token
            # Cold keeps it (resume needs it) ...
            cold = await sf.get_run(handle.run_id)
            assert cold.checkpoint_json is not None
            assert cold.checkpoint_json["variables"]["__celestialWait"]["wake_token"] == token
            paused = [e for e in await sf.events(handle.run_id) if e.event_type == "run_paused"]
            assert paused[0].payload["wake_token"] == token
            # ... the outbox never has it.
            rows = await sf.adapter.pending_outbox(limit=1000)
            assert token not in msgspec.json.encode([r.payload for r in rows]).decode()
            event = next(r.payload["event"] for r in rows if r.kind == "event"
                         and r.payload["event"]["event_type"] == "run_paused")
            assert event["payload"]["wake_token"] == REDACTED
            checkpoint = next(r.payload["columns"]["checkpoint_json"] for r in rows
                              if r.kind == "run" and r.payload["columns"].get("checkpoint_json"))
            assert checkpoint["variables"]["__celestialWait"]["wake_token"] == REDACTED
            assert checkpoint["variables"]["__celestialWait"]["node_id"] == "wait:approval#1"
