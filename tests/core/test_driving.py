"""The runner's parts: the stop seam, the checkpoint's wait, and no kill branches elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import pytest

import starflow
from starflow import Starflow, StarflowError, step, wait_for, workflow
from starflow.records import HELD
from starflow.workflow.context import WAIT_KEY, CheckpointWait, checkpoint_wait
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres

_gate: dict[str, anyio.Event] = {}


@step(name="driving-blocks")
async def blocks() -> str:
    _gate["started"].set()
    await _gate["release"].wait()
    return "done"


@workflow(name="driving-blocking")
async def blocking() -> str:
    return await blocks()


class TestStopSeam:
    """Runner.stop: the owner stops an execution; the driver raises the owner's error."""

    async def test_the_driving_call_raises_the_owners_error(self, adapter_kind: str) -> None:
        """Nothing more is written: the run keeps its lease for the sweep."""
        if adapter_kind == "postgres":
            require_postgres()
        _gate.update(started=anyio.Event(), release=anyio.Event())
        owner_error = StarflowError("stopped by the test, on purpose")
        async with WorkflowEnvironment(adapter=adapter_kind) as env:
            raised: list[BaseException] = []
            async with anyio.create_task_group() as tg:
                async def drive() -> None:
                    try:
                        await env.run(blocking)
                    except StarflowError as exc:
                        raised.append(exc)

                tg.start_soon(drive)
                await _gate["started"].wait()
                [run] = await env.list_runs()
                assert env.runner.stop(run.id, owner_error)
                await env.quiesce()
            assert raised == [owner_error]
            assert env.runner.stopped(owner_error)
            assert not env.runner.stopped(StarflowError("another"))
            after = await env.get_run(run.id)
            assert (after.status, after.leased_by, after.lease_until) == (
                "running", run.leased_by, run.lease_until)
            assert run.id not in env.runner.engines

    async def test_stopping_a_run_not_executing_here(self) -> None:
        """False, and nothing is stopped."""
        async with WorkflowEnvironment() as env:
            assert not env.runner.stop("no-such-run", StarflowError("x"))


class TestCheckpointWait:
    """The wait a checkpoint records is written and read by one type."""

    def test_round_trip(self) -> None:
        wait = CheckpointWait(node_id="wait:go#2", event="go", deadline="2030-01-01T00:00:00Z",
                              wake_token="tok", job_id=None)
        variable = wait.variable()
        assert variable["status"] == "pending" and "job_id" not in variable
        assert checkpoint_wait({"variables": {WAIT_KEY: variable}}) == wait
        job = CheckpointWait(node_id="step:s#1", wake_token="t", job_id="j-1")
        assert checkpoint_wait({"variables": {WAIT_KEY: job.variable()}}) == job

    @pytest.mark.parametrize("checkpoint", [
        None, {}, {"variables": None}, {"variables": {}}, {"variables": {WAIT_KEY: {}}},
        {"variables": {WAIT_KEY: "not a dict"}}, {"variables": ["x"]},
    ])
    def test_no_wait(self, checkpoint: object) -> None:
        assert checkpoint_wait(checkpoint) is None  # type: ignore[arg-type]


def _names(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.alias | ast.ClassDef):
            found.add(node.name)
    return found


def test_no_kill_simulation_in_the_product() -> None:
    """Only errors.py names RunnerKilled (it defines it): engine, runner, worker and
    jobs have no kill branch; the simulated SIGKILL goes through Runner.stop."""
    root = Path(__file__).parent.parent.parent / "starflow"
    naming = sorted(str(path.relative_to(root)) for path in root.rglob("*.py")
                    if "RunnerKilled" in _names(ast.parse(path.read_text())))
    assert naming == ["errors.py"]


_chain_app: dict[str, Starflow] = {}


@workflow(name="driving-chain-child")
async def chain_child() -> str:
    return str(await wait_for("never"))


@workflow(name="driving-chain-with-child")
async def chain_with_child(n: int) -> str:
    """Continues as new ``n`` times; the last run starts an attached child and ends."""
    if n > 0:
        starflow.continue_as_new(n - 1)
    await starflow.start_child(chain_child)
    return "last run done"


@step(name="driving-pause-me")
async def pause_me() -> None:
    app = _chain_app["app"]
    [me] = await app.list_runs(status="running", template_id="driving-chain-pauses")
    await app.pause(me.id)  # an operator pause while the run executes


@workflow(name="driving-chain-pauses")
async def chain_pauses(n: int) -> str:
    """Continues as new ``n`` times; the last run is paused by an operator while it
    executes, then reaches a wait."""
    if n > 0:
        starflow.continue_as_new(n - 1)
    await pause_me()
    return str(await wait_for("go"))


class TestInlineChainSettles:
    """An inline ``continue_as_new`` chain is settled as its last run: that run's end
    cancels its children, and what was asked of it while it ran reaches it."""

    @pytest.mark.parametrize("links", [0, 2])
    async def test_the_last_runs_children_are_cancelled(self, sf: Starflow,
                                                        links: int) -> None:
        handle = await sf.run(chain_with_child, links)
        assert (handle.status, handle.result) == ("success", "last run done")
        last = await sf.get_run(handle.run_id)
        assert last.continued_as is None and last.parent_run_id is None
        [kid] = await sf.list_runs(parent_run_id=handle.run_id)
        assert kid.status == "cancelled"  # the last run's end cancelled its child

    @pytest.mark.parametrize("links", [0, 1])
    async def test_a_pause_requested_while_the_last_run_ran_parks_it(
            self, sf: Starflow, links: int) -> None:
        _chain_app["app"] = sf
        handle = await sf.run(chain_pauses, links)
        assert (handle.status, handle.waiting_for) == ("paused", "go")
        last = await sf.get_run(handle.run_id)
        assert last.claim_state == HELD  # parked at its wait by the pending pause
        # Held: a signal stays queued until an operator resumes the run.
        assert (await sf.signal(handle.run_id, "go", 1)).status == "paused"
        done = await sf.resume(handle.run_id)
        assert (done.status, done.result) == ("success", "1")
