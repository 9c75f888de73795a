"""bench/flow_control.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import pytest

from tests.conftest import run_bench

#: Bench smoke test: the bench script runs for real.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runs_and_prints_both_legs(kind: str) -> None:
    proc = run_bench("flow_control.py", kind, "--schedules", "40", "--runs", "40", "--rounds", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith(kind) and "schedules=40" in line and "ticks/s" in line
               for line in lines), proc.stdout
    assert any(line.startswith(kind) and "claims (40 runs/pool, 2 rounds" in line
               for line in lines), proc.stdout
