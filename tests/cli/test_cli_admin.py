"""migrate, outbox status, scoping, bad databases and apps, the installed entry point,
and a PostgreSQL leg of ``runs list``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from starflow import Starflow

from . import cli_app
from .support import APP, HERE, Cli, Seeded


class TestMigrate:
    """migrate lists what it applied, then has nothing to do."""

    def test_applies_then_nothing(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'm.db'}"
        first = cli("migrate", "--db", url)
        assert first.code == 0, first.err
        lines = first.out.splitlines()
        assert lines[0] == "applied 001 initial"
        assert "applied 020 starflow_runtime" in lines
        assert lines[-1].endswith("migration(s) applied; schema up to date")
        assert f"migrating {url} database" in first.err
        second = cli("migrate", "--db", url)
        assert second.out == "schema up to date (nothing to apply)\n"


class TestOutboxStatus:
    """Reads the outbox table: no warm tier needs to be configured."""

    def test_pending_rows(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'o.db'}"

        async def mirrored_run() -> None:
            # A mirror with no drainer in this process: its outbox rows stay pending.
            async with Starflow.open(url, warm="memory://", maintenance=False) as sf:
                await sf.run(cli_app.cli_quick, 2)

        anyio.run(mirrored_run)
        data = json.loads(cli("outbox", "status", "--db", url, "--json").out)
        assert data["pending"] > 0
        assert set(data) == {"pending", "oldest_age_seconds", "level", "buckets", "warm"}
        assert data["level"] in ("ok", "warn", "page") and data["warm"] is None
        assert sum(data["buckets"].values()) == data["pending"]
        table = cli("outbox", "status", "--db", url)
        assert table.code == 0
        assert table.out.startswith(f"outbox: {data['pending']} pending, oldest ")
        assert table.out.splitlines()[1].split() == ["AGE", "ROWS"]

    def test_empty(self, cli: Cli, seeded: Seeded) -> None:
        data = json.loads(cli("outbox", "status", "--db", seeded.url, "--json").out)
        assert data["pending"] == 0 and data["level"] == "ok"


class TestScope:
    """--workspace/--env choose the tenant; $STARFLOW_DATABASE_URL the database."""

    def test_workspace_and_env(self, cli: Cli, seeded: Seeded,
                               monkeypatch: pytest.MonkeyPatch) -> None:
        async def other() -> str:
            async with Starflow.open(seeded.url, workspace_id="acme", env="staging",
                                     maintenance=False) as sf:
                return (await sf.run(cli_app.cli_quick, 1)).run_id

        run_id = anyio.run(other)
        monkeypatch.setenv("STARFLOW_DATABASE_URL", seeded.url)
        default = json.loads(cli("runs", "list", "--json").out)
        assert run_id not in {r["id"] for r in default} and len(default) == 4
        scoped = json.loads(cli("runs", "list", "--json", "--workspace", "acme",
                                "--env", "staging").out)
        assert [r["id"] for r in scoped] == [run_id]
        assert "RunNotFound" in cli.fails("runs", "show", run_id)


class TestBadInput:
    """One line naming the problem and the fix; exit 1, or 2 for usage."""

    def test_unreachable_postgres(self, cli: Cli) -> None:
        line = cli.fails("runs", "list", "--db", "postgresql://u:secret@127.0.0.1:1/x")
        assert "cannot reach PostgreSQL" in line and "secret" not in line

    def test_missing_sqlite_file(self, cli: Cli, tmp_path: Path) -> None:
        path = tmp_path / "typo.db"
        line = cli.fails("runs", "list", "--db", f"sqlite:///{path}")
        assert f"no SQLite database at {path}" in line and "starflow migrate" in line
        assert not path.exists()

    def test_no_database(self, cli: Cli) -> None:
        assert "pass --db URL or set STARFLOW_URL" in cli.fails("runs", "list",
                                                                         code=2)

    @pytest.mark.parametrize(("app", "needle"), [
        ("no_such_module", "no module named 'no_such_module'"),
        (f"{APP}:missing", "has no attribute 'missing'"),
        (f"{APP}::x", "MODULE:ATTR"),
    ])
    def test_bad_app(self, cli: Cli, seeded: Seeded, app: str, needle: str) -> None:
        assert needle in cli.fails("runs", "list", "--db", seeded.url, "--app", app, code=2)

    @pytest.mark.parametrize(("args", "needle"), [
        (["runs", "list", "--since", "yesterday"], "not an ISO date/time or an age"),
        (["runs", "list", "--status", "done"], "invalid choice: 'done'"),
        (["runs", "list", "--limit", "0"], "must be >= 1"),
        (["runs", "show"], "required: RUN_ID"),
        (["runs"], "required"),
        (["outbox"], "required"),
        (["signal", "r"], "required: EVENT"),
    ])
    def test_usage(self, cli: Cli, seeded: Seeded, args: list[str], needle: str) -> None:
        assert needle in cli.fails(*args, code=2)

    def test_traceback_on_request(self, cli: Cli, seeded: Seeded,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
        from starflow.errors import RunNotFound

        monkeypatch.setenv("STARFLOW_TRACEBACK", "1")
        with pytest.raises(RunNotFound):
            cli("runs", "show", "nope", "--db", seeded.url)


def test_help_lists_every_subcommand(cli: Cli) -> None:
    with pytest.raises(SystemExit):
        cli("--help")
    out = cli.capsys.readouterr().out
    for name in ("worker", "server", "migrate", "sweep", "runs", "signal", "resume", "cancel",
                 "outbox", "replay"):
        assert name in out
    with pytest.raises(SystemExit):
        cli("runs", "--help")
    out = cli.capsys.readouterr().out
    for name in ("list", "show", "events", "export"):
        assert name in out


@pytest.mark.slow  # runs the installed script
def test_installed_entry_point(seeded: Seeded, tmp_path: Path) -> None:
    """The `starflow` script of [project.scripts], as a user runs it."""
    script = Path(sys.executable).parent / "starflow"
    if not script.exists():
        pytest.skip(f"no installed starflow script beside {sys.executable}")
    env = {**os.environ, "STARFLOW_DATABASE_URL": seeded.url}
    env.pop("STARFLOW_TRACEBACK", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(script), *args], capture_output=True, text=True, env=env,
                              cwd=HERE, timeout=60, check=False)

    listed = run("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert len(json.loads(listed.stdout)) == 4
    target = tmp_path / "all.json"
    assert run("runs", "export", "--all", "-o", str(target)).returncode == 0
    replay = run("replay", str(target), "--app", "cli_app")  # cwd is tests/cli
    assert replay.returncode == 0, replay.stderr
    bad = run("signal", seeded.paused[0], "approval", "--payload", "{")
    assert bad.returncode == 2
    assert len(bad.stderr.splitlines()) == 1 and "Traceback" not in bad.stderr


@pytest.mark.postgres
def test_runs_list_on_postgres(cli: Cli) -> None:
    """The same listing against PostgreSQL, in a workspace of its own."""
    from conftest import POSTGRES_URL, require_postgres  # the suite's root conftest

    require_postgres()
    workspace = f"cli-{uuid.uuid4().hex[:12]}"

    async def seed() -> list[str]:
        async with Starflow.open(POSTGRES_URL, workspace_id=workspace,
                                 maintenance=False) as sf:
            quick = (await sf.run(cli_app.cli_quick, 3)).run_id
            paused = (await sf.run(cli_app.cli_order, "pg")).run_id
            return [quick, paused]

    quick, paused = anyio.run(seed)
    base = ["runs", "list", "--db", POSTGRES_URL, "--workspace", workspace]
    runs = json.loads(cli(*base, "--json").out)
    assert {r["id"] for r in runs} == {quick, paused}
    assert [r["id"] for r in json.loads(cli(*base, "--json", "--status", "paused").out)] == [
        paused]
    assert [r["id"] for r in json.loads(cli(*base, "--json", "--template", "cli_quick",
                                            "--since", "1h").out)] == [quick]
    table = cli(*base)
    assert table.code == 0 and paused in table.out and "cli_order v1" in table.out


def test_closed_stdout_is_not_an_error(tmp_path: Path) -> None:
    """`starflow … | head` closing the pipe early ends quietly with exit 0."""
    script = ("import sys, starflow.cli as c\n"
              "def boom(ns): raise BrokenPipeError(32, 'Broken pipe')\n"
              "c.anyio.run = lambda handler, ns: boom(ns)\n"
              "sys.exit(c.main(['sweep', '--db', sys.argv[1]]))\n")
    proc = subprocess.run([sys.executable, "-c", script, f"sqlite:///{tmp_path / 'x.db'}"],
                          capture_output=True, text=True, check=False, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
