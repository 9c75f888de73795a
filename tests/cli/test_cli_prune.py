"""``starflow runs prune``: flags, dry run, export and its replay, errors."""

from __future__ import annotations

import json
from pathlib import Path

import anyio

from starflow import Starflow
from starflow.cli.prune import parse_age

from .support import APP, Cli, Seeded


async def _ids(url: str) -> set[str]:
    async with Starflow.open(url, maintenance=False) as sf:
        return {r.id for r in await sf.list_runs(limit=100)}


class TestRunsPrune:
    """The command over a seeded SQLite file (three paused runs, one finished)."""

    def test_dry_run_then_export_and_replay(self, cli: Cli, seeded: Seeded,
                                            tmp_path: Path) -> None:
        """A dry run deletes nothing; --export writes a file replay accepts; only
        the ended run goes."""
        dry = cli("runs", "prune", "--db", seeded.url, "--older-than", "0s", "--dry-run",
                  "--json")
        assert dry.code == 0, dry
        assert json.loads(dry.out)["run_ids"] == [seeded.done]
        assert anyio.run(_ids, seeded.url) == {*seeded.paused, seeded.done}

        out = tmp_path / "exports"
        done = cli("runs", "prune", "--db", seeded.url, "--older-than", "0s", "--export",
                   str(out), "--status", "success,error")
        assert done.code == 0, done
        assert done.out.startswith("pruned 1 run(s)")
        assert anyio.run(_ids, seeded.url) == set(seeded.paused)
        files = sorted(out.iterdir())
        assert len(files) == 1 and files[0].suffix == ".jsonl"
        replay = cli("replay", "--app", APP, str(files[0]))
        assert replay.code == 0, replay

    def test_nothing_old_enough(self, cli: Cli, seeded: Seeded) -> None:
        """Runs younger than the age stay."""
        result = cli("runs", "prune", "--db", seeded.url, "--older-than", "30d")
        assert result.code == 0 and result.out == "pruned 0 run(s)\n"
        assert anyio.run(_ids, seeded.url) == {*seeded.paused, seeded.done}

    def test_bad_flags(self, cli: Cli, seeded: Seeded) -> None:
        """Active statuses, bad ages and a missing age are usage errors; nothing goes."""
        assert "active runs are never pruned" in cli.fails(
            "runs", "prune", "--db", seeded.url, "--older-than", "1d", "--status", "paused",
            code=2)
        assert "not an age" in cli.fails("runs", "prune", "--db", seeded.url,
                                         "--older-than", "soon", code=2)
        assert "--older-than" in cli.fails("runs", "prune", "--db", seeded.url, code=2)
        assert anyio.run(_ids, seeded.url) == {*seeded.paused, seeded.done}

    def test_parse_age(self) -> None:
        assert parse_age("30d").days == 30
        assert parse_age("90s").total_seconds() == 90
