"""bench/transactional_start.py runs end to end (small sizes); no figure is asserted."""

from __future__ import annotations

import pytest

from tests.conftest import require_pgbouncer, run_bench

#: Bench smoke test: the bench script runs for real.
pytestmark = pytest.mark.slow

MODES = ("plain", "in caller txn", "in txn, run_id", "row + start, one txn",
         "row, then start")


@pytest.mark.parametrize("kind", ["sqlite", "postgres", "pgbouncer"])
def test_prints_every_mode(kind: str) -> None:
    if kind == "pgbouncer":
        require_pgbouncer()
    proc = run_bench("transactional_start.py", kind, "--starts", "10", "--rounds", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    header, row = proc.stdout.splitlines()
    assert all(mode in header for mode in MODES)
    cells = row.split()
    assert cells[0] == kind and len(cells) == 1 + len(MODES)
    assert all(float(c) > 0 for c in cells[1:])
