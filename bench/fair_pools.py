"""Fair pools (#30): what a fair claim costs next to a plain limited claim, with
10 and with 1,000 concurrency keys, on SQLite and PostgreSQL, in one run.

    python bench/fair_pools.py                        # sqlite and postgres, default sizes
    python bench/fair_pools.py --db sqlite --runs 3000 --keys 10,1000

For each key count K, R queued runs spread over K keys (round robin, so every
key has R/K runs) are queued for two pools: ``plain`` (non-binding
concurrency limit: the oldest-first limited claim) and ``fair``
(``fair=True``, the same non-binding limit). Both are claimed 16 at a time
until none is left; the pools are claimed in alternating order per round and
the ratio is the median of the rounds' ratios. Every claimed run stays
claimed (the worst case for the counts a limited claim reads).

A fair claim walks the pool's queued runs key by key (one index probe per key
with a claimable run: the first run of each), reads the stored passes, then
each chosen key's first runs, and writes the passes of the keys it served: its
cost grows with the number of keys that have runs queued, not with the number
of runs. On PostgreSQL it claims under the pool's limits row lock (the plain
limited claim first tries a claim by version, two round trips).

Default durability for every measured write (SQLite ``synchronous=FULL``,
PostgreSQL ``synchronous_commit=on``); fixtures are written with durability
off. Nothing here is asserted in tests (tests/test_bench_fair.py only runs it
small): this tells how fast, on this machine, today.
"""

from __future__ import annotations

import argparse
import os
import statistics
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
import starflow.logs
from starflow import Starflow, StarflowConfig

POSTGRES_URL = os.environ.get("STARFLOW_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
MEASURED = StarflowConfig(poll_interval=timedelta(hours=1))
FIXTURE = StarflowConfig(poll_interval=timedelta(hours=1), sqlite_synchronous="OFF",
                         postgres_synchronous_commit="off")
CLAIM_BATCH = 16
NON_BINDING = 10**9


@starflow.workflow(name="bench-fair-job")
async def fair_job(n: int) -> int:
    return n


def _url(kind: str, tmp: str, name: str) -> str:
    return f"sqlite:///{os.path.join(tmp, name)}" if kind == "sqlite" else POSTGRES_URL


async def drop_workspace(kind: str, workspace: str) -> None:
    """Delete a bench workspace's rows from the shared PostgreSQL database."""
    if kind != "postgres":
        return
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        await conn.execute(
            "DELETE FROM workflow_run_events WHERE run_id IN "
            "(SELECT id FROM workflow_runs WHERE workspace_id = $1)", workspace)
        for table in ("starflow_pool_keys", "starflow_pool_limits", "workflow_runs"):
            await conn.execute(f"DELETE FROM {table} WHERE workspace_id = $1", workspace)
    finally:
        await conn.close()


async def _concurrently(n: int, fn: Any, concurrency: int = 16) -> None:
    limiter = anyio.CapacityLimiter(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            await fn(i)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)


async def _claim_all(sf: Starflow, pool: str) -> tuple[int, float, list[float]]:
    """Claim ``pool`` dry, 16 at a time: runs claimed, seconds, each claim's seconds."""
    now = sf.clock.now()
    claimed = 0
    each: list[float] = []
    t0 = time.perf_counter()
    while True:
        t1 = time.perf_counter()
        got = await sf.adapter.claim_runs("bench", pool=pool, now=now,
                                          lease_until=now + timedelta(hours=1),
                                          limit=CLAIM_BATCH)
        each.append(time.perf_counter() - t1)
        if not got:
            return claimed, time.perf_counter() - t0, each
        claimed += len(got)


async def leg(kind: str, tmp: str, keys: int, runs: int, rounds: int) -> dict[str, Any]:
    workspace = f"bench-fair-{uuid.uuid4().hex[:10]}"
    url = _url(kind, tmp, f"fair{keys}.db")
    rates: dict[str, list[float]] = {"plain": [], "fair": []}
    claim_ms: dict[str, list[float]] = {"plain": [], "fair": []}
    try:
        async with Starflow.open(url, workspace_id=workspace, config=FIXTURE,
                                 maintenance=False) as fix, \
                Starflow.open(url, workspace_id=workspace, config=MEASURED,
                              maintenance=False) as sf:
            for r in range(rounds):
                pools = {"plain": f"plain{r}", "fair": f"fair{r}"}
                for shape, pool in pools.items():
                    await fix.set_pool_limits(pool, concurrency=NON_BINDING,
                                              fair=shape == "fair")
                    await _concurrently(runs, lambda i, p=pool: fix.options(
                        pool=p, concurrency_key=f"tenant-{i % keys:04d}").start(fair_job, i))
                order = ["plain", "fair"] if r % 2 == 0 else ["fair", "plain"]
                for shape in order:
                    claimed, seconds, each = await _claim_all(sf, pools[shape])
                    assert claimed == runs, (shape, claimed, runs)
                    rates[shape].append(runs / seconds)
                    claim_ms[shape].append(statistics.median(each) * 1000)
        return {
            "db": kind, "keys": keys, "runs": runs, "rounds": rounds,
            "plain_per_s": statistics.median(rates["plain"]),
            "fair_per_s": statistics.median(rates["fair"]),
            "plain_ms": statistics.median(claim_ms["plain"]),
            "fair_ms": statistics.median(claim_ms["fair"]),
            "ratio": statistics.median(
                [f / p for f, p in zip(rates["fair"], rates["plain"], strict=True)]),
        }
    finally:
        await drop_workspace(kind, workspace)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument("--keys", default="10,1000", help="key counts, comma-separated")
    parser.add_argument("--runs", type=int, default=2000, help="queued runs per pool per round")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    starflow.logs.set_level("WARNING")
    kinds = ["sqlite", "postgres"] if args.db == "all" else [args.db]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="starflow-bench-fair-") as tmp:
        for kind in kinds:
            for keys in (int(k) for k in args.keys.split(",")):
                c = await leg(kind, tmp, keys, args.runs, args.rounds)
                print(f"{kind:8} keys={c['keys']:<5} ({c['runs']} runs/pool, {c['rounds']} "
                      f"rounds, claims of {CLAIM_BATCH}): plain {c['plain_per_s']:.0f} "
                      f"runs claimed/s ({c['plain_ms']:.2f} ms per claim), fair "
                      f"{c['fair_per_s']:.0f} runs claimed/s ({c['fair_ms']:.2f} ms per "
                      f"claim), fair/plain {c['ratio']:.2f}")
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
