"""The engine's one write path (``starflow.engine.writes``): one buffer of pending
writes, the order they go out in, and the read-only mode a replay runs in."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

import starflow
from starflow import StarflowConfig, step, workflow
from starflow.adapters import adapter_from_url
from starflow.adapters.units import Unit
from starflow.clock import SystemClock
from starflow.engine.engine import Engine
from starflow.engine.execution import Runtime
from starflow.engine.replay import Journal
from starflow.engine.writes import (
    AttributesWrite,
    DeferredOps,
    PatchMarker,
    ReadOnlyWrite,
    WritePath,
)
from starflow.records import StartOptions
from starflow.tokens import Keyring
from starflow.workflow.context import WorkflowContext, current_engine
from starflow.workflow.decorators import definition_of
from starflow.workflow.events import EVENT_KIND, DataWrite
from tests.core.conftest import SpyAdapter

_ran: list[str] = []


@step(name="writes-step")
async def a_step() -> str:
    _ran.append("step")
    return "done"


@workflow(name="writes-flow")
async def flow() -> str:
    starflow.set_attributes(k="v")
    return await a_step()


async def _engine(spy: SpyAdapter, *, read_only: bool) -> Engine:
    """An engine of a new run of ``flow`` this runner holds the lease of."""
    await spy.open()
    run_id = str(uuid.uuid4())
    clock = SystemClock()
    now = clock.now()
    runtime = Runtime(adapter=spy, clock=clock, config=StarflowConfig(), runner_id="r1",
                      keyring=Keyring({"k": "secret"}))
    definition = definition_of(flow)
    ctx = WorkflowContext(run_id=run_id, workflow=definition.name, version=definition.version,
                          workspace_id=spy.workspace_id, env=spy.env)
    async with spy.unit() as unit:
        await spy.on_run_start(run_id, ctx, StartOptions(input={"args": [], "kwargs": {}},
                                                         status="running",
                                                         claim_state="running"), now=now)
        await spy.write_lease(run_id, "r1", now + StarflowConfig().lease_ttl, now=now)
    assert unit.held
    spy.units.clear()
    return Engine(runtime=runtime, definition=definition, ctx=ctx, journal=Journal(),
                  args=(), kwargs={}, started_at=now, read_only=read_only)


class TestReadOnly:
    """``Engine(..., read_only=True)``: the replayer's engine writes nothing."""

    async def test_a_read_only_engine_refuses_its_first_unit(self, db_url: str,
                                                             workspace_id: str) -> None:
        spy = SpyAdapter(adapter_from_url(db_url, workspace_id=workspace_id))
        try:
            engine = await _engine(spy, read_only=True)
            _ran.clear()
            token = current_engine.set(engine)
            try:
                with pytest.raises(BaseException) as info:
                    await engine._body()
            finally:
                current_engine.reset(token)
            assert _contains(info.value, ReadOnlyWrite)
            assert spy.units == [] and _ran == []  # no unit, no step handler
            # The pending attributes stayed in the buffer: nothing went out.
            assert [type(w) for w in engine.writes.pending] == [AttributesWrite]
        finally:
            await spy.close()

    async def test_the_same_engine_writes_when_not_read_only(self, db_url: str,
                                                             workspace_id: str) -> None:
        spy = SpyAdapter(adapter_from_url(db_url, workspace_id=workspace_id))
        try:
            engine = await _engine(spy, read_only=False)
            _ran.clear()
            outcome = await engine.execute()
            assert (outcome.status, outcome.result) == ("success", "done")
            assert _ran == ["step"] and spy.units
            assert engine.writes.pending == []
        finally:
            await spy.close()


def _contains(exc: BaseException, kind: type[BaseException]) -> bool:
    if isinstance(exc, kind):
        return True
    return isinstance(exc, BaseExceptionGroup) and any(_contains(e, kind)
                                                       for e in exc.exceptions)


class _DurableSpy(SpyAdapter):
    """Records each written unit's durability too."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.flushes: list[bool] = []

    async def execute(self, unit: Unit) -> bool:
        held = await super().execute(unit)
        if held:
            self.flushes.append(unit.durable)
        return held


class TestOneBuffer:
    """What the workflow code asked for waits in one buffer and goes out with the next
    unit: deferred ops first, then patch markers, attributes and data writes, each
    kind in the order it was asked for."""

    async def test_unit_order_and_durability(self, db_url: str, workspace_id: str) -> None:
        spy = _DurableSpy(adapter_from_url(db_url, workspace_id=workspace_id))
        try:
            engine = await _engine(spy, read_only=False)
            writes: WritePath = engine.writes
            rid = engine.run_id
            now = datetime.now(UTC)
            async with spy.collect() as collected:
                await spy.record_event(rid, "deferred_marker", None, None, now=now,
                                       method="deferred")
            writes.add(DataWrite(node_id="event:e#1", kind=EVENT_KIND, key="e", value=1))
            writes.add(AttributesWrite("attributes#1", {"k": "v"}))
            writes.add(PatchMarker("patch:p#1", "p"))
            writes.add(DeferredOps(collected.ops))

            async def build(ts: Any) -> None:
                await spy.record_event(rid, "build", None, None, now=ts, method="build")

            spy.flushes.clear()
            await writes.commit(build, durable=False)
            [unit] = spy.units
            assert unit == ["deferred", "on_node_complete", "on_node_complete",
                            "set_attributes", "on_node_complete", "set_event", "build"]
            assert spy.flushes == [True]  # asked for a non-durable unit: the data makes it
            kinds = [(e.event_type, e.node_id) for e in await spy.list_events(rid)]
            assert kinds == [("deferred_marker", None), ("node_complete", "patch:p#1"),
                             ("node_complete", "attributes#1"),
                             ("node_complete", "event:e#1"), ("build", None)]
            assert writes.pending == []
        finally:
            await spy.close()
