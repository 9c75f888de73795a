"""Waiting for several kinds of message at once (#30 item 6): ``receive`` with several
update names, and ``wait_for_message`` for signals and updates together."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import msgspec
import pytest

import starflow
from starflow import (
    InvalidArgument,
    Message,
    Starflow,
    UpdateRejected,
    WaitTimeout,
    receive,
    step,
    wait_for,
    wait_for_message,
    workflow,
)
from starflow_testing import WorkflowEnvironment


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


class Item(msgspec.Struct):
    sku: str
    qty: int


def completes(events: list[Any]) -> list[str]:
    return [e.node_id for e in events if e.event_type == "node_complete" and e.node_id]


def shop(effects: list[str]) -> Any:
    """Handles add_item / set_note updates and a 'cancel' signal until 'checkout'."""
    effect_name = unique("effect")

    @step(name=effect_name)
    async def effect(what: str) -> None:
        effects.append(what)

    @workflow(name=unique("shop"))
    async def wf() -> list[str]:
        items: list[str] = []
        while True:
            msg = await wait_for_message(signals=["cancel"],
                                         updates=["add_item", "checkout"],
                                         types={"add_item": Item})
            if msg.kind == "signal":
                await effect(f"cancelled:{msg.payload}")
                return ["cancelled", *items]
            assert msg.update is not None
            if msg.name == "checkout":
                await msg.update.reply(len(items))
                return items
            assert isinstance(msg.payload, Item)
            await effect(f"add:{msg.payload.sku}")
            items.append(msg.payload.sku)
            await msg.update.reply(len(items))

    return wf


class TestWaitForMessage:
    """Signals and updates together: whichever comes first is handled."""

    async def test_updates_then_a_signal(self, sf: Starflow) -> None:
        """Two updates answered, then a signal ends it; each wait is one any: node."""
        effects: list[str] = []
        handle = await sf.run(shop(effects))
        assert handle.status == "paused"
        assert await sf.update(handle.run_id, "add_item", {"sku": "a", "qty": 1}) == 1
        assert await sf.update(handle.run_id, "add_item", {"sku": "b", "qty": 2}) == 2
        done = await sf.signal(handle.run_id, "cancel", "changed my mind")
        assert (done.status, done.result) == ("success", ["cancelled", "a", "b"])
        assert effects == ["add:a", "add:b", "cancelled:changed my mind"]
        node = "any:cancel|__starflow.update:add_item|__starflow.update:checkout"
        nodes = completes(await sf.events(handle.run_id))
        assert [n for n in nodes if n.startswith("any:")] == [f"{node}#1", f"{node}#2",
                                                                f"{node}#3"]

    async def test_an_update_ends_it(self, sf: Starflow) -> None:
        effects: list[str] = []
        handle = await sf.run(shop(effects))
        assert await sf.update(handle.run_id, "checkout", None) == 0
        info = await sf.get_run(handle.run_id)
        assert info.status == "success"
        assert await sf.result(handle.run_id) == []

    async def test_early_messages_oldest_wins(self, sf: Starflow) -> None:
        """A signal queued before the run reaches its wait beats a later update."""

        @workflow(name=unique("early"))
        async def wf() -> list[str]:
            await wait_for("go")
            first = await wait_for_message(signals=["s"], updates=["u"])
            second = await wait_for_message(signals=["s"], updates=["u"])
            out = []
            for msg in (first, second):
                if msg.update is not None:
                    await msg.update.reply("ok")
                out.append(f"{msg.kind}:{msg.name}:{msg.payload}")
            return out

        handle = await sf.run(wf)
        await sf.signal(handle.run_id, "s", 1)  # queued: the run waits for "go"
        await sf.signal(handle.run_id, "go")
        assert await sf.update(handle.run_id, "u", 2) == "ok"
        assert await sf.result(handle.run_id) == ["signal:s:1", "update:u:2"]

    async def test_a_payload_that_does_not_fit_is_rejected_and_the_wait_goes_on(
            self, sf: Starflow) -> None:
        effects: list[str] = []
        handle = await sf.run(shop(effects))
        with pytest.raises(UpdateRejected, match="does not match the type"):
            await sf.update(handle.run_id, "add_item", {"sku": "a"})
        assert await sf.update(handle.run_id, "add_item", {"sku": "b", "qty": 1}) == 1
        assert effects == ["add:b"]

    @pytest.mark.parametrize("kwargs", [
        {},
        {"signals": ["a"], "updates": ["a"]},
        {"signals": ["a", "a"]},
        {"updates": ["x|y"]},
        {"signals": "ab"},
        {"signals": ["__starflow.update:x"]},
        {"signals": ["a"], "types": {"b": int}},
        {"signals": ["a"], "timeout": timedelta(0)},
    ])
    async def test_bad_arguments_write_nothing(self, sf: Starflow,
                                               kwargs: dict[str, Any]) -> None:
        @workflow(name=unique("msg-bad"))
        async def wf() -> str:
            try:
                await wait_for_message(**kwargs)
            except InvalidArgument as exc:
                return f"refused: {exc}"
            return "accepted"

        handle = await sf.run(wf)
        assert str(handle.result).startswith("refused"), handle.result
        assert [e.node_id for e in await sf.events(handle.run_id) if e.node_id] == []

    async def test_resumed_by_either_kind_after_the_process_exits(
            self, db_url: str, workspace_id: str, adapter_kind: str) -> None:
        """The run pauses in wait_for_message; the app closes; a new app wakes it once
        with an update and once with a signal, replaying the recorded messages."""
        if adapter_kind == "memory":
            pytest.skip("a memory database ends with its app (the sf fixture tests cover it)")
        effects: list[str] = []
        wf = shop(effects)
        async with Starflow.open(db_url, workspace_id=workspace_id) as first:
            handle = await first.run(wf)
            assert handle.status == "paused"
        async with Starflow.open(db_url, workspace_id=workspace_id) as second:
            assert await second.update(handle.run_id, "add_item", {"sku": "a", "qty": 1}) == 1
        async with Starflow.open(db_url, workspace_id=workspace_id) as third:
            done = await third.signal(handle.run_id, "cancel", "bye")
            assert (done.status, done.result) == ("success", ["cancelled", "a"])
        assert effects == ["add:a", "cancelled:bye"]  # replay ran no step again

    async def test_worker_run_woken_by_either_kind(self, adapter_kind: str) -> None:
        """A queued run paused in wait_for_message: an update then a signal wake it on
        a worker, which replays it from its checkpoint."""
        effects: list[str] = []
        wf = shop(effects)
        async with WorkflowEnvironment(adapter=adapter_kind) as env:
            handle = await env.start(wf)
            await env.run_until_idle()
            assert await env.app.update(handle.run_id, "add_item", {"sku": "x", "qty": 1},
                                        timeout=timedelta(minutes=1)) == 1
            await env.run_until_idle()
            await env.signal(handle.run_id, "cancel", "stop")
            assert await env.result(handle.run_id, timeout=timedelta(minutes=1)) == [
                "cancelled", "x"]
        assert effects == ["add:x", "cancelled:stop"]

    async def test_timeout(self) -> None:
        @workflow(name=unique("msg-timeout"))
        async def wf() -> str:
            try:
                await wait_for_message(signals=["a"], updates=["b"], timeout=timedelta(hours=1))
            except WaitTimeout:
                return "timed out"
            return "came"

        async with WorkflowEnvironment() as env:
            handle = await env.start(wf)
            await env.run_until_idle()
            await env.advance(timedelta(hours=2))
            assert await env.result(handle.run_id, timeout=timedelta(minutes=1)) == "timed out"


class TestReceiveSeveral:
    """receive("a", "b"): the first request of several update names."""

    async def test_first_of_several_names(self, sf: Starflow) -> None:
        @workflow(name=unique("recv-many"))
        async def wf() -> list[str]:
            seen = []
            while True:
                req = await receive("add", "done", type=int)
                seen.append(f"{req.name}:{req.payload}")
                await req.reply(len(seen))
                if req.name == "done":
                    return seen

        handle = await sf.run(wf)
        assert await sf.update(handle.run_id, "add", 5) == 1
        assert await sf.update(handle.run_id, "done", 0) == 2
        assert await sf.result(handle.run_id) == ["add:5", "done:0"]
        nodes = completes(await sf.events(handle.run_id))
        assert nodes[0] == "any:__starflow.update:add|__starflow.update:done#1"
        assert "reply:add#1" in nodes and "reply:done#1" in nodes

    async def test_one_name_keeps_its_node(self, sf: Starflow) -> None:
        """receive with one name is recorded as before (receive:<name>#n)."""

        @workflow(name=unique("recv-one"))
        async def wf() -> int:
            req = await receive("ask", type=int)
            await req.reply(req.payload + 1)
            return int(req.payload)

        handle = await sf.run(wf)
        assert await sf.update(handle.run_id, "ask", 1) == 2
        assert completes(await sf.events(handle.run_id))[0] == "receive:ask#1"

    async def test_repeated_names_refused(self, sf: Starflow) -> None:
        @workflow(name=unique("recv-bad"))
        async def wf() -> str:
            try:
                await receive("a", "a")
            except InvalidArgument as exc:
                return str(exc)
            return "accepted"

        handle = await sf.run(wf)
        assert "distinct" in str(handle.result)
        assert [e.node_id for e in await sf.events(handle.run_id) if e.node_id] == []


def test_message_is_public() -> None:
    assert starflow.Message is Message and starflow.wait_for_message is wait_for_message
