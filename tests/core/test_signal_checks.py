"""A signal whose payload does not fit its typed wait never fails the run, even when
the sender cannot load the wait's type (a CLI or web page without the code)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import msgspec
import pytest

from starflow import (
    SerializationError,
    UnexpectedSignal,
    UpdateRejected,
    WorkflowDefinitionError,
    receive,
    serde,
    sleep,
    wait_for,
    wait_for_any,
    workflow,
)
from starflow.adapters import adapter_from_url
from starflow.workflow.context import CheckpointWait, checkpoint_wait
from starflow_testing import WorkflowEnvironment


class Decision(msgspec.Struct):
    approved: bool


@workflow(name="typed-decision")
async def decide() -> bool:
    decision = await wait_for("decision", type=Decision)
    return decision.approved


@pytest.fixture
async def env(db_url: str, workspace_id: str) -> AsyncIterator[WorkflowEnvironment]:
    async with WorkflowEnvironment(adapter_from_url(db_url, workspace_id=workspace_id)) as e:
        yield e


@pytest.fixture
def no_code_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sending process cannot load the wait's type (no --app): it cannot check."""
    monkeypatch.setattr(serde, "loaded_type", lambda name: None)


class TestWorkerRunBadPayload:
    """A worker run paused at a typed wait, signalled with ``{"approved": "yes"}``."""

    async def test_sender_with_the_type_refuses_before_writing(
            self, env: WorkflowEnvironment) -> None:
        handle = await env.start(decide)
        await env.run_until_idle()
        before = await env.events(handle.run_id)
        with pytest.raises(SerializationError) as info:
            await env.signal(handle.run_id, "decision", {"approved": "yes"})
        message = str(info.value)
        assert handle.run_id in message and "wait:decision#1" in message
        assert "Decision" in message and "approved" in message
        assert await env.events(handle.run_id) == before
        assert await env.adapter.find_signal(handle.run_id, "decision") is None

    async def test_sender_without_the_type_never_fails_the_run(
            self, env: WorkflowEnvironment, no_code_here: None) -> None:
        """The worker checks it at the wait: rejected (an event says why), the run
        stays paused, and a good payload afterwards finishes it."""
        handle = await env.start(decide)
        await env.run_until_idle()
        sent = await env.signal(handle.run_id, "decision", {"approved": "yes"})
        assert sent.status in ("queued", "paused")
        await env.run_until_idle()
        run = await env.get_run(handle.run_id)
        assert run.status == "paused", run.error
        events = await env.events(handle.run_id)
        rejected = [e for e in events if e.event_type == "signal_rejected"]
        assert len(rejected) == 1 and rejected[0].node_id == "wait:decision#1"
        assert "approved" in rejected[0].payload["error"]
        assert not [e for e in events if e.event_type == "node_complete"]
        assert await env.adapter.find_signal(handle.run_id, "decision") is None
        await env.signal(handle.run_id, "decision", {"approved": True})
        await env.run_until_idle()
        assert await env.result(handle.run_id) is True

    async def test_raced_signal_checked_before_it_is_recorded(
            self, env: WorkflowEnvironment) -> None:
        """A bad signal already in the inbox when the run pauses (it raced the pause)
        is refused by the delivery, not recorded as the wait's outcome."""
        handle = await env.start(decide)
        await env.run_until_idle()
        async with env.adapter.unit() as unit:
            await env.adapter.enqueue_signal(handle.run_id, "decision", {"approved": "yes"},
                                             now=env.now())
        assert unit.held
        assert await env.runner.deliver(handle.run_id, "decision") is None
        run = await env.get_run(handle.run_id)
        assert run.status == "paused"
        events = await env.events(handle.run_id)
        assert [e.event_type for e in events][-1] == "signal_rejected"
        assert await env.adapter.find_signal(handle.run_id, "decision") is None


    async def test_wake_by_token_without_the_type(self, env: WorkflowEnvironment,
                                                  no_code_here: None) -> None:
        """The same for a wake by token from a process that cannot load the type."""
        handle = await env.start(decide)
        await env.run_until_idle()
        run = await env.get_run(handle.run_id)
        token = (checkpoint_wait(run.checkpoint_json) or CheckpointWait(node_id=None)
                 ).wake_token
        assert token is not None
        await env.resume(token, {"approved": "yes"})
        await env.run_until_idle()
        run = await env.get_run(handle.run_id)
        assert run.status == "paused", run.error
        rejected = [e for e in await env.events(handle.run_id)
                    if e.event_type == "signal_rejected"]
        assert len(rejected) == 1 and rejected[0].node_id == "wait:decision#1"
        await env.signal(handle.run_id, "decision", {"approved": False})
        await env.run_until_idle()
        assert await env.result(handle.run_id) is False


@workflow(name="sleeps-then-any")
async def sleeps_then_any() -> list[object]:
    await sleep(timedelta(seconds=30))
    return await typed_any_body()


async def typed_any_body() -> list[object]:
    event, payload = await wait_for_any("decision", "cancel", types={"decision": Decision})
    return [event, payload.approved if isinstance(payload, Decision) else payload]


@workflow(name="typed-any")
async def typed_any() -> list[object]:
    event, payload = await wait_for_any("decision", "cancel", types={"decision": Decision})
    return [event, payload.approved if isinstance(payload, Decision) else payload]


class TestWaitForAnyTypes:
    """``wait_for_any(types=)`` is recorded per event and checked like ``wait_for(type=)``."""

    async def test_sender_with_the_type_refuses(self, env: WorkflowEnvironment) -> None:
        handle = await env.run(typed_any)
        run = await env.get_run(handle.run_id)
        wait = checkpoint_wait(run.checkpoint_json)
        assert wait is not None and wait.payload_types == {"decision": f"{__name__}:Decision"}
        before = await env.events(handle.run_id)
        with pytest.raises(SerializationError) as info:
            await env.signal(handle.run_id, "decision", {"approved": "yes"})
        assert "any:decision|cancel#1" in str(info.value) and "approved" in str(info.value)
        assert await env.events(handle.run_id) == before
        done = await env.signal(handle.run_id, "cancel", "untyped")
        assert done.status == "success" and done.result == ["cancel", "untyped"]

    async def test_sender_without_the_type(self, env: WorkflowEnvironment,
                                           no_code_here: None) -> None:
        handle = await env.start(typed_any)
        await env.run_until_idle()
        await env.signal(handle.run_id, "decision", {"approved": "yes"})
        await env.run_until_idle()
        run = await env.get_run(handle.run_id)
        assert run.status == "paused", run.error
        rejected = [e for e in await env.events(handle.run_id)
                    if e.event_type == "signal_rejected"]
        assert [e.node_id for e in rejected] == ["any:decision|cancel#1"]
        await env.signal(handle.run_id, "decision", {"approved": True})
        await env.run_until_idle()
        assert await env.result(handle.run_id) == ["decision", True]

    async def test_early_bad_signal_rejected_at_the_wait(self, env: WorkflowEnvironment
                                                         ) -> None:
        """Queued while the run sleeps before the wait: the bad one is rejected there,
        the good one after it wins."""
        handle = await env.run(sleeps_then_any)
        assert handle.status == "paused" and handle.waiting_for is None
        await env.signal(handle.run_id, "decision", {"approved": "yes"})
        await env.signal(handle.run_id, "decision", {"approved": False})
        assert await env.result(handle.run_id) == ["decision", False]
        events = await env.events(handle.run_id)
        rejected = [e for e in events if e.event_type == "signal_rejected"]
        assert len(rejected) == 1, [(e.event_type, e.node_id, e.payload) for e in events]
        assert rejected[0].node_id == "any:decision|cancel#1"


@workflow(name="sleeps-then-waits")
async def sleeps_then_waits() -> object:
    await sleep(timedelta(seconds=30))
    return await wait_for("approve")


@workflow(name="approve-twice", signals=("approve", "reject"))
async def approve_twice() -> list[object]:
    first = await wait_for("approve")
    second = await wait_for_any("approve", "reject")
    return [first, list(second)]


class TestUnexpectedSignal:
    """A signal for a name the paused run neither waits for nor ever waited for."""

    async def test_refused_before_anything_is_written(self, env: WorkflowEnvironment) -> None:
        handle = await env.run(approve_twice)
        before = await env.events(handle.run_id)
        with pytest.raises(UnexpectedSignal) as info:
            await env.signal(handle.run_id, "aprove", True)
        exc = info.value
        assert exc.run_id == handle.run_id and exc.event == "aprove"
        assert exc.expected == ("approve", "reject")
        assert "'aprove'" in str(exc) and "nothing was written" in str(exc)
        assert await env.events(handle.run_id) == before
        assert await env.adapter.find_signal(handle.run_id, "aprove") is None
        assert (await env.get_run(handle.run_id)).status == "paused"

    async def test_names_of_its_waits_are_accepted(self, env: WorkflowEnvironment) -> None:
        """The current wait's events and any recorded wait's are taken; "reject"
        (an event of the wait_for_any reached next) once it is the current wait."""
        handle = await env.run(approve_twice)
        handle = await env.signal(handle.run_id, "approve", 1)
        assert handle.status == "paused" and handle.waiting_for == "approve|reject"
        done = await env.signal(handle.run_id, "reject", 2)
        assert done.status == "success" and done.result == [1, ["reject", 2]]

    async def test_declared_workflow_refuses_at_any_status(self, env: WorkflowEnvironment
                                                           ) -> None:
        """Queued (not yet at any wait): an undeclared name is refused all the same,
        and a declared one is kept for the wait it reaches."""
        handle = await env.start(approve_twice)
        with pytest.raises(UnexpectedSignal):
            await env.signal(handle.run_id, "aprove", True)
        assert await env.adapter.find_signal(handle.run_id, "aprove") is None
        await env.signal(handle.run_id, "reject", "early")  # declared: kept
        assert await env.adapter.find_signal(handle.run_id, "reject") is not None

    async def test_sleeping_run_keeps_an_early_signal(self, env: WorkflowEnvironment) -> None:
        """Paused at a sleep (not a signal wait): a signal for the wait it reaches
        next is kept, not refused, and delivered there."""
        handle = await env.run(sleeps_then_waits)
        assert handle.status == "paused" and handle.waiting_for is None
        await env.signal(handle.run_id, "approve", "early")
        assert await env.adapter.find_signal(handle.run_id, "approve") is not None
        assert await env.result(handle.run_id) == "early"


class Item(msgspec.Struct):
    sku: str
    qty: int


@workflow(name="typed-update")
async def typed_update() -> int:
    req = await receive("add_item", type=Item)
    await req.reply(req.payload.qty)
    return req.payload.qty


class TestUpdatePayload:
    """An update whose payload does not fit ``receive(type=)`` is rejected; the run lives."""

    async def test_bad_update_rejected_run_keeps_receiving(
            self, env: WorkflowEnvironment) -> None:
        handle = await env.run(typed_update)
        assert handle.status == "paused"
        with pytest.raises(UpdateRejected) as info:
            await env.app.update(handle.run_id, "add_item", {"sku": "a", "qty": "many"},
                             timeout=5, update_id="bad-1")
        assert "Item" in info.value.reason and "qty" in info.value.reason
        run = await env.get_run(handle.run_id)
        assert run.status == "paused", run.error
        assert await env.app.update(handle.run_id, "add_item", {"sku": "a", "qty": 3},
                                timeout=5, update_id="good-1") == 3
        assert await env.result(handle.run_id) == 3


class TestDeclaredSignals:
    """``@workflow(signals=)`` is checked when decorated and recorded with a pause."""

    @pytest.mark.parametrize("bad", ["approve", ("a", ""), ("a#1",), ("a|b",), (1,)])
    def test_bad_declaration_refused(self, bad: object) -> None:
        with pytest.raises(WorkflowDefinitionError, match="signals must be"):
            @workflow(name="bad-signals", signals=bad)  # type: ignore[arg-type]
            async def wf() -> None: ...

    async def test_recorded_with_the_paused_wait(self, env: WorkflowEnvironment) -> None:
        """A sender without the code (a CLI without --app) reads it from the checkpoint."""
        handle = await env.run(approve_twice)
        wait = checkpoint_wait((await env.get_run(handle.run_id)).checkpoint_json)
        assert wait is not None and wait.signals == ("approve", "reject")
