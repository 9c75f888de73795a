"""A database that cannot be opened ends the process with one line, never a hang.

Each case runs in a subprocess with a deadline: before, the SQLite connection's
thread was left running when the open failed after connecting (a file that is
not a database, a failing migration), so ``migrate``, ``runs list``, ``worker``
and a plain script printed the error and then never exited.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from .support import Cli, Seeded

#: Each case runs the CLI in a subprocess with a deadline.
pytestmark = pytest.mark.slow


HERE = Path(__file__).parent
DEADLINE_S = 30


def _not_a_database(tmp_path: Path) -> Path:
    path = tmp_path / "text.db"
    path.write_text("this is a text file, not a SQLite database\n" * 40)
    return path


def _failing_migration(tmp_path: Path) -> Path:
    # A view where the first migration creates a table: CREATE TABLE fails.
    path = tmp_path / "view.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIEW workflow_runs AS SELECT 1 AS id")
    conn.commit()
    conn.close()
    return path


def _read_only(tmp_path: Path) -> Path:
    if os.geteuid() == 0:
        pytest.skip("root writes to read-only files: the read-only case needs another user")
    path = tmp_path / "ro.db"
    sqlite3.connect(path).close()  # an empty database: migrations must write to it
    path.chmod(0o444)
    return path


def _directory(tmp_path: Path) -> Path:
    # sqlite3 cannot open a directory: the connect itself fails (aiosqlite's thread
    # then reported to the closed event loop with a traceback after the error line).
    path = tmp_path / "dir.db"
    path.mkdir()
    return path


CASES = {"not-a-database": _not_a_database, "failing-migration": _failing_migration,
         "read-only": _read_only, "directory": _directory}

SCRIPT = textwrap.dedent("""
    import anyio, sys
    from starflow import Starflow, StorageError

    async def main() -> None:
        async with Starflow.open(sys.argv[1]):
            pass

    try:
        anyio.run(main)
    except StorageError as exc:
        print("StorageError:", exc, file=sys.stderr)
        sys.exit(1)
""")


def _run(args: list[str], url: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STARFLOW_DATABASE_URL": url}
    env.pop("STARFLOW_TRACEBACK", None)
    try:
        return subprocess.run(args, capture_output=True, text=True, env=env, cwd=HERE,
                              timeout=DEADLINE_S, check=False)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args[1:])} did not exit within {DEADLINE_S} s")


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", [
    ["migrate"], ["runs", "list"], ["worker", "--app", "cli_app"], ["script"]])
def test_open_failure_exits(tmp_path: Path, case: str, command: list[str]) -> None:
    """The process prints one line naming the database error and exits 1."""
    url = f"sqlite:///{CASES[case](tmp_path)}"
    if command == ["script"]:
        done = _run([sys.executable, "-c", SCRIPT, url], url)
    else:
        done = _run([sys.executable, "-m", "starflow", *command], url)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    if command == ["migrate"]:  # its progress line comes first
        assert lines[:1] == [f"starflow: migrating {url} database …"], done.stderr
        lines = lines[1:]
    assert len(lines) == 1 and "StorageError" in lines[0], done.stderr


def test_postgres_detail_stays_on_one_line(seeded: Seeded, cli: Cli,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A driver message with PostgreSQL's DETAIL:/HINT: lines is printed as one line."""
    from starflow import Starflow, StorageError

    async def refuse(self: Starflow, *args: object, **kwargs: object) -> None:
        raise StorageError("PostgreSQL error during list_runs (UntranslatableCharacterError): "
                           "unsupported Unicode escape sequence\nDETAIL:  \\u0000 cannot be "
                           "converted to text.\nHINT:  fix it")

    monkeypatch.setattr(Starflow, "list_runs", refuse)
    monkeypatch.setenv("STARFLOW_DATABASE_URL", seeded.url)
    line = cli.fails("runs", "list")
    assert line.startswith("starflow: StorageError: PostgreSQL error")
    assert "; DETAIL:  \\u0000 cannot be converted to text.; HINT:  fix it" in line
