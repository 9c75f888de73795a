"""``starflow migrate --dry-run`` on SQLite: the plan, and nothing written."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from starflow.migrations import load_migrations

#: Runs `starflow migrate` in a subprocess four times.
pytestmark = pytest.mark.slow


ROOT = Path(__file__).resolve().parents[2]


def migrate(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "starflow", "migrate", "--db",
                           f"sqlite:///{db}", *args], capture_output=True, text=True,
                          cwd=str(ROOT), timeout=60, check=False)


def test_dry_run_then_migrate(tmp_path: Path) -> None:
    db = tmp_path / "sf.db"
    db.touch()  # an empty file: what `sqlite3 sf.db` leaves
    dry = migrate(db, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    versions = load_migrations("sqlite")
    assert dry.stdout.splitlines() == [
        *(f"would apply {m.version:03d} {m.name}" for m in versions),
        f"{len(versions)} migration(s) to apply"]
    assert db.stat().st_size == 0  # nothing written
    assert migrate(db).returncode == 0
    again = migrate(db, "--dry-run")
    assert again.stdout == "schema up to date (nothing to do)\n"
