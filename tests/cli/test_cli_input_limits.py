"""Input too big for starflow (an age past 100 years, JSON nested thousands deep)
is one line on stderr and a usage exit code, never a raw OverflowError or
RecursionError, and nothing is written (issue #29)."""

from __future__ import annotations

from pathlib import Path

import anyio

from starflow import Starflow

from .support import APP, Cli, Seeded

#: Deeper than msgspec's decoder can recurse (it raised RecursionError).
DEEP = "[" * 10_000 + "]" * 10_000
DEPTH_LINE = ("the JSON is nested more than 250 levels deep (lists and objects), more than "
              "starflow stores: flatten it; nothing was written")


async def _snapshot(url: str) -> tuple[list[tuple[str, str, int]], bool]:
    """Every run (id, status, number of events), and whether an approval signal is queued
    for any of them."""
    async with Starflow.open(url, maintenance=False) as sf:
        runs = await sf.list_runs(limit=100)
        rows = sorted([(r.id, r.status, len(await sf.events(r.id))) for r in runs])
        queued = [await sf.adapter.find_signal(r.id, "approval") for r in runs]
        return rows, any(q is not None for q in queued)


def snapshot(seeded: Seeded) -> tuple[list[tuple[str, str, int]], bool]:
    return anyio.run(_snapshot, seeded.url)


class TestAges:
    """--since and --older-than refuse an age past 100 years."""

    def test_since(self, cli: Cli, seeded: Seeded) -> None:
        for age in ("99999999d", "999999999999999d"):
            line = cli.fails("runs", "list", "--db", seeded.url, "--since", age, code=2)
            assert line == (f"starflow: runs list: argument --since: the age {age!r} is longer "
                            "than 36500d (100 years), the longest starflow takes: give a "
                            "shorter one (see starflow runs list --help)")

    def test_older_than(self, cli: Cli, seeded: Seeded) -> None:
        before = snapshot(seeded)
        for age in ("99999999d", "999999999999999d"):
            line = cli.fails("runs", "prune", "--db", seeded.url, "--older-than", age, code=2)
            assert line.startswith("starflow: runs prune: argument --older-than: the age ")
            assert "longer than 36500d (100 years)" in line
        assert snapshot(seeded) == before

    def test_the_limit_is_accepted(self, cli: Cli, seeded: Seeded) -> None:
        result = cli("runs", "list", "--db", seeded.url, "--since", "36500d", "--json")
        assert result.code == 0, result.err
        result = cli("runs", "prune", "--db", seeded.url, "--older-than", "36500d",
                     "--dry-run")
        assert result.code == 0, result.err


class TestDeepJson:
    """A JSON argument nested past the limit is refused before it is decoded."""

    def test_signal_payload(self, cli: Cli, seeded: Seeded) -> None:
        before = snapshot(seeded)
        line = cli.fails("signal", seeded.paused[0], "approval", "--payload", DEEP,
                         "--db", seeded.url, "--app", APP, code=2)
        assert line == (f"starflow: signal: argument --payload: {DEPTH_LINE} "
                        "(see starflow signal --help)")
        assert snapshot(seeded) == before

    def test_start_args(self, cli: Cli, seeded: Seeded) -> None:
        before = snapshot(seeded)
        line = cli.fails("start", "cli_order", "--args", DEEP, "--db", seeded.url,
                         "--app", APP, code=2)
        assert line == (f"starflow: start: argument --args: {DEPTH_LINE} "
                        "(see starflow start --help)")
        assert snapshot(seeded) == before

    def test_resume_payload(self, cli: Cli, seeded: Seeded) -> None:
        before = snapshot(seeded)
        token = seeded.tokens[seeded.paused[0]]
        line = cli.fails("resume", token, "--payload", DEEP, "--db", seeded.url,
                         "--app", APP, code=2)
        assert DEPTH_LINE in line and "argument --payload" in line
        assert snapshot(seeded) == before

    def test_nesting_at_the_limit_is_delivered(self, cli: Cli, seeded: Seeded) -> None:
        payload = "[" * 250 + "]" * 250
        result = cli("signal", seeded.paused[0], "approval", "--payload", payload,
                     "--db", seeded.url, "--app", APP)
        assert result.code == 0, result.err

    def test_replay_file(self, cli: Cli, seeded: Seeded, tmp_path: Path) -> None:
        export = tmp_path / "deep.json"
        export.write_text(DEEP)
        line = cli.fails("replay", str(export), "--app", APP, code=1)
        assert line == (f"starflow: {export}: nested too deep to be a run history export; "
                        "export it with starflow runs export")
