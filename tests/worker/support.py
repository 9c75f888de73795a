"""Helpers for the worker tests: a fake clock, a probing adapter, worker processes."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel

from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Unit
from starflow.records import RunInfo, SweepResult
from starflow_testing import FakeClock

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
START = datetime(2030, 1, 1, tzinfo=UTC)


async def all_blocked() -> None:
    """Return once every other asyncio task waits on an unfinished future.

    (``anyio.wait_all_tasks_blocked`` does the same with real-time polls, too
    slow for hundreds of clock steps.) A task waiting on a database thread
    counts as blocked: the tests also wait for the writes they expect.
    """
    me = asyncio.current_task()
    for _ in range(10_000):
        await anyio.lowlevel.checkpoint()
        if all(task is me or task.done()
               or ((w := getattr(task, "_fut_waiter", None)) is not None and not w.done())
               for task in asyncio.all_tasks()):
            return


def make_clock() -> FakeClock:
    """A fresh ``starflow_testing.FakeClock`` at the tests' start time."""
    return FakeClock(START)


class Probe(DelegatingAdapter):
    """Records units, claims and sweep passes, and lets a test await a condition."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.units: list[tuple[list[str], bool | None]] = []
        self.sweeps: list[tuple[datetime, list[SweepResult]]] = []
        self.claims: list[tuple[str, list[str]]] = []
        self._changed = anyio.Event()

    def _bump(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def execute(self, unit: Unit) -> bool:
        held = await self.inner.execute(unit)
        self.units.append((unit.methods, held))
        self._bump()
        return held

    async def claim_runs(self, runner_id: str, *, pool: str | None, now: datetime,
                         lease_until: datetime, limit: int = 1,
                         workflows: Any = None, after: Any = None) -> list[RunInfo]:
        got = await self.inner.claim_runs(runner_id, pool=pool, now=now,
                                          lease_until=lease_until, limit=limit,
                                          workflows=workflows, after=after)
        self.claims.append((runner_id, [r.id for r in got]))
        self._bump()
        return got

    async def expire_old_leases(self, now: datetime, reason: str = "runner_lost",
                                *, after: Any = None, requeue: bool = True) -> list[SweepResult]:
        got = await self.inner.expire_old_leases(now, reason, after=after, requeue=requeue)
        self.sweeps.append((now, got))
        self._bump()
        return got

    def count(self, method: str, held: bool | None = True) -> int:
        return sum(1 for methods, h in self.units if method in methods
                   and (held is None or h == held))

    async def until(self, predicate: Callable[[], bool], what: str = "condition",
                    limit: float = 10.0) -> None:
        """Wait (bounded in real time, never sleeping) until ``predicate()`` holds."""
        with anyio.fail_after(limit):
            while not predicate():
                changed = self._changed
                with anyio.move_on_after(0.05):
                    await changed.wait()

    async def at_least(self, value: Callable[[], int], n: int, limit: float = 10.0) -> None:
        """Wait until ``value() >= n``."""
        await self.until(lambda: value() >= n, limit=limit)

    async def until_run(self, run_id: str, predicate: Callable[[RunInfo], bool],
                        limit: float = 10.0) -> RunInfo:
        """Wait until the run row satisfies ``predicate``; return it."""
        with anyio.fail_after(limit):
            while True:
                run = await self.inner.get_run(run_id)
                if run is not None and predicate(run):
                    return run
                changed = self._changed
                with anyio.move_on_after(0.05):
                    await changed.wait()


# -- worker processes -----------------------------------------------------------------


def process_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE), str(ROOT)]),
           "STARFLOW_LOG_LEVEL": "info", **extra}
    env.pop("STARFLOW_TRACEBACK", None)
    return env


def spawn_worker(url: str, log: Path, *args: str, app: str = "apps:make_app",
                 **env: str) -> subprocess.Popen[bytes]:
    """``python -m starflow worker --app … --db url`` with output appended to ``log``."""
    out = log.open("ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "starflow", "worker", "--app", app, "--db", url, *args],
            stdout=out, stderr=subprocess.STDOUT, env=process_env(**env), cwd=str(HERE))
    finally:
        out.close()


def cli(*args: str, timeout: float = 30, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m starflow ARGS`` to completion."""
    return subprocess.run([sys.executable, "-m", "starflow", *args], capture_output=True,
                          text=True, env=process_env(**env), cwd=str(HERE), timeout=timeout,
                          check=False)


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
    for p in procs:
        p.wait(timeout=10)


def side_effects(path: Path) -> Iterator[tuple[str, float, int]]:
    """The side-effect log: (idempotency key, wall time, pid) per step execution."""
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        key, ts, pid = line.split("\t")
        yield key, float(ts), int(pid)
