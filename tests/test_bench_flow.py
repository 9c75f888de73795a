"""bench/flow_control.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL, require_postgres

BENCH = Path(__file__).resolve().parent.parent / "bench" / "flow_control.py"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runs_and_prints_both_legs(kind: str) -> None:
    if kind == "postgres":
        require_postgres()
    env = {**os.environ, "STARFLOW_TEST_POSTGRES_URL": POSTGRES_URL}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--db", kind, "--schedules", "40", "--runs", "40",
         "--rounds", "2"], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith(kind) and "schedules=40" in line and "ticks/s" in line
               for line in lines), proc.stdout
    assert any(line.startswith(kind) and "claims (40 runs/pool, 2 rounds" in line
               for line in lines), proc.stdout
