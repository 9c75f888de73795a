"""Fork and continue-as-new (#17): new runs made from a run's history, on every
durable adapter."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import anyio
import pytest

import starflow
from starflow import (
    InvalidArgument,
    NodeNotInHistory,
    OutsideWorkflow,
    RunFinished,
    RunNotEnded,
    RunNotFound,
    Starflow,
    WorkflowDefinitionError,
    step,
    wait_for,
    workflow,
)
from tests.core.conftest import SpyAdapter


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def run_count(sf: Starflow, name: str) -> int:
    return len(await sf.list_runs(template_id=name, limit=1000))


class TestFork:
    """sf.fork(run_id, from_node=...)."""

    async def test_fork_after_a_fix_replays_the_prefix_and_runs_from_the_node(
            self, sf: Starflow) -> None:
        """Steps before the node are not run again; the node and what follows are;
        the prefix's events and stream items are the fork's; the source is untouched."""
        calls: list[str] = []
        bug = {"on": True}

        @step(name=unique("fk-reserve"))
        async def reserve(n: int) -> int:
            calls.append("reserve")
            return n

        @step(name=unique("fk-charge"))
        async def charge(n: int) -> int:
            calls.append("charge")
            if bug["on"]:
                raise RuntimeError("the bug")
            return n * 10

        @workflow(name=unique("fk-order"))
        async def order(n: int) -> int:
            starflow.set_event("stage", "reserving")
            r = await reserve(n)
            starflow.write_stream("log", "reserved")
            starflow.set_event("stage", "charging")
            c = await charge(n)
            starflow.set_event("stage", "done")
            return r + c

        source = await sf.run(order, 2)
        assert source.status == "error"
        source_events = await sf.events(source.run_id)
        charge_node = next(e.node_id for e in source_events
                           if e.node_id and e.node_id.startswith("step:fk-charge"))
        bug["on"] = False
        calls.clear()
        fork = await sf.fork(source.run_id, from_node=charge_node)
        assert (fork.status, fork.result) == ("success", 22)
        assert calls == ["charge"]  # reserve was replayed, not run
        forked = await sf.events(fork.run_id)
        assert forked[0].event_type == "run_forked"
        assert forked[0].payload_json == {"from_run_id": source.run_id,
                                          "from_node": charge_node}
        prefix = [(e.event_type, e.node_id, e.payload_json) for e in source_events]
        cut = next(i for i, e in enumerate(source_events) if e.node_id == charge_node)
        assert [(e.event_type, e.node_id, e.payload_json) for e in forked[1:cut + 1]] == \
            prefix[:cut]
        assert await sf.get_event(fork.run_id, "stage", timeout=0) == "done"
        assert [v async for v in sf.read_stream(fork.run_id, "log")] == ["reserved"]
        # The source is unchanged.
        assert (await sf.get_run(source.run_id)).status == "error"
        assert len(await sf.events(source.run_id)) == len(source_events)
        assert await sf.get_event(source.run_id, "stage", timeout=0) == "charging"
        run, src = await sf.get_run(fork.run_id), await sf.get_run(source.run_id)
        assert (run.template_id, run.workflow_version, run.definition_id, run.input_json) == (
            src.template_id, src.workflow_version, src.definition_id, src.input_json)

    async def test_fork_from_an_early_node_keeps_only_the_prefix_events(
            self, sf: Starflow) -> None:
        @step(name=unique("fk-a"))
        async def a() -> int:
            return 1

        @workflow(name=unique("fk-early"))
        async def wf() -> int:
            starflow.set_event("k", "first")
            await a()
            starflow.set_event("k", "second")
            starflow.write_stream("s", 1)
            return 1

        source = await sf.run(wf)
        node = next(e.node_id for e in await sf.events(source.run_id)
                    if e.node_id and e.node_id.startswith("step:"))
        fork = await sf.fork(source.run_id, from_node=node)
        assert fork.status == "success"
        # The fork ran on from the step: it set the event again and wrote the item once.
        assert await sf.get_event(fork.run_id, "k", timeout=0) == "second"
        items = await sf.adapter.list_stream_items(fork.run_id)
        assert [(i.seq, i.value) for i in items] == [(1, 1)]

    async def test_fork_from_a_concurrent_step_keeps_its_siblings(
            self, sf: Starflow) -> None:
        """Forking from one of steps run side by side: it and what follows it run
        again; the siblings that ran beside it keep their recorded outcomes."""
        calls: list[str] = []
        arrived: set[str] = set()
        all_in = anyio.Event()

        @step(name=unique("fk-side"))
        async def side(tag: str) -> str:
            calls.append(tag)
            if not all_in.is_set():  # the three run at once (starts recorded) before any ends
                arrived.add(tag)
                if len(arrived) == 3:
                    all_in.set()
                await all_in.wait()
            return tag

        @step(name=unique("fk-after"))
        async def after(values: list[str]) -> str:
            calls.append("after")
            return "+".join(values)

        @workflow(name=unique("fk-gather"))
        async def wf() -> str:
            values = await asyncio.gather(side("a"), side("b"), side("c"))
            return await after(list(values))

        source = await sf.run(wf)
        assert source.status == "success" and sorted(calls) == ["a", "after", "b", "c"]
        events = await sf.events(source.run_id)
        nodes = list(dict.fromkeys(e.node_id for e in events if e.node_id))
        a, b, c = sorted((n for n in nodes if "fk-side" in n), key=lambda n: n[-1])
        [last] = [n for n in nodes if "fk-after" in n]
        first = {n: min(i for i, e in enumerate(events) if e.node_id == n) for n in nodes}
        ends = {e.node_id: i for i, e in enumerate(events) if e.event_type == "node_complete"}
        assert ends[a] > first[b] and first[c] < ends[b]  # they ran side by side
        calls.clear()
        fork = await sf.fork(source.run_id, from_node=b)
        assert fork.status == "success", fork.error
        assert fork.result == "a+b+c"
        assert calls == ["b", "after"]
        # The siblings' outcomes are the fork's history; b's is new.
        completes = [e.node_id for e in await sf.events(fork.run_id)
                     if e.event_type == "node_complete"]
        assert sorted(completes[:2]) == sorted([a, c]) and completes[2:] == [b, last]

    async def test_bad_input_writes_nothing(self, sf: Starflow, spy: SpyAdapter) -> None:
        name = unique("fk-bad")

        @workflow(name=name)
        async def wf(wait: bool) -> None:
            if wait:
                await wait_for("go")

        paused = await sf.run(wf, True)
        ended = await sf.run(wf, False)
        units = len(spy.units)
        with pytest.raises(RunNotEnded, match="still 'paused'") as info:
            await sf.fork(paused.run_id, from_node="wait:go#1")
        assert (info.value.run_id, info.value.status) == (paused.run_id, "paused")
        with pytest.raises(NodeNotInHistory, match="has no node 'step:x#1'") as missing:
            await sf.fork(ended.run_id, from_node="step:x#1")
        assert (missing.value.run_id, missing.value.node_id) == (ended.run_id, "step:x#1")
        with pytest.raises(InvalidArgument):
            await sf.fork(ended.run_id, from_node="")
        with pytest.raises(RunNotFound):
            await sf.fork(str(uuid.uuid4()), from_node="step:x#1")
        assert len(spy.units) == units
        assert await run_count(sf, name) == 2


class TestContinueAsNew:
    """starflow.continue_as_new(*args)."""

    async def test_a_long_loop_keeps_each_history_bounded(self, sf: Starflow,
                                                          spy: SpyAdapter) -> None:
        """60 iterations of a loop that continues as new every 3 steps: each run's
        history holds at most its own 3 steps; result() of the first run follows the
        chain to the last one's value."""
        name = unique("can-loop")

        @step(name=unique("can-add"))
        async def add(total: int, i: int) -> int:
            return total + i

        @workflow(name=name)
        async def loop(i: int, total: int) -> int:
            for _ in range(3):
                total = await add(total, i)
                i += 1
            if i < 60:
                starflow.continue_as_new(i, total)
            return total

        handle = await sf.run(loop, 0, 0)
        assert (handle.status, handle.result) == ("success", sum(range(60)))
        runs = await sf.list_runs(template_id=name, limit=1000)
        assert len(runs) == 20
        successors = {r.continued_as for r in runs}
        first = [r for r in runs if r.id not in successors]
        assert len(first) == 1 and first[0].id != handle.run_id
        assert await sf.result(first[0].id) == sum(range(60))
        sizes = {len(await sf.events(r.id)) for r in runs}
        assert max(sizes) <= 8, sizes  # 3 steps (start + complete) and two links
        # Each link is one unit: the run's end and the next run's start together.
        link = next(u for u in spy.units if "on_run_start" in u and "on_run_complete" in u)
        # (fused_boundaries: the last step's node_complete opens it)
        assert link[:-7] == (["on_node_complete"] if sf.config.fused_boundaries else [])
        assert link[-7:] == ["on_run_complete", "continue_as_new", "clear_lease",
                             "continue_as_new", "on_run_start", "write_lease", "continue_as_new"]
        last = next(r for r in runs if r.continued_as is None)
        assert last.id == handle.run_id and last.result_json == sum(range(60))
        chain = [first[0].id]
        by_id = {r.id: r for r in runs}
        while by_id[chain[-1]].continued_as is not None:
            chain.append(str(by_id[chain[-1]].continued_as))
        assert len(chain) == 20 and chain[-1] == handle.run_id

    async def test_bad_input_writes_nothing(self, sf: Starflow) -> None:
        name = unique("can-bad")

        @step(name=unique("can-step"))
        async def inside() -> str:
            try:
                starflow.continue_as_new()
            except OutsideWorkflow as exc:
                return str(exc)
            return "accepted"

        @workflow(name=name)
        async def wf(kind: int) -> Any:
            if kind == 0:
                return await inside()
            try:
                if kind == 1:
                    starflow.continue_as_new(1, 2, 3)  # wf takes one argument
                else:
                    starflow.continue_as_new(object())
            except (WorkflowDefinitionError, starflow.SerializationError) as exc:
                return type(exc).__name__
            return "accepted"

        results = [(await sf.run(wf, kind)).result for kind in range(3)]
        assert "inside step" in results[0]
        assert results[1:] == ["WorkflowDefinitionError", "SerializationError"]
        assert await run_count(sf, name) == 3
        assert all(r.continued_as is None for r in await sf.list_runs(template_id=name))
        with pytest.raises(OutsideWorkflow, match="outside a workflow run"):
            starflow.continue_as_new(1)


async def test_a_queued_chain_is_run_by_workers(adapter_kind: str) -> None:
    """continue_as_new of a worker run queues the next run for the workers (same
    pool); result() of the first run waits for the last one."""
    from starflow_testing import WorkflowEnvironment

    if adapter_kind == "postgres":
        from tests.conftest import require_postgres

        require_postgres()
    name = unique("can-queued")

    @workflow(name=name)
    async def countdown(n: int) -> str:
        if n > 0:
            starflow.continue_as_new(n - 1)
        return "liftoff"

    async with WorkflowEnvironment(adapter=adapter_kind) as env:
        handle = await env.start(countdown, 5)
        assert await env.result(handle.run_id, timeout=60) == "liftoff"
        runs = await env.list_runs(template_id=name)
        assert len(runs) == 6
        assert {(r.status, r.start_mode) for r in runs} == {("success", "queued")}


async def test_the_replayer_checks_runs_that_publish_and_continue(sf: Starflow) -> None:
    """starflow replay over histories with events, streams and a continue_as_new link:
    each replays to the outcome it recorded, without writing."""
    from starflow.admin.replayer import Replayer

    @step(name=unique("rp-step"))
    async def work(n: int) -> int:
        return n

    @workflow(name=unique("rp-wf"))
    async def wf(n: int) -> int:
        starflow.set_event("n", n)
        starflow.write_stream("s", await work(n))
        if n < 2:
            starflow.continue_as_new(n + 1)
        starflow.close_stream("s")
        return n

    handle = await sf.run(wf, 0)
    assert handle.result == 2
    name = (await sf.get_run(handle.run_id)).template_id
    chain = await sf.list_runs(template_id=name, limit=1000)
    assert len(chain) == 3
    replayer = Replayer(workflows=[wf])
    for run in chain:
        result = await replayer.replay_run(sf.adapter, run.id)
        assert (result.ok, result.outcome) == (True, "success"), result.error


async def test_continue_as_new_in_a_cancelled_runs_cleanup_ends_it_cancelled(
        sf: Starflow) -> None:
    """A cancelled run cannot continue: it ends cancelled and no new run starts."""
    name = unique("can-cancel")

    @workflow(name=name)
    async def wf(n: int) -> None:
        try:
            await wait_for("go")
        except starflow.RunCancelled:
            starflow.continue_as_new(n + 1)

    handle = await sf.run(wf, 0)
    done = await sf.cancel(handle.run_id)
    assert done.status == "cancelled"
    runs = await sf.list_runs(template_id=name)
    assert [(r.status, r.continued_as) for r in runs] == [("cancelled", None)]


async def test_signals_and_updates_to_the_first_run_follow_the_chain(sf: Starflow) -> None:
    """#30: a message sent to a run that continued as new goes to the chain's current run."""

    @workflow(name=f"chain-inbox-{uuid.uuid4().hex[:8]}")
    async def inbox(n: int, total: int) -> int:
        total += int(await starflow.wait_for("add"))
        if n < 2:
            starflow.continue_as_new(n + 1, total)
        req = await starflow.receive("ask")
        await req.reply(total * 10)
        return total

    first = await sf.run(inbox, 0, 0)
    assert first.status == "paused"
    second = await sf.signal(first.run_id, "add", 1)  # the first run takes it, continues
    assert second.run_id != first.run_id and second.status == "paused"
    third = await sf.signal(first.run_id, "add", 2)  # given to the second run
    assert third.run_id not in (first.run_id, second.run_id) and third.status == "paused"
    assert (await sf.get_run(second.run_id)).continued_as == third.run_id
    last = await sf.signal(first.run_id, "add", 3)  # the third run takes it, asks
    assert last.run_id == third.run_id and last.status == "paused"
    uid = str(uuid.uuid4())
    assert await sf.update(first.run_id, "ask", update_id=uid) == 60
    assert await sf.update(first.run_id, "ask", update_id=uid) == 60  # a retry: same answer
    assert await sf.update(second.run_id, "ask", update_id=uid) == 60
    assert await sf.result(first.run_id) == 6
    with pytest.raises(RunFinished):
        await sf.signal(first.run_id, "add", 4)  # the chain's last run has ended
    with pytest.raises(RunFinished):
        await sf.update(first.run_id, "ask")
