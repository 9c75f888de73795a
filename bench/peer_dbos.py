"""starflow next to DBOS Transact: the same three-step workflow, the same database, one run.

    pip install -e '.[bench]'            # DBOS Transact, for this script only
    python bench/peer_dbos.py            # SQLite and PostgreSQL (about 2 min)
    python bench/peer_dbos.py --db sqlite --n 200

Both libraries run the same workflow (three steps, each returning an int)
at their default durability; DBOS both through its async API (steps and
workflow ``async def``, as starflow's) and its synchronous one (run in a
pool of threads), and starflow is compared with the faster of the two. All
run in one process, in alternating rounds so that a drift of the machine's
fsync cost hits each alike; each figure is the median of the rounds:

- sequential: one run after the other, awaited;
- 50 in flight: 50 runs at once in one event loop.

SQLite: a fresh database file for each library (DBOS's default journal mode,
starflow's WAL; both ``synchronous=FULL``). PostgreSQL: DBOS's system
database is its own database (``--dbos-database``, created if missing);
starflow uses a fresh workspace in ``$STARFLOW_BENCH_POSTGRES_URL``
(default ``postgresql://postgres@127.0.0.1:5432/test``). Each database kind
runs in its own subprocess: DBOS is one instance per process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make `starflow` importable from the checkout
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # and bench.py

POSTGRES_URL = os.environ.get("STARFLOW_BENCH_POSTGRES_URL",
                              "postgresql://postgres@127.0.0.1:5432/test")
HERE = Path(__file__).resolve()
WIDTH = 50


def dbos_url(kind: str, tmp: str, database: str) -> str:
    if kind == "sqlite":
        return f"sqlite:///{os.path.join(tmp, 'dbos.sqlite')}"
    base = POSTGRES_URL.rsplit("/", 1)[0]
    return f"{base}/{database}"


async def measure(kind: str, n: int, rounds: int, database: str) -> dict[str, Any]:
    try:
        from dbos import DBOS, DBOSConfig
    except ImportError:
        sys.exit("DBOS Transact is not installed: pip install -e '.[bench]'")
    import starflow.logs

    # starflow's side is bench.py's own three-step workflow: one definition for both benches.
    from bench import three_steps as starflow_three  # type: ignore[import-not-found]
    from bench import timed_rate as rate
    from starflow import Starflow

    @DBOS.step()
    async def d1(x: int) -> int:
        return x + 1

    @DBOS.step()
    async def d2(x: int) -> int:
        return x * 2

    @DBOS.step()
    async def d3(x: int) -> int:
        return x - 3

    @DBOS.workflow()
    async def dbos_three(x: int) -> int:
        return await d3(await d2(await d1(x)))

    # DBOS's synchronous API (workflows in threads) is its faster path here: measured too.
    @DBOS.step()
    def t1(x: int) -> int:
        return x + 1

    @DBOS.step()
    def t2(x: int) -> int:
        return x * 2

    @DBOS.step()
    def t3(x: int) -> int:
        return x - 3

    @DBOS.workflow()
    def dbos_three_sync(x: int) -> int:
        return t3(t2(t1(x)))

    starflow.logs.set_level("error")
    tmp = tempfile.mkdtemp(prefix="starflow-peer-")
    config: DBOSConfig = {"name": "starflow-peer-bench",
                          "system_database_url": dbos_url(kind, tmp, database)}
    DBOS(config=config)
    DBOS.launch()
    sf_url = (f"sqlite:///{os.path.join(tmp, 'starflow.db')}" if kind == "sqlite"
              else POSTGRES_URL)
    workspace = f"bench-peer-{uuid.uuid4().hex[:10]}"
    names = ("dbos_async", "dbos_sync", "starflow")
    results: dict[str, list[float]] = {f"{name}_{fig}": [] for name in names
                                       for fig in ("seq", "conc")}
    threads = ThreadPoolExecutor(max_workers=WIDTH)
    try:
        async with Starflow.open(sf_url, workspace_id=workspace, maintenance=False) as sf:
            async def run_dbos_async(i: int) -> None:
                assert await dbos_three(i) == (i + 1) * 2 - 3

            async def run_dbos_sync(i: int) -> None:
                loop = asyncio.get_running_loop()
                assert await loop.run_in_executor(threads, dbos_three_sync, i) == (i + 1) * 2 - 3

            async def run_starflow(i: int) -> None:
                handle = await sf.run(starflow_three, i)
                assert handle.status == "success", handle

            runners = {"dbos_async": run_dbos_async, "dbos_sync": run_dbos_sync,
                       "starflow": run_starflow}
            # Warm-up: connections, caches, and a SQLite WAL past its first checkpoint.
            for fn in runners.values():
                await rate(60, fn, 1)
            per = max(1, n // rounds)
            for _ in range(rounds):
                for name, fn in runners.items():
                    results[f"{name}_seq"].append(await rate(per, fn, 1))
                for name, fn in runners.items():
                    results[f"{name}_conc"].append(await rate(per * 4, fn, WIDTH))
    finally:
        threads.shutdown()
        DBOS.destroy()
        if kind == "postgres":
            await _drop_workspace(workspace)
    from importlib.metadata import version

    return {"kind": kind, "dbos_version": version("dbos"),
            "rounds": results,
            "median": {k: statistics.median(v) for k, v in results.items()},
            # Against the faster of DBOS's two APIs, round by round.
            "ratios": {fig: statistics.median(
                           sf / max(a, b) for sf, a, b in zip(
                               results[f"starflow_{fig}"], results[f"dbos_async_{fig}"],
                               results[f"dbos_sync_{fig}"], strict=True))
                       for fig in ("seq", "conc")}}


async def _drop_workspace(workspace: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL)
    try:
        await conn.execute("DELETE FROM workflow_run_events WHERE run_id IN "
                           "(SELECT id FROM workflow_runs WHERE workspace_id = $1)", workspace)
        await conn.execute("DELETE FROM workflow_runs WHERE workspace_id = $1", workspace)
    finally:
        await conn.close()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--db", choices=["sqlite", "postgres", "all"], default="all")
    parser.add_argument("--n", type=int, default=300, help="sequential runs per library")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dbos-database", default="starflow_peer_dbos",
                        help="PostgreSQL database for DBOS's system tables")
    parser.add_argument("--json", default="", help="also write the figures here")
    parser.add_argument("--_kind", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args._kind:
        out = asyncio.run(measure(args._kind, args.n, args.rounds, args.dbos_database))
        print(json.dumps(out))
        return 0
    kinds = ["sqlite", "postgres"] if args.db == "all" else [args.db]
    reports = []
    for kind in kinds:
        proc = subprocess.run(
            [sys.executable, str(HERE), "--_kind", kind, "--n", str(args.n),
             "--rounds", str(args.rounds), "--dbos-database", args.dbos_database],
            capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stdout + proc.stderr)
            return proc.returncode
        reports.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.2f}; DBOS Transact {reports[0]['dbos_version']}")
    print(f"{'db':<9}{'figure':<16}{'DBOS async':>12}{'DBOS sync':>11}{'starflow':>10}"
          f"{'starflow / best DBOS':>22}   (workflows/s, medians of rounds)")
    for r in reports:
        m = r["median"]
        for fig, label in (("seq", "sequential"), ("conc", f"{WIDTH} in flight")):
            print(f"{r['kind']:<9}{label:<16}{m[f'dbos_async_{fig}']:>12.1f}"
                  f"{m[f'dbos_sync_{fig}']:>11.1f}{m[f'starflow_{fig}']:>10.1f}"
                  f"{r['ratios'][fig]:>22.2f}")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
