"""Durable events and streams (#17): set in workflow code, recorded once, read
by callers as soon as they commit, on every durable adapter."""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta
from typing import Any

import anyio
import pytest

import starflow
from starflow import (
    InvalidArgument,
    OutsideWorkflow,
    ResultTimeout,
    RunFinished,
    RunNotFound,
    SerializationError,
    Starflow,
    StreamClosed,
    step,
    wait_for,
    workflow,
)
from tests.core.conftest import SpyAdapter


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def data_nodes(events: list[Any]) -> list[str]:
    return [e.node_id for e in events
            if e.node_id and e.node_id.startswith(("event:", "stream:"))]


class TestEvents:
    """set_event / get_event."""

    async def test_last_write_wins_and_replay_writes_nothing(self, sf: Starflow,
                                                             spy: SpyAdapter) -> None:
        """Each set is recorded once (a wake's replay adds nothing) and rides on the
        next boundary's unit; get_event returns the latest value."""
        @step(name=unique("ev-step"))
        async def work() -> int:
            return 1

        @workflow(name=unique("ev-wf"))
        async def wf() -> str:
            starflow.set_event("status", "started")
            await work()
            starflow.set_event("status", {"phase": "waiting"})
            await wait_for("go")
            starflow.set_event("status", "done")
            return "ok"

        handle = await sf.run(wf)
        assert handle.status == "paused"
        assert await sf.get_event(handle.run_id, "status") == {"phase": "waiting"}
        # The first set was written in the unit of the step's node_start (which, with
        # fused_boundaries on SQLite and memory, is also the run's start).
        assert any(u[-3:] == ["on_node_complete", "set_event", "on_node_start"]
                   for u in spy.units), spy.units
        await sf.signal(handle.run_id, "go")
        assert await sf.get_event(handle.run_id, "status", timeout=0) == "done"
        assert data_nodes(await sf.events(handle.run_id)) == [
            "event:status#1", "event:status#2", "event:status#3"]
        assert spy.calls.count("set_event") == 3

    async def test_a_waiting_reader_is_woken_by_the_commit(self, slow_poll: Starflow) -> None:
        """get_event blocks until the run sets the key, then returns at once."""
        sf = slow_poll

        @workflow(name=unique("ev-wake"))
        async def wf() -> None:
            await wait_for("go")
            starflow.set_event("answer", 42)
            await wait_for("end")

        handle = await sf.run(wf)
        got: list[Any] = []

        async def reader() -> None:
            got.append(await sf.get_event(handle.run_id, "answer", timeout=600))

        with anyio.fail_after(10):  # far below the 60 s poll interval
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await sf.adapter.idle()
                await anyio.wait_all_tasks_blocked()
                await sf.signal(handle.run_id, "go")
        assert got == [42]

    async def test_timeout_ended_and_unknown_runs(self, sf: Starflow) -> None:
        @workflow(name=unique("ev-none"))
        async def wf(wait: bool) -> None:
            if wait:
                await wait_for("go")

        paused = await sf.run(wf, True)
        with pytest.raises(ResultTimeout, match="did not set event 'k'") as info:
            await sf.get_event(paused.run_id, "k", timeout=0)
        assert info.value.run_id == paused.run_id
        ended = await sf.run(wf, False)
        with pytest.raises(RunFinished, match="without setting that event"):
            await sf.get_event(ended.run_id, "k", timeout=30)
        with pytest.raises(RunNotFound):
            await sf.get_event(str(uuid.uuid4()), "k", timeout=0)
        with pytest.raises(InvalidArgument):
            await sf.get_event(paused.run_id, "a#b", timeout=0)


class TestStreams:
    """write_stream / close_stream / read_stream."""

    async def test_every_value_once_in_order_across_replays(self, sf: Starflow) -> None:
        """A stream written across two waits (two replays) holds each value once; a
        reader that starts after the end gets all of them from the beginning."""
        @workflow(name=unique("st-wf"))
        async def wf(n: int) -> int:
            for i in range(n):
                starflow.write_stream("numbers", i)
                if i % 2 == 1:
                    await wait_for(f"tick{i}")
            starflow.close_stream("numbers")
            return n

        handle = await sf.run(wf, 4)
        await sf.signal(handle.run_id, "tick1")
        await sf.signal(handle.run_id, "tick3")
        assert await sf.result(handle.run_id) == 4
        assert [v async for v in sf.read_stream(handle.run_id, "numbers")] == [0, 1, 2, 3]
        items = await sf.adapter.list_stream_items(handle.run_id)
        assert [(i.seq, i.value, i.closed) for i in items] == [
            (1, 0, False), (2, 1, False), (3, 2, False), (4, 3, False), (5, None, True)]
        assert data_nodes(await sf.events(handle.run_id)) == [
            f"stream:numbers#{n}" for n in range(1, 6)]

    async def test_live_reader_follows_the_run_and_stops_when_it_ends(
            self, slow_poll: Starflow) -> None:
        """A reader attached before the values exist gets each as it commits and
        stops when the run ends, even though the stream was never closed."""
        sf = slow_poll

        @workflow(name=unique("st-live"))
        async def wf() -> None:
            starflow.write_stream("log", "a")
            await wait_for("more")
            starflow.write_stream("log", "b")
            starflow.write_stream("log", "c")
            await wait_for("end")

        handle = await sf.run(wf)
        seen: list[str] = []
        grew = anyio.Event()
        ended = False

        async def reader() -> None:
            nonlocal grew, ended
            async for value in sf.read_stream(handle.run_id, "log"):
                seen.append(value)
                grew.set()
                grew = anyio.Event()
            ended = True

        async def until(count: int) -> None:
            while len(seen) < count:
                await grew.wait()

        with anyio.fail_after(10):  # far below the 60 s poll interval
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await until(1)
                assert seen == ["a"] and not ended
                await sf.signal(handle.run_id, "more")
                await until(3)
                assert seen == ["a", "b", "c"] and not ended
                await sf.signal(handle.run_id, "end")
        assert seen == ["a", "b", "c"] and ended

    async def test_unknown_run(self, sf: Starflow) -> None:
        with pytest.raises(RunNotFound):
            async for _ in sf.read_stream(str(uuid.uuid4()), "k"):
                pass


class TestBadInput:
    """Refused with a clear error before anything is written."""

    async def test_outside_a_workflow(self) -> None:
        for call in (lambda: starflow.set_event("k", 1), lambda: starflow.write_stream("k", 1),
                     lambda: starflow.close_stream("k")):
            with pytest.raises(OutsideWorkflow, match="outside a workflow run") as info:
                call()
            assert info.value.run_id is None

    async def test_unstorable_values_bad_keys_and_closed_streams(self, sf: Starflow) -> None:
        @workflow(name=unique("bad-values"))
        async def wf(kind: int) -> str:
            try:
                if kind == 0:
                    starflow.set_event("k", object())
                elif kind == 1:
                    starflow.write_stream("k", float("nan"))
                elif kind == 2:
                    starflow.set_event("has#hash", 1)
                elif kind == 3:
                    starflow.write_stream("", 1)
                else:
                    starflow.close_stream("s")
                    starflow.write_stream("s", 1)
            except (SerializationError, InvalidArgument, StreamClosed) as exc:
                assert exc.run_id is not None
                return type(exc).__name__
            return "accepted"

        expected = ["SerializationError", "SerializationError", "InvalidArgument",
                    "InvalidArgument", "StreamClosed"]
        for kind, error in enumerate(expected):
            handle = await sf.run(wf, kind)
            assert (handle.status, handle.result) == ("success", error)
            written = data_nodes(await sf.events(handle.run_id))
            # Only the close before the refused write of kind 4 was recorded.
            assert written == (["stream:s#1"] if kind == 4 else [])
            assert await sf.adapter.list_event_values(handle.run_id) == []
            items = await sf.adapter.list_stream_items(handle.run_id)
            assert [(i.key, i.closed) for i in items] == ([("s", True)] if kind == 4 else [])


class TestWorkers:
    """Worker-driven runs: a crash between writes and a takeover append each value once."""

    async def test_killed_runner_then_takeover_writes_each_value_once(
            self, adapter_kind: str) -> None:
        from starflow_testing import RunnerKilled, WorkflowEnvironment

        if adapter_kind == "postgres":
            from tests.conftest import require_postgres

            require_postgres()
        entered = anyio.Event()
        release = {"now": False}

        @step(name=unique("wk-slow"))
        async def slow(i: int) -> int:
            if not release["now"]:
                entered.set()
                await anyio.sleep_forever()
            return i

        @workflow(name=unique("wk-stream"))
        async def wf() -> int:
            starflow.write_stream("s", "before")
            starflow.set_event("stage", "slow")
            got = await slow(1)  # the runner is killed here; the writes above committed
            starflow.write_stream("s", "after")
            starflow.close_stream("s")
            return got

        async with WorkflowEnvironment(adapter=adapter_kind) as env:
            handle = await env.start(wf)
            with anyio.fail_after(10):
                await entered.wait()
            release["now"] = True
            with contextlib.suppress(RunnerKilled):  # raised in the worker, not here
                await env.kill_runner(handle.run_id)
            await env.advance(timedelta(minutes=5))  # the sweep hands it to a worker
            assert await env.result(handle.run_id, timeout=timedelta(minutes=5)) == 1
            app = env.app
            assert [v async for v in app.read_stream(handle.run_id, "s")] == ["before", "after"]
            items = await app.adapter.list_stream_items(handle.run_id)
            assert [(i.seq, i.value, i.closed) for i in items] == [
                (1, "before", False), (2, "after", False), (3, None, True)]
            nodes = data_nodes(await app.events(handle.run_id))
            assert nodes == ["stream:s#1", "event:stage#1", "stream:s#2", "stream:s#3"]


async def test_a_reader_is_woken_mid_step_by_the_commit(slow_poll: Starflow) -> None:
    """The run does not pause or end between the write and the reader's wake-up: the
    step after the write waits for the reader, so only the commit can wake it (the
    poll interval is a minute; the test gives up after 10 s)."""
    sf = slow_poll
    seen = anyio.Event()

    @step(name=unique("mid-step"))
    async def wait_for_reader() -> None:
        await seen.wait()

    @workflow(name=unique("mid-wf"))
    async def wf() -> None:
        await wait_for("go")
        starflow.write_stream("s", "first")
        await wait_for_reader()  # the write commits with this step's start
        starflow.write_stream("s", "second")

    handle = await sf.run(wf)
    got: list[str] = []

    async def reader() -> None:
        async for value in sf.read_stream(handle.run_id, "s"):
            got.append(value)
            seen.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            await sf.signal(handle.run_id, "go")
    assert got == ["first", "second"]
