"""The sweep's outcome for a lost runner (``StarflowConfig.lost_runs``), claim
attempts for inline runs, and queued runs nobody claims (``stuck_after``)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

import anyio
import msgspec
import pytest

from starflow import LeaseLostError, Starflow, StarflowConfig
from starflow.adapters.sqlite import LocalWorkflowStateAdapter
from starflow.errors import ConfigError
from starflow_testing import FakeClock, capture_logs

from . import flows
from .conftest import CONFIG, OpenApp
from .support import Probe, cli
from .test_worker_claims import claim_all, queue_raw

TTL = CONFIG.lease_ttl


async def lose_inline_run(sf: Starflow, probe: Probe, clock: FakeClock, tag: str) -> str:
    """``sf.run`` a gated workflow here; its runner dies at the step (lease kept)."""
    run_id = ""
    async with anyio.create_task_group() as tg:
        async def driven() -> None:
            with pytest.raises(LeaseLostError):
                await sf.run(flows.gated_flow, tag)

        tg.start_soon(driven)
        await flows.started(tag).wait()
        [run_id] = list(sf.runner.engines)
        sf.runner.engines[run_id].kill()  # as with SIGKILL: the lease stays
    await clock.advance(TTL + timedelta(seconds=1))
    return run_id


@asynccontextmanager
async def counted_selects(adapter: Any, monkeypatch: pytest.MonkeyPatch
                          ) -> AsyncIterator[list[str]]:
    """The SELECT statements ``adapter`` sends to its database while in the block
    (SQLite: its connection's trace; PostgreSQL: every query asyncpg executes)."""
    selects: list[str] = []

    def seen(sql: str) -> None:
        if sql.lstrip().upper().startswith("SELECT"):
            selects.append(sql)

    if isinstance(adapter, LocalWorkflowStateAdapter):
        await adapter._call(lambda conn: conn.set_trace_callback(seen))
        try:
            yield selects
        finally:
            await adapter._call(lambda conn: conn.set_trace_callback(None))
        return
    import asyncpg.connection

    real = asyncpg.connection.Connection._execute

    async def execute(self: Any, query: str, *args: Any, **kwargs: Any) -> Any:
        seen(query)
        return await real(self, query, *args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(asyncpg.connection.Connection, "_execute", execute)
        yield selects


class TestLostRuns:
    def test_bad_setting(self) -> None:
        with pytest.raises(ConfigError, match="lost_runs must be one of requeue, fail"):
            StarflowConfig(lost_runs="retry")  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="stuck_after must be positive"):
            StarflowConfig(stuck_after=timedelta(0))

    async def test_requeue_is_the_default(self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = await lose_inline_run(sf, probe, clock, "r")
            assert await sf.sweep() == 1
            run = await sf.get_run(run_id)
            # The lost inline execution counts as the run's first claim.
            assert (run.status, run.claim_state, run.claim_attempts) == ("queued", "queued", 1)

    async def test_fail_is_the_seeds_outcome(self, open_app: OpenApp, clock: FakeClock) -> None:
        config = msgspec.structs.replace(CONFIG, lost_runs="fail")
        async with open_app(config=config) as (sf, probe):
            inline = await lose_inline_run(sf, probe, clock, "f")
            queued = await queue_raw(probe, "wt-gated", 1, clock)
            now = clock.now()
            assert await probe.claim_runs("dead", pool=None, now=now, lease_until=now + TTL)
            await clock.advance(TTL + timedelta(seconds=1))
            assert await sf.sweep() == 2
            for run_id in (inline, queued):
                run = await sf.get_run(run_id)
                assert (run.status, run.claim_state, run.error) == (
                    "error", "abandoned", "runner_lost")
                [lost] = [e for e in await sf.events(run_id) if e.event_type == "runner_lost"]
                assert lost.payload_json["action"] == "abandoned"

    async def test_inline_run_honours_max_claim_attempts(self, open_app: OpenApp,
                                                         clock: FakeClock) -> None:
        config = msgspec.structs.replace(CONFIG, max_claim_attempts=1)
        async with open_app(config=config) as (sf, probe):
            run_id = await lose_inline_run(sf, probe, clock, "m")
            [swept] = await probe.expire_old_leases(clock.now())
            assert swept.action == "abandoned"
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.claim_attempts) == (
                "error", "abandoned", 1)

    async def test_inline_then_claimed_counts_every_attempt(self, open_app: OpenApp,
                                                            clock: FakeClock) -> None:
        config = msgspec.structs.replace(CONFIG, max_claim_attempts=2)
        async with open_app(config=config) as (sf, probe):
            run_id = await lose_inline_run(sf, probe, clock, "c")
            [first] = await probe.expire_old_leases(clock.now())
            now = clock.now()
            [claimed] = await probe.claim_runs("dead", pool=None, now=now,
                                               lease_until=now + TTL)
            assert (first.action, claimed.claim_attempts) == ("requeued", 2)
            await clock.advance(TTL + timedelta(seconds=1))
            [second] = await probe.expire_old_leases(clock.now())
            assert second.action == "abandoned"
            assert run_id == second.run_id


class TestStuckRuns:
    async def test_a_queued_run_nobody_claims_is_reported(
            self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, _):
            pooled = (await sf.start(flows.one_step, "p", pool="gpu")).run_id
            assert await sf.stuck_runs() == []
            await clock.advance(CONFIG.stuck_after - timedelta(seconds=1))
            fresh = (await sf.start(flows.one_step, "q")).run_id
            assert await sf.stuck_runs() == []
            await clock.advance(timedelta(seconds=2))
            assert [r.id for r in await sf.stuck_runs()] == [pooled]
            with capture_logs() as logs:
                await sf.runner.warn_stuck()
            [warning] = [e for e in logs if e["event"] == "queued runs not claimed"]
            assert (warning["log_level"], warning["count"], warning["oldest_run_id"],
                    warning["pools"]) == ("warning", 1, pooled, ["gpu"])
            # A worker (no pool) claims the unpooled run; the gpu one stays stuck.
            await clock.advance(CONFIG.stuck_after)
            assert {r.id for r in await sf.stuck_runs()} == {pooled, fresh}
            await claim_all(sf.worker())
            assert [r.id for r in await sf.stuck_runs()] == [pooled]

    async def test_one_query_however_many_runs_are_stuck(
            self, open_app: OpenApp, clock: FakeClock, monkeypatch: pytest.MonkeyPatch) -> None:
        """The check reads the page of queued runs and their newest events in one
        statement (it read each candidate's events, one query per run)."""
        async with open_app() as (sf, probe):
            ids = [(await sf.start(flows.one_step, f"n{i}", pool="gpu")).run_id
                   for i in range(6)]
            await clock.advance(CONFIG.stuck_after + timedelta(seconds=1))
            async with counted_selects(probe.inner, monkeypatch) as selects:
                stuck = await sf.stuck_runs()
            assert [r.id for r in stuck] == sorted(ids)  # one start time: by id
            assert len(selects) == 1, selects

    @pytest.mark.slow  # runs the CLI twice
    async def test_runs_list_stuck(self, url: str, workspace_id: str) -> None:
        from datetime import UTC, datetime

        from starflow.adapters import adapter_from_url

        # The CLI reads the real clock: a run queued 10 minutes ago, one just now.
        adapter = adapter_from_url(url, workspace_id=workspace_id)
        async with Starflow(adapter, maintenance=False):
            probe = Probe(adapter)
            old = await queue_raw(probe, "wt-one-step", 1,
                                  FakeClock(datetime.now(UTC) - timedelta(minutes=10)))
            await queue_raw(probe, "wt-one-step", 1, FakeClock(datetime.now(UTC)))
        done = cli("runs", "list", "--stuck", "--json", "--db", url, "--workspace",
                   workspace_id)
        assert done.returncode == 0, done.stderr
        assert [r["id"] for r in json.loads(done.stdout)] == [old]
        everything = cli("runs", "list", "--json", "--db", url, "--workspace", workspace_id)
        assert len(json.loads(everything.stdout)) == 2

    async def test_a_run_requeued_by_a_wake_counts_from_the_wake(
            self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, _):
            run_id = (await sf.start(flows.signal_flow, "w")).run_id
            await claim_all(sf.worker())
            assert (await sf.get_run(run_id)).status == "paused"
            await clock.advance(CONFIG.stuck_after * 3)
            await sf.signal(run_id, "go", {})  # a queued run: requeued for the workers
            assert (await sf.get_run(run_id)).status == "queued"
            assert await sf.stuck_runs() == []
            await clock.advance(CONFIG.stuck_after + timedelta(seconds=1))
            assert [r.id for r in await sf.stuck_runs()] == [run_id]


async def test_maintenance_warns_at_the_sweep_interval(open_app: OpenApp,
                                                       clock: FakeClock) -> None:
    from starflow.runtime.maintenance import Maintenance

    async with open_app() as (sf, probe):
        run_id = (await sf.start(flows.one_step, "g", pool="gpu")).run_id
        maintenance = Maintenance(sf.runner)
        with capture_logs() as logs:
            async with anyio.create_task_group() as tg:
                tg.start_soon(maintenance.run)
                await probe.until(lambda: len(probe.sweeps) >= 1, "boot-time pass")

                def warned() -> bool:
                    return any(e["event"] == "queued runs not claimed" for e in logs)

                for _ in range(20):  # 10 min of sweep intervals: past stuck_after
                    await clock.advance(CONFIG.sweep_interval)
                    await anyio.sleep(0.01)  # real time: let the check's query finish
                    if warned():
                        break
                tg.cancel_scope.cancel()
        [warning] = [e for e in logs if e["event"] == "queued runs not claimed"][:1]
        assert warning["oldest_run_id"] == run_id
        assert clock.now() - (await sf.get_run(run_id)).started_at > CONFIG.stuck_after
