"""A signal whose payload does not fit its typed wait never fails the run, even when
the sender cannot load the wait's type (a CLI or web page without the code)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import msgspec
import pytest

from starflow import SerializationError, serde, wait_for, workflow
from starflow.adapters import adapter_from_url
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
