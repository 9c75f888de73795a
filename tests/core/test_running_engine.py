"""Workflow code reaches the running engine through one accessor,
``context.running_engine``: every workflow-only call made outside a run raises
the same ``OutsideWorkflow`` naming the call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import starflow
from starflow import OutsideWorkflow, UpdateRequest
from starflow.workflow.context import running_engine


@starflow.workflow
async def _child() -> None:
    return None


CALLS: dict[str, Callable[[], Awaitable[Any] | Any]] = {
    "wait_for": lambda: starflow.wait_for("go"),
    "wait_for_any": lambda: starflow.wait_for_any("a", "b"),
    "sleep": lambda: starflow.sleep(timedelta(seconds=1)),
    "now": lambda: starflow.now(),
    "patched": lambda: starflow.patched("fix-1"),
    "wake_token": lambda: starflow.wake_token("go"),
    "context": lambda: starflow.context(),
    "set_attributes": lambda: starflow.set_attributes(team="a"),
    "receive": lambda: starflow.receive("add"),
    "UpdateRequest.reply": lambda: UpdateRequest("add", "u1", None).reply(1),
    "start_child": lambda: starflow.start_child(_child),
    "session_get": lambda: starflow.session_get("s", "k"),
    "session_set": lambda: starflow.session_set("s", "k", 1,
                                                datetime(2030, 1, 1, tzinfo=UTC)),
    "set_event": lambda: starflow.set_event("k", 1),
    "continue_as_new": lambda: starflow.continue_as_new(),
}


@pytest.mark.anyio
@pytest.mark.parametrize("call", sorted(CALLS))
async def test_workflow_calls_outside_a_run_raise_outside_workflow(call: str) -> None:
    with pytest.raises(OutsideWorkflow, match="outside a workflow run") as info:
        result = CALLS[call]()
        if isinstance(result, Awaitable):
            await result
    assert info.value.call == call
    assert info.value.run_id is None


def test_running_engine_outside_a_run() -> None:
    with pytest.raises(OutsideWorkflow, match=r"starflow\.x\(\) called outside a workflow run"):
        running_engine("x")
