"""Instructions per run, repeatable whatever the machine's load (issue #22's A/B tool).

    python bench/instr_count.py                       # null:// and SQLite, 50 in flight
    python bench/instr_count.py --urls sqlite --runs 100,300 --concurrency 1

Wall-clock and CPU time on a shared machine drift several-fold; the number of
instructions a fixed workload executes does not. This script runs the bench's
three-step workflow ``--runs`` times (two counts, say 100 and 300) under
``valgrind --tool=callgrind`` (every thread, the SQLite writer's included;
the kernel's time, fsync included, is not counted) and prints the difference
divided by the difference in runs: the instructions of one run, with the
interpreter's start-up, the imports and the warm-up cancelled out. Without
valgrind on the machine it says so and stops.

``--child URL N C`` is the workload itself (what valgrind runs).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `starflow` and bench importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    sys.path.insert(0, str(Path(__file__).resolve().parent))

HERE = Path(__file__).resolve()


def child(url: str, runs: int, concurrency: int) -> None:
    import anyio

    import bench
    from starflow import Starflow

    async def main() -> None:
        async with Starflow.open(url, workspace_id="instr", maintenance=False) as sf:
            async def run(i: int) -> None:
                handle = await sf.run(bench.three_steps, i)
                assert handle.status == "success", handle

            await bench.timed_rate(bench.WARMUP_RUNS, run, 1)
            await bench.timed_rate(runs, run, concurrency)

    anyio.run(main)


def count(url: str, runs: int, concurrency: int, keep: str = "") -> int:
    with tempfile.TemporaryDirectory() as tmp:
        target = url if url != "sqlite" else f"sqlite:///{os.path.join(tmp, 'instr.db')}"
        name = f"callgrind.{url.strip(':/')}.{runs}.out"
        out = os.path.join(keep or tmp, name)
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, str(HERE), "--child", target, str(runs), str(concurrency)],
            capture_output=True, text=True, check=False)
        match = re.search(r"Collected : (\d+)", proc.stderr)
        if proc.returncode != 0 or match is None:
            raise SystemExit(f"valgrind failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
        return int(match.group(1))


def main(argv: list[str]) -> int:
    if argv[:1] == ["--child"]:
        child(argv[1], int(argv[2]), int(argv[3]))
        return 0
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--urls", default="null://,sqlite",
                        help="comma separated; 'sqlite' is a fresh file in a temp dir")
    parser.add_argument("--runs", default="100,300", help="the two run counts")
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--keep", default="", help="a directory to keep the callgrind files "
                        "in (callgrind_annotate reads them)")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        print("valgrind is not installed: no instruction counts on this machine")
        return 1
    low, high = (int(x) for x in args.runs.split(","))
    for url in args.urls.split(","):
        a = count(url, low, args.concurrency, args.keep)
        b = count(url, high, args.concurrency, args.keep)
        print(f"{url:<10} c={args.concurrency:<3} {(b - a) / (high - low):>12,.0f} "
              f"instructions/run  ({low}: {a:,}  {high}: {b:,})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
