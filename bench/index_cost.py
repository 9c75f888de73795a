"""What an index of ``workflow_runs`` costs per write (migration 035, issue #24).

    python bench/index_cost.py --db postgresql://postgres@127.0.0.1:5432/DB
    python bench/index_cost.py --db sqlite:////tmp/cost.db

On a private database (PostgreSQL: a scratch database on the server of
``--db``, dropped after; SQLite: ``PATH-cost.db``, deleted after), migrated
and seeded with ``--seeded`` ended runs (bench/scale.py's seeding), it
alternates rounds with the index and without it (``DROP INDEX`` / the
migration's ``CREATE INDEX``), and in each round measures:

* **statements**: run rows written as the runtime writes them, without the
  runtime: one ``INSERT`` and two status ``UPDATE``s per run (running, then
  success), 100 runs per transaction, no flush waited for (PostgreSQL
  ``synchronous_commit = off``, SQLite ``synchronous = OFF``), executed in the
  database's own process (a ``DO`` block on PostgreSQL, in-process on SQLite),
  so the figure is the writes and their index maintenance, not round trips or
  the disk's commit latency;
* **runs**: sequential three-step workflows through ``Starflow`` (durable,
  default settings): what a user sees.

Each figure is the median over the rounds; the cost is with minus without, per
run and as a share. ``--index`` names the index (default: 035's).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from scale import _with_database, seed_postgres, seed_sqlite

from starflow import Starflow, step, workflow
from starflow.adapters import adapter_from_url
from starflow.clock import format_ts

T0 = datetime.now(UTC).replace(microsecond=0)
WS = "cost"


@step
async def cost_step(n: int) -> int:
    return n + 1


@workflow(name="cost-flow")
async def cost_flow(n: int) -> int:
    for _ in range(3):
        n = await cost_step(n)
    return n


class Target:
    def __init__(self, base_url: str, index: str) -> None:
        self.base_url, self.index = base_url, index
        tag = uuid.uuid4().hex[:6]
        if base_url.startswith("sqlite"):
            path = Path(base_url.removeprefix("sqlite:///"))
            self.path: Path | None = path.with_name(f"{path.stem}-cost-{tag}.db")
            self.url, self.database = f"sqlite:///{self.path}", None
        else:
            self.path, self.database = None, f"starflow_cost_{tag}"
            self.url = _with_database(base_url, self.database)
        self.definition = ""

    async def setup(self, seeded: int) -> None:
        if self.database is not None:
            import asyncpg

            admin = await asyncpg.connect(self.base_url)
            await admin.execute(f'CREATE DATABASE "{self.database}"')
            await admin.close()
        adapter = adapter_from_url(self.url, workspace_id=WS)
        await adapter.open()
        await adapter.close()
        if self.path is not None:
            await asyncio.to_thread(seed_sqlite, str(self.path), WS, seeded)
        else:
            await seed_postgres(self.url, WS, seeded)
        self.definition = await self.sql_one(
            "SELECT sql FROM sqlite_master WHERE name = ?" if self.path else
            "SELECT indexdef FROM pg_indexes WHERE indexname = $1", self.index)
        assert self.definition, f"no index {self.index}"

    async def sql_one(self, sql: str, *args: Any) -> Any:
        if self.path is not None:
            import sqlite3

            conn = sqlite3.connect(self.path, isolation_level=None)
            try:
                row = conn.execute(sql, args).fetchone()
                return row[0] if row else None
            finally:
                conn.close()
        import asyncpg

        conn = await asyncpg.connect(self.url)
        try:
            return await conn.fetchval(sql, *args)
        finally:
            await conn.close()

    async def toggle(self, on: bool) -> None:
        create = self.definition.replace("IF NOT EXISTS ", "").replace(
            "CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ", 1)
        sql = create if on else f"DROP INDEX IF EXISTS {self.index}"
        await self.sql_one(sql)
        await self.sql_one("ANALYZE workflow_runs")

    async def statements(self, runs: int) -> float:
        """Seconds per run: INSERT + 2 UPDATEs, 100 runs per transaction, no flush."""
        ids = [str(uuid.uuid4()) for _ in range(runs)]
        if self.path is not None:
            import sqlite3

            def work() -> float:
                conn = sqlite3.connect(self.path, isolation_level=None)
                try:
                    conn.execute("PRAGMA synchronous = OFF")
                    ts = format_ts(T0)
                    t0 = time.perf_counter()
                    for i in range(0, runs, 100):
                        conn.execute("BEGIN")
                        for n, run_id in enumerate(ids[i:i + 100]):
                            conn.execute(
                                "INSERT INTO workflow_runs (id, workspace_id, env, template_id,"
                                " status, started_at, claim_state) VALUES "
                                "(?, ?, 'prod', ?, 'queued', ?, 'queued')",
                                (run_id, WS, f"wf-{n % 20}", ts))
                            conn.execute("UPDATE workflow_runs SET status = 'running', "
                                         "claim_state = 'running', lease_until = ? "
                                         "WHERE id = ?", (ts, run_id))
                            conn.execute("UPDATE workflow_runs SET status = 'success', "
                                         "claim_state = 'complete', completed_at = ?, "
                                         "lease_until = NULL WHERE id = ?", (ts, run_id))
                        conn.execute("COMMIT")
                    return (time.perf_counter() - t0) / runs
                finally:
                    conn.close()

            return await asyncio.to_thread(work)
        import asyncpg

        conn = await asyncpg.connect(self.url)
        try:
            await conn.execute("SET synchronous_commit = off")
            # In the server (one round trip per 100 runs): the statements' own cost.
            block = f"""
                DO $$ DECLARE rid uuid; BEGIN
                FOR n IN 1..100 LOOP
                    rid := gen_random_uuid();
                    INSERT INTO workflow_runs (id, workspace_id, env, template_id, status,
                                               started_at, claim_state)
                    VALUES (rid, '{WS}', 'prod', 'wf-' || (n % 20), 'queued', now(), 'queued');
                    UPDATE workflow_runs SET status = 'running', claim_state = 'running',
                           lease_until = now() WHERE id = rid;
                    UPDATE workflow_runs SET status = 'success', claim_state = 'complete',
                           completed_at = now(), lease_until = NULL WHERE id = rid;
                END LOOP; END $$"""
            t0 = time.perf_counter()
            for _ in range(0, runs, 100):
                await conn.execute(block)
            return (time.perf_counter() - t0) / runs
        finally:
            await conn.close()

    async def runs(self, sf: Starflow, count: int) -> float:
        """Seconds per sequential three-step run through the runtime."""
        t0 = time.perf_counter()
        for n in range(count):
            await sf.run(cost_flow, n)
        return (time.perf_counter() - t0) / count

    async def teardown(self) -> None:
        if self.path is not None:
            for suffix in ("", "-wal", "-shm"):
                await asyncio.to_thread(Path(str(self.path) + suffix).unlink, missing_ok=True)
            return
        import asyncpg

        admin = await asyncpg.connect(self.base_url)
        await admin.execute(f'DROP DATABASE IF EXISTS "{self.database}" WITH (FORCE)')
        await admin.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", required=True)
    parser.add_argument("--index", default="idx_workflow_runs_template_page")
    parser.add_argument("--seeded", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--statement-runs", type=int, default=2000)
    parser.add_argument("--workflow-runs", type=int, default=200)
    ns = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}", file=sys.stderr)
    target = Target(ns.db, ns.index)
    await target.setup(ns.seeded)
    got: dict[tuple[str, bool], list[float]] = {}
    try:
        async with Starflow.open(target.url, workspace_id=WS, maintenance=False) as sf:
            await target.runs(sf, 20)  # warm up: definitions, prepared statements
            for r in range(ns.rounds):
                for on in ((True, False) if r % 2 == 0 else (False, True)):
                    await target.toggle(on)
                    got.setdefault(("statements", on), []).append(
                        await target.statements(ns.statement_runs))
                    got.setdefault(("runs", on), []).append(
                        await target.runs(sf, ns.workflow_runs))
    finally:
        await target.teardown()
    print(f"\n{ns.index}, {ns.seeded:,} runs seeded, {ns.rounds} rounds (median):")
    print("| figure | without | with | cost per run | share |")
    print("|---|---:|---:|---:|---:|")
    for name, label in (("statements", "INSERT + 2 UPDATEs of a run row, no flush"),
                        ("runs", "sequential 3-step workflow, durable")):
        off = statistics.median(got[(name, False)]) * 1e6
        on = statistics.median(got[(name, True)]) * 1e6
        print(f"| {label} | {off:,.1f} µs | {on:,.1f} µs | {on - off:+,.1f} µs | "
              f"{(on - off) / off:+.1%} |")
    print(f"load average at the end: {os.getloadavg()}", file=sys.stderr)


if __name__ == "__main__":
    asyncio.run(main())
