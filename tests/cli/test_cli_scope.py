"""The CLI finds the database and scope as ``Starflow.open()`` does, and says where it looked."""

from __future__ import annotations

import uuid
from pathlib import Path

import anyio
import pytest

from starflow import Starflow
from tests.conftest import POSTGRES_URL, require_postgres

from . import cli_app
from .support import Cli


def _url(kind: str, tmp_path: Path) -> str:
    if kind == "postgres":
        require_postgres()
        return POSTGRES_URL
    return f"sqlite:///{tmp_path / 'scope.db'}"


def _make_run(url: str, workspace: str, env: str) -> str:
    async def make() -> str:
        async with Starflow.open(url, workspace_id=workspace, env=env,
                                 maintenance=False) as sf:
            return (await sf.run(cli_app.cli_quick, 1)).run_id

    return anyio.run(make)


class TestDatabaseVariables:
    """$STARFLOW_URL and $STARFLOW_DATABASE_URL name the database, for the CLI as for the API."""

    @pytest.mark.parametrize("variable", ["STARFLOW_URL", "STARFLOW_DATABASE_URL"])
    def test_either_variable_names_the_database(self, cli: Cli, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                variable: str) -> None:
        """`starflow runs show` reads the run from the database the variable names."""
        url = _url("sqlite", tmp_path)
        run_id = _make_run(url, "celestial", "prod")
        monkeypatch.setenv(variable, url)
        result = cli("runs", "show", run_id)
        assert result.code == 0, result
        assert run_id in result.out and "success" in result.out

    def test_starflow_url_wins_as_in_the_api(self, cli: Cli, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
        """With both set, the CLI and Starflow.open() read the same one: $STARFLOW_URL."""
        url = _url("sqlite", tmp_path)
        run_id = _make_run(url, "celestial", "prod")
        monkeypatch.setenv("STARFLOW_URL", url)
        monkeypatch.setenv("STARFLOW_DATABASE_URL", f"sqlite:///{tmp_path / 'other.db'}")
        assert cli("runs", "show", run_id).code == 0

        async def api() -> str:
            async with Starflow.open(maintenance=False) as sf:
                return (await sf.get_run(run_id)).status

        assert anyio.run(api) == "success"
        assert not (tmp_path / "other.db").exists()


@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
class TestRunInAnotherScope:
    """A run id looked up in the wrong workspace/env: the error names both scopes."""

    def test_show_names_the_scope_searched_and_the_one_holding_it(
            self, cli: Cli, tmp_path: Path, kind: str) -> None:
        """The line says where it searched and which --workspace/--env holds the run."""
        url = _url(kind, tmp_path)
        workspace = f"ws-{uuid.uuid4().hex[:8]}"
        run_id = _make_run(url, workspace, "staging")
        line = cli.fails("runs", "show", run_id, "--db", url)
        assert f"run {run_id} not found in workspace 'celestial', env 'prod'" in line
        assert f"pass --workspace {workspace} --env staging" in line
        assert cli("runs", "show", run_id, "--db", url, "--workspace", workspace,
                   "--env", "staging").code == 0

    def test_unknown_id_suggests_the_scope_flags(self, cli: Cli, tmp_path: Path,
                                                 kind: str) -> None:
        """An id no scope holds: the scope searched and how to search another."""
        url = _url(kind, tmp_path)
        _make_run(url, "celestial", "prod")
        missing = str(uuid.uuid4())
        line = cli.fails("runs", "show", missing, "--db", url, "--workspace", "acme")
        assert f"run {missing} not found in workspace 'acme', env 'prod'" in line
        assert "--workspace W --env E" in line
