"""The ``starflow`` command: bad input is one line on stderr; migrate and sweep work."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from starflow import Starflow

from .apps import chunks
from .support import cli, spawn_worker, stop

#: Each case runs the starflow command in a subprocess.
pytestmark = pytest.mark.slow


class TestBadInput:
    """One clear line on stderr, a non-zero exit, never a traceback."""

    @pytest.mark.parametrize(("args", "needle"), [
        (["worker", "--app", "no_such_module:app", "--db", "sqlite:///x.db"],
         "no module named 'no_such_module'"),
        (["worker", "--app", "apps:missing", "--db", "sqlite:///x.db"],
         "has no attribute 'missing'"),
        (["worker", "--app", "apps:chunk", "--db", "sqlite:///x.db"],
         "factory"),
        (["worker", "--app", "apps::x", "--db", "sqlite:///x.db"], "MODULE:ATTR"),
        (["worker", "--app", "apps:make_app", "--concurrency", "0"], "must be >= 1"),
        (["worker", "--app", "apps:make_app", "--grace", "soon"], "not a number"),
        (["worker", "--app", "apps:make_app", "--db", "mysql://x"],
         "unsupported database URL"),
        (["worker", "--db", "sqlite:///x.db"], "needs --app"),
        (["sweep"], "no database"),
        (["frobnicate"], "invalid choice"),
        ([], "required"),
    ])
    def test_bad_input(self, args: list[str], needle: str, tmp_path: Path) -> None:
        out = cli(*args, STARFLOW_DATABASE_URL="")
        assert out.returncode != 0
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1, out.stderr
        assert needle in lines[0]
        assert "Traceback" not in out.stderr


class TestCommands:
    """migrate and sweep against a SQLite file; $STARFLOW_DATABASE_URL as the default."""

    def test_migrate(self, tmp_path: Path) -> None:
        out = cli("migrate", "--db", f"sqlite:///{tmp_path / 'm.db'}")
        assert out.returncode == 0, out.stderr
        assert "up to date" in out.stdout
        assert (tmp_path / "m.db").exists()

    async def test_sweep_with_env_url(self, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 's.db'}"
        async with Starflow.open(url, maintenance=False) as sf:
            run_id = (await sf.start(chunks, 1, 0.0)).run_id
            now = sf.clock.now()
            from datetime import timedelta

            await sf.adapter.claim_runs("dead", pool=None, now=now - timedelta(minutes=5),
                                        lease_until=now - timedelta(minutes=4))
        out = cli("sweep", STARFLOW_DATABASE_URL=url)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "1 run(s) requeued or abandoned"
        async with Starflow.open(url, maintenance=False) as sf:
            assert (await sf.get_run(run_id)).status == "queued"

    def test_help_lists_subcommands(self) -> None:
        out = cli("--help")
        assert out.returncode == 0
        for name in ("worker", "server", "migrate", "sweep"):
            assert name in out.stdout


class TestTimersFlag:
    """``starflow worker`` fires due timers by default; ``--no-timers`` says what it drops."""

    def test_help_says_workers_fire_timers(self) -> None:
        out = cli("worker", "--help")
        assert out.returncode == 0
        text = " ".join(out.stdout.split())
        assert "--no-timers" in text
        assert "by default every worker fires them, each once" in text

    @pytest.mark.parametrize(("flags", "banner", "warned"), [
        ((), ", timers)", False),
        (("--no-timers",), "concurrency 2)", True),
    ])
    def test_the_start_says_whether_timers_fire(self, flags: tuple[str, ...], banner: str,
                                                warned: bool, tmp_path: Path) -> None:
        url = f"sqlite:///{tmp_path / 'w.db'}"
        assert cli("migrate", "--db", url).returncode == 0
        log = tmp_path / "worker.log"
        proc = spawn_worker(url, log, "--concurrency", "2", "--grace", "0", *flags)
        # A real process: wait until it logged its start (and the warning, if any).
        expect = "fires no durable timers" if warned else "worker started"
        try:
            deadline = time.monotonic() + 30
            while expect not in log.read_text() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop([proc])
        text = log.read_text()
        assert banner in text
        assert ("fires no durable timers" in text) is warned
        assert ("warning: --no-timers" in text) is warned
