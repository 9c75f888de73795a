"""An interrupted prune (SIGKILL of the pruning process) leaves no half-deleted run:
every run is either there with all of its rows or gone with all of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest

from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.units import (
    InsertEvent,
    InsertJob,
    InsertOutbox,
    InsertRun,
    InsertSignal,
    InsertStreamItem,
    InsertWait,
    Unit,
    UpsertAttribute,
    UpsertEventValue,
    UpsertSessionVar,
)
from starflow.records import JobSpec

from .test_retention import START, _sql, counts

#: Kills a real pruning process (SIGKILL).
pytestmark = pytest.mark.slow


RUNS = 1500
ROOT = Path(__file__).resolve().parents[2]

PRUNER = textwrap.dedent("""
    import sys
    from datetime import datetime, timedelta
    import anyio
    from starflow.adapters import adapter_from_url
    from starflow.admin.retention import prune_runs

    async def main() -> None:
        adapter = adapter_from_url(sys.argv[1], workspace_id=sys.argv[2])
        await adapter.open()
        print("ready", flush=True)
        await prune_runs(adapter, now=datetime.fromisoformat(sys.argv[3]),
                         older_than=timedelta(days=1), batch_size=3)
        print("done", flush=True)

    anyio.run(main)
""")


def _ops(run_id: str) -> list[Any]:
    ended = START + timedelta(hours=1)
    return [
        InsertRun(method="t", run_id=run_id, values={
            "template_id": "kill", "status": "success", "started_at": START,
            "completed_at": ended, "claim_state": "complete"}),
        *(InsertEvent(method="t", run_id=run_id, event_type="node_complete", node_id=f"n{i}",
                      payload=i, created_at=START) for i in range(3)),
        InsertWait(method="t", run_id=run_id, node_id="w", event=None, deadline=None,
                   created_at=START),
        InsertSignal(method="t", run_id=run_id, event="go", payload=1, created_at=START),
        InsertOutbox(method="t", run_id=run_id, kind="run", payload=1, created_at=START),
        InsertJob(method="t", job=JobSpec(id=str(uuid.uuid4()), run_id=run_id, node_id="j",
                                          pool="p", step_name="s",
                                          idempotency_key=f"{run_id}:j", input={}),
                  created_at=START),
        UpsertAttribute(method="t", run_id=run_id, key="k", value="1", updated_at=START),
        UpsertEventValue(method="t", run_id=run_id, key="k", value=1, node_id="event:k#1",
                         updated_at=START),
        InsertStreamItem(method="t", run_id=run_id, key="s", seq=1, value=1, closed=False,
                         node_id="stream:s#1", created_at=START),
        UpsertSessionVar(method="t", session_id=run_id, key="k", value=1, run_id=run_id,
                         keep_until=START, updated_at=START),
    ]


async def _remaining(adapter: WorkflowStateAdapter) -> int:
    rows = await _sql(adapter, "SELECT count(*) FROM workflow_runs WHERE workspace_id = ?",
                      adapter.workspace_id)
    return int(rows[0][0])


@pytest.mark.parametrize("adapter_kind", ["sqlite", "postgres"])
async def test_sigkill_mid_prune_leaves_whole_runs(db_url: str, workspace_id: str,
                                                   tmp_path: Path) -> None:
    adapter = adapter_from_url(db_url, workspace_id=workspace_id)
    await adapter.open()
    try:
        ids = [str(uuid.uuid4()) for _ in range(RUNS)]
        for i in range(0, RUNS, 100):
            await adapter.execute(Unit(ops=[op for r in ids[i:i + 100] for op in _ops(r)]))
        now = START + timedelta(days=10)
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = await anyio.open_process([sys.executable, "-c", PRUNER, db_url, workspace_id,
                                         now.isoformat()], stdout=subprocess.DEVNULL, env=env)
        try:
            with anyio.fail_after(60):  # real time: a real process is pruning
                # Each count is a round trip: the loop polls as fast as the database answers.
                while await _remaining(adapter) > RUNS - 60:
                    pass
            os.kill(proc.pid, signal.SIGKILL)
        finally:
            if proc.returncode is None:
                proc.kill()
            await proc.wait()
        assert proc.returncode == -signal.SIGKILL
        left = await _remaining(adapter)
        assert 0 < left < RUNS, f"the kill did not land mid-prune: {left} of {RUNS} left"
        per_run = await counts(adapter, ids)
        whole = {"workflow_runs": 1, "workflow_run_events": 3, "workflow_waits": 1,
                 "workflow_signals": 1, "worker_jobs": 1, "mirror_outbox": 1,
                 "workflow_session_vars": 1, "workflow_run_attributes": 1,
                 "workflow_event_values": 1, "workflow_stream_items": 1}
        present = 0
        for run_id in ids:
            rows = {t: n for (t, who), n in per_run.items() if who == run_id}
            if rows["workflow_runs"]:
                present += 1
                assert rows == whole, (run_id, rows)
            else:
                assert not any(rows.values()), (run_id, rows)
        assert present == left
    finally:
        await adapter.close()
