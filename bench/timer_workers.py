"""What every worker firing timers costs (issue #29): idle reads and a burst of due timers.

    python bench/timer_workers.py postgresql://postgres@127.0.0.1/bench --timers 200
    python bench/timer_workers.py sqlite:////tmp/t.db --timers 200 --workers 1 4

Queues ``--timers`` runs that sleep one second, lets one worker pause them all
(with ``timers=False``), then, for each count in ``--workers``, starts that
many timer loops (a worker's share of maintenance, each its own app and
connection pool, as separate worker processes would have), moves the fake
clock past the timers and times (wall clock) until no run is paused any more.
All loops run in this one process (real workers are processes of their own,
so this overstates the Python side of the contention). Prints that time, how
many wakes were written (``run_resumed`` events: one per run whatever the
number of loops), how many wake units their guard refused (the losers' wasted
transactions), and the idle cost: the milliseconds of
one ``next_deadline`` read, the one read an idle timer loop makes per poll,
with ``--background`` queued runs with a deadline (each a timer) of another
workspace in the tables.
docs/guides/workers.md records a run. Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from contextlib import AsyncExitStack
from datetime import timedelta
from pathlib import Path
from typing import Any

import anyio

if __package__ in (None, ""):  # run as a script: make `starflow` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from starflow import Starflow, StarflowConfig, sleep, workflow
from starflow.adapters import adapter_from_url
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Unit
from starflow.runtime.maintenance import Maintenance
from starflow_testing import FakeClock

CONFIG = StarflowConfig(poll_interval=timedelta(hours=1))


@workflow(name="bench-timer-sleep")
async def sleeper() -> None:
    await sleep(timedelta(seconds=1))


class Counting(DelegatingAdapter):
    """Counts the guarded units written (held) and refused (another loop won)."""

    held = 0
    refused = 0

    async def execute(self, unit: Unit) -> bool:
        ok = await self.inner.execute(unit)
        if ok:
            Counting.held += 1
        else:
            Counting.refused += 1
        return ok


def _adapter(url: str, workspace: str) -> Any:
    """Each loop's own adapter; two connections each on PostgreSQL, so eight fit a
    shared server."""
    options: dict[str, Any] = {}
    if url.startswith(("postgresql:", "postgres:")):
        options = {"min_size": 1, "max_size": 2}
    return Counting(adapter_from_url(url, workspace_id=workspace, **options))


async def _until(predicate: Any, limit: float = 120.0) -> None:
    with anyio.fail_after(limit):
        while not await predicate():  # noqa: ASYNC110 - polls the database, not an event
            await anyio.sleep(0.02)


async def paused_runs(url: str, workspace: str, n: int, clock: FakeClock) -> list[str]:
    """``n`` runs paused on a one-second sleep, in ``workspace``."""
    async with Starflow.open(url, workspace_id=workspace, clock=clock, config=CONFIG,
                             maintenance=False) as sf:
        ids = [(await sf.start(sleeper)).run_id for _ in range(n)]
        worker = sf.worker(concurrency=32, timers=False)
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)

            async def all_paused() -> bool:
                return len(await sf.list_runs(status="paused", limit=n + 1)) == n

            await _until(all_paused)
            await worker.drain()
    return ids


async def fire(url: str, timers: int, loops: int) -> tuple[float, int, int]:
    """Seconds until ``loops`` timer loops fired ``timers`` due timers; wakes written;
    wake units refused by their guard (another loop's wake won)."""
    clock = FakeClock()
    workspace = f"bench-{uuid.uuid4().hex[:8]}"
    ids = await paused_runs(url, workspace, timers, clock)
    async with AsyncExitStack() as stack:
        apps = [await stack.enter_async_context(
            Starflow(_adapter(url, workspace), clock=clock, config=CONFIG,
                     maintenance=False)) for _ in range(loops)]
        tg = await stack.enter_async_context(anyio.create_task_group())
        for app in apps:
            tg.start_soon(Maintenance(app.runner, poll=True, timers_only=True).run)
        await anyio.sleep(0.2)  # each loop read the next deadline and sleeps until it
        Counting.held = Counting.refused = 0
        began = time.perf_counter()
        tg.start_soon(clock.jump_to, clock.now() + timedelta(seconds=2))

        async def none_paused() -> bool:
            return not await apps[0].list_runs(status="paused", limit=1)

        await _until(none_paused)
        elapsed = time.perf_counter() - began
        refused = Counting.refused
        tg.cancel_scope.cancel()
    async with Starflow.open(url, workspace_id=workspace, clock=clock, config=CONFIG,
                             maintenance=False) as sf:
        wakes = 0
        for run_id in ids:
            wakes += sum(1 for e in await sf.events(run_id) if e.event_type == "run_resumed")
    return elapsed, wakes, refused


async def idle_read(url: str, background: int, reads: int) -> float:
    """Median milliseconds of one ``next_deadline`` read."""
    clock = FakeClock()
    if background:
        async with Starflow.open(url, workspace_id=f"bench-bg-{uuid.uuid4().hex[:8]}",
                                 clock=clock, config=CONFIG, maintenance=False) as bg:
            timed = bg.options(timeout=timedelta(days=1))
            for _ in range(background):
                await timed.start(sleeper)  # queued, with a deadline: a timer of its own
    async with Starflow.open(url, workspace_id=f"bench-{uuid.uuid4().hex[:8]}", clock=clock,
                             config=CONFIG, maintenance=False) as sf:
        times = []
        for _ in range(reads):
            began = time.perf_counter()
            await sf.adapter.next_deadline()
            times.append((time.perf_counter() - began) * 1000)
    return statistics.median(times)


async def main(args: argparse.Namespace) -> None:
    ms = await idle_read(args.url, args.background, args.reads)
    print(f"idle: next_deadline {ms:.3f} ms (median of {args.reads}, "
          f"{args.background} timed runs elsewhere)")
    for loops in args.workers:
        elapsed, wakes, refused = await fire(args.url, args.timers, loops)
        print(f"{loops} timer loop(s): {args.timers} due timers fired in {elapsed:.3f} s, "
              f"{wakes} wakes written, {refused} wake units refused by their guard")


def cli(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("url")
    parser.add_argument("--timers", type=int, default=200)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--background", type=int, default=0)
    parser.add_argument("--reads", type=int, default=200)
    return parser.parse_args(argv)


if __name__ == "__main__":
    anyio.run(main, cli())
