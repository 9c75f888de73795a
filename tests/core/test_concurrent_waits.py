"""Durable waits in concurrent branches of one run (a task group, asyncio.gather):
untimed ones pause one after another and survive a restart; a timed one fails the
run at once with ConcurrentWaits instead of hanging."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import anyio
import pytest

import starflow
from starflow import ConcurrentWaits, RunHandle, Starflow, WorkflowFailed, wait_for, workflow


@workflow(name="concurrent-waits-tg")
async def in_task_group() -> list[object]:
    got: dict[str, object] = {}

    async def branch(name: str) -> None:
        got[name] = await wait_for(name)

    async with anyio.create_task_group() as tg:
        tg.start_soon(branch, "a")
        tg.start_soon(branch, "b")
    return [got["a"], got["b"]]


@workflow(name="concurrent-waits-gather")
async def in_gather() -> list[object]:
    return list(await asyncio.gather(wait_for("a"), wait_for("b")))


@workflow(name="concurrent-sleeps")
async def sleeps() -> str:
    await asyncio.gather(starflow.sleep(timedelta(seconds=5)),
                         starflow.sleep(timedelta(seconds=9)))
    return "slept"


@workflow(name="concurrent-timed-wait")
async def timed() -> object:
    async with anyio.create_task_group() as tg:
        tg.start_soon(wait_for, "a")
        tg.start_soon(lambda: wait_for("b", timeout=timedelta(minutes=5)))
    return "never"


class TestUntimedWaitsInBranches:
    """Each branch's wait is delivered, whichever signal comes first."""

    @pytest.mark.parametrize("wf", [in_task_group, in_gather], ids=["task_group", "gather"])
    @pytest.mark.parametrize("order", [("a", "b"), ("b", "a")], ids=["a_first", "b_first"])
    async def test_both_signals_delivered(self, sf: Starflow, wf: object,
                                          order: tuple[str, str]) -> None:
        """The run pauses on one wait, then the other; both payloads reach their branch."""
        with anyio.fail_after(20):  # hung before the fix
            handle = await sf.run(wf)  # type: ignore[call-overload]
            assert handle.status == "paused"
            for event in order:
                handle = await sf.signal(handle.run_id, event, f"{event}!")
            assert handle.status == "success", handle
            assert handle.result == ["a!", "b!"]
        events = await sf.events(handle.run_id)
        done = sorted(e.node_id or "" for e in events if e.event_type == "node_complete")
        assert done == ["wait:a#1", "wait:b#1"]

    @pytest.mark.parametrize("wf", [in_task_group, in_gather], ids=["task_group", "gather"])
    async def test_durable_across_a_restart(self, adapter_kind: str, db_url: str,
                                            workspace_id: str, wf: object) -> None:
        """Each signal is sent by a fresh process-like app over the same database.

        ``asyncio.gather`` leaves its other awaitable running past the pause: the
        execution lets it finish its reads first, so closing the app (its pool)
        does not hang on a query still in flight.
        """
        if adapter_kind == "memory":
            pytest.skip("a memory database does not outlive its app")
        with anyio.fail_after(30):
            async with Starflow.open(db_url, workspace_id=workspace_id) as sf:
                handle = await sf.run(wf)  # type: ignore[call-overload]
            for event in ("b", "a"):
                async with Starflow.open(db_url, workspace_id=workspace_id) as sf:
                    handle = await sf.signal(handle.run_id, event, event.upper())
            assert handle.status == "success" and handle.result == ["A", "B"]


class TestTimedWaitsInBranches:
    """A timed wait reached with another one fails the run at once, naming both."""

    @pytest.mark.parametrize("wf", [sleeps, timed], ids=["sleeps", "wait_with_timeout"])
    async def test_fails_with_concurrent_waits(self, sf: Starflow, wf: object) -> None:
        with anyio.fail_after(20):
            handle = await sf.run(wf)  # type: ignore[call-overload]
        assert handle.status == "error", handle
        with pytest.raises(WorkflowFailed) as info:
            await sf.result(handle.run_id)
        assert info.value.error_type == "ConcurrentWaits"
        message = info.value.error_message or ""
        assert "wait_for_any" in message and handle.run_id in message
        expected = ("sleep#1", "sleep#2") if wf is sleeps else ("wait:a#1", "wait:b#1")
        assert all(node in message for node in expected)
        # Nothing paused: no wait row is left behind.
        assert await sf.adapter.list_waits(handle.run_id) == []

    def test_error_names_the_nodes(self) -> None:
        exc = ConcurrentWaits("x", run_id="r", node_ids=("sleep#1", "sleep#2"))
        assert exc.node_ids == ("sleep#1", "sleep#2") and exc.node_id == "sleep#2"


class TestRunHandleRepr:
    """A handle's repr never shows its live wake token."""

    def test_repr_redacts_the_wake_token(self) -> None:
        token = "sfw1.default.secret-part.signature"
        handle = RunHandle(run_id="r-1", status="paused", waiting_for="a", wake_token=token)
        for shown in (repr(handle), str(handle), f"{handle}", f"{handle!r}"):
            assert token not in shown and "secret-part" not in shown
            assert "[redacted]" in shown and "r-1" in shown and "paused" in shown
        assert dict(handle.__rich_repr__())["wake_token"] == "[redacted]"
        assert handle.wake_token == token  # the attribute itself is unchanged

    async def test_repr_of_a_paused_run(self, sf: Starflow) -> None:
        handle = await sf.run(in_gather)
        assert handle.wake_token is not None
        assert handle.wake_token not in repr(handle)
        assert "wake_token=None" in repr(RunHandle(run_id="r", status="queued"))

    async def test_run_info_repr_redacts_the_checkpoint_token(self, sf: Starflow) -> None:
        """A paused run's row carries its wake token in ``checkpoint_json``: its repr
        shows ``[redacted]`` there, the field itself is unchanged."""
        handle = await sf.run(in_gather)
        assert handle.wake_token is not None
        info = await sf.get_run(handle.run_id)
        assert handle.wake_token in repr(info.checkpoint_json)  # stored as it is
        for shown in (repr(info), str(info), f"{info!r}",
                      repr(dict(info.__rich_repr__()))):
            assert handle.wake_token not in shown
            assert "[redacted]" in shown and handle.run_id in shown
