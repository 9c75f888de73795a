"""``starflow copy SRC DST``: positional URLs, and the source's only tenant as the default scope."""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from starflow import Starflow
from starflow.cli.copy import source_tenants
from tests.conftest import POSTGRES_URL, require_postgres

from . import cli_app
from .support import Cli


def _make_runs(url: str, workspace: str, env: str, n: int) -> list[str]:
    async def make() -> list[str]:
        async with Starflow.open(url, workspace_id=workspace, env=env,
                                 maintenance=False) as sf:
            return [(await sf.run(cli_app.cli_quick, i)).run_id for i in range(n)]

    return anyio.run(make)


def _run_ids(url: str, workspace: str, env: str) -> set[str]:
    async def read() -> set[str]:
        async with Starflow.open(url, workspace_id=workspace, env=env,
                                 maintenance=False) as sf:
            return {r.id for r in await sf.list_runs(limit=1000)}

    return anyio.run(read)


class TestDefaultScope:
    """Without scope flags, copy takes the source's only (workspace, env) or lists them."""

    def test_one_tenant_copies_without_flags(self, cli: Cli, tmp_path: Path) -> None:
        """SRC DST alone copies the single tenant the source holds, and says which."""
        src, dst = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
        made = _make_runs(src, "acme", "staging", 3)
        result = cli("copy", src, dst)
        assert result.code == 0, result
        assert "workspace 'acme', env 'staging' (the only one in the source)" in result.err
        assert "verified: 3 run(s) identical" in result.out
        assert _run_ids(dst, "acme", "staging") == set(made)

    def test_several_tenants_is_an_error_listing_them(self, cli: Cli, tmp_path: Path) -> None:
        """Two tenants: exit 2 naming both and the flags; the target is not created."""
        src, target = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "b.db"
        _make_runs(src, "acme", "prod", 1)
        _make_runs(src, "zeta", "dev", 1)
        line = cli.fails("copy", src, f"sqlite:///{target}", code=2)
        assert "holds 2 workspace/env pairs" in line
        assert "--workspace acme --env prod" in line and "--workspace zeta --env dev" in line
        assert "--all-tenants" in line
        assert not target.exists()

    def test_flags_still_choose(self, cli: Cli, tmp_path: Path) -> None:
        """--from/--to and --workspace/--env work as before, next to the positional form."""
        src, dst = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
        _make_runs(src, "acme", "prod", 1)
        zeta = _make_runs(src, "zeta", "dev", 2)
        result = cli("copy", "--from", src, "--to", dst, "--workspace", "zeta", "--env", "dev")
        assert result.code == 0, result
        assert _run_ids(dst, "zeta", "dev") == set(zeta)
        assert _run_ids(dst, "acme", "prod") == set()

    def test_empty_source_and_conflicting_urls(self, cli: Cli, tmp_path: Path) -> None:
        """An empty source and a SRC that differs from --from are usage errors."""
        src, target = f"sqlite:///{tmp_path / 'a.db'}", tmp_path / "b.db"
        with closing(sqlite3.connect(tmp_path / "a.db")) as conn:  # a table, no rows
            conn.execute("CREATE TABLE workflow_runs (id TEXT, workspace_id TEXT, env TEXT)")
        assert "nothing to copy" in cli.fails("copy", src, f"sqlite:///{target}", code=2)
        line = cli.fails("copy", src, f"sqlite:///{target}", "--from",
                         f"sqlite:///{tmp_path / 'c.db'}", code=2)
        assert "differ" in line
        assert "starflow copy SRC DST" in cli.fails("copy", code=2)
        assert not target.exists()


@pytest.mark.postgres
def test_source_tenants_on_postgres() -> None:
    """The tenant listing reads PostgreSQL too (a UNION over the tenant tables)."""
    require_postgres()
    workspace = f"ws-{uuid.uuid4().hex[:8]}"
    _make_runs(POSTGRES_URL, workspace, "qa", 1)
    tenants = anyio.run(source_tenants, POSTGRES_URL)
    assert (workspace, "qa") in tenants and tenants == sorted(set(tenants))
