"""bench/: the suite runs end to end, and its bare-driver ceiling writes what starflow writes.

No figure is asserted: the benchmark tells how fast, the tests only that what it
measures is what it says it measures.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from starflow import Starflow, StarflowConfig
from tests.conftest import POSTGRES_URL, require_postgres

#: Bench smoke tests: the bench scripts run for real.
pytestmark = pytest.mark.slow


BENCH = Path(__file__).resolve().parent.parent / "bench" / "bench.py"


def _load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("starflow_bench", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


bench = _load_bench()


def _url(kind: str, tmp_path: Path) -> str:
    if kind == "postgres":
        require_postgres()
        return POSTGRES_URL
    return f"sqlite:///{tmp_path / 'bench.db'}"


async def _shape(sf: Starflow, run_id: str) -> tuple[Any, ...]:
    info = await sf.get_run(run_id)
    assert info is not None
    events = [(e.event_type, e.node_id) for e in await sf.events(run_id)]
    return info.status, info.claim_state, info.result_json, info.leased_by, events


class TestBareReplay:
    """The replay of a recorded run's statements through the bare driver."""

    @pytest.mark.parametrize("fused", [True, False], ids=["fused", "separate"])
    @pytest.mark.parametrize("kind", ["sqlite", "postgres"])
    async def test_replayed_runs_are_the_recorded_run(self, kind: str, tmp_path: Path,
                                                      workspace_id: str, fused: bool) -> None:
        """Every replayed run, one at a time or 50 at once, ends as the recorded one did
        (the run shape of today's default, and with one commit per boundary)."""
        url = _url(kind, tmp_path)
        config = StarflowConfig(fused_boundaries=fused)
        async with Starflow.open(url, workspace_id=workspace_id, maintenance=False,
                                 config=config) as sf:
            async def run(i: int) -> None:
                handle = await sf.run(bench.three_steps, i)
                assert handle.status == "success"

            # The definition row exists before the recorded run, as in the bench.
            first = (await sf.run(bench.three_steps, 1)).run_id
            replay = await bench.BareReplay(kind, url).record(sf, run)
            (recorded,) = [r.id for r in await sf.list_runs(limit=10) if r.id != first]
            await replay.open(3)
            try:
                assert await replay.sequential(4) > 0
                assert await replay.inflight(7) > 0
            finally:
                await replay.close()
            runs = await sf.list_runs(limit=100)
            want = await _shape(sf, recorded)
            assert want[0] == "success" and len(want[4]) == 6
            assert len(runs) == 2 + 4 + 7
            replayed = [r.id for r in runs if r.id not in (first, recorded)]
            for run_id in replayed:
                assert await _shape(sf, run_id) == want


class TestSuite:
    """`python bench/bench.py` on small sizes."""

    def test_instruction_count_workload_and_its_refusal_without_valgrind(
            self, tmp_path: Path) -> None:
        """`bench/instr_count.py`: the workload valgrind counts drives every run to
        success; without valgrind the script says so instead of printing a figure."""
        script = BENCH.parent / "instr_count.py"
        proc = subprocess.run(
            [sys.executable, str(script), "--child", f"sqlite:///{tmp_path / 'i.db'}", "5", "2"],
            capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        proc = subprocess.run(
            [sys.executable, str(script), "--urls", "null://"], capture_output=True, text=True,
            timeout=60, cwd=tmp_path, env={**os.environ, "PATH": str(tmp_path)})
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "valgrind is not installed" in proc.stdout

    def test_throughput_legs_print_and_write_their_figures(self, tmp_path: Path) -> None:
        """Sequential and in-flight figures, each with its bare-driver row, on both databases."""
        require_postgres()
        out = tmp_path / "figures.json"
        env = {**os.environ, "STARFLOW_BENCH_POSTGRES_URL": POSTGRES_URL}
        proc = subprocess.run(
            [sys.executable, str(BENCH), "--only", "sequential,inflight,cpu", "--n", "10",
             "--cpu-runs", "20", "--json", str(out)],
            capture_output=True, text=True, timeout=110, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        figures = json.loads(out.read_text())["figures"]
        for db in ("sqlite", "postgres"):
            mine = {f["figure"].strip(): f for f in figures if f["db"] == db}
            assert {"raw INSERT+COMMIT", "sequential 3-step workflows",
                    "the same statements, bare driver", "starflow vs its bare-driver replay",
                    "50 in flight, one process"} <= set(mine)
            rows = [f for f in figures if f["db"] == db and f["ratio"] is not None]
            assert rows and all(f["ratio"] > 0 and f["value"] > 0 for f in rows)
            assert sum(1 for f in figures if f["db"] == db
                       and f["figure"].strip() == "the same statements, bare driver") == 2
            # the shape before #22, measured in the same rounds
            assert sum(1 for f in figures if f["db"] == db and f["figure"].strip()
                       == "one commit per boundary (before #22)") == 2
        assert "starflow vs its bare-driver replay" in proc.stdout
        # Issue #22's four targets, each with its figure of this run.
        targets = proc.stdout.split("issue #22 targets (this run):")[1]
        for label in ("SQLite sequential / bare replay", "PostgreSQL sequential / bare replay",
                      "SQLite 50 in flight / bare ideal group commit",
                      "CPU per run, SQLite 50 in flight"):
            assert label in targets, targets
        cpu = [f for f in figures if f["figure"] == "CPU per run, 50 in flight"]
        assert {f["db"] for f in cpu} == {"sqlite", "postgres"}
        assert all(f["value"] > 0 and f["baseline"] > 0 for f in cpu)
