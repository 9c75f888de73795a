"""Child workflows (#17): fan-out/fan-in of N children, next to N independent runs
measured in the same process, on the same database, back to back.

    python bench/children.py                      # sqlite and postgres, N = 1,000
    python bench/children.py --db sqlite --n 200 --rounds 1

Legs (each round runs both, on a fresh database, the order alternating):

- ``independent``: N runs of a one-step workflow queued with ``sf.start``
  and drained by one in-process worker (``--concurrency``), timed from the
  first start to the last run's end;
- ``fan-out``: one parent run that starts N children of the same workflow
  with ``starflow.start_child`` and gathers ``handle.result()`` over all of
  them (``asyncio.gather``), drained by the same worker, timed from the
  parent's start to its end.

For each: wall time, and the write transactions per run (child) as the
adapter seam sees them: every unit and every command (claims, sweeps) is one
transaction on PostgreSQL; SQLite's group commit may merge concurrent ones
into fewer fsyncs, so there the figure is an upper bound on commits. For the
fan-out, also how many times the parent ran (its executions: the first, and
one per wake by a child that ended while it waited on it).

Default durability for every measured write (SQLite ``synchronous=FULL``,
PostgreSQL ``synchronous_commit=on``). Nothing here is asserted in tests
(tests/test_bench_children.py only runs it small).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import anyio

if __package__ in (None, ""):  # run as a script: make `starflow` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import starflow
import starflow.logs
from starflow import Starflow, step, workflow
from starflow.adapters import adapter_from_url
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Command, Unit

POSTGRES_URL = os.environ.get("STARFLOW_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")


@step(name="bench-child-work")
async def work(i: int) -> int:
    return i + 1


@workflow(name="bench-child-leaf")
async def leaf(i: int) -> int:
    return await work(i)


@workflow(name="bench-child-fan")
async def fan(n: int) -> int:
    handles = [await starflow.start_child(leaf, i) for i in range(n)]
    return sum(await asyncio.gather(*(h.result() for h in handles)))


class Counting(DelegatingAdapter):
    """Counts the write transactions the seam executes (units and commands)."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.writes = 0

    async def execute(self, unit: Unit) -> bool:
        self.writes += 1
        return await self.inner.execute(unit)

    async def perform(self, command: Command[Any]) -> Any:
        self.writes += 1
        return await self.inner.perform(command)


async def _leg(url: str, workspace: str, which: str, n: int, concurrency: int
               ) -> dict[str, float]:
    adapter = Counting(adapter_from_url(url, workspace_id=workspace))
    async with Starflow(adapter, maintenance=False) as sf, anyio.create_task_group() as tg:
        worker = sf.worker(concurrency=concurrency)
        tg.start_soon(worker.run)
        before = adapter.writes
        began = time.perf_counter()
        if which == "independent":
            ids = [(await sf.start(leaf, i)).run_id for i in range(n)]
            for run_id in ids:  # they run concurrently; this waits for the last one
                await sf.result(run_id, timeout=3600)
            assert {(await sf.get_run(r)).status for r in ids} == {"success"}
            executions = float(n)
        else:
            handle = await sf.start(fan, n)
            value = await sf.result(handle.run_id, timeout=3600)
            assert value == sum(range(1, n + 1)), value
            kids = await sf.list_runs(parent_run_id=handle.run_id, limit=n + 1)
            assert len(kids) == n and {k.status for k in kids} == {"success"}
            events = await sf.events(handle.run_id)
            executions = 1.0 + sum(1 for e in events if e.event_type == "run_resumed")
        wall = time.perf_counter() - began
        writes = adapter.writes - before
        worker.stop()
        tg.cancel_scope.cancel()
    return {"wall_s": wall, "writes_per_run": writes / n, "parent_executions": executions}


async def bench(kind: str, n: int, rounds: int, concurrency: int) -> list[str]:
    results: dict[str, list[dict[str, float]]] = {"independent": [], "fan-out": []}
    for r in range(rounds):
        order = ["independent", "fan-out"] if r % 2 == 0 else ["fan-out", "independent"]
        for which in order:
            with tempfile.TemporaryDirectory() as tmp:
                url = f"sqlite:///{tmp}/children.db" if kind == "sqlite" else POSTGRES_URL
                workspace = f"bench-{uuid.uuid4().hex[:10]}"
                results[which].append(await _leg(url, workspace, which, n, concurrency))
    lines = []
    base = statistics.median(x["wall_s"] for x in results["independent"])
    for which in ("independent", "fan-out"):
        xs = results[which]
        wall = statistics.median(x["wall_s"] for x in xs)
        writes = statistics.median(x["writes_per_run"] for x in xs)
        extra = ""
        if which == "fan-out":
            execs = statistics.median(x["parent_executions"] for x in xs)
            extra = f"  parent executions {execs:.0f}  wall x{wall / base:.2f} of independent"
        lines.append(f"{kind:8} {which:12} n={n} rounds={rounds} concurrency={concurrency}: "
                     f"wall {wall:.2f} s ({n / wall:.0f} runs/s)  "
                     f"write transactions/run {writes:.2f}{extra}")
    return lines


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args(argv)
    starflow.logs.set_level("WARNING")
    kinds = ["sqlite", "postgres"] if args.db == "both" else [args.db]
    for kind in kinds:
        for line in await bench(kind, args.n, args.rounds, args.concurrency):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
