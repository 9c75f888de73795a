"""Schedules and flow control (#18): the schedule loop with many schedules, and what
pool limits cost a claim, each figure next to a baseline measured in the same run.

    python bench/flow_control.py                     # sqlite and postgres, default sizes
    python bench/flow_control.py --db sqlite --schedules 10000 --runs 3000 --rounds 3

Legs:

- ``schedules``: N schedules stored (``*/5 * * * *``, every one due at the same
  tick). The *idle pass* is what every maintenance loop pays per wake-up when
  nothing is due (one indexed read for due rows, one for the next due time);
  the *due pass* fires all N ticks (N runs queued, each tick decided by a
  compare-and-set and started idempotently), as ticks/s, against plain
  ``sf.start`` queued starts/s at the same concurrency (the ratio is what a
  tick costs over a start: the two compare-and-sets).
- ``claims``: R queued runs per pool claimed 16 at a time until none are left,
  on a pool without limits and on one whose limits (concurrency, rate limit)
  are set but never bind; rounds alternate and the ratio is the median of the
  rounds' ratios. A limited claim locks the pool's limits row and counts the
  pool's executing runs and recent claims in its transaction, so the count
  grows with the runs left executing: here every claimed run stays claimed,
  the worst case for that count. On PostgreSQL a third pool is claimed with
  the earlier shape of the limited claim (limits row locked first, then the
  read and the claim: five round trips where the claim by version takes two),
  in the same rounds.

Default durability for every measured write (SQLite ``synchronous=FULL``,
PostgreSQL ``synchronous_commit=on``); fixtures are written with durability
off. Nothing here is asserted in tests (tests/test_bench_flow.py only runs it
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio

if __package__ in (None, ""):  # run as a script: make `starflow` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import starflow
import starflow.logs
from starflow import Starflow, StarflowConfig
from starflow.runtime.schedules import ScheduleLoop
from starflow_testing import FakeClock

POSTGRES_URL = os.environ.get("STARFLOW_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
START = datetime(2030, 1, 1, tzinfo=UTC)
#: Long polls: the schedule loops here are driven by hand, pass by pass.
MEASURED = StarflowConfig(poll_interval=timedelta(hours=1))
FIXTURE = StarflowConfig(poll_interval=timedelta(hours=1), sqlite_synchronous="OFF",
                         postgres_synchronous_commit="off")
CLAIM_BATCH = 16


@starflow.workflow(name="bench-flow-tick")
async def tick_job(n: int) -> int:
    return n


def _url(kind: str, tmp: str, name: str) -> str:
    return f"sqlite:///{os.path.join(tmp, name)}" if kind == "sqlite" else POSTGRES_URL


def _workspace(tag: str) -> str:
    return f"bench-{tag}-{uuid.uuid4().hex[:10]}"


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
        for table in ("starflow_schedules", "starflow_pool_limits", "workflow_runs"):
            await conn.execute(f"DELETE FROM {table} WHERE workspace_id = $1", workspace)
    finally:
        await conn.close()


async def _concurrently(n: int, fn: Any, concurrency: int = 16) -> float:
    """Run ``fn(i)`` for i < n with ``concurrency`` in flight; seconds taken."""
    limiter = anyio.CapacityLimiter(concurrency)
    t0 = time.perf_counter()

    async def one(i: int) -> None:
        async with limiter:
            await fn(i)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return time.perf_counter() - t0


async def leg_schedules(kind: str, tmp: str, n: int) -> dict[str, Any]:
    workspace = _workspace("sched")
    url = _url(kind, tmp, "sched.db")
    try:
        async with Starflow.open(url, workspace_id=workspace, config=FIXTURE,
                                 maintenance=False, clock=FakeClock(START)) as fix:
            await _concurrently(n, lambda i: fix.schedule(
                f"s{i:05d}", tick_job, i, cron="*/5 * * * *", overlap="allow"))
        clock = FakeClock(START)
        async with Starflow.open(url, workspace_id=workspace, config=MEASURED,
                                 maintenance=False, clock=clock) as sf:
            loop = ScheduleLoop(sf.runner)
            idle = []
            for _ in range(20):
                t0 = time.perf_counter()
                assert await loop.fire_due() == 0
                await sf.adapter.next_schedule_due()
                idle.append(time.perf_counter() - t0)
            await clock.jump_to(START + timedelta(minutes=5))  # every schedule due
            t0 = time.perf_counter()
            passes = 0
            while await loop.fire_due():
                passes += 1
            due_s = time.perf_counter() - t0
            assert loop.started == n, (loop.started, n)
            # Baseline: the same number of plain queued starts, same concurrency.
            starts = min(n, 2000)
            start_s = await _concurrently(starts, lambda i: sf.start(tick_job, i))
        tick_rate = n / due_s
        start_rate = starts / start_s
        return {"db": kind, "schedules": n, "idle_pass_ms": statistics.median(idle) * 1000,
                "due_pass_s": due_s, "passes": passes, "ticks_per_s": tick_rate,
                "starts_per_s": start_rate, "tick_over_start": tick_rate / start_rate}
    finally:
        await drop_workspace(kind, workspace)


async def _claim_all(sf: Starflow, pool: str) -> tuple[int, float]:
    now = sf.clock.now()
    claimed = 0
    t0 = time.perf_counter()
    while True:
        got = await sf.adapter.claim_runs("bench", pool=pool, now=now,
                                          lease_until=now + timedelta(hours=1),
                                          limit=CLAIM_BATCH)
        if not got:
            return claimed, time.perf_counter() - t0
        claimed += len(got)


async def leg_claims(kind: str, tmp: str, runs: int, rounds: int) -> dict[str, Any]:
    workspace = _workspace("claims")
    url = _url(kind, tmp, "claims.db")
    rates: dict[str, list[float]] = {"free": [], "limited": [], "locked": []}
    try:
        async with Starflow.open(url, workspace_id=workspace, config=FIXTURE,
                                 maintenance=False) as fix, \
                Starflow.open(url, workspace_id=workspace, config=MEASURED,
                              maintenance=False) as sf:
            adapter: Any = sf.adapter
            # PostgreSQL: the limited claim's earlier shape (limits row locked
            # first, five round trips) next to the claim by version, in the same rounds.
            shapes = (["free", "limited", "locked"] if hasattr(adapter, "versioned_claims")
                      else ["free", "limited"])
            for r in range(rounds):
                pools = {shape: f"{shape}{r}" for shape in shapes}
                for shape, pool in pools.items():
                    if shape != "free":
                        await fix.set_pool_limits(pool, concurrency=10**9,
                                                  rate_limit=(10**9, timedelta(minutes=1)))
                    await _concurrently(runs, lambda i, p=pool: fix.options(pool=p).start(
                        tick_job, i))
                order = shapes[r % len(shapes):] + shapes[:r % len(shapes)]
                for shape in order:
                    if shape != "free":
                        adapter.versioned_claims = shape == "limited"
                    claimed, seconds = await _claim_all(sf, pools[shape])
                    assert claimed == runs, (claimed, runs)
                    rates[shape].append(runs / seconds)
        out: dict[str, Any] = {"db": kind, "runs": runs, "rounds": rounds}
        for shape in shapes:
            out[f"{shape}_claims_per_s"] = statistics.median(rates[shape])
            if shape != "free":
                out[f"{shape}_over_free"] = statistics.median(
                    [x / f for x, f in zip(rates[shape], rates["free"], strict=True)])
        return out
    finally:
        await drop_workspace(kind, workspace)


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument("--only", default="schedules,claims")
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3000, help="queued runs per pool per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    starflow.logs.set_level("WARNING")
    kinds = ["sqlite", "postgres"] if args.db == "all" else [args.db]
    legs = set(args.only.split(","))
    with tempfile.TemporaryDirectory(prefix="starflow-bench-flow-") as tmp:
        for kind in kinds:
            if "schedules" in legs:
                s = await leg_schedules(kind, tmp, args.schedules)
                print(f"{kind:8} schedules={s['schedules']}: idle pass "
                      f"{s['idle_pass_ms']:.2f} ms; due pass {s['due_pass_s']:.2f} s "
                      f"({s['passes']} passes) = {s['ticks_per_s']:.0f} ticks/s vs "
                      f"{s['starts_per_s']:.0f} plain queued starts/s "
                      f"(ratio {s['tick_over_start']:.2f})")
            if "claims" in legs:
                c = await leg_claims(kind, tmp, args.runs, args.rounds)
                print(f"{kind:8} claims ({c['runs']} runs/pool, {c['rounds']} rounds, "
                      f"batches of {CLAIM_BATCH}): no limits {c['free_claims_per_s']:.0f}/s, "
                      f"non-binding limits {c['limited_claims_per_s']:.0f}/s "
                      f"(ratio {c['limited_over_free']:.2f})"
                      + (f"; limits row locked first (the shape before the claim by "
                         f"version) {c['locked_claims_per_s']:.0f}/s "
                         f"(ratio {c['locked_over_free']:.2f})"
                         if "locked_claims_per_s" in c else ""))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
