"""bench/ui_ops.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import pytest

from tests.conftest import run_bench

#: Bench smoke test: the bench script runs for real.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runs_and_prints_both_pages(kind: str) -> None:
    proc = run_bench("ui_ops.py", kind, "--runs", "300", "--schedules", "5", "--loads", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.startswith(kind) and "runs=300 schedules=5: GET /ops median" in line
               and "GET /runs median" in line for line in proc.stdout.splitlines()), proc.stdout
