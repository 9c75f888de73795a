"""The scaling guide (docs/guides/scaling.md), tested: three ``starflow worker``
processes behind PgBouncer in transaction mode (4 server connections) drain 60
queued runs, each exactly once, and the metrics endpoint of one of them
(``--metrics-port``) reports the queue depth falling to 0.

Needs ``STARFLOW_TEST_PGBOUNCER_URL`` (``.ci/run`` starts one; required there).
"""

from __future__ import annotations

import socket
import time
import urllib.request
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

FAST = {"SF_LEASE": "5", "SF_HEARTBEAT": "1", "SF_SWEEP": "2", "SF_POLL": "0.2"}
RUNS = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def queue_depth(port: int) -> float | None:
    """``starflow_queue_depth{pool=""}`` as the worker's endpoint serves it (None: not yet)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read()
    except OSError:
        return None
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == "starflow_queue_depth" and sample.labels == {"pool": ""}:
                return float(sample.value)
    return None


async def test_three_workers_drain_the_queue_and_report_it(tmp_path: Path) -> None:
    pytest.importorskip("prometheus_client")
    require_postgres()
    require_pgbouncer()
    url = pgbouncer_url()
    workspace = f"ws-scale-{uuid.uuid4().hex[:10]}"
    side, log = tmp_path / "side.log", tmp_path / "workers.log"
    env = {**FAST, "STARFLOW_TEST_SIDE_LOG": str(side)}
    async with Starflow.open(url, workspace_id=workspace, maintenance=False) as sf:
        run_ids = [(await sf.start(chunks, 2, 0.4)).run_id for _ in range(RUNS)]
    port = free_port()
    args = ("--workspace", workspace, "--concurrency", "4", "--grace", "5")
    procs = [spawn_worker(url, log, *args, "--metrics-port", str(port),
                          "--metrics-interval", "0.2", **env)]
    procs += [spawn_worker(url, log, *args, **env) for _ in range(2)]
    depths: list[float] = []
    try:
        deadline = time.monotonic() + 90
        async with Starflow.open(url, workspace_id=workspace, maintenance=False) as sf:
            while len(await sf.list_runs(status="success", limit=RUNS + 1)) < RUNS:
                assert time.monotonic() < deadline, (
                    f"runs not done after 90 s; log:\n{log.read_text()[-3000:]}")
                if (depth := queue_depth(port)) is not None:
                    depths.append(depth)
                await anyio.sleep(0.1)
            while (depth := queue_depth(port)) != 0:
                assert time.monotonic() < deadline, f"queue depth still {depth}"
                await anyio.sleep(0.1)
            depths.append(depth)
            for run_id in run_ids:
                run = await sf.get_run(run_id)
                assert run is not None and run.status == "success" and run.result_json == 1
                events = await sf.events(run_id)
                done = Counter(e.node_id for e in events if e.event_type == "node_complete")
                assert sorted(done.values()) == [1, 1], (run_id, done)
        # Graceful drain: SIGTERM, and each worker exits on its own.
        for p in procs:
            p.terminate()
        for p in procs:
            assert p.wait(timeout=30) == 0, log.read_text()[-3000:]
    finally:
        stop(procs)
    assert depths[0] > 0 and depths[-1] == 0
    assert depths == sorted(depths, reverse=True), depths  # it only fell
    # Every step ran exactly once, and the work was shared.
    executions = Counter(key for key, _, _ in side_effects(side))
    assert len(executions) == 2 * RUNS and set(executions.values()) == {1}
    assert len({pid for _, _, pid in side_effects(side)}) >= 2
    text = log.read_text()
    assert "prepared statement" not in text
    assert text.count("worker stopped:") == 3
