"""Worker processes behind a transaction pooler: 8 workers share PgBouncer's 4 server
connections (``pool_mode = transaction``, ``default_pool_size = 4``), some are
SIGKILLed, and every run still completes exactly once.

Needs ``STARFLOW_TEST_PGBOUNCER_URL`` (``.ci/run`` starts one; required there).
"""

from __future__ import annotations

import random
import signal
import time
import uuid
from collections import Counter
from pathlib import Path

import anyio
import pytest

from starflow import Starflow
from tests.conftest import pgbouncer_url, require_pgbouncer, require_postgres

from .apps import chunks
from .support import side_effects, spawn_worker, stop

pytestmark = pytest.mark.slow

FAST = {"SF_LEASE": "1.5", "SF_HEARTBEAT": "0.3", "SF_SWEEP": "0.4", "SF_POLL": "0.1"}
WORKERS = 8
RUNS = 40


async def test_eight_workers_share_four_server_connections(tmp_path: Path) -> None:
    require_postgres()
    require_pgbouncer()
    url = pgbouncer_url()
    workspace = f"ws-pgb-{uuid.uuid4().hex[:10]}"
    side, log = tmp_path / "side.log", tmp_path / "workers.log"
    env = {**FAST, "STARFLOW_TEST_SIDE_LOG": str(side)}
    async with Starflow.open(url, workspace_id=workspace, maintenance=False) as sf:
        run_ids = [(await sf.start(chunks, 4, 0.05)).run_id for _ in range(RUNS)]
    args = ("--workspace", workspace, "--concurrency", "4", "--maintenance", "--grace", "0")
    procs = [spawn_worker(url, log, *args, **env) for _ in range(WORKERS)]
    rng = random.Random(20)
    kills = 0
    try:
        async with Starflow.open(url, workspace_id=workspace, maintenance=False) as sf:
            async def finished() -> int:
                return len(await sf.list_runs(status="success", limit=RUNS + 1))

            while kills < 4 and await finished() < RUNS - 8:
                await anyio.sleep(rng.uniform(0.3, 0.6))
                i = rng.randrange(len(procs))
                procs[i].send_signal(signal.SIGKILL)
                procs[i].wait(timeout=10)
                kills += 1
                procs[i] = spawn_worker(url, log, *args, **env)
            deadline = time.monotonic() + 60
            while await finished() < RUNS:
                assert time.monotonic() < deadline, (
                    f"{await finished()} of {RUNS} runs done after 60 s; "
                    f"worker log:\n{log.read_text()[-3000:]}")
                await anyio.sleep(0.1)
            completed: set[str] = set()
            for run_id in run_ids:
                run = await sf.get_run(run_id)
                assert run is not None and run.status == "success" and run.result_json == 6
                events = await sf.events(run_id)
                done = Counter(e.node_id for e in events if e.event_type == "node_complete")
                assert sorted(done.values()) == [1, 1, 1, 1], (run_id, done)
                completed |= {f"{run_id}:{node}" for node in done}
    finally:
        stop(procs)
    text = log.read_text()
    assert "unsupported startup parameter" not in text
    assert "prepared statement" not in text
    # Every completed step ran; none ran more often than the kills can explain.
    executions = Counter(key for key, _, _ in side_effects(side))
    assert set(executions) == completed
    assert sum(executions.values()) - len(completed) <= kills * 4
    assert kills >= 2
