"""What a crash between a step and the run's next boundary costs (``fused_boundaries``).

Fused (the default), a step's ``node_complete`` commits with the run's next
boundary. A runner killed in between loses it: the step runs again on the next
runner, as after a crash just before an unfused ``node_complete``. The history
still holds one outcome per node, and nothing after the step ran twice.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

import anyio
import pytest

from starflow import StarflowConfig, start_child, step, wait_for, workflow
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres

CALLS: dict[str, int] = {}
IN_WINDOW: list[anyio.Event] = []
GO_ON: list[anyio.Event] = []


@step
async def t_window_first(key: str) -> str:
    CALLS[key + ":first"] = CALLS.get(key + ":first", 0) + 1
    return key


@step
async def t_window_second(key: str) -> str:
    CALLS[key + ":second"] = CALLS.get(key + ":second", 0) + 1
    return key + "!"


@workflow(name="t_window")
async def window_flow(key: str) -> str:
    first = await t_window_first(key)
    # Workflow code between two steps (a test hook: it waits for nothing durable).
    IN_WINDOW[0].set()
    await GO_ON[0].wait()
    return await t_window_second(first)


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def env_adapter(request: pytest.FixtureRequest) -> str:
    kind = str(request.param)
    if kind == "postgres":
        require_postgres()
    return kind


@pytest.mark.parametrize("fused", [True, False])
async def test_a_kill_between_steps(env_adapter: str, fused: bool) -> None:
    """Killed after step 1 returned, before step 2: fused, step 1 runs again; not, once."""
    key = f"k-{env_adapter}-{fused}"
    IN_WINDOW[:] = [anyio.Event()]
    GO_ON[:] = [anyio.Event()]
    config = StarflowConfig(fused_boundaries=fused, lease_ttl=timedelta(seconds=30),
                            sweep_interval=timedelta(seconds=30))
    async with WorkflowEnvironment(adapter=env_adapter, config=config) as env:
        handle = await env.start(window_flow, key)
        await IN_WINDOW[0].wait()
        before = [e.event_type for e in await env.events(handle.run_id)
                  if e.node_id == "step:t_window_first#1"]
        # Fused, step 1's outcome is not durable yet: only its start is in the history.
        assert before == (["node_start"] if fused else ["node_start", "node_complete"])
        await env.kill_runner(handle.run_id)
        GO_ON[0].set()  # the replay on the next runner passes through
        await env.advance(timedelta(seconds=60))  # the sweep requeues; a worker replays
        assert await env.result(handle.run_id) == key + "!"
        assert CALLS[key + ":first"] == (2 if fused else 1)  # at-least-once, as documented
        assert CALLS[key + ":second"] == 1
        events = [(e.event_type, e.node_id) for e in await env.events(handle.run_id)
                  if e.event_type == "node_complete"]
        assert events == [("node_complete", "step:t_window_first#1"),
                          ("node_complete", "step:t_window_second#1")]


@workflow(name="t_window_child")
async def window_child(n: int) -> int:
    return n * 10


@workflow(name="t_window_children")
async def window_children(key: str) -> int:
    handles = [await start_child(window_child, i) for i in range(3)]
    await wait_for("go")  # the children end meanwhile
    values = await asyncio.gather(*(h.result() for h in handles))
    IN_WINDOW[0].set()  # their results recorded, not committed yet (fused)
    await GO_ON[0].wait()
    return sum(values)


async def test_a_kill_after_child_results(env_adapter: str) -> None:
    """Killed after recording the results of ended children, before the run's next
    unit: the replay reads them again from the children's rows (no child twice)."""
    IN_WINDOW[:] = [anyio.Event()]
    GO_ON[:] = [anyio.Event()]
    config = StarflowConfig(lease_ttl=timedelta(seconds=30),
                            sweep_interval=timedelta(seconds=30))
    async with WorkflowEnvironment(adapter=env_adapter, config=config) as env:
        handle = await env.start(window_children, "k")
        await env.run_until_idle()
        kids = await env.list_runs(parent_run_id=handle.run_id)
        assert sorted(k.status for k in kids) == ["success"] * 3
        await env.signal(handle.run_id, "go", None)
        await IN_WINDOW[0].wait()
        results = [e for e in await env.events(handle.run_id)
                   if (e.node_id or "").startswith("result:")]
        assert results == []  # deferred to the run's next unit
        await env.kill_runner(handle.run_id)
        GO_ON[0].set()
        await env.advance(timedelta(seconds=60))  # the sweep requeues; a worker replays
        assert await env.result(handle.run_id) == 30
        results = [e.node_id for e in await env.events(handle.run_id)
                   if (e.node_id or "").startswith("result:")
                   and e.event_type == "node_complete"]
        assert sorted(results) == sorted(f"result:{k.id}#1" for k in kids)
        assert len(await env.list_runs(parent_run_id=handle.run_id)) == 3
