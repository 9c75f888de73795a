"""wait_for_any: the first of several signals wins, the others stay in the inbox, and the
winner is recorded as one node that replays."""

from __future__ import annotations

import uuid
from datetime import timedelta

import anyio
import msgspec
import pytest

from starflow import (
    InvalidArgument,
    InvalidWakeToken,
    RunFinished,
    Starflow,
    WaitTimeout,
    step,
    wait_for,
    wait_for_any,
    workflow,
)
from starflow_testing import WorkflowEnvironment


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


#: Bad ``wait_for_any`` calls: (events, keyword arguments).
BAD: list[tuple[tuple[str, ...], dict[str, object]]] = [
    (("only",), {}),
    (("a", "a"), {}),
    (("a", "b|c"), {}),
    (("a", "b#1"), {}),
    (("a", "b"), {"types": {"c": int}}),
    (("a", "b"), {"timeout": timedelta(0)}),
]


class Approval(msgspec.Struct):
    by: str


class TestWaitForAny:
    async def test_paused_run_woken_by_either(self, sf: Starflow) -> None:
        """A paused run waits for both; the one signalled wins, with its type applied."""

        @workflow(name=unique("any-basic"))
        async def wf() -> str:
            event, payload = await wait_for_any("approve", "reject",
                                                types={"approve": Approval})
            if event == "approve":
                assert isinstance(payload, Approval)
                return f"approved by {payload.by}"
            return f"rejected: {payload}"

        handle = await sf.run(wf)
        assert (handle.status, handle.waiting_for) == ("paused", "approve|reject")
        done = await sf.signal(handle.run_id, "approve", {"by": "ann"})
        assert (done.status, done.result) == ("success", "approved by ann")
        events = await sf.events(handle.run_id)
        nodes = [e.node_id for e in events if e.event_type == "node_complete"]
        assert nodes == ["any:approve|reject#1"]

    async def test_racing_signals_exactly_one_wins(self, sf: Starflow) -> None:
        """Two signals sent concurrently to a paused run: one wakes it, the other is
        kept in the inbox and delivered to the next wait on its event."""

        @workflow(name=unique("any-race"))
        async def wf() -> list[object]:
            first = await wait_for_any("approve", "reject")
            other = "reject" if first[0] == "approve" else "approve"
            second = await wait_for(other)
            return [first[0], first[1], other, second]

        handle = await sf.run(wf)
        assert handle.status == "paused"

        async def send(event: str) -> None:
            await sf.signal(handle.run_id, event, f"{event}-payload")

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "approve")
            tg.start_soon(send, "reject")
        done = await sf.result(handle.run_id, timeout=10)
        winner, payload, other, second = done
        assert winner in ("approve", "reject")
        assert payload == f"{winner}-payload"
        assert second == f"{other}-payload"  # the loser stayed in the inbox
        events = await sf.events(handle.run_id)
        completes = [e.node_id for e in events if e.event_type == "node_complete"]
        assert completes == ["any:approve|reject#1", f"wait:{other}#1"]

    async def test_racing_signals_loser_stays_queued(self, sf: Starflow) -> None:
        """With no later wait, the losing signal is still in the inbox after the run."""

        @workflow(name=unique("any-race-left"))
        async def wf() -> str:
            event, _ = await wait_for_any("approve", "reject")
            return event

        handle = await sf.run(wf)

        sent: dict[str, bool] = {}

        async def send(event: str) -> None:
            # The first signal drives the run to its end inline: the second either
            # reached the inbox before that, or is told the run has ended.
            try:
                await sf.signal(handle.run_id, event, event)
                sent[event] = True
            except RunFinished:
                sent[event] = False

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "approve")
            tg.start_soon(send, "reject")
        winner = await sf.result(handle.run_id, timeout=10)
        loser = "reject" if winner == "approve" else "approve"
        assert sent[winner]
        adapter = sf.runner.adapter
        assert await adapter.find_signal(handle.run_id, winner) is None
        left = await adapter.find_signal(handle.run_id, loser)
        if sent[loser]:
            assert left is not None and left.payload == loser
        else:
            assert left is None

    async def test_early_signals_oldest_wins(self, sf: Starflow) -> None:
        """Signals queued before the wait: the oldest among the events wins."""

        @workflow(name=unique("any-early"))
        async def wf() -> tuple[str, object]:
            await wait_for("go")
            return await wait_for_any("approve", "reject")

        handle = await sf.run(wf)
        await sf.signal(handle.run_id, "reject", "r")
        await sf.signal(handle.run_id, "approve", "a")
        done = await sf.signal(handle.run_id, "go", None)
        assert done.status == "success"
        assert list(done.result) == ["reject", "r"]
        left = await sf.runner.adapter.find_signal(handle.run_id, "approve")
        assert left is not None and left.payload == "a"

    async def test_replay_returns_recorded_winner(self, sf: Starflow) -> None:
        """After the wake the body replays the any-node: same winner, code runs once."""
        effects: list[str] = []

        @step(name=unique("any-effect"))
        async def effect(what: str) -> str:
            effects.append(what)
            return what

        @workflow(name=unique("any-replay"))
        async def wf() -> str:
            event, payload = await wait_for_any("a", "b")
            await effect(f"{event}:{payload}")
            await wait_for("done")
            return event

        handle = await sf.run(wf)
        await sf.signal(handle.run_id, "b", 1)
        done = await sf.signal(handle.run_id, "done", None)
        assert (done.status, done.result) == ("success", "b")
        assert effects == ["b:1"]

    @pytest.mark.parametrize("index", range(len(BAD)))
    async def test_bad_arguments_write_nothing(self, sf: Starflow, index: int) -> None:
        """Bad events, duplicate events, unknown types: InvalidArgument, nothing recorded."""

        @workflow(name=unique("any-bad"))
        async def wf(index: int) -> str:
            events, kwargs = BAD[index]
            try:
                await wait_for_any(*events, **kwargs)  # type: ignore[arg-type]
            except InvalidArgument as exc:
                return f"refused: {exc}"
            return "accepted"

        handle = await sf.run(wf, index)
        assert handle.status == "success"
        assert str(handle.result).startswith("refused"), handle.result
        nodes = [e.node_id for e in await sf.events(handle.run_id) if e.node_id]
        assert nodes == []

    async def test_wake_token_refused_for_any_wait(self, sf: Starflow) -> None:
        @workflow(name=unique("any-token"))
        async def wf() -> str:
            event, _ = await wait_for_any("a", "b")
            return event

        handle = await sf.run(wf)
        assert handle.wake_token is not None
        with pytest.raises(InvalidWakeToken, match="wait_for_any"):
            await sf.resume(handle.wake_token, "x")
        again = await sf.signal(handle.run_id, "a", None)
        assert (again.status, again.result) == ("success", "a")


async def test_timeout_raises_wait_timeout() -> None:
    """No signal before the timeout: WaitTimeout, recorded as the node's failure."""
    name = unique("any-timeout")

    @workflow(name=name)
    async def wf() -> str:
        try:
            await wait_for_any("a", "b", timeout=timedelta(hours=1))
        except WaitTimeout:
            return "timed out"
        return "signalled"

    async with WorkflowEnvironment() as env:
        handle = await env.start(wf)
        await env.advance(timedelta(hours=2))
        assert await env.result(handle.run_id) == "timed out"
