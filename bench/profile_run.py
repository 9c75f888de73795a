"""Where a run's CPU goes: cProfile of the three throughput legs of bench.py.

    python bench/profile_run.py                     # every leg, profiled
    python bench/profile_run.py --legs null,sqlite-inflight --runs 3000
    python bench/profile_run.py --no-profile        # CPU and wall per run only
    python bench/profile_run.py --ab fused_boundaries --pairs 5   # A/B pairs of a switch
    python bench/profile_run.py --uvloop-ab sqlite-inflight,null 4 2000   # asyncio vs uvloop

Legs:

- ``null``: 50 three-step runs in flight over ``null://`` (the engine alone:
  the adapter accepts every unit and stores nothing);
- ``sqlite-seq``: one run at a time on a SQLite file (WAL, ``synchronous=FULL``);
- ``sqlite-inflight``: 50 in flight on a SQLite file;
- ``postgres-seq`` / ``postgres-inflight``: the same on PostgreSQL
  (``$STARFLOW_BENCH_POSTGRES_URL``).

Per leg it prints runs/s, CPU per run (``time.process_time``: this process's
user + system time, every thread), the adapter units executed per run, and,
profiled, the top functions by own time and by cumulative time. The raw
profile goes to ``--out``/<leg>.prof (``python -m pstats``, snakeviz or
flameprof read it) and collapsed stacks (caller;callee own-time pairs, for
flamegraph.pl) to <leg>.collapsed. The profiler itself roughly doubles the
CPU per run: read its shares, and take the unprofiled figures as the figures.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

if __package__ in (None, ""):  # run as a script: make `starflow` and bench importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench  # the same workflows as the bench
from starflow import Starflow, StarflowConfig

LEGS = ("null", "sqlite-seq", "sqlite-inflight", "postgres-seq", "postgres-inflight")


def _counting(sf: Starflow) -> dict[str, int]:
    """Count the units the innermost adapter executes (a wrapper on its ``execute``)."""
    adapter: Any = bench.inner(sf.adapter)
    counts = {"units": 0, "durable": 0}
    original = adapter.execute

    async def execute(unit: Any) -> bool:
        counts["units"] += 1
        counts["durable"] += bool(unit.durable)
        return bool(await original(unit))

    adapter.execute = execute
    return counts


async def one_leg(leg: str, runs: int, tmp: str, profile: bool, out: Path | None,
                  config: StarflowConfig | None) -> dict[str, Any]:
    db, _, shape = leg.partition("-")
    url = {"null": "null://", "sqlite": f"sqlite:///{os.path.join(tmp, leg + '.db')}",
           "postgres": bench.POSTGRES_URL}[db]
    concurrency = 1 if shape == "seq" else 50
    workspace = bench.new_workspace("profile")
    try:
        async with Starflow.open(url, workspace_id=workspace, maintenance=False,
                                 config=config) as sf:
            async def run(i: int) -> None:
                handle = await sf.run(bench.three_steps, i)
                assert handle.status == "success", handle

            await bench.timed_rate(bench.WARMUP_RUNS, run, 1)  # see bench.WARMUP_RUNS
            counts = _counting(sf)
            profiler = cProfile.Profile() if profile else None
            cpu0, wall0 = time.process_time(), time.perf_counter()
            if profiler is not None:
                profiler.enable()
            await bench.timed_rate(runs, run, concurrency)
            if profiler is not None:
                profiler.disable()
            cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    finally:
        await bench.drop_workspace("postgres" if db == "postgres" else db, workspace)
    result = {"leg": leg, "runs": runs, "wf_s": runs / wall, "cpu_ms_per_run": cpu / runs * 1e3,
              "units_per_run": counts["units"] / runs,
              "durable_units_per_run": counts["durable"] / runs}
    if profiler is not None:
        stats = pstats.Stats(profiler)
        for key in ("tottime", "cumulative"):
            buf = io.StringIO()
            pstats.Stats(profiler, stream=buf).sort_stats(key).print_stats(35)
            result[key] = buf.getvalue()
        if out is not None:
            await anyio.Path(out).mkdir(parents=True, exist_ok=True)
            stats.dump_stats(str(out / f"{leg}.prof"))
            _collapsed(stats, out / f"{leg}.collapsed")
    return result


async def ab_pairs(legs: list[str], runs: int, field: str, pairs: int) -> None:
    """Alternate each leg with ``field`` off (A) and on (B): ``pairs`` pairs, printed."""
    for leg in legs:
        n = runs if "seq" not in leg else max(1, runs // 4)
        got: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        for i in range(pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            for value in order:
                with tempfile.TemporaryDirectory() as tmp:
                    r = await one_leg(leg, n, tmp, False, None,
                                      StarflowConfig(**{field: value}))
                got[value].append(r)
                print(f"{leg:<18} {field}={value!s:<5} {r['wf_s']:>8.0f} wf/s  cpu "
                      f"{r['cpu_ms_per_run']:.3f} ms/run  units {r['units_per_run']:.2f} "
                      f"load {os.getloadavg()[0]:.2f}", flush=True)
        for value in (False, True):
            rates = sorted(r["wf_s"] for r in got[value])
            cpus = sorted(r["cpu_ms_per_run"] for r in got[value])
            print(f"{leg:<18} {field}={value!s:<5} wf/s {rates[0]:.0f}-{rates[-1]:.0f}  "
                  f"cpu {cpus[0]:.3f}-{cpus[-1]:.3f} ms/run", flush=True)
        wins = sum(b["wf_s"] > a["wf_s"] for a, b in zip(got[False], got[True], strict=True))
        print(f"{leg:<18} {field}=True faster in {wins} of {pairs} pairs", flush=True)


def _collapsed(stats: pstats.Stats, path: Path) -> None:
    """Two-frame collapsed stacks: ``caller;callee microseconds`` of the callee's own time,
    split over its callers in proportion to their calls (cProfile keeps no deeper stacks)."""
    def name(func: tuple[str, int, str]) -> str:
        return f"{Path(func[0]).name}:{func[2]}"

    lines = []
    for func, (_cc, _nc, tt, _ct, callers) in stats.stats.items():  # type: ignore[attr-defined]
        if not callers:
            lines.append(f"{name(func)} {int(tt * 1e6)}")
            continue
        total = sum(c[1] for c in callers.values()) or 1
        for caller, c in callers.items():
            lines.append(f"{name(caller)};{name(func)} {int(tt * 1e6 * c[1] / total)}")
    path.write_text("\n".join(sorted(lines)) + "\n")


async def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--legs", default="null,sqlite-seq,sqlite-inflight")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--out", default="profile-out", help="where .prof files go ('' none)")
    parser.add_argument("--quiet", action="store_true", help="figures only, no tables")
    parser.add_argument("--ab", default="", metavar="FIELD",
                        help="A/B pairs, unprofiled: each leg alternately with the "
                        "StarflowConfig bool FIELD off and on (e.g. fused_boundaries)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs per leg with --ab")
    args = parser.parse_args(argv)
    legs = [leg.strip() for leg in args.legs.split(",") if leg.strip()]
    unknown = set(legs) - set(LEGS)
    if unknown:
        parser.error(f"unknown legs: {sorted(unknown)}")
    out = Path(args.out) if args.out else None
    print(f"load {os.getloadavg()[0]:.2f}")
    if args.ab:
        await ab_pairs(legs, args.runs, args.ab, args.pairs)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        for leg in legs:
            runs = args.runs if "seq" not in leg else max(1, args.runs // 4)
            r = await one_leg(leg, runs, tmp, not args.no_profile, out, None)
            print(f"{leg:<18} {r['wf_s']:>8.0f} wf/s  cpu {r['cpu_ms_per_run']:.3f} ms/run  "
                  f"units {r['units_per_run']:.2f}/run ({r['durable_units_per_run']:.2f} "
                  "durable)", flush=True)
            if not args.quiet and "tottime" in r:
                print(r["tottime"])
                print(r["cumulative"])
    return 0


def uvloop_pairs(argv: list[str]) -> int:
    """``--uvloop-ab LEGS PAIRS RUNS``: each leg on asyncio's loop (A) and uvloop (B),
    alternating, each run in its own event loop (``pip install uvloop``)."""
    legs, pairs, runs = argv[0].split(","), int(argv[1]), int(argv[2])
    print(f"load {os.getloadavg()[0]:.2f}")
    for leg in legs:
        n = runs if "seq" not in leg else max(1, runs // 4)
        got: dict[bool, list[float]] = {False: [], True: []}
        for i in range(pairs):
            for use in ((False, True) if i % 2 == 0 else (True, False)):
                async def once(use: bool = use, leg: str = leg, n: int = n) -> dict[str, Any]:
                    with tempfile.TemporaryDirectory() as tmp:
                        return await one_leg(leg, n, tmp, False, None, None)

                r = anyio.run(once, backend_options={"use_uvloop": use})
                got[use].append(r["wf_s"])
                print(f"{leg:<18} uvloop={use!s:<5} {r['wf_s']:>8.0f} wf/s  cpu "
                      f"{r['cpu_ms_per_run']:.3f} ms/run  load {os.getloadavg()[0]:.2f}",
                      flush=True)
        wins = sum(b > a for a, b in zip(got[False], got[True], strict=True))
        print(f"{leg:<18} uvloop faster in {wins} of {pairs} pairs", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--uvloop-ab"]:
        sys.exit(uvloop_pairs(sys.argv[2:]))
    sys.exit(anyio.run(main, sys.argv[1:]))
