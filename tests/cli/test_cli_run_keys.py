"""The CLI takes a run key wherever it takes a run id, and shows the key (#30)."""

from __future__ import annotations

import json
import sqlite3
import uuid
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from starflow import Starflow
from starflow.admin.copy import CopyOptions, copy_database
from starflow.errors import ConfigError

from . import cli_app
from .support import APP, Cli


def _start(url: str, key: str, workspace_id: str = "celestial") -> str:
    async def go() -> str:
        async with Starflow.open(url, workspace_id=workspace_id, maintenance=False) as sf:
            return (await sf.options(run_id=key).start(cli_app.cli_quick, 2)).run_id

    return anyio.run(go)


class TestRunKeysInTheCli:
    """runs show/list, cancel and the not-found hint, by key."""

    def test_show_list_and_cancel_by_key(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'keys.db'}"
        run_id = _start(url, "order-1")
        _start(url, str(uuid.uuid4()))  # a run without a key
        shown = cli("runs", "show", "order-1", "--db", url)
        assert shown.code == 0, shown.err
        lines = shown.out.splitlines()
        assert lines[0].split() == ["run", run_id]
        assert lines[1].split() == ["key", "order-1"]
        data = json.loads(cli("runs", "show", "order-1", "--db", url, "--json").out)
        assert (data["run"]["id"], data["run"]["run_key"]) == (run_id, "order-1")
        listed = cli("runs", "list", "--db", url).out.splitlines()
        assert listed[0].split()[:3] == ["ID", "KEY", "WORKFLOW"]
        assert any(row.split()[:2] == [run_id, "order-1"] for row in listed[1:])
        rows = json.loads(cli("runs", "list", "--db", url, "--json").out)
        assert sorted(str(r["run_key"]) for r in rows) == ["None", "order-1"]
        cancelled = cli("cancel", "order-1", "--db", url)
        assert cancelled.out == f"cancelled run {run_id}: now cancelled\n"

    def test_unknown_key_and_other_scope(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'keys.db'}"
        _start(url, "order-2", workspace_id="acme")
        line = cli.fails("runs", "show", "order-404", "--db", url)
        assert line.startswith("starflow: RunNotFound: run order-404 not found in workspace")
        assert "here a run key" in line
        line = cli.fails("signal", "order-2", "approval", "--db", url)
        assert "run order-2 not found" in line
        assert "it is in another scope: pass --workspace acme --env prod" in line

    def test_start_by_key_twice(self, cli: Cli, tmp_path: Path) -> None:
        """starflow start --run-id KEY: one run however often it is called."""
        url = f"sqlite:///{tmp_path / 'keys.db'}"
        _start(url, "order-0")  # creates the database
        runs = [json.loads(cli("start", "cli_quick", "--app", APP, "--db", url, "--args",
                               f"[{n}]", "--run-id", "order-5", "--json").out)["run_id"]
                for n in (1, 2)]
        assert runs[0] == runs[1]
        row = json.loads(cli("runs", "show", "order-5", "--db", url, "--json").out)["run"]
        assert (row["id"], row["run_key"], row["input"]["args"]) == (runs[0], "order-5", [1])
        line = cli.fails("start", "cli_quick", "--app", APP, "--db", url, "--run-id", " x")
        assert "not a UUID nor a valid run key" in line

    def test_pause_and_resume_by_key(self, cli: Cli, tmp_path: Path) -> None:
        """runs pause/resume KEY: a key is a run there, never a wake token."""
        url = f"sqlite:///{tmp_path / 'keys.db'}"
        run_id = _start(url, "order-4")
        assert cli("runs", "pause", "order-4", "--db", url).code == 0
        assert json.loads(cli("runs", "show", "order-4", "--db", url, "--json").out
                          )["run"]["claim_state"] == "held"
        assert cli("runs", "resume", "order-4", "--db", url).code == 0
        row = json.loads(cli("runs", "show", run_id, "--db", url, "--json").out)["run"]
        assert row["claim_state"] == "queued"
        line = cli.fails("runs", "resume", "order-404", "--db", url)
        assert "RunNotFound: run order-404 not found" in line

    def test_bad_key_is_one_line(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'keys.db'}"
        _start(url, "order-3")
        line = cli.fails("runs", "show", "sfw1.order", "--db", url)
        assert "not a UUID nor a valid run key" in line


class TestCopyByKey:
    """starflow copy --run KEY: the run with that key, looked up in every scope."""

    def test_copy_one_run_by_key(self, tmp_path: Path) -> None:
        src = f"sqlite:///{tmp_path / 'src.db'}"
        run_id = _start(src, "order-9", workspace_id="acme")
        _start(src, "order-8", workspace_id="acme")
        report = anyio.run(copy_database, CopyOptions(
            source=src, run_id="order-9", target=f"sqlite:///{tmp_path / 'one.db'}"))
        assert report.ok and report.runs == 1
        with closing(sqlite3.connect(tmp_path / "one.db")) as conn, conn:
            assert conn.execute("SELECT id, run_key FROM workflow_runs").fetchall() == [
                (run_id, "order-9")]

    def test_key_in_two_workspaces_needs_the_id(self, tmp_path: Path) -> None:
        src = f"sqlite:///{tmp_path / 'src.db'}"
        _start(src, "order-7", workspace_id="acme")
        _start(src, "order-7", workspace_id="zeta")
        target = f"sqlite:///{tmp_path / 'one.db'}"
        with pytest.raises(ConfigError, match="several workspaces have this key"):
            anyio.run(copy_database, CopyOptions(source=src, run_id="order-7", target=target))
        with pytest.raises(ConfigError, match="no such run"):
            anyio.run(copy_database, CopyOptions(source=src, run_id="order-6", target=target))
        with pytest.raises(ConfigError, match="not a UUID nor a valid run key"):
            anyio.run(copy_database, CopyOptions(source=src, run_id=" x", target=target))
