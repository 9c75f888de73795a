"""Scale bench (issue #24): do the hot paths stay flat as ended runs pile up?

    python bench/scale.py --db postgresql://postgres@127.0.0.1:5432/DB --small 10000 --large 1000000
    python bench/scale.py --db sqlite:///tmp/scale.db --small 10000 --large 200000

For each size N it seeds a fresh workspace, quickly and not through the runtime
(``COPY`` on PostgreSQL, ``executemany`` in one transaction per chunk on
SQLite): N ended runs (success/error/cancelled, 20 workflows, 8 events each)
plus 10,000 active ones (4,000 queued, 1,000 running with live leases, 3,000
paused on a timer of which 100 are due, 2,000 paused on an event). Then it
times, median of several calls: the claim of one queued run, one lease-sweep
pass, the due-timers query, the first page (50) of ``list_runs`` (newest, by
status, by workflow), ``get_run`` and ``list_events`` of a random ended run,
and prune throughput (5,000 runs in batches of 500, runs/s). It prints each
figure at both sizes and the ratio large/small (1.0: flat). No figure is
asserted anywhere; docs/performance.md records a run.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from starflow.adapters import adapter_from_url  # noqa: E402
from starflow.adapters.base import WorkflowStateAdapter  # noqa: E402
from starflow.clock import format_ts  # noqa: E402
from starflow.retention import prune_runs  # noqa: E402

NOW = datetime.now(UTC).replace(microsecond=0)
BASE = NOW - timedelta(days=400)
ACTIVE = 10_000
CHUNK = 20_000
EVENTS_PER_RUN = 8
WORKFLOWS = [f"wf-{i}" for i in range(20)]
PRUNE_RUNS = 5_000


def _ended(i: int) -> tuple[Any, ...]:
    status = "success" if i % 50 else ("error" if i % 100 else "cancelled")
    started = BASE + timedelta(seconds=i * 10)
    return (str(uuid.uuid4()), WORKFLOWS[i % 20], status, started, started + timedelta(seconds=2),
            "complete", None, None)


def _active(i: int) -> tuple[tuple[Any, ...], tuple[Any, ...] | None]:
    """An active run row and, for a paused one, its wait ``(node, event, deadline)``."""
    run_id = str(uuid.uuid4())
    started = NOW - timedelta(minutes=30) + timedelta(milliseconds=i)
    wf = WORKFLOWS[i % 20]
    if i < 4000:
        return (run_id, wf, "queued", started, None, "queued", None, None), None
    if i < 5000:
        return (run_id, wf, "running", started, None, "running", "alive",
                NOW + timedelta(hours=1)), None
    if i < 8000:
        due = i < 5100
        deadline = NOW - timedelta(seconds=5) if due else NOW + timedelta(hours=1 + i)
        return (run_id, wf, "paused", started, None, "running", None, None), \
            ("sleep:1", None, deadline)
    return (run_id, wf, "paused", started, None, "running", None, None), ("wait:1", "go", None)


RUN_COLS = ["id", "workspace_id", "env", "template_id", "status", "started_at", "completed_at",
            "claim_state", "leased_by", "lease_until", "start_mode"]


async def seed(url: str, ws: str, n: int) -> list[str]:
    """Seed ``n`` ended runs and the active ones; return some ended run ids."""
    sample: list[str] = []
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        conn.execute("PRAGMA synchronous = OFF")

        def ts(v: datetime | None) -> str | None:
            return format_ts(v) if v is not None else None

        def put(runs: list[tuple[Any, ...]], events: list[tuple[Any, ...]],
                waits: list[tuple[Any, ...]]) -> None:
            conn.execute("BEGIN")
            conn.executemany(
                f"INSERT INTO workflow_runs ({', '.join(RUN_COLS)}) VALUES "
                f"({', '.join('?' * len(RUN_COLS))})",
                [(r[0], ws, "prod", r[1], r[2], ts(r[3]), ts(r[4]), r[5], r[6], ts(r[7]),
                  "queued") for r in runs])
            conn.executemany("INSERT INTO workflow_run_events (run_id, event_type, node_id, "
                             "payload_json, created_at) VALUES (?, ?, ?, ?, ?)",
                             [(e[0], e[1], e[2], e[3], ts(e[4])) for e in events])
            conn.executemany("INSERT INTO workflow_waits (run_id, node_id, workspace_id, env, "
                             "event, deadline, created_at) VALUES (?, ?, ?, 'prod', ?, ?, ?)",
                             [(w[0], w[1], ws, w[2], ts(w[3]), ts(NOW)) for w in waits])
            conn.execute("COMMIT")

        await _fill(n, put, sample)
        conn.execute("ANALYZE")
        conn.close()
        return sample
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        async def put_pg(runs: list[tuple[Any, ...]], events: list[tuple[Any, ...]],
                         waits: list[tuple[Any, ...]]) -> None:
            async with conn.transaction():
                await conn.copy_records_to_table(
                    "workflow_runs", columns=RUN_COLS,
                    records=[(uuid.UUID(r[0]), ws, "prod", *r[1:], "queued") for r in runs])
                await conn.copy_records_to_table(
                    "workflow_run_events",
                    columns=["run_id", "event_type", "node_id", "payload_json", "created_at"],
                    records=[(uuid.UUID(e[0]), *e[1:]) for e in events])
                if waits:
                    await conn.copy_records_to_table(
                        "workflow_waits",
                        columns=["run_id", "node_id", "workspace_id", "env", "event",
                                 "deadline", "created_at"],
                        records=[(uuid.UUID(w[0]), w[1], ws, "prod", w[2], w[3], NOW)
                                 for w in waits])

        pending: list[Awaitable[None]] = []

        def put(runs: list[tuple[Any, ...]], events: list[tuple[Any, ...]],
                waits: list[tuple[Any, ...]]) -> None:
            pending.append(put_pg(runs, events, waits))

        await _fill(n, put, sample, flush=pending)
        await conn.execute("ANALYZE workflow_runs")
        await conn.execute("ANALYZE workflow_run_events")
        await conn.execute("ANALYZE workflow_waits")
    finally:
        await conn.close()
    return sample


async def _fill(n: int, put: Callable[..., None], sample: list[str],
                flush: list[Awaitable[None]] | None = None) -> None:
    payload = '{"ok": true}'
    for start in range(0, n, CHUNK):
        runs = [_ended(i) for i in range(start, min(n, start + CHUNK))]
        events = []
        for r in runs:
            for k in range(EVENTS_PER_RUN):
                events.append((r[0], "node_start" if k % 2 == 0 else "node_complete",
                               f"step:s#{k // 2}", payload, r[3]))
        if len(sample) < 1000:
            sample.extend(r[0] for r in runs[:: max(1, len(runs) // 50)])
        put(runs, events, [])
        if flush:
            await flush.pop()
    runs, waits = [], []
    for i in range(ACTIVE):
        row, wait = _active(i)
        runs.append(row)
        if wait is not None:
            waits.append((row[0], *wait))
    put(runs, [], waits)
    if flush:
        await flush.pop()


async def median(fn: Callable[[], Awaitable[Any]], times: int) -> float:
    out = []
    for _ in range(times):
        t0 = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


async def measure(url: str, n: int) -> dict[str, float]:
    ws = f"scale-{n}-{uuid.uuid4().hex[:6]}"
    adapter: WorkflowStateAdapter = adapter_from_url(url, workspace_id=ws)
    await adapter.open()  # migrates a fresh database first
    try:
        t0 = time.perf_counter()
        sample = await seed(url, ws, n)
        seeded = time.perf_counter() - t0
        print(f"  seeded {n:,} ended + {ACTIVE:,} active runs in {seeded:.1f} s",
              file=sys.stderr)
        rnd = random.Random(n)
        figures: dict[str, float] = {}

        async def claim() -> None:
            got = await adapter.claim_runs(f"bench-{uuid.uuid4().hex[:6]}", pool=None, now=NOW,
                                           lease_until=NOW + timedelta(minutes=1))
            assert len(got) == 1

        figures["claim of a queued run"] = await median(claim, 30)
        figures["sweep pass (nothing expired)"] = await median(
            lambda: adapter.expire_old_leases(NOW - timedelta(seconds=1)), 20)

        async def due() -> None:
            assert len(await adapter.due_waits(NOW, limit=100)) == 100

        figures["timers due (100)"] = await median(due, 20)
        figures["list_runs newest (50)"] = await median(lambda: adapter.list_runs(limit=50), 20)
        figures["list_runs status=error (50)"] = await median(
            lambda: adapter.list_runs(status="error", limit=50), 20)
        figures["list_runs by workflow (50)"] = await median(
            lambda: adapter.list_runs(template_id="wf-7", limit=50), 20)
        figures["get_run"] = await median(lambda: adapter.get_run(rnd.choice(sample)), 200)

        async def events() -> None:
            assert len(await adapter.list_events(rnd.choice(sample))) == EVENTS_PER_RUN

        figures["events of one run"] = await median(events, 200)
        t0 = time.perf_counter()
        report = await prune_runs(adapter, now=NOW, older_than=timedelta(days=1),
                                  batch_size=500, max_runs=min(PRUNE_RUNS, n // 2))
        elapsed = time.perf_counter() - t0
        assert report.runs == min(PRUNE_RUNS, n // 2), report.runs
        figures["prune throughput (runs/s)"] = report.runs / elapsed
        if not url.startswith("sqlite"):
            import asyncpg

            conn = await asyncpg.connect(url)
            try:
                t0 = time.perf_counter()
                await conn.execute("VACUUM workflow_runs, workflow_run_events")
                figures["VACUUM after the prune (s)"] = time.perf_counter() - t0
            finally:
                await conn.close()
        await _drop(url, ws)
        return figures
    finally:
        await adapter.close()


async def _drop(url: str, ws: str) -> None:
    """Remove the bench workspace's rows (plain deletes: not part of the figures)."""
    if url.startswith("sqlite"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        with conn:
            conn.execute("DELETE FROM workflow_run_events WHERE run_id IN "
                         "(SELECT id FROM workflow_runs WHERE workspace_id = ?)", (ws,))
            for t in ("workflow_waits", "workflow_runs", "workflow_definitions"):
                conn.execute(f"DELETE FROM {t} WHERE workspace_id = ?", (ws,))
        conn.close()
        return
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DELETE FROM workflow_run_events WHERE run_id IN "
                           "(SELECT id FROM workflow_runs WHERE workspace_id = $1)", ws)
        for t in ("workflow_waits", "workflow_runs", "workflow_definitions"):
            await conn.execute(f"DELETE FROM {t} WHERE workspace_id = $1", ws)
    finally:
        await conn.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", required=True, help="postgresql://… or sqlite:///path.db")
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--large", type=int, default=1_000_000)
    ns = parser.parse_args()
    results = {}
    for n in (ns.small, ns.large):
        print(f"N = {n:,} ended runs", file=sys.stderr)
        results[n] = await measure(ns.db, n)
    small, large = results[ns.small], results[ns.large]
    print(f"\n| figure | {ns.small:,} ended runs | {ns.large:,} ended runs | ratio |")
    print("|---|---:|---:|---:|")
    for name in small:
        unit = "" if "runs/s" in name or "(s)" in name else " ms"
        scale = 1 if unit == "" else 1e3
        a, b = small[name] * scale, large[name] * scale
        print(f"| {name} | {a:,.2f}{unit} | {b:,.2f}{unit} | {b / a:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
