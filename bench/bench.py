"""starflow benchmarks: every figure printed next to its floor measured in the same run.

    python bench/bench.py [--db sqlite|postgres|all] [--n 300] [--json out.json]

Figures:
- raw commit rate: single-row INSERT+COMMIT through the bare driver (sqlite3,
  asyncpg), same durability settings as starflow's defaults;
- sequential three-step workflows per second, and the floor
  raw_commit_rate / (steps + 2) (one durable commit per step, plus start and
  end); the ratio is starflow / floor;
- 50 runs in flight in one process: workflows per second, and its ratio to
  the sequential figure of the same run (group commit at work).
No number here is asserted in tests: the suite stays correct on a slow
machine, this tells how fast.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio

from starflow import Starflow, step, workflow

STEPS = 3
POSTGRES_URL = os.environ.get("STARFLOW_BENCH_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")


@step
async def s1(x: int) -> int:
    return x + 1


@step
async def s2(x: int) -> int:
    return x * 2


@step
async def s3(x: int) -> int:
    return x - 3


@workflow(name="bench-three-steps")
async def three_steps(x: int) -> int:
    return await s3(await s2(await s1(x)))


def raw_sqlite_rate(path: str, n: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS raw (id INTEGER PRIMARY KEY, payload TEXT)")
    t0 = time.perf_counter()
    for i in range(n):
        conn.execute("BEGIN")
        conn.execute("INSERT INTO raw (payload) VALUES (?)", (f"row-{i}",))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - t0
    conn.close()
    return n / elapsed


async def raw_postgres_rate(url: str, n: int) -> float:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("CREATE TEMP TABLE raw (id bigserial PRIMARY KEY, payload text)")
        t0 = time.perf_counter()
        for i in range(n):
            async with conn.transaction():
                await conn.execute("INSERT INTO raw (payload) VALUES ($1)", f"row-{i}")
        return n / (time.perf_counter() - t0)
    finally:
        await conn.close()


async def _timed(n: int, fn: Callable[[int], Awaitable[Any]], concurrency: int) -> float:
    t0 = time.perf_counter()
    if concurrency == 1:
        for i in range(n):
            await fn(i)
    else:
        limiter = anyio.CapacityLimiter(concurrency)

        async def one(i: int) -> None:
            async with limiter:
                await fn(i)

        async with anyio.create_task_group() as tg:
            for i in range(n):
                tg.start_soon(one, i)
    return n / (time.perf_counter() - t0)


async def workflow_rates(url: str, n: int, workspace: str) -> tuple[float, float]:
    async with Starflow.open(url, workspace_id=workspace, maintenance=False) as sf:
        async def run(i: int) -> None:
            handle = await sf.run(three_steps, i)
            assert handle.status == "success", handle

        await _timed(10, run, 1)  # warm-up: connections, definition row
        sequential = await _timed(n, run, 1)
        concurrent = await _timed(n * 2, run, 50)
    return sequential, concurrent


async def bench_db(kind: str, n: int) -> dict[str, Any]:
    workspace = f"bench-{os.getpid()}-{int(time.time())}"
    if kind == "sqlite":
        tmp = tempfile.mkdtemp()
        raw = raw_sqlite_rate(os.path.join(tmp, "raw.db"), n * 3)
        url = f"sqlite:///{os.path.join(tmp, 'starflow.db')}"
    else:
        raw = await raw_postgres_rate(POSTGRES_URL, n * 3)
        url = POSTGRES_URL
    seq, conc = await workflow_rates(url, n, workspace)
    floor = raw / (STEPS + 2)
    return {
        "db": kind,
        "raw_commit_rate": raw,
        "floor_workflows_per_s": floor,
        "sequential_workflows_per_s": seq,
        "sequential_steps_per_s": seq * STEPS,
        "sequential_ratio_to_floor": seq / floor,
        "concurrent50_workflows_per_s": conc,
        "concurrent50_ratio_to_sequential": conc / seq,
    }


def print_table(rows: list[dict[str, Any]]) -> None:
    print(f"machine: {platform.machine()} {os.cpu_count()} cores, Python {platform.python_version()}")
    header = (f"{'db':<9}{'raw commit/s':>14}{'floor wf/s':>12}{'seq wf/s':>10}"
              f"{'seq steps/s':>13}{'seq/floor':>11}{'50-flight wf/s':>16}{'50/seq':>8}")
    print(header)
    for r in rows:
        print(f"{r['db']:<9}{r['raw_commit_rate']:>14.0f}{r['floor_workflows_per_s']:>12.0f}"
              f"{r['sequential_workflows_per_s']:>10.0f}{r['sequential_steps_per_s']:>13.0f}"
              f"{r['sequential_ratio_to_floor']:>11.2f}{r['concurrent50_workflows_per_s']:>16.0f}"
              f"{r['concurrent50_ratio_to_sequential']:>8.2f}")


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument("--n", type=int, default=300, help="sequential workflows per leg")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    kinds = ["sqlite", "postgres"] if args.db == "all" else [args.db]
    rows = [await bench_db(kind, args.n) for kind in kinds]
    print_table(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
