"""``starflow runs cancel|retry|fork`` with filters: every matching run (#30)."""

from __future__ import annotations

import io
import json

import anyio
import pytest

from starflow import Starflow

from . import cli_app
from .support import APP, Cli, Seeded


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def statuses(url: str) -> dict[str, str]:
    async def read() -> dict[str, str]:
        async with Starflow.open(url, maintenance=False) as sf:
            return {r.id: r.status for r in await sf.list_runs(limit=100)}
    return anyio.run(read)


class TestBulkCancel:
    """Count with --dry-run, confirm, act; exit codes say what happened."""

    def test_dry_run_counts_and_writes_nothing(self, cli: Cli, seeded: Seeded) -> None:
        before = statuses(seeded.url)
        result = cli("runs", "cancel", "--db", seeded.url, "--workflow", "cli_order",
                     "--dry-run")
        assert result.code == 0, result.err
        assert result.out.startswith("3 runs match") and "nothing was written" in result.out
        result = cli("runs", "cancel", "--db", seeded.url, "--since", "1d", "--dry-run",
                     "--json")
        assert json.loads(result.out)["matched"] == 3
        assert statuses(seeded.url) == before

    def test_cancel_with_yes(self, cli: Cli, seeded: Seeded) -> None:
        result = cli("runs", "cancel", "--db", seeded.url, "--app", APP, "--workflow",
                     "cli_order", "--yes", "--json")
        assert result.code == 0, result.err
        out = json.loads(result.out)
        assert (out["matched"], out["acted"], out["skipped_count"]) == (3, 3, 0)
        now = statuses(seeded.url)
        assert {now[r] for r in seeded.paused} == {"cancelled"}
        assert now[seeded.done] == "success"

    def test_empty_filter_and_both_forms_are_usage_errors(self, cli: Cli,
                                                          seeded: Seeded) -> None:
        before = statuses(seeded.url)
        line = cli.fails("runs", "cancel", "--db", seeded.url, "--yes", code=2)
        assert "no criterion" in line and "--all" in line
        line = cli.fails("runs", "cancel", seeded.paused[0], "--db", seeded.url,
                         "--status", "paused", code=2)
        assert "not both" in line
        line = cli.fails("runs", "cancel", "--db", seeded.url, "--status", "success",
                         "--yes", code=2)
        assert "applies only to queued, running, paused" in line
        assert cli.fails("runs", "cancel", "--db", seeded.url, "--attr", "novalue",
                         code=2)
        assert statuses(seeded.url) == before

    def test_over_the_limit(self, cli: Cli, seeded: Seeded) -> None:
        before = statuses(seeded.url)
        line = cli.fails("runs", "cancel", "--db", seeded.url, "--all", "--limit", "2",
                         "--yes")
        assert "more than limit=2" in line and "nothing was written" in line
        assert statuses(seeded.url) == before
        result = cli("runs", "cancel", "--db", seeded.url, "--app", APP, "--all",
                     "--limit", "2", "--no-limit", "--yes")
        assert result.code == 0 and "3 cancelled" in result.out

    def test_off_a_terminal_needs_yes(self, cli: Cli, seeded: Seeded,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
        line = cli.fails("runs", "cancel", "--db", seeded.url, "--all", code=2)
        assert "pass --yes" in line
        assert set(statuses(seeded.url).values()) == {"paused", "success"}

    def test_terminal_confirmation(self, cli: Cli, seeded: Seeded,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
        """On a terminal it asks, showing the count; 'n' writes nothing, 'y' acts."""
        monkeypatch.setattr("sys.stdin", _Terminal("n\n"))
        result = cli("runs", "cancel", "--db", seeded.url, "--app", APP, "--all")
        assert result.code == 1 and "cancel 3 matching runs? [y/N]" in result.err
        assert "not confirmed" in result.err
        assert set(statuses(seeded.url).values()) == {"paused", "success"}
        monkeypatch.setattr("sys.stdin", _Terminal("y\n"))
        result = cli("runs", "cancel", "--db", seeded.url, "--app", APP, "--all")
        assert result.code == 0 and "3 cancelled" in result.out
        assert set(statuses(seeded.url).values()) == {"cancelled", "success"}


class TestBulkRetryAndFork:
    """retry and fork take the same filters; a single RUN_ID still works."""

    def test_retry_and_fork_by_filter(self, cli: Cli, seeded: Seeded,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
        async def fail_two() -> list[str]:
            async with Starflow.open(seeded.url, maintenance=False) as sf:
                return [(await sf.run(cli_app.cli_flaky, f"f-{i}")).run_id for i in range(2)]

        monkeypatch.setitem(cli_app.BODY_BUG, "on", True)
        failed = anyio.run(fail_two)
        result = cli("runs", "retry", "--db", seeded.url, "--app", APP, "--status", "error",
                     "--dry-run")
        assert result.out.startswith("2 runs match")
        result = cli("runs", "fork", "--db", seeded.url, "--app", APP, "--workflow",
                     "cli_flaky", "--from-node", "step:nowhere#1", "--yes")
        assert result.code == 0, result.err
        assert "0 forked, 2 skipped" in result.out and "has no node" in result.out
        monkeypatch.setitem(cli_app.BODY_BUG, "on", False)
        result = cli("runs", "retry", "--db", seeded.url, "--app", APP, "--workflow",
                     "cli_flaky", "--yes")
        assert result.code == 0, result.err
        assert "2 runs matched: 2 retried" in result.out
        now = statuses(seeded.url)
        assert {now[r] for r in failed} == {"success"}
