"""A run paused in one process is resumed and finished by another process."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import anyio.to_thread
import pytest

from starflow import Starflow

#: Two processes per run: pause in one, resume in another.
pytestmark = pytest.mark.slow


HERE = Path(__file__).parent


def _run(args: list[str], log: Path) -> str:
    env = {**os.environ, "STARFLOW_TEST_CALL_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    proc = subprocess.run([sys.executable, str(HERE / "crossproc_app.py"), *args],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip().splitlines()[-1]


@pytest.fixture(params=["sqlite", "postgres"])
def adapter_kind(request: pytest.FixtureRequest) -> str:
    """Databases two processes can share (not a private in-memory one)."""
    return str(request.param)


@pytest.mark.parametrize("queued", [False, True], ids=["inline", "worker"])
async def test_pause_in_one_process_resume_in_another(db_url: str, workspace_id: str,
                                                      tmp_path: Path, queued: bool) -> None:
    """Process A runs the workflow to its wait (inline, or through its own worker);
    process B, with its own connection pool, signals it and finishes it (inline, or
    through its own worker). No step runs twice; nothing is lost."""
    url = db_url
    log = tmp_path / "calls.log"
    start, wake = ("start-queued", "signal-and-work") if queued else ("start", "signal")
    run_id, status = _run([url, workspace_id, start, "widget"], log).split()
    assert status == "paused"
    out = _run([url, workspace_id, wake, run_id, "ada"], log)
    assert out.startswith(f"{run_id} success")
    calls = log.read_text().splitlines()
    assert [c.split(":")[0] for c in calls] == ["reserve", "ship"]  # reserve never ran twice
    pid_a, pid_b = calls[0].split(":")[2], calls[1].split(":")[2]
    assert pid_a != pid_b
    async with Starflow.open(url, workspace_id=workspace_id, maintenance=False) as sf:
        run = await sf.get_run(run_id)
        assert run.status == "success" and run.checkpoint_json is None
        assert run.result_json == {"reserve": "reserved-widget", "ship": "shipped-widget-by-ada"}
        types = [e.event_type for e in await sf.events(run_id)]
        assert types.count("node_start") == 2
        assert "run_paused" in types and "run_resumed" in types


def _kill_inside_pack(args: list[str], env: dict[str, str], log: Path) -> int:
    """Start crossproc_app with ``args``, SIGKILL it once it logs its ``pack`` step;
    its exit code."""
    import signal
    import time

    with subprocess.Popen([sys.executable, str(HERE / "crossproc_app.py"), *args], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        try:
            deadline = time.monotonic() + 60
            while not (log.exists() and "pack:" in log.read_text()):
                assert proc.poll() is None, proc.communicate()[1].decode()
                assert time.monotonic() < deadline, "the run never reached its second step"
                time.sleep(0.05)  # another process's progress: nothing to await
            proc.send_signal(signal.SIGKILL)
            return proc.wait(10)
        finally:
            if proc.poll() is None:
                proc.kill()


async def test_sync_workflow_killed_mid_step_replays_elsewhere(
        db_url: str, workspace_id: str, tmp_path: Path) -> None:
    """A plain ``def`` workflow's process is SIGKILLed inside its second step: once
    its lease has expired the sweep requeues it, and another process's worker replays
    it in a new thread: the first step is not run again, the second runs again."""
    import signal
    import uuid as uuid_mod

    from starflow_testing import WorkflowEnvironment
    from tests.core import crossproc_app  # registers crossproc-sync here

    log = tmp_path / "calls.log"
    run_id = str(uuid_mod.uuid4())
    env = {**os.environ, "STARFLOW_TEST_CALL_LOG": str(log), "STARFLOW_TEST_HANG": "1",
           "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path])}
    args = [db_url, workspace_id, "start-sync", run_id, "crate"]
    code = await anyio.to_thread.run_sync(_kill_inside_pack, args, env, log)
    assert code == -signal.SIGKILL
    async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False) as sf:
        lost = await sf.get_run(run_id)
    assert lost.status == "running" and lost.lease_until is not None
    crossproc_app.LOG = log  # this process's steps append to the same file
    # Fake time starts past the dead runner's lease: the sweep finds it at once.
    async with WorkflowEnvironment(adapter=db_url, workspace_id=workspace_id,
                                   start=lost.lease_until + timedelta(seconds=1)) as wenv:
        result = await wenv.result(run_id, timeout=30)  # swept at its start, requeued
        lost_events = [e for e in await wenv.events(run_id) if e.event_type == "runner_lost"]
    assert result == {"reserve": "reserved-crate", "pack": "packed-crate"}
    assert [e.payload["action"] for e in lost_events] == ["requeued"]
    calls = [c.split(":")[0] for c in log.read_text().splitlines()]
    assert calls == ["reserve", "pack", "pack"]  # reserve replayed, pack at least once
