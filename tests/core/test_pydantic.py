"""Pydantic v2 models as values (#30): steps and workflows take and return models,
decoded by annotation live, on replay, in ``sf.result``, in typed waits and in
events and streams, on every durable adapter."""

from __future__ import annotations

import subprocess
import sys
import uuid
from dataclasses import dataclass
from typing import Any

import pydantic
import pytest

import starflow
from starflow import SerializationError, Starflow, step, wait_for, workflow
from tests.core.conftest import SpyAdapter


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Line(pydantic.BaseModel):
    sku: str
    qty: int


class Order(pydantic.BaseModel):
    id: str
    lines: list[Line]
    note: Line | None = None


class Approval(pydantic.BaseModel):
    by: str


@dataclass
class Shipment:
    order: Order
    extra: list[Line | None]


class TestModelsAsValues:
    """Models in and out of steps and workflows come back as model instances."""

    async def test_replay_after_pause_gives_models(self, sf: Starflow, spy: SpyAdapter) -> None:
        """Steps run once; after the pause the replayed outputs are models again
        (nested, in list[...], Optional, inside a dataclass), the signal's payload
        is typed, and sf.result is the annotated model; stored as model_dump JSON."""
        calls: list[str] = []
        seen: list[Any] = []

        @step(name=unique("price"))
        async def price(order: Order) -> Order:
            calls.append("price")
            assert isinstance(order, Order) and isinstance(order.lines[0], Line)
            return order.model_copy(update={"note": Line(sku="gift", qty=1)})

        @step(name=unique("ship"))
        async def ship(order: Order) -> Shipment:
            calls.append("ship")
            return Shipment(order=order, extra=[None, Line(sku="box", qty=2)])

        @step(name=unique("lines"))
        async def lines(order: Order) -> list[Line] | None:
            calls.append("lines")
            return list(order.lines)

        @workflow(name=unique("orders"))
        async def flow(order: Order) -> Shipment:
            priced = await price(order)
            shipment = await ship(priced)
            got = await lines(priced)
            seen.append((priced, shipment, got))
            approval = await wait_for("approve", type=Approval)
            assert isinstance(approval, Approval)
            starflow.set_event("approved", approval)
            starflow.write_stream("lines", priced.lines[0])
            return shipment

        order = Order(id="o1", lines=[Line(sku="a", qty=2)])
        handle = await sf.run(flow, order)
        assert handle.status == "paused" and calls == ["price", "ship", "lines"]
        done = await sf.signal(handle.run_id, "approve", Approval(by="ann"))
        assert done.status == "success"
        assert calls == ["price", "ship", "lines"]  # replayed, not re-run
        assert len(seen) == 2
        priced, shipment, got = seen[1]  # the replay's values, decoded from storage
        assert isinstance(priced, Order) and priced.note == Line(sku="gift", qty=1)
        assert isinstance(shipment, Shipment) and isinstance(shipment.order, Order)
        assert shipment.extra == [None, Line(sku="box", qty=2)]
        assert got == [Line(sku="a", qty=2)] and isinstance(got[0], Line)
        result = await sf.result(handle)
        assert isinstance(result, Shipment) and result == shipment
        assert await sf.get_event(handle.run_id, "approved", type=Approval) == Approval(by="ann")
        assert await sf.get_event(handle.run_id, "approved") == {"by": "ann"}
        streamed = [v async for v in sf.read_stream(handle.run_id, "lines", type=Line)]
        assert streamed == [Line(sku="a", qty=2)]
        run = await sf.get_run(handle.run_id)
        # stored as plain JSON (model_dump(mode="json")), not a pickled object
        assert run.result_json["order"] == {
            "id": "o1", "lines": [{"sku": "a", "qty": 2}], "note": {"sku": "gift", "qty": 1}}

    async def test_replay_in_a_fresh_app_decodes_from_the_database(
            self, db_url: str, adapter_kind: str, workspace_id: str) -> None:
        """A second app on the same database (no journal of the first in memory) wakes
        the run: the recorded step output is read back from the row as a model."""
        if adapter_kind == "memory":
            pytest.skip("a private in-memory database cannot be opened twice")
        calls: list[str] = []
        seen: list[Any] = []

        @step(name=unique("fresh-price"))
        async def price(order: Order) -> list[Order]:
            calls.append("price")
            return [order, order.model_copy(update={"id": "o2"})]

        @workflow(name=unique("fresh-orders"))
        async def flow(order: Order) -> str:
            priced = await price(order)
            seen.append(priced)
            await wait_for("go")
            return ",".join(o.id for o in priced)

        order = Order(id="o1", lines=[Line(sku="a", qty=2)], note=None)
        async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False) as first:
            handle = await first.run(flow, order)
            assert handle.status == "paused"
        async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False) as second:
            done = await second.signal(handle.run_id, "go")
        assert done.status == "success" and done.result == "o1,o2"
        assert calls == ["price"] and len(seen) == 2
        assert all(isinstance(o, Order) and isinstance(o.lines[0], Line) for o in seen[1])
        assert seen[1] == seen[0]

    async def test_signal_not_fitting_the_model_is_refused(self, sf: Starflow) -> None:
        """A payload that fails the model's validation: SerializationError naming the
        model and the field, and nothing written; the run still waits."""
        @workflow(name=unique("approve"))
        async def flow() -> str:
            approval = await wait_for("approve", type=Approval)
            return approval.by

        handle = await sf.run(flow)
        before = await sf.events(handle.run_id)
        with pytest.raises(SerializationError) as info:
            await sf.signal(handle.run_id, "approve", {"by": 3})
        assert "Approval" in str(info.value) and "by" in str(info.value)
        assert info.value.run_id == handle.run_id
        assert await sf.events(handle.run_id) == before
        done = await sf.signal(handle.run_id, "approve", {"by": "bo"})
        assert done.status == "success" and done.result == "bo"

    async def test_stored_value_not_fitting_the_model(self, sf: Starflow) -> None:
        """A stored result that no longer validates (the model changed, or the code
        returned something else): sf.result raises SerializationError naming the run
        and the model's type, not a raw pydantic error."""
        @workflow(name=unique("bad-result"))
        async def flow() -> Line:
            return {"sku": "a", "qty": "many"}  # type: ignore[return-value]

        with pytest.raises(SerializationError) as first:
            await sf.run(flow)
        run_id = first.value.run_id
        assert run_id is not None
        with pytest.raises(SerializationError) as info:
            await sf.result(run_id)
        message = str(info.value)
        assert info.value.run_id == run_id
        assert f"{Line.__module__}.Line" in message and "qty" in message
        assert run_id in message

    async def test_step_output_not_fitting_the_model(self, sf: Starflow) -> None:
        """A step whose output fails its annotated model: the error names the node."""
        @step(name=unique("bad-step"))
        async def bad() -> Line:
            return {"sku": 1}  # type: ignore[return-value]

        @workflow(name=unique("bad-step-flow"))
        async def flow() -> None:
            with pytest.raises(SerializationError) as info:
                await bad()
            assert info.value.node_id is not None and info.value.node_id.startswith("step:")
            assert info.value.run_id is not None
            assert "Line" in str(info.value) and "sku" in str(info.value)

        handle = await sf.run(flow)
        assert handle.status == "success"

    async def test_update_request_and_answer_are_models(self, sf: Starflow) -> None:
        """receive(type=Model) gets a model; sf.update(type=Model) returns the answer
        as a model (the stored answer is its JSON form)."""
        @workflow(name=unique("cart"))
        async def flow() -> int:
            req = await starflow.receive("add", type=Line)
            assert isinstance(req.payload, Line)
            await req.reply(Order(id="cart", lines=[req.payload]))
            return req.payload.qty

        handle = await sf.run(flow)
        answer = await sf.update(handle.run_id, "add", Line(sku="a", qty=3), type=Order)
        assert answer == Order(id="cart", lines=[Line(sku="a", qty=3)])
        assert (await sf.result(handle.run_id)) == 3


class TestOptional:
    """Pydantic is an optional dependency."""

    def test_importing_starflow_does_not_import_pydantic(self) -> None:
        """starflow, its CLI and its serde never import pydantic themselves."""
        code = ("import sys, starflow, starflow.cli, starflow.serde\n"
                "assert 'pydantic' not in sys.modules, 'pydantic imported'\n"
                "starflow.serde.to_builtins({'a': 1}, what='x')\n"
                "starflow.serde.convert({'a': 1}, dict[str, int])\n"
                "assert 'pydantic' not in sys.modules\n")
        subprocess.run([sys.executable, "-c", code], check=True)
