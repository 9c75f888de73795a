"""bench/children.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import POSTGRES_URL, require_postgres

BENCH = Path(__file__).resolve().parent.parent / "bench" / "children.py"


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_runs_and_prints_both_legs(kind: str) -> None:
    if kind == "postgres":
        require_postgres()
    env = {**os.environ, "STARFLOW_TEST_POSTGRES_URL": POSTGRES_URL}
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--db", kind, "--n", "30", "--rounds", "1"],
        capture_output=True, text=True, timeout=180, env=env, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for leg in ("independent", "fan-out"):
        assert any(line.startswith(kind) and leg in line and "write transactions/run" in line
                   for line in lines), proc.stdout
