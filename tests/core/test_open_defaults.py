"""Starflow.open() defaults: environment variables, a client's share of maintenance."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import anyio
import pytest

from starflow import Starflow, sleep, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow_testing import FakeClock


@workflow(name="defaults-sleeper")
async def sleeper() -> str:
    await sleep(timedelta(seconds=5))
    return "woke"


@workflow(name="defaults-waiter")
async def waiter() -> str:
    try:
        return str(await wait_for("go", timeout=timedelta(seconds=10)))
    except Exception as exc:  # WaitTimeout
        return type(exc).__name__


@workflow(name="defaults-approve-then-sleep")
async def approve_then_sleep() -> str:
    await wait_for("approval", timeout=timedelta(days=2))
    await sleep(timedelta(seconds=5))
    return "shipped"


class TestEnvironmentDefaults:
    """STARFLOW_URL, STARFLOW_WORKSPACE and STARFLOW_ENV fill what open() is not given."""

    @pytest.fixture(autouse=True)
    def _clean(self, monkeypatch: pytest.MonkeyPatch) -> None:
        for name in ("STARFLOW_URL", "STARFLOW_DATABASE_URL", "STARFLOW_WORKSPACE",
                     "STARFLOW_ENV"):
            monkeypatch.delenv(name, raising=False)

    async def test_url_workspace_and_env(self, monkeypatch: pytest.MonkeyPatch,
                                         tmp_path: Path) -> None:
        """A run started with only the variables set lands in that database and scope."""
        url = f"sqlite:///{tmp_path / 'env.db'}"
        monkeypatch.setenv("STARFLOW_URL", url)
        monkeypatch.setenv("STARFLOW_WORKSPACE", "shop")
        monkeypatch.setenv("STARFLOW_ENV", "staging")
        async with Starflow.open() as sf:
            assert (sf.adapter.workspace_id, sf.adapter.env) == ("shop", "staging")
            handle = await sf.run(waiter)
        probe = adapter_from_url(url, workspace_id="shop", env="staging")
        await probe.open()
        try:
            run = await probe.get_run(handle.run_id)
        finally:
            await probe.close()
        assert run is not None and run.status == "paused"

    async def test_arguments_win(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Explicit arguments override the variables."""
        monkeypatch.setenv("STARFLOW_URL", "sqlite:////nonexistent/dir/x.db")
        monkeypatch.setenv("STARFLOW_WORKSPACE", "shop")
        monkeypatch.setenv("STARFLOW_ENV", "staging")
        async with Starflow.open("memory://", workspace_id="w", env="e") as sf:
            assert (sf.adapter.workspace_id, sf.adapter.env) == ("w", "e")

    async def test_database_url_still_read(self, monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
        """STARFLOW_DATABASE_URL is used when STARFLOW_URL is unset; STARFLOW_URL wins."""
        old, new = tmp_path / "old.db", tmp_path / "new.db"
        monkeypatch.setenv("STARFLOW_DATABASE_URL", f"sqlite:///{old}")
        async with Starflow.open() as sf:
            await sf.run(waiter)
        assert old.exists() and not new.exists()
        monkeypatch.setenv("STARFLOW_URL", f"sqlite:///{new}")
        async with Starflow.open() as sf:
            await sf.run(waiter)
        assert new.exists()

    async def test_seed_defaults(self) -> None:
        """Without variables: workspace celestial, env prod (the state model's defaults)."""
        async with Starflow.open("memory://") as sf:
            assert (sf.adapter.workspace_id, sf.adapter.env) == ("celestial", "prod")


class TestClientMaintenance:
    """open()'s default fits a client: its own inline timers fire, nothing else runs."""

    async def test_own_inline_sleep_fires(self, db_url: str, workspace_id: str) -> None:
        """An inline run paused on a sleep finishes once its timer is due, while open."""
        clock = FakeClock()
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock) as sf:
            handle = await sf.run(sleeper)
            assert handle.status == "paused"
            await clock.advance(timedelta(seconds=6))
            with anyio.fail_after(10):  # real seconds: a timer never fired fails, not hangs
                assert await sf.result(handle) == "woke"

    async def test_own_wait_timeout_fires(self, db_url: str, workspace_id: str) -> None:
        """A wait_for timeout of an inline run fires too (WaitTimeout in the workflow)."""
        clock = FakeClock()
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock) as sf:
            handle = await sf.run(waiter)
            await clock.advance(timedelta(seconds=11))
            with anyio.fail_after(10):  # real seconds: a timer never fired fails, not hangs
                assert await sf.result(handle) == "WaitTimeout"

    async def test_new_wait_after_a_signal(self, db_url: str, workspace_id: str) -> None:
        """Signalled past a wait with a far timeout, the run's new nearer sleep fires."""
        clock = FakeClock()
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock) as sf:
            handle = await sf.run(approve_then_sleep)
            assert (await sf.signal(handle.run_id, "approval")).status == "paused"
            await clock.advance(timedelta(seconds=6))
            with anyio.fail_after(10):  # real seconds: a timer never fired fails, not hangs
                assert await sf.result(handle) == "shipped"

    async def test_no_sweep_nor_other_runs_timers(self, db_url: str,
                                                  workspace_id: str) -> None:
        """Timers of runs this app did not pause are left to a maintenance process."""
        clock = FakeClock()
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock) as sf:
            mt = sf._maintenance
            assert mt is not None and not mt.full
            # Paused through the runner: as if another process had run it.
            handle = await sf.runner.start(
                sleeper.__starflow_workflow__, (), {},  # type: ignore[attr-defined]
                run_id=None, inline=True)
            assert handle.status == "paused"
            await clock.advance(timedelta(seconds=6))
            assert (await sf.get_run(handle.run_id)).status == "paused"
            assert mt.sweeps == 0
        if db_url.startswith("memory"):
            return  # a private database: no second process can open it
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock,
                                 maintenance=True) as server:
            await clock.advance(timedelta(seconds=1))
            assert await server.result(handle.run_id) == "woke"

    async def test_false_runs_nothing(self) -> None:
        """maintenance=False: no background task; the paused run stays paused."""
        clock = FakeClock()
        async with Starflow.open("memory://", clock=clock, maintenance=False) as sf:
            assert sf._maintenance is None
            handle = await sf.run(sleeper)
            await clock.advance(timedelta(seconds=6))
            assert (await sf.get_run(handle.run_id)).status == "paused"


class TestClientWithAMaintenanceWorker:
    """A client app whose worker runs maintenance fires each timer once, quietly."""

    async def test_one_wake_per_timer(self, db_url: str, workspace_id: str) -> None:
        """The inline run's timer is seen by both loops; it is fired once, no error logged."""
        from starflow_testing import capture_logs

        clock = FakeClock()
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock) as sf:
            worker = sf.worker(maintenance=True)
            with capture_logs("warning") as logs:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(worker.run)
                    handle = await sf.run(sleeper)
                    await clock.advance(timedelta(seconds=6))
                    with anyio.fail_after(10):
                        assert await sf.result(handle) == "woke"
                    worker.stop()
            assert [e for e in logs if e["log_level"] == "error"] == []
            events = [e.event_type for e in await sf.events(handle.run_id)]
            assert events.count("run_resumed") == 1, events
