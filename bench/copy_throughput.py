"""``starflow copy`` throughput: rows per second, SQLite → PostgreSQL and back.

    python bench/copy_throughput.py                       # 20,000 runs (about a minute each way)
    python bench/copy_throughput.py --runs 100000         # the issue's size
    STARFLOW_BENCH_POSTGRES_URL=postgresql://… python bench/copy_throughput.py

The source database is real: a few runs are made by starflow (one finished,
one paused on a signal with a session variable, one asleep on a timer), then
their rows are cloned under new run ids with the stdlib driver until there are
``--runs`` runs, so building it takes seconds, not the copy's time. The copy
then goes SQLite → PostgreSQL (a fresh workspace) and PostgreSQL → a new
SQLite file, each verified; the table gives runs, rows, seconds and rows/s.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

if __package__ in (None, ""):  # run as a script: make `starflow` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import starflow
from starflow import Starflow, session_set, step, workflow
from starflow.admin.copy import CopyOptions, copy_database

POSTGRES_URL = os.environ.get("STARFLOW_BENCH_POSTGRES_URL",
                              os.environ.get("STARFLOW_TEST_POSTGRES_URL",
                                             "postgresql://postgres@127.0.0.1:5432/postgres"))


@step
async def charge(n: int) -> dict[str, int]:
    return {"n": n, "cents": n * 100}


@workflow(name="bench_copy_finished")
async def finished(n: int) -> int:
    for i in range(3):
        await charge(n + i)
    return n


@workflow(name="bench_copy_paused")
async def paused(n: int) -> Any:
    await charge(n)
    await session_set(f"cart-{n}", "total", n)
    return await starflow.wait_for("approve", timeout=timedelta(days=14))


@workflow(name="bench_copy_sleeping")
async def sleeping(n: int) -> int:
    await charge(n)
    await starflow.sleep(timedelta(days=1))
    return n


async def build(path: Path, runs: int, workspace: str) -> None:
    async with Starflow.open(f"sqlite:///{path}", workspace_id=workspace,
                             maintenance=False) as sf:
        templates = [(await sf.run(wf, 1)).run_id for wf in (finished, paused, sleeping)]
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN")
        rows: dict[str, dict[str, list[tuple[Any, ...]]]] = {}
        cols: dict[str, list[str]] = {}
        for table, run_col in (("workflow_runs", "id"), ("workflow_run_events", "run_id"),
                               ("workflow_waits", "run_id"),
                               ("workflow_session_vars", "run_id")):
            cols[table] = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
            for t in templates:
                rows.setdefault(t, {})[table] = conn.execute(
                    f"SELECT * FROM {table} WHERE {run_col} = ?", (t,)).fetchall()
        made = len(templates)
        while made < runs:
            t = templates[made % len(templates)]
            new = str(uuid.uuid4())
            for table, data in rows[t].items():
                c = cols[table]
                out = []
                for r in data:
                    values = list(r)
                    key = "id" if table == "workflow_runs" else "run_id"
                    values[c.index(key)] = new
                    if table == "workflow_run_events":
                        values[c.index("id")] = None  # a new id, in order
                    if table == "workflow_session_vars":
                        values[c.index("session_id")] = f"s-{new}"
                    out.append(tuple(values))
                conn.executemany(f"INSERT INTO {table} ({', '.join(c)}) "
                                 f"VALUES ({', '.join('?' * len(c))})", out)
            made += 1
        conn.execute("COMMIT")
    finally:
        conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=500, help="runs per target transaction")
    parser.add_argument("--json", default="bench-copy.json")
    args = parser.parse_args()
    workspace = f"bench-copy-{uuid.uuid4().hex[:8]}"
    tmp = Path(tempfile.mkdtemp(prefix="starflow-bench-copy-"))
    src = tmp / "source.db"
    started = time.perf_counter()
    await build(src, args.runs, workspace)
    print(f"built {args.runs} runs in {time.perf_counter() - started:.1f}s ({src})")
    results = []
    for name, source, target in (
            ("sqlite → postgres", f"sqlite:///{src}", POSTGRES_URL),
            ("postgres → sqlite", POSTGRES_URL, f"sqlite:///{tmp / 'back.db'}")):
        report = await copy_database(CopyOptions(source=source, target=target,
                                                 workspace_id=workspace, env="prod",
                                                 batch_runs=args.batch))
        assert report.ok, (report.conflicts[:3], report.mismatches[:3])
        assert report.verified == args.runs
        results.append({"leg": name, "runs": report.runs, "rows": report.rows_read,
                        "seconds": round(report.seconds, 2),
                        "rows_per_second": round(report.rows_per_second),
                        "runs_per_second": round(report.runs / report.seconds)})
    print(f"{'leg':<20} {'runs':>8} {'rows':>9} {'seconds':>8} {'rows/s':>9} {'runs/s':>8}")
    for r in results:
        print(f"{r['leg']:<20} {r['runs']:>8} {r['rows']:>9} {r['seconds']:>8} "
              f"{r['rows_per_second']:>9} {r['runs_per_second']:>8}")
    summary = {"workspace": workspace, "legs": results}
    await anyio.Path(args.json).write_text(json.dumps(summary, indent=2))


if __name__ == "__main__":
    anyio.run(main)
