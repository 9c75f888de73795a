"""bench/children.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import pytest

from tests.conftest import run_bench

#: Bench smoke test: the bench script runs for real.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runs_and_prints_both_legs(kind: str) -> None:
    proc = run_bench("children.py", kind, "--n", "30", "--rounds", "1", timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for leg in ("independent", "fan-out"):
        assert any(line.startswith(kind) and leg in line and "write transactions/run" in line
                   for line in lines), proc.stdout
