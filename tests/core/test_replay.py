"""Replay: recorded outcomes come back typed, finished steps never re-run, divergence is caught."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

import msgspec
import pytest

import starflow
from starflow import NonDeterminismError, Starflow, StepFailed, step, wait_for, workflow
from starflow.workflow.decorators import registry


@dataclass
class Receipt:
    id: str
    cents: int


class Shipment(msgspec.Struct):
    tracking: str


calls: dict[str, int] = {}


def _count(name: str) -> None:
    calls[name] = calls.get(name, 0) + 1


@step
async def charge(order_id: str, cents: int) -> Receipt:
    _count("charge")
    return Receipt(id=f"r-{order_id}", cents=cents)


@step
async def ship(order_id: str) -> Shipment:
    _count("ship")
    return Shipment(tracking=f"t-{order_id}")


@step
async def refuse() -> None:
    _count("refuse")
    raise PermissionError("card declined")


@workflow(name="replay-order")
async def order(order_id: str) -> dict[str, object]:
    receipt = await charge(order_id, 1999)
    assert isinstance(receipt, Receipt)
    try:
        await refuse()
    except StepFailed as exc:
        refused = exc.error_type
    await wait_for("go")
    receipt_again = receipt
    shipment = await ship(order_id)
    assert isinstance(shipment, Shipment)
    return {"receipt": receipt_again.id, "tracking": shipment.tracking, "refused": refused}


async def test_recorded_steps_are_not_rerun_and_decode_to_their_types(sf: Starflow) -> None:
    """After resume, charge and refuse replay from the journal as Receipt / StepFailed."""
    calls.clear()
    handle = await sf.run(order, "o1")
    assert handle.status == "paused"
    assert calls == {"charge": 1, "refuse": 1}
    done = await sf.signal(handle.run_id, "go")
    assert done.status == "success"
    assert done.result == {"receipt": "r-o1", "tracking": "t-o1",
                           "refused": "builtins.PermissionError"}
    assert calls == {"charge": 1, "refuse": 1, "ship": 1}


async def test_result_is_decoded_to_the_annotated_return_type(sf: Starflow) -> None:
    """sf.result converts the stored JSON to the workflow's return annotation."""

    @workflow(name="replay-typed-result")
    async def typed() -> Receipt:
        return await charge("x", 5)

    handle = await sf.run(typed)
    assert await sf.result(handle.run_id) == Receipt(id="r-x", cents=5)


async def test_different_step_at_recorded_node(sf: Starflow) -> None:
    """New code that inserts a step before a recorded wait is caught on replay."""

    @workflow(name="replay-changing", version=1)
    async def v1() -> str:
        await charge("c", 1)
        await wait_for("go")
        return "done"

    handle = await sf.run(v1)
    assert handle.status == "paused"

    @workflow(name="replay-changing", version=1)
    async def v1_changed() -> str:
        await charge("c", 1)
        await ship("inserted")  # a new step in the middle
        await wait_for("go")
        return "done"

    try:
        calls.clear()
        done = await sf.signal(handle.run_id, "go")
        assert done.status == "error"
        assert "NonDeterminismError" in (done.error or "")
        assert "step:ship#1" in (done.error or "") and "wait:go#1" in (done.error or "")
        assert "ship" not in calls  # the new step never ran
    finally:
        registry.add(v1.__starflow_workflow__)  # type: ignore[attr-defined]


async def test_changed_arguments_at_recorded_node(sf: Starflow) -> None:
    """A recorded step called with different arguments names the node and both hashes."""
    amount = {"cents": 1}

    @workflow(name="replay-args")
    async def wf() -> None:
        await charge("a", amount["cents"])
        await wait_for("go")

    handle = await sf.run(wf)
    amount["cents"] = 2
    done = await sf.signal(handle.run_id, "go")
    assert done.status == "error"
    assert "step:charge#1" in (done.error or "") and "arguments" in (done.error or "")


def test_nondeterminism_error_carries_ids() -> None:
    """The error type exposes the node and the recorded vs current values."""
    err = NonDeterminismError("x", run_id="r", node_id="step:a#1", recorded="a", current="b")
    assert (err.run_id, err.node_id, err.recorded, err.current) == ("r", "step:a#1", "a", "b")
    with pytest.raises(NonDeterminismError):
        raise err


async def test_inline_caller_learns_its_lease_was_taken(sf: Starflow) -> None:
    """A runner whose lease another runner took stops and raises LeaseLostError."""
    import starflow as sf_mod
    from starflow.adapters.units import Guard

    @step
    async def steal() -> None:
        ctx = sf_mod.context()
        async with sf.adapter.unit(guard=Guard(run_id=ctx.run_id)) as unit:
            await sf.adapter.update_run(ctx.run_id, "test", leased_by="someone-else")
        assert unit.held

    @workflow(name="replay-stolen")
    async def stolen() -> None:
        await steal()
        await charge("never", 1)

    calls.clear()
    with pytest.raises(sf_mod.LeaseLostError, match="no longer leased by this runner"):
        await sf.run(stolen)
    assert "charge" not in calls


@step
async def by_number() -> dict[Any, Any]:
    return {2: "two", 10: "ten"}


async def test_live_value_is_the_value_replay_returns(sf: Starflow) -> None:
    """A step's dict with int keys comes back live as replay will decode it: str keys."""
    seen: list[object] = []

    @workflow(name="replay-int-keys")
    async def wf() -> None:
        seen.append(await by_number())
        await wait_for("go")

    handle = await sf.run(wf)
    done = await sf.signal(handle.run_id, "go")
    assert done.status == "success", done.error
    assert seen == [{"10": "ten", "2": "two"}] * 2


@step
async def not_a_number() -> float:
    return float("nan")


async def test_non_finite_float_is_refused_not_stored_as_null(sf: Starflow) -> None:
    """NaN has no JSON form: it is refused, not recorded as null to fail on replay."""

    @workflow(name="replay-nan")
    async def wf() -> float:
        return await not_a_number()

    handle = await sf.run(wf)
    assert handle.status == "error"
    assert "SerializationError" in (handle.error or "") and "nan" in (handle.error or "")
    types = [e.event_type for e in await sf.events(handle.run_id)]
    assert "node_complete" not in types


@step
async def price_list() -> dict[str, int]:
    return {"b": 2, "aa": 1}


@step
async def fetch_price(region: str) -> str:
    return region


async def test_recorded_dict_keeps_its_key_order(sf: Starflow) -> None:
    """Iterating a recorded dict visits its keys in the same order live and on replay.

    PostgreSQL's jsonb stores object keys shortest first; a replay that saw that
    order would call the per-key steps in another order than the first execution.
    """
    orders: list[list[str]] = []

    @workflow(name="replay-key-order")
    async def wf(regions: dict[str, int]) -> list[str]:
        prices = await price_list()
        orders.append(list(prices) + list(regions))
        fetched = [await fetch_price(region) for region in prices]
        await wait_for("go")
        return fetched

    handle = await sf.run(wf, {"zz": 1, "y": 2})
    done = await sf.signal(handle.run_id, "go")
    assert done.status == "success", done.error
    assert orders == [["aa", "b", "y", "zz"]] * 2
    assert done.result == ["aa", "b"]


class TestDivergenceMessages:
    """Every kind of divergence names the node, recorded vs now, and what to do."""

    async def _diverge(self, sf: Starflow, name: str, old: Any, new: Any) -> str:
        original = workflow(name=name)(old)
        handle = await sf.run(original)
        replaced = workflow(name=name)(new)
        assert replaced is not None
        done = await sf.signal(handle.run_id, "go")
        assert done.status == "error"
        return done.error or ""

    async def test_changed_arguments_show_both_values(self, sf: Starflow) -> None:
        """Changed arguments are shown as values, not only as hashes, with the fix."""

        async def old() -> None:
            await charge("order-7", 1999)
            await wait_for("go")

        async def new() -> None:
            await charge("order-7", 2500)
            await wait_for("go")

        error = await self._diverge(sf, "replay-msg-args", old, new)
        assert "step:charge#1" in error
        assert '"args":["order-7",1999]' in error and '"args":["order-7",2500]' in error
        assert "starflow.patched()" in error

    async def test_removed_step_says_what_to_do(self, sf: Starflow) -> None:
        """A recorded step the code no longer reaches is named, with the fix."""

        async def old() -> None:
            await charge("a", 1)
            await wait_for("go")
            await ship("a")

        async def new() -> None:
            await wait_for("go")

        error = await self._diverge(sf, "replay-msg-removed", old, new)
        assert "step:charge#1" in error and "starflow.patched()" in error


@step(name="replay-vars-checkout")
async def checkout_step() -> None:
    ctx = starflow.context()
    ctx.phase = "charging"
    ctx.set("customer", {"name": "ada", "tags": ["vip"]})
    ctx.variables.pop("draft", None)


@step(name="replay-vars-fails")
async def tags_then_fails() -> None:
    starflow.context().variables["customer"]["tags"].append("retried")
    raise RuntimeError("declined")


@step(name="replay-vars-noop")
async def noop_step() -> None:
    return None


@workflow(name="replay-vars")
async def with_step_variables() -> dict[str, object]:
    starflow.context().set("draft", True)
    await checkout_step()
    with contextlib.suppress(StepFailed):
        await tags_then_fails()
    await wait_for("go")
    await noop_step()
    ctx = starflow.context()
    return {"phase": ctx.phase, "customer": ctx.variables.get("customer"),
            "draft": ctx.variables.get("draft", "gone")}


async def test_variables_written_by_steps_survive_a_wake(sf: Starflow) -> None:
    """Variables and the phase a step set (or changed in place, or removed, even in a
    step that failed) are what the workflow sees after a wake, and no spurious phase
    event is recorded: a recorded step's variable writes are replayed with it."""
    handle = await sf.run(with_step_variables)
    assert handle.status == "paused"
    done = await sf.signal(handle.run_id, "go", None)
    assert done.status == "success", done
    assert done.result == {"phase": "charging",
                           "customer": {"name": "ada", "tags": ["vip", "retried"]},
                           "draft": "gone"}
    phases = [e.payload for e in await sf.events(handle.run_id) if e.event_type == "phase"]
    assert phases == [{"phase": "charging", "previous": None}]
