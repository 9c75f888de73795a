"""``starflow schedules list|show|pause|resume|delete|trigger`` and ``starflow pools``."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import anyio

from starflow import Starflow

from . import cli_app
from .support import APP, Cli


async def _seed(url: str) -> None:
    async with Starflow.open(url, maintenance=False) as sf:
        await sf.schedule("nightly", cli_app.cli_quick, 21, cron="0 3 * * *",
                          timezone="Europe/Berlin", catchup=timedelta(hours=6))
        await sf.set_pool_limits("payments", concurrency=5,
                                 rate_limit=(100, timedelta(minutes=1)), key_concurrency=1)
        await sf.options(pool="payments").start(cli_app.cli_quick, 1)


class TestSchedules:
    """Every subcommand, in tables and in JSON; an unknown id is one line, exit 1."""

    def test_list_show_pause_resume_trigger_delete(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 's.db'}"
        anyio.run(_seed, url)
        listed = cli("schedules", "list", "--db", url)
        assert listed.code == 0, listed.err
        assert "nightly" in listed.out and "0 3 * * *" in listed.out
        assert "Europe/Berlin" in listed.out and "active" in listed.out
        data = json.loads(cli("schedules", "list", "--db", url, "--json").out)
        assert data[0]["id"] == "nightly" and data[0]["catchup_seconds"] == 21600
        assert data[0]["input"] == {"args": [21], "kwargs": {}}

        shown = cli("schedules", "show", "nightly", "--db", url)
        assert "cron" in shown.out and "0 3 * * * (Europe/Berlin)" in shown.out
        assert "catchup" in shown.out and "6h" in shown.out

        paused = json.loads(cli("schedules", "pause", "nightly", "--db", url, "--json").out)
        assert paused["paused"] is True
        resumed = json.loads(cli("schedules", "resume", "nightly", "--db", url, "--json").out)
        assert resumed["paused"] is False

        triggered = cli("schedules", "trigger", "nightly", "--db", url, "--app", APP)
        run_id, status = triggered.out.split()
        assert status == "queued"
        assert json.loads(cli("schedules", "show", "nightly", "--db", url,
                              "--json").out)["last_run_id"] == run_id

        assert cli("schedules", "delete", "nightly", "--db", url).out == \
            "deleted schedule nightly\n"
        assert cli("schedules", "list", "--db", url).err == "no schedules\n"
        line = cli.fails("schedules", "show", "nightly", "--db", url)
        assert "schedule 'nightly' not found" in line


class TestPools:
    """Limits and current use."""

    def test_table_and_json(self, cli: Cli, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'p.db'}"
        anyio.run(_seed, url)
        table = cli("pools", "--db", url)
        assert table.code == 0, table.err
        header, row = table.out.splitlines()
        assert header.split()[:4] == ["POOL", "STATE", "QUEUED", "EXECUTING"]
        assert row.split()[:4] == ["payments", "active", "1", "0/5"]
        assert "0/100 per 1m" in row
        data = json.loads(cli("pools", "--db", url, "--json").out)
        assert data == [{"pool": "payments", "concurrency": 5, "rate_limit": 100,
                         "rate_period_seconds": 60.0, "key_concurrency": 1,
                         "key_rate_limit": None, "key_rate_period_seconds": None,
                         "fair": False, "key_weights": None, "keep_slot": False,
                         "paused": False, "queued": 1, "active": 0, "kept": 0,
                         "claimed_in_window": 0}]
        assert "oldest first" in row

    def test_fair_pool(self, cli: Cli, tmp_path: Path) -> None:
        """A fair pool's key rate limit, weights and kept slots are shown (#30)."""
        url = f"sqlite:///{tmp_path / 'f.db'}"

        async def seed() -> None:
            async with Starflow.open(url, maintenance=False) as sf:
                await sf.set_pool_limits("tenants", key_rate_limit=(10, timedelta(minutes=1)),
                                         fair=True, key_weights={"acme": 3}, keep_slot=True)

        anyio.run(seed)
        row = cli("pools", "--db", url).out.splitlines()[1]
        assert "10 per 1m" in row
        assert "fair (acme=3); paused runs keep their slot" in row
        data = json.loads(cli("pools", "--db", url, "--json").out)[0]
        assert (data["key_rate_limit"], data["key_rate_period_seconds"]) == (10, 60.0)
        assert (data["fair"], data["key_weights"], data["keep_slot"]) == (
            True, {"acme": 3}, True)

    def test_pause_and_resume(self, cli: Cli, tmp_path: Path) -> None:
        """`pools pause|resume NAME` (#30): the state is stored and shown; limits kept."""
        url = f"sqlite:///{tmp_path / 'p.db'}"
        anyio.run(_seed, url)
        assert cli("pools", "pause", "payments", "--db", url).out == "pool payments: paused\n"
        row = cli("pools", "--db", url).out.splitlines()[1]
        assert row.split()[:4] == ["payments", "paused", "1", "0/5"]
        data = json.loads(cli("pools", "resume", "payments", "--db", url, "--json").out)
        assert data == {"pool": "payments", "paused": False}
        assert json.loads(cli("pools", "--db", url, "--json").out)[0]["concurrency"] == 5
        line = cli.fails("pools", "pause", "", "--db", url)
        assert "pool" in line
