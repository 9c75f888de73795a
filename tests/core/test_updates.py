"""Updates: a request to a running workflow answered by it, recorded, executed once per
update_id however often (or concurrently) the caller retries."""

from __future__ import annotations

import uuid
from datetime import timedelta

import anyio
import msgspec
import pytest

from starflow import (
    InvalidArgument,
    ResultTimeout,
    RunFinished,
    Starflow,
    UpdateRejected,
    receive,
    step,
    wait_for,
    wait_for_message,
    workflow,
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Item(msgspec.Struct):
    sku: str
    qty: int


def cart_workflow(executions: list[str]) -> object:
    """A cart that answers add_item updates until 'checkout'; rejects qty <= 0."""
    name = unique("cart")
    step_name = unique("add")

    @step(name=step_name)
    async def add(sku: str) -> None:
        executions.append(sku)

    @workflow(name=name)
    async def cart() -> list[str]:
        items: list[str] = []
        while len(items) < 2:
            req = await receive("add_item", type=Item)
            if req.payload.qty <= 0:
                await req.reject(f"qty must be positive, got {req.payload.qty}")
                continue
            await add(req.payload.sku)
            items.append(req.payload.sku)
            await req.reply(len(items))
        await wait_for("checkout")
        return items

    return cart


async def test_update_gets_the_reply_and_rejects(sf: Starflow) -> None:
    executions: list[str] = []
    wf = cart_workflow(executions)
    handle = await sf.run(wf)  # type: ignore[call-overload]
    assert handle.status == "paused"
    assert await sf.update(handle.run_id, "add_item", {"sku": "a", "qty": 1}) == 1
    with pytest.raises(UpdateRejected, match="qty must be positive") as info:
        await sf.update(handle.run_id, "add_item", {"sku": "b", "qty": 0})
    assert info.value.reason == "qty must be positive, got 0"
    assert await sf.update(handle.run_id, "add_item", {"sku": "c", "qty": 2}) == 2
    done = await sf.signal(handle.run_id, "checkout", None)
    assert (done.status, done.result) == ("success", ["a", "c"])
    assert executions == ["a", "c"]
    nodes = [e.node_id for e in await sf.events(handle.run_id)
             if e.event_type == "node_complete"]
    assert nodes[0] == "receive:add_item#1" and nodes[1].startswith("step:")
    assert "reply:add_item#1" in nodes and "reply:add_item#3" in nodes


async def test_retry_with_the_same_update_id_executes_once(sf: Starflow) -> None:
    executions: list[str] = []
    wf = cart_workflow(executions)
    handle = await sf.run(wf)  # type: ignore[call-overload]
    first = await sf.update(handle.run_id, "add_item", {"sku": "a", "qty": 1},
                            update_id="u-1")
    again = await sf.update(handle.run_id, "add_item", {"sku": "a", "qty": 1},
                            update_id="u-1")
    assert first == again == 1
    assert executions == ["a"]


async def test_concurrent_calls_with_one_update_id_execute_once(sf: Starflow) -> None:
    executions: list[str] = []
    wf = cart_workflow(executions)
    handle = await sf.run(wf)  # type: ignore[call-overload]
    replies: list[object] = []

    async def call() -> None:
        replies.append(await sf.update(handle.run_id, "add_item", {"sku": "x", "qty": 1},
                                       update_id="same", timeout=10))

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(call)
    assert replies == [1, 1, 1, 1]
    assert executions == ["x"]
    receives = [e.node_id for e in await sf.events(handle.run_id)
                if e.event_type == "node_complete" and e.node_id
                and e.node_id.startswith("receive:")]
    assert receives == ["receive:add_item#1"]
    # The run still waits for its second item: the duplicate was never queued.
    assert await sf.runner.adapter.find_signal(handle.run_id,
                                               "__starflow.update:add_item") is None


async def test_update_to_an_ended_run_or_with_bad_input(sf: Starflow) -> None:
    @workflow(name=unique("no-updates"))
    async def quick() -> str:
        return "done"

    handle = await sf.run(quick)
    with pytest.raises(RunFinished):
        await sf.update(handle.run_id, "add_item", 1)
    executions: list[str] = []
    cart = await sf.run(cart_workflow(executions))  # type: ignore[call-overload]
    for name, uid in (("bad#name", None), ("__starflow.x", None), ("ok", "")):
        with pytest.raises(InvalidArgument):
            await sf.update(cart.run_id, name, 1, update_id=uid)
    assert await sf.runner.adapter.find_signal(cart.run_id, "__starflow.update:ok") is None


class TestUnanswered:
    """An update the run ended without answering says whether it was received."""

    async def test_received_then_returned_without_a_reply(self, sf: Starflow) -> None:
        @workflow(name=unique("forgets-to-reply"))
        async def forgetful() -> str:
            message = await wait_for_message(signals=["stop"], updates=["greet"])
            return message.name  # the request is never answered

        handle = await sf.run(forgetful)
        with pytest.raises(RunFinished) as info:
            await sf.update(handle.run_id, "greet", "x", update_id="u-1")
        text = str(info.value)
        assert info.value.run_id == handle.run_id and info.value.status == "success"
        assert "received update 'greet' (id u-1) at any:stop|" in text
        assert "request.reply(value)" in text and "message.update.reply" in text
        # Asked again with the same id: the same explanation, nothing queued.
        with pytest.raises(RunFinished, match=r"received update 'greet' \(id u-1\)"):
            await sf.update(handle.run_id, "greet", "x", update_id="u-1")

    async def test_ended_before_it_was_received(self, sf: Starflow) -> None:
        @workflow(name=unique("never-receives"))
        async def deaf() -> str:
            await wait_for("stop")
            return "stopped"

        handle = await sf.run(deaf)
        with pytest.raises(ResultTimeout):  # queued; nobody receives it
            await sf.update(handle.run_id, "greet", "x", update_id="u-2", timeout=0.05)
        await sf.signal(handle.run_id, "stop", None)
        assert await sf.result(handle.run_id, timeout=5) == "stopped"
        with pytest.raises(RunFinished, match="ended before it received update 'greet' "
                                              r"\(id u-2\)"):
            await sf.update(handle.run_id, "greet", "x", update_id="u-2")


async def test_timeout_keeps_the_request(sf: Starflow) -> None:
    """Nobody receives it yet: ResultTimeout; the request is delivered later, and a call
    with its id gets the answer."""

    @workflow(name=unique("late-receiver"))
    async def late() -> int:
        await wait_for("ready")
        req = await receive("ask")
        await req.reply(req.payload * 2)
        return 0

    handle = await sf.run(late)
    with pytest.raises(ResultTimeout, match="update_id='q-1'"):
        await sf.update(handle.run_id, "ask", 21, update_id="q-1",
                        timeout=timedelta(milliseconds=50))
    await sf.signal(handle.run_id, "ready", None)
    assert await sf.update(handle.run_id, "ask", 21, update_id="q-1") == 42
