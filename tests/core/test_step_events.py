"""set_event / write_stream / close_stream inside a step (#30 item 6): written at once,
so readers see them while the step runs; numbered in the step's slot; a finished step
replays without writing again; a step that runs again appends after what it wrote."""

from __future__ import annotations

import contextlib
import uuid
from datetime import timedelta
from typing import Any

import anyio
import pytest

import starflow
from starflow import (
    RetryPolicy,
    Starflow,
    StreamClosed,
    step,
    wait_for,
    workflow,
)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def items_of(items: list[Any], key: str = "s") -> list[tuple[int, int, Any, bool]]:
    return [(i.seq, i.sub, i.value, i.closed) for i in items if i.key == key]


class TestLive:
    """Readers see a step's writes before the step ends."""

    async def test_reader_sees_tokens_while_the_step_runs(self, slow_poll: Starflow) -> None:
        sf = slow_poll
        got: list[str] = []
        two_seen = anyio.Event()

        @step(name=unique("llm"))
        async def generate() -> str:
            for token in ("Hel", "lo"):
                starflow.write_stream("s", token)
            await two_seen.wait()  # the step goes on only once the reader saw both
            starflow.write_stream("s", "!")
            return "Hello!"

        @workflow(name=unique("tokens"))
        async def wf() -> str:
            await wait_for("go")
            starflow.write_stream("s", "before")
            text = await generate()
            starflow.write_stream("s", "after")
            starflow.close_stream("s")
            return text

        handle = await sf.run(wf)

        async def reader() -> None:
            async for value in sf.read_stream(handle.run_id, "s"):
                got.append(value)
                if got == ["before", "Hel", "lo"]:
                    two_seen.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                done = await sf.signal(handle.run_id, "go")
        assert (done.status, done.result) == ("success", "Hello!")
        assert got == ["before", "Hel", "lo", "!", "after"]
        items = items_of(await sf.adapter.list_stream_items(handle.run_id))
        assert items == [(1, 0, "before", False), (1, 1, "Hel", False), (1, 2, "lo", False),
                         (1, 3, "!", False), (2, 0, "after", False), (3, 0, None, True)]
        # The step's writes have no history node of their own: the step is the node.
        nodes = [e.node_id for e in await sf.events(handle.run_id)
                 if e.node_id and e.node_id.startswith("stream:")]
        assert nodes == ["stream:s#1", "stream:s#2", "stream:s#3"]

    async def test_get_event_sees_a_step_event_before_the_step_ends(
            self, slow_poll: Starflow) -> None:
        sf = slow_poll
        seen = anyio.Event()

        @step(name=unique("stage"))
        async def work() -> int:
            starflow.set_event("stage", {"at": "thinking"})
            await seen.wait()
            starflow.set_event("stage", {"at": "done"})
            return 1

        @workflow(name=unique("staged"))
        async def wf() -> int:
            await wait_for("go")
            return await work()

        handle = await sf.run(wf)
        got: list[Any] = []

        async def reader() -> None:
            got.append(await sf.get_event(handle.run_id, "stage", timeout=30))
            seen.set()

        with anyio.fail_after(10):
            async with anyio.create_task_group() as tg:
                tg.start_soon(reader)
                await sf.signal(handle.run_id, "go")
        assert got == [{"at": "thinking"}]
        assert await sf.get_event(handle.run_id, "stage") == {"at": "done"}
        (value,) = await sf.adapter.list_event_values(handle.run_id)
        assert value.node_id is not None and value.node_id.startswith("step:")


class TestAgain:
    """Replays, retries and crashes."""

    async def test_replay_of_a_finished_step_writes_nothing(self, sf: Starflow) -> None:
        runs: list[int] = []

        @step(name=unique("once"))
        async def once() -> None:
            runs.append(1)
            starflow.write_stream("s", "a")
            starflow.set_event("e", 1)

        @workflow(name=unique("replayed"))
        async def wf() -> str:
            await once()
            await wait_for("go")  # the wake replays: once() returns its record
            starflow.write_stream("s", "b")
            return "ok"

        handle = await sf.run(wf)
        assert handle.status == "paused"
        done = await sf.signal(handle.run_id, "go")
        assert (done.status, runs) == ("success", [1])
        assert items_of(await sf.adapter.list_stream_items(handle.run_id)) == [
            (0, 1, "a", False), (1, 0, "b", False)]
        assert [v async for v in sf.read_stream(handle.run_id, "s")] == ["a", "b"]

    async def test_a_retried_step_appends_after_its_failed_attempt(self, sf: Starflow) -> None:
        attempts: list[int] = []

        @step(name=unique("flaky"), retry=RetryPolicy(max_attempts=2,
                                                      initial_interval=timedelta(0)))
        async def flaky() -> int:
            attempts.append(1)
            starflow.write_stream("s", f"try-{len(attempts)}")
            if len(attempts) == 1:
                raise RuntimeError("the model timed out")
            return len(attempts)

        @workflow(name=unique("retried"))
        async def wf() -> int:
            return await flaky()

        handle = await sf.run(wf)
        assert (handle.status, handle.result) == ("success", 2)
        items = items_of(await sf.adapter.list_stream_items(handle.run_id))
        assert items == [(0, 1, "try-1", False), (0, 2, "try-2", False)]
        events = await sf.events(handle.run_id)
        kinds = [e.event_type for e in events if e.node_id and e.node_id.startswith("step:")]
        assert kinds == ["node_start", "node_retry", "node_complete"]
        # The failed attempt's item was durable before its node_retry was written.
        retry = next(e for e in events if e.event_type == "node_retry")
        first = (await sf.adapter.list_stream_items(handle.run_id))[0]
        assert first.created_at <= retry.created_at

    async def test_closing_in_a_step_closes_the_stream(self, sf: Starflow) -> None:
        @step(name=unique("closer"))
        async def closer() -> None:
            starflow.write_stream("s", "last")
            starflow.close_stream("s")
            with pytest.raises(StreamClosed):
                starflow.write_stream("s", "too late")

        @workflow(name=unique("closed"))
        async def wf() -> str:
            await closer()
            try:
                starflow.write_stream("s", "after")
            except StreamClosed as exc:
                return type(exc).__name__
            return "accepted"

        handle = await sf.run(wf)
        assert handle.result == "StreamClosed"
        assert [v async for v in sf.read_stream(handle.run_id, "s")] == ["last"]

    async def test_a_plain_def_step_publishes_from_its_thread(self, sf: Starflow) -> None:
        @step(name=unique("sync-step"))
        def blocking() -> int:
            for i in range(3):
                starflow.write_stream("s", i)
            starflow.set_event("e", "set in a thread")
            return 3

        @workflow(name=unique("sync-wf"))
        async def wf() -> int:
            return await blocking()

        handle = await sf.run(wf)
        assert handle.result == 3
        assert [v async for v in sf.read_stream(handle.run_id, "s")] == [0, 1, 2]
        assert await sf.get_event(handle.run_id, "e") == "set in a thread"

    async def test_crash_mid_step_reruns_it_after_what_it_wrote(
            self, adapter_kind: str) -> None:
        """The runner dies while the step runs: its first token is durable; the next
        runner runs the step again, whose tokens follow (at least once, in order)."""
        from starflow_testing import RunnerKilled, WorkflowEnvironment

        if adapter_kind == "postgres":
            from tests.conftest import require_postgres

            require_postgres()
        entered = anyio.Event()
        release = {"now": False}

        @step(name=unique("crashy"))
        async def speak() -> str:
            starflow.write_stream("s", "t1")
            if not release["now"]:
                entered.set()
                await anyio.sleep_forever()
            starflow.write_stream("s", "t2")
            return "spoken"

        @workflow(name=unique("crash-wf"))
        async def wf() -> str:
            starflow.write_stream("s", "start")
            out = await speak()
            starflow.close_stream("s")
            return out

        async with WorkflowEnvironment(adapter=adapter_kind) as env:
            handle = await env.start(wf)
            with anyio.fail_after(10):
                await entered.wait()
            app = env.app
            stream = app.read_stream(handle.run_id, "s")
            with anyio.fail_after(10):  # the first token is durable while the step waits
                assert [await anext(stream), await anext(stream)] == ["start", "t1"]
            await stream.aclose()  # type: ignore[attr-defined]
            release["now"] = True
            with contextlib.suppress(RunnerKilled):
                await env.kill_runner(handle.run_id)
            await env.advance(timedelta(minutes=5))
            assert await env.result(handle.run_id, timeout=timedelta(minutes=5)) == "spoken"
            assert [v async for v in app.read_stream(handle.run_id, "s")] == [
                "start", "t1", "t1", "t2"]
            assert items_of(await app.adapter.list_stream_items(handle.run_id)) == [
                (1, 0, "start", False), (1, 1, "t1", False), (1, 2, "t1", False),
                (1, 3, "t2", False), (2, 0, None, True)]


async def test_a_fork_keeps_what_its_kept_steps_published(sf: Starflow) -> None:
    """Forked from the failed step: the step before it is kept with its stream items
    and event value; it does not run again."""
    calls: list[str] = []
    broken = {"now": True}

    @step(name=unique("speak"))
    async def speak() -> None:
        calls.append("speak")
        starflow.write_stream("s", "a")
        starflow.write_stream("s", "b")
        starflow.set_event("e", "from a step")

    @step(name=unique("fragile"))
    async def fragile() -> str:
        calls.append("fragile")
        if broken["now"]:
            raise RuntimeError("broken")
        return "fixed"

    @workflow(name=unique("forked"))
    async def wf() -> str:
        await speak()
        out = await fragile()
        starflow.write_stream("s", out)
        return out

    handle = await sf.run(wf)
    assert handle.status == "error"
    failed = next(str(e.node_id) for e in await sf.events(handle.run_id)
                  if e.event_type == "node_error")
    broken["now"] = False
    forked = await sf.fork(handle.run_id, from_node=failed)
    assert (forked.status, forked.result) == ("success", "fixed")
    assert calls == ["speak", "fragile", "fragile"]
    assert items_of(await sf.adapter.list_stream_items(forked.run_id)) == [
        (0, 1, "a", False), (0, 2, "b", False), (1, 0, "fixed", False)]
    assert await sf.get_event(forked.run_id, "e") == "from a step"
