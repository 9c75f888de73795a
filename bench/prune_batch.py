"""Where a SQLite prune batch spends its time (issue #24): each statement timed.

    python bench/prune_batch.py /tmp/p.db --runs 1000000 --batches 8
    python bench/prune_batch.py /tmp/p.db --runs 1000000 --batches 8 --run-ids ordered
    python bench/prune_batch.py /tmp/p.db --runs 1000000 --batches 8 --no-checkpoint

Seeds ``PATH`` with ``bench/scale.py``'s seeding (``--runs`` ended runs of 8
events, the active ones; unless the file exists), then runs ``--batches``
prune batches of ``--batch`` runs on a copy of it, with the adapter's own
statements (``starflow.adapters.sql.pruning``) in one ``BEGIN IMMEDIATE`` each,
``foreign_keys = ON`` as the adapter opens it, and prints the milliseconds per
batch of each statement and of the ``COMMIT`` (which runs the WAL's automatic
checkpoint when the WAL passes 1,000 pages). ``--no-checkpoint`` turns that
checkpoint off and also prints the pages each batch wrote to the WAL.
docs/performance.md records a run. Nothing here is asserted in tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sqlite3
import statistics
import sys
import time
from datetime import timedelta
from pathlib import Path

import anyio

if __package__ in (None, ""):  # run as a script: make `starflow` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import scale  # bench/ is the script's directory

from starflow.adapters import adapter_from_url
from starflow.adapters.sql.dialect import SQLITE
from starflow.adapters.sql.pruning import ENDED_STATUSES, prune_delete_sql, prune_select_sql
from starflow.clock import format_ts

#: One WAL frame: a page and its 24-byte header (4,096-byte pages).
FRAME = 4096 + 24


async def seed(path: str, runs: int) -> None:
    adapter = adapter_from_url(f"sqlite:///{path}", workspace_id=f"scale-{runs}")
    await adapter.open()  # migrations
    await adapter.close()
    scale.seed_sqlite(path, f"scale-{runs}", runs)


def wal_size(path: str) -> int:
    wal = path + "-wal"
    return os.path.getsize(wal) if os.path.exists(wal) else 0


def batches(path: str, runs: int, count: int, size: int, checkpoint: bool
            ) -> tuple[dict[str, float], float | None]:
    """Milliseconds per batch of each statement, and WAL pages per batch."""
    ws = f"scale-{runs}"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")
    if not checkpoint:
        conn.execute("PRAGMA wal_autocheckpoint = 0")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    select = prune_select_sql(SQLITE, len(ENDED_STATUSES), False, None, False, False)
    cutoff = format_ts(scale.NOW - timedelta(days=1))
    # The cutoff twice: the batch's, then the continue_as_new chain walk's (#29).
    args = (ws, "prod", *ENDED_STATUSES, cutoff, cutoff, size)
    times: dict[str, list[float]] = {}
    pages: list[int] = []

    def timed(name: str, sql: str, values: tuple[object, ...] = ()) -> list[tuple[str]]:
        t0 = time.perf_counter()
        rows: list[tuple[str]] = conn.execute(sql, values).fetchall()
        times.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
        return rows

    try:
        for _ in range(count):
            before = wal_size(path)
            conn.execute("BEGIN IMMEDIATE")
            ids = [r[0] for r in timed("select", select, args)]
            for table, sql in prune_delete_sql(SQLITE, len(ids)):
                extra: tuple[object, ...] = ()
                if table == "workflow_session_vars":
                    extra = (format_ts(scale.NOW),)
                elif table == "workflow_runs":
                    extra = (ws, "prod")
                timed(f"delete {table}", sql, (*ids, *extra))
            timed("COMMIT", "COMMIT")
            pages.append((wal_size(path) - max(before, 32)) // FRAME)
    finally:
        conn.close()
    out = {name: statistics.mean(values) for name, values in times.items()}
    return out, None if checkpoint else statistics.mean(pages)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("path", help="the seeded SQLite file (created if missing)")
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--run-ids", choices=["random", "ordered"], default="random")
    parser.add_argument("--no-checkpoint", action="store_true")
    ns = parser.parse_args(argv)
    scale.RUN_IDS = ns.run_ids
    if not os.path.exists(ns.path):
        t0 = time.perf_counter()
        anyio.run(seed, ns.path, ns.runs)
        print(f"seeded {ns.runs:,} ended runs in {time.perf_counter() - t0:.1f} s",
              file=sys.stderr)
    work = ns.path + ".work"
    shutil.copyfile(ns.path, work)
    try:
        times, pages = batches(work, ns.runs, ns.batches, ns.batch, not ns.no_checkpoint)
    finally:
        for suffix in ("", "-wal", "-shm"):
            Path(work + suffix).unlink(missing_ok=True)
    for name, ms in times.items():
        print(f"{name:40} {ms:8.1f} ms per batch")
    if pages is not None:
        print(f"{'pages written to the WAL':40} {pages:8.0f} per batch")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
