"""bench/prune_batch.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: Bench smoke test: the bench script runs for real.
pytestmark = pytest.mark.slow


BENCH = Path(__file__).resolve().parent.parent / "bench" / "prune_batch.py"


@pytest.mark.parametrize("extra", [[], ["--no-checkpoint", "--run-ids", "ordered"]])
def test_times_each_statement_of_a_batch(tmp_path: Path, extra: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), str(tmp_path / "p.db"), "--runs", "2000", "--batches", "2",
         "--batch", "100", *extra], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for name in ("select", "delete workflow_run_events", "delete workflow_runs", "COMMIT"):
        assert any(line.startswith(name) and line.endswith("ms per batch") for line in lines)
    assert any(line.startswith("pages written to the WAL") for line in lines) == bool(extra)
