"""A start in the caller's own transaction (#30): what ``connection=`` costs, per start.

    python bench/transactional_start.py                    # sqlite, postgres, pgbouncer
    python bench/transactional_start.py --db sqlite --starts 500 --rounds 5

Five ways to queue a run, each measured as microseconds per start, in
interleaved rounds (the median round is printed):

- ``plain``: ``await sf.start(wf, i)``, its own commit;
- ``in caller txn``: ``BEGIN``, ``sf.start(wf, i, connection=conn)``, ``COMMIT``
  on the caller's own connection (the same work as ``plain``, plus the caller's
  transaction);
- ``in txn, run_id``: the same with a fresh ``run_id=`` (an idempotent start:
  it reads for the run first, and on PostgreSQL writes under a savepoint, so
  that finding the id taken leaves the caller's transaction usable);
- ``row + start, one txn``: ``BEGIN``, ``INSERT`` a business row, the start
  with ``connection=``, ``COMMIT``: both or neither;
- ``row, then start``: ``BEGIN``, ``INSERT``, ``COMMIT``, then a plain
  ``sf.start``: two commits, and a crash between them leaves a row without
  its run.

Backends: SQLite (an aiosqlite connection to the app's file, ``synchronous``
FULL like the app), PostgreSQL (asyncpg, ``synchronous_commit`` on) and
PostgreSQL through PgBouncer in transaction mode (the app with
``?pooler=transaction``, the caller's asyncpg connection with
``statement_cache_size=0``). The PostgreSQL URLs come from
``$STARFLOW_TEST_POSTGRES_URL`` / ``$STARFLOW_TEST_PGBOUNCER_URL``; each run
uses a fresh workspace and a business table it drops at the end. Nothing here
is asserted in tests (tests/test_bench_transactional_start.py only runs it
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
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

if __package__ in (None, ""):  # run as a script: make `starflow` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import starflow
from starflow import Starflow

POSTGRES_URL = os.environ.get("STARFLOW_TEST_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
PGBOUNCER_URL = os.environ.get("STARFLOW_TEST_PGBOUNCER_URL",
                               "postgresql://postgres@127.0.0.1:6432/test")
MODES = ("plain", "in caller txn", "in txn, run_id", "row + start, one txn",
         "row, then start")


@starflow.workflow(name="bench-txn-fulfil")
async def fulfil(order_id: str) -> str:
    return order_id


class Caller:
    """The application's connection: its transactions and its business rows."""

    def __init__(self, conn: Any, sqlite: bool, table: str) -> None:
        self.conn, self.sqlite, self.table = conn, sqlite, table
        self._tx: Any = None
        self.insert_sql = (f"INSERT INTO {table} (id) VALUES ("
                           f"{'?' if sqlite else '$1'})")

    async def begin(self) -> None:
        if self.sqlite:
            await self.conn.execute("BEGIN")
        else:
            self._tx = self.conn.transaction()
            await self._tx.start()

    async def commit(self) -> None:
        if self.sqlite:
            await self.conn.commit()
        else:
            await self._tx.commit()

    async def insert(self, key: str) -> None:
        if self.sqlite:
            await self.conn.execute(self.insert_sql, (key,))
        else:
            await self.conn.execute(self.insert_sql, key)


async def connect(kind: str, path: str, table: str) -> Caller:
    if kind == "sqlite":
        import aiosqlite

        conn: Any = await aiosqlite.connect(path)
        await conn.execute("PRAGMA synchronous = FULL")
        await conn.execute(f"CREATE TABLE {table} (id TEXT PRIMARY KEY)")
        await conn.commit()
        return Caller(conn, True, table)
    import asyncpg

    if kind == "pgbouncer":
        conn = await asyncpg.connect(PGBOUNCER_URL, statement_cache_size=0)
    else:
        conn = await asyncpg.connect(POSTGRES_URL)
    await conn.execute(f"CREATE TABLE {table} (id text PRIMARY KEY)")
    return Caller(conn, False, table)


def app_url(kind: str, path: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{path}"
    if kind == "pgbouncer":
        sep = "&" if "?" in PGBOUNCER_URL else "?"
        return f"{PGBOUNCER_URL}{sep}pooler=transaction"
    return POSTGRES_URL


async def measure(kind: str, starts: int, rounds: int) -> dict[str, float]:
    """Median microseconds per start of each mode."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "bench.db")
        workspace = f"bench-txn-{uuid.uuid4().hex[:8]}"
        table = f"bench_orders_{workspace[-8:]}"
        async with Starflow.open(app_url(kind, path), workspace_id=workspace,
                                 maintenance=False) as sf:
            caller = await connect(kind, path, table)
            counter = iter(range(10**9))

            async def plain() -> None:
                await sf.start(fulfil, "x")

            async def in_txn() -> None:
                await caller.begin()
                await sf.start(fulfil, "x", connection=caller.conn)
                await caller.commit()

            async def in_txn_run_id() -> None:
                await caller.begin()
                await sf.start(fulfil, "x", connection=caller.conn, run_id=str(uuid.uuid4()))
                await caller.commit()

            async def row_and_start() -> None:
                await caller.begin()
                await caller.insert(f"o-{next(counter)}")
                await sf.start(fulfil, "x", connection=caller.conn)
                await caller.commit()

            async def row_then_start() -> None:
                await caller.begin()
                await caller.insert(f"o-{next(counter)}")
                await caller.commit()
                await sf.start(fulfil, "x")

            legs: dict[str, Callable[[], Awaitable[None]]] = dict(
                zip(MODES, (plain, in_txn, in_txn_run_id, row_and_start, row_then_start),
                    strict=True))
            try:
                for leg in legs.values():  # warm up: statement caches, the definition id
                    for _ in range(20):
                        await leg()
                per_round = max(1, starts // rounds)
                results: dict[str, list[float]] = {m: [] for m in MODES}
                for _ in range(rounds):
                    for mode, leg in legs.items():
                        t0 = time.perf_counter()
                        for _ in range(per_round):
                            await leg()
                        results[mode].append((time.perf_counter() - t0) / per_round * 1e6)
            finally:
                if not caller.sqlite:
                    await caller.conn.execute(f"DROP TABLE IF EXISTS {table}")
                await caller.conn.close()
        return {m: statistics.median(v) for m, v in results.items()}


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", default="sqlite,postgres,pgbouncer",
                        help="comma-separated: sqlite, postgres, pgbouncer")
    parser.add_argument("--starts", type=int, default=600, help="starts per mode")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.db.split(",") if k.strip()]
    bad = sorted(set(kinds) - {"sqlite", "postgres", "pgbouncer"})
    if bad:
        parser.error(f"unknown --db: {', '.join(bad)}")
    print(f"{'backend':<10} " + " ".join(f"{m:>21}" for m in MODES) + "   (µs per start)")
    for kind in kinds:
        result = await measure(kind, args.starts, args.rounds)
        print(f"{kind:<10} " + " ".join(f"{result[m]:>21.0f}" for m in MODES))
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main, sys.argv[1:]))
