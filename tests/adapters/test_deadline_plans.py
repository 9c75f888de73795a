"""Plans of the timer loop's queued-deadline reads and of the stranded-parent pass
(migration 036): index searches on a production-shaped table, on both databases.

Many ended runs in two workspaces, a few queued ones (some with a deadline), many
paused runs waiting on timers or signals and a few waiting on a child run."""

from __future__ import annotations

import json
import sqlite3
import uuid
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from starflow.adapters.sql.dialect import POSTGRES, SQLITE
from starflow.adapters.sql.queries import Queries
from starflow.adapters.sqlite import LocalWorkflowStateAdapter
from starflow.clock import format_ts
from tests.adapters.test_postgres import explain_nodes, scratch_database, seq_scanned

#: EXPLAIN on tables filled to make the planner choose.
pytestmark = pytest.mark.slow


T0 = datetime(2030, 1, 1, tzinfo=UTC)
RUNS = 60_000


def statements(d: Any) -> list[tuple[str, str, tuple[Any, ...], str | None]]:
    """(what, sql, args, the index it must use) for each statement under test."""
    q = Queries(d)
    after = "00000000-0000-0000-0000-000000000000"
    return [
        ("due_run_deadlines", q.due_run_deadlines,
         ("ws0", "prod", d.ts(T0 + timedelta(days=1)), 100),
         "idx_workflow_runs_queued_deadline"),
        ("next_deadline", q.next_deadline, ("ws0", "prod", "ws0", "prod"),
         "idx_workflow_runs_queued_deadline"),
        ("child_waits", q.child_waits, ("ws0", "prod", after, 1000) + ("ws0", "prod") * 3,
         "idx_workflow_waits_child"),
    ]


class TestPlans:
    async def test_postgres(self) -> None:
        async with scratch_database("starflow_deadline_plan") as (_, conn):
            await conn.execute(f"""
                INSERT INTO workflow_runs (id, workspace_id, env, status, started_at,
                                           claim_state, deadline_at)
                SELECT gen_random_uuid(), 'ws' || (g % 2), 'prod',
                    CASE WHEN g % 500 = 0 THEN 'queued'
                         WHEN g % 10 = 2 THEN 'paused' ELSE 'success' END,
                    $1::timestamptz + g * interval '1 second',
                    CASE WHEN g % 500 = 0 THEN 'queued' ELSE 'complete' END,
                    CASE WHEN g % 3 = 0 THEN $1::timestamptz + g * interval '1 minute' END
                FROM generate_series(1, {RUNS}) g""", T0)
            # Every paused run waits: one in 50 on a child (a successful run), the
            # others on a timer or a signal.
            await conn.execute("""
                WITH paused AS (SELECT id, workspace_id,
                                       row_number() OVER (PARTITION BY workspace_id) AS n
                                FROM workflow_runs WHERE status = 'paused'),
                     ended AS (SELECT id, workspace_id,
                                      row_number() OVER (PARTITION BY workspace_id) AS n
                               FROM workflow_runs WHERE status = 'success')
                INSERT INTO workflow_waits (run_id, node_id, workspace_id, env, event,
                                            deadline, created_at)
                SELECT p.id, 'wait:x#1', p.workspace_id, 'prod',
                    CASE WHEN p.n % 50 = 0 THEN '__starflow.child:' || e.id::text
                         ELSE 'approval' END,
                    CASE WHEN p.n % 2 = 0 THEN $1::timestamptz + p.n * interval '1 hour' END,
                    $1::timestamptz
                FROM paused p JOIN ended e ON e.n = p.n AND e.workspace_id = p.workspace_id
                """, T0)
            await conn.execute("ANALYZE")
            for what, sql, args, index in statements(POSTGRES):
                nodes = await explain_nodes(conn, sql, *args)
                assert not seq_scanned(nodes), (what, json.dumps(nodes, indent=1))
                indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
                assert index in indexes, (what, indexes)
            # And the answer: the child waits of ws0 (its paused runs: g even), each
            # child ended.
            rows = await conn.fetch(Queries(POSTGRES).child_waits, *statements(POSTGRES)[2][2])
            assert rows and all(r[2] is not None for r in rows)

    async def test_sqlite(self, tmp_path: Path) -> None:
        path = tmp_path / "deadline-plan.db"
        adapter = LocalWorkflowStateAdapter.from_url(f"sqlite:///{path}", workspace_id="ws0")
        await adapter.open()
        await adapter.close()
        with closing(sqlite3.connect(path)) as conn, conn:
            runs = []
            for g in range(RUNS):
                status = "queued" if g % 500 == 0 else "paused" if g % 10 == 2 else "success"
                runs.append((str(uuid.uuid4()), f"ws{g % 2}", status,
                             format_ts(T0 + timedelta(seconds=g)),
                             "queued" if status == "queued" else "complete",
                             format_ts(T0 + timedelta(minutes=g)) if g % 3 == 0 else None))
            conn.executemany(
                "INSERT INTO workflow_runs (id, workspace_id, env, status, started_at, "
                "claim_state, deadline_at) VALUES (?, ?, 'prod', ?, ?, ?, ?)", runs)
            ended = {ws: [r[0] for r in runs if r[2] == "success" and r[1] == ws]
                     for ws in ("ws0", "ws1")}
            paused = [r for r in runs if r[2] == "paused"]
            conn.executemany(
                "INSERT INTO workflow_waits (run_id, node_id, workspace_id, env, event, "
                "deadline, created_at) VALUES (?, 'wait:x#1', ?, 'prod', ?, ?, ?)",
                [(p[0], p[1],
                  f"__starflow.child:{ended[p[1]][n]}" if n % 50 == 0 else "approval",
                  format_ts(T0 + timedelta(hours=n)) if n % 2 == 0 else None, format_ts(T0))
                 for n, p in enumerate(paused)])
            conn.execute("ANALYZE")
            for what, sql, args, index in statements(SQLITE):
                plan = " | ".join(row[3] for row in conn.execute(
                    f"EXPLAIN QUERY PLAN {sql}", args))
                assert f"INDEX {index}" in plan, (what, plan)
                for table in ("workflow_runs", "workflow_waits"):
                    assert f"SCAN {table}" not in plan, (what, plan)
                    assert "SCAN w " not in plan and "SCAN r " not in plan, (what, plan)
            rows = conn.execute(Queries(SQLITE).child_waits, statements(SQLITE)[2][2]).fetchall()
            assert rows and all(r[2] is not None for r in rows)
