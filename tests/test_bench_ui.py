"""bench/ui_ops.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL, require_postgres

BENCH = Path(__file__).resolve().parent.parent / "bench" / "ui_ops.py"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runs_and_prints_both_pages(kind: str) -> None:
    if kind == "postgres":
        require_postgres()
    env = {**os.environ, "STARFLOW_TEST_POSTGRES_URL": POSTGRES_URL}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--db", kind, "--runs", "300", "--schedules", "5",
         "--loads", "2"], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.startswith(kind) and "runs=300 schedules=5: GET /ops median" in line
               and "GET /runs median" in line for line in proc.stdout.splitlines()), proc.stdout
