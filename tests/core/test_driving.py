"""The runner's parts: the stop seam, the checkpoint's wait, and no kill branches elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

import anyio
import pytest

from starflow import StarflowError, step, workflow
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
