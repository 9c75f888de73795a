"""A run paused in one process is resumed and finished by another process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
