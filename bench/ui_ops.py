"""What the operations page of ``starflow ui`` costs to serve on a big database.

    python bench/ui_ops.py                          # sqlite and postgres, 100,000 runs
    python bench/ui_ops.py --db sqlite --runs 20000 --schedules 50 --loads 5

Seeds one workspace with ``--runs`` runs (20 % queued, spread over three pools
with limits and runs for any pool; 1 % running with live leases; the rest
ended), ``--schedules`` cron schedules (each triggered once, so each has a
last run to look up) and pool limits, then times ``GET /ops`` over the ASGI
app ``--loads`` times (after one warm-up load) and prints the median and the
slowest, next to ``GET /runs`` (the runs page, index lookups only) measured
the same way. The operations page reads the outbox gauge, three capped run
pages (one with the counts per status), the stuck runs, every pool's counts
(``sf.pools()``: an aggregate over the queued and executing runs) and every
schedule with its last run; each of those reads is timed on its own too
(median of ``--loads``), to show where the time goes.

Nothing here is asserted in tests (tests/test_bench_ui.py only runs it
small): this tells how fast, on this machine, today.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from contextlib import closing
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import httpx

if __package__ in (None, ""):  # run as a script: make `starflow` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from flow_control import drop_workspace  # bench/ is the script's directory

import starflow
import starflow.logs
from starflow import Starflow, StarflowConfig
from starflow.adapters.pages import MAX_PAGE, RunPageQuery
from starflow.clock import format_ts
from starflow.ui import create_app
from starflow.ui.operations import read_schedules

POSTGRES_URL = os.environ.get("STARFLOW_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
FIXTURE = StarflowConfig(sqlite_synchronous="OFF", postgres_synchronous_commit="off")
POOLS = ("gpu", "cpu", "payments", None)


@starflow.workflow(name="bench-ui-job")
async def job(n: int) -> int:
    return n


def _rows(workspace: str, n: int, now: datetime) -> list[tuple[Any, ...]]:
    """(id, workspace, env, template, status, claim_state, pool, started_at,
    leased_by, lease_until) of ``n`` runs, oldest first."""
    rows = []
    for i in range(n):
        started = now - timedelta(seconds=n - i)
        if i % 100 == 0:
            status, claim, leased, until = "running", "running", f"runner-{i % 7}", \
                now + timedelta(seconds=30)
        elif i % 5 == 0:
            status, claim, leased, until = "queued", "queued", None, None
        else:
            status, claim, leased, until = "success", "complete", None, None
        rows.append((str(uuid.uuid4()), workspace, "prod", "bench-ui-job", status, claim,
                     POOLS[i % len(POOLS)], started, leased, until))
    return rows


_INSERT = ("INSERT INTO workflow_runs (id, workspace_id, env, template_id, status, "
           "claim_state, runner_pool, started_at, leased_by, lease_until) VALUES ({})")


async def _seed_runs(kind: str, url: str, workspace: str, n: int, now: datetime) -> None:
    rows = _rows(workspace, n, now)
    if kind == "postgres":
        import asyncpg

        conn = await asyncpg.connect(POSTGRES_URL)
        try:
            await conn.executemany(
                _INSERT.format(", ".join(f"${i}" for i in range(1, 11))),
                [(uuid.UUID(r[0]), *r[1:]) for r in rows])
            await conn.execute("ANALYZE workflow_runs")
        finally:
            await conn.close()
        return

    def insert() -> None:
        path = url.removeprefix("sqlite:///")
        with closing(sqlite3.connect(path)) as conn, conn:
            conn.executemany(_INSERT.format(", ".join("?" * 10)), [
                (*r[:7], format_ts(r[7]), r[8], format_ts(r[9]) if r[9] else None)
                for r in rows])
            conn.execute("ANALYZE")

    await anyio.to_thread.run_sync(insert)



async def _time(client: httpx.AsyncClient, path: str, loads: int) -> list[float]:
    assert (await client.get(path)).status_code == 200  # warm-up
    took = []
    for _ in range(loads):
        t0 = time.perf_counter()
        response = await client.get(path)
        took.append(time.perf_counter() - t0)
        assert response.status_code == 200, response.text[:500]
    return took


async def leg(kind: str, tmp: str, runs: int, schedules: int, loads: int) -> dict[str, Any]:
    workspace = f"bench-ui-{uuid.uuid4().hex[:10]}"
    url = f"sqlite:///{os.path.join(tmp, 'ui.db')}" if kind == "sqlite" else POSTGRES_URL
    try:
        async with Starflow.open(url, workspace_id=workspace, config=FIXTURE,
                                 maintenance=False) as sf:
            await _seed_runs(kind, url, workspace, runs, sf.clock.now())
            await sf.set_pool_limits("gpu", concurrency=4, rate_limit=(100, timedelta(minutes=1)))
            await sf.set_pool_limits("payments", concurrency=10, key_concurrency=1)
            for i in range(schedules):
                await sf.schedule(f"s{i:04d}", job, i, cron="*/5 * * * *")
                await sf.trigger_schedule(f"s{i:04d}")
            async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(sf)),
                                         base_url="http://127.0.0.1") as client:
                ops = await _time(client, "/ops", loads)
                page = await _time(client, "/runs", loads)
            now = sf.clock.now()
            parts = {
                "counts": lambda: sf.adapter.list_runs_page(
                    RunPageQuery(status="queued", limit=MAX_PAGE, counts=True)),
                "stuck runs": sf.stuck_runs,
                "pools": sf.pools,
                "schedules": lambda: read_schedules(sf, now),
            }
            split = {}
            for name, read in parts.items():
                await read()
                took = []
                for _ in range(loads):
                    t0 = time.perf_counter()
                    await read()
                    took.append(time.perf_counter() - t0)
                split[name] = statistics.median(took) * 1000
    finally:
        await drop_workspace(kind, workspace)
    return {"db": kind, "runs": runs, "schedules": schedules, "loads": loads,
            "ops_ms": statistics.median(ops) * 1000, "ops_max_ms": max(ops) * 1000,
            "runs_ms": statistics.median(page) * 1000, "runs_max_ms": max(page) * 1000,
            "parts": split}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--schedules", type=int, default=100)
    parser.add_argument("--loads", type=int, default=10)
    ns = parser.parse_args()
    starflow.logs.set_level("WARNING")
    kinds = ["sqlite", "postgres"] if ns.db == "both" else [ns.db]
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            r = await leg(kind, tmp, ns.runs, ns.schedules, ns.loads)
            sys.stdout.write(
                f"{r['db']:<8} runs={r['runs']} schedules={r['schedules']}: GET /ops median "
                f"{r['ops_ms']:.1f} ms (slowest {r['ops_max_ms']:.1f}) · GET /runs median "
                f"{r['runs_ms']:.1f} ms (slowest {r['runs_max_ms']:.1f}), {r['loads']} loads\n"
                f"{'':<8} of /ops: " + " · ".join(f"{name} {ms:.1f} ms" for name, ms
                                                    in r["parts"].items()) + "\n")


if __name__ == "__main__":
    anyio.run(main)
