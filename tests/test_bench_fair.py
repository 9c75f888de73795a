"""bench/fair_pools.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import pytest

from tests.conftest import run_bench

#: Bench smoke test: the bench script runs for real.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runs_and_prints_both_key_counts(kind: str) -> None:
    proc = run_bench("fair_pools.py", kind, "--runs", "60", "--rounds", "2", "--keys", "3,50")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith(kind)]
    assert len(lines) == 2, proc.stdout
    assert "keys=3 " in lines[0] and "keys=50 " in lines[1]
    assert all("fair/plain" in line for line in lines), proc.stdout
