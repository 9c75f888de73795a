"""Leases: fencing, the sweep's boundaries and outcomes, concurrent sweepers."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta

import anyio
import pytest

from starflow import LeaseLostError, Starflow
from starflow.adapters.units import Guard
from starflow.runtime.maintenance import Maintenance
from starflow_testing import FakeClock

from . import flows
from .conftest import CONFIG, OpenApp
from .support import Probe
from .test_worker_claims import claim_all, queue_raw

TTL = CONFIG.lease_ttl


class TestFencing:
    """A runner whose lease was taken over can write nothing and stops the run."""

    async def test_takeover_fences_the_old_runner(self, open_app: OpenApp,
                                                  clock: FakeClock) -> None:
        async with open_app(runner_id="runner-a") as (a, pa), \
                open_app(runner_id="runner-b") as (b, pb):
            run_id = (await a.start(flows.gated_flow, "f")).run_id
            worker_a = a.worker()
            async with anyio.create_task_group() as tg:
                assert await worker_a.claim_once(tg) == 1
                await flows.started("f").wait()
                # runner-a stalls past its lease; the sweep (run by b) requeues the
                # run and b claims it: the lease is b's now.
                later = clock.now() + TTL + timedelta(seconds=1)
                [swept] = await pb.expire_old_leases(later)
                assert (swept.run_id, swept.leased_by, swept.action) == (
                    run_id, "runner-a", "requeued")
                [taken] = await pb.claim_runs("runner-b", pool=None, now=later,
                                              lease_until=later + TTL)
                assert (taken.leased_by, taken.claim_attempts) == ("runner-b", 2)
                # Every state write of runner-a is refused, and writes nothing.
                async with pa.unit(guard=Guard(run_id=run_id, leased_by="runner-a",
                                               status_in=("running",))) as unit:
                    await pa.refresh_lease(run_id, later + 2 * TTL, now=later)
                assert unit.held is False
                row = await pb.get_run(run_id)
                assert row is not None and row.lease_until == later + TTL
                held_before = len(pa.units)
                # runner-a's step returns: its node_complete is refused, the engine stops.
                flows.gate("f").set()
            assert worker_a.active == 0
            # (fused, the default: in one unit with the next step's node_start)
            refused = (["on_node_complete", "on_node_start"] if a.config.fused_boundaries
                       else ["on_node_complete"])
            assert [(m, h) for m, h in pa.units[held_before:]] == [(refused, False)]
            assert [f"{run_id}:step:gated#1"] == flows.EXECUTED  # note#1 never started on a
            # runner-b replays and finishes; only one node_complete per node.
            flows.GATES.clear()
            flows.gate("f").set()
            out = await b.runner.drive(taken)
            assert out.status == "success"
            events = await b.events(run_id)
            completes = [e.node_id for e in events if e.event_type == "node_complete"]
            assert completes == ["step:gated#1", "step:note#1", "step:note#2"]
            assert flows.EXECUTED.count(f"{run_id}:step:gated#1") == 2  # at-least-once

    async def test_heartbeat_finds_the_lease_taken_and_cancels_the_body(
            self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app(runner_id="runner-a") as (a, pa), \
                open_app(runner_id="runner-b") as (_, pb):
            run_id = (await a.start(flows.gated_flow, "h")).run_id
            worker_a = a.worker()
            async with anyio.create_task_group() as tg:
                assert await worker_a.claim_once(tg) == 1
                await flows.started("h").wait()
                later = clock.now() + TTL + timedelta(seconds=1)
                await pb.expire_old_leases(later)
                await pb.claim_runs("runner-b", pool=None, now=later, lease_until=later + TTL)
                await clock.advance(CONFIG.heartbeat_interval)  # a's heartbeat: refused
                await pa.until(lambda: worker_a.active == 0, "a's engine to stop")
            assert pa.count("refresh_lease", held=False) == 1
            assert pa.count("refresh_lease", held=True) == 0
            assert not flows.gate("h").is_set()  # the step was cancelled, not finished
            row = await pb.get_run(run_id)
            assert row is not None and row.leased_by == "runner-b"
            assert [e.event_type for e in await pb.list_events(run_id)] == [
                "node_start", "runner_lost"]


class TestSweepOutcomes:
    """Requeue under max_claim_attempts; past it, the seed's exact outcome."""

    async def expire(self, probe: Probe, clock: FakeClock, run_id: str) -> str:
        now = clock.now()
        [run] = await probe.claim_runs("dead", pool=None, now=now, lease_until=now + TTL)
        assert run.id == run_id
        await clock.advance(TTL + timedelta(seconds=1))
        [swept] = await probe.expire_old_leases(clock.now())
        return swept.action

    async def test_default_three_claims(self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.one_step, "x")).run_id
            actions = [await self.expire(probe, clock, run_id) for _ in range(3)]
            assert actions == ["requeued", "requeued", "abandoned"]
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.error, run.claim_attempts) == (
                "error", "abandoned", "runner_lost", 3)
            lost = [e for e in await sf.events(run_id) if e.event_type == "runner_lost"]
            assert [e.payload["action"] for e in lost] == ["requeued", "requeued", "abandoned"]

    async def test_per_workflow_max(self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.once_flow, "y")).run_id
            assert (await sf.get_run(run_id)).max_claim_attempts == 1
            assert await self.expire(probe, clock, run_id) == "abandoned"
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.error) == ("error", "abandoned",
                                                                 "runner_lost")

    async def test_two_sweepers_at_once(self, open_app: OpenApp, clock: FakeClock) -> None:
        """Two sweeps on one database (two connections): each expired run is swept once."""
        async with open_app() as (a, pa), open_app() as (_, pb):
            run_ids = [(await a.start(flows.one_step, f"z{i}")).run_id for i in range(12)]
            now = clock.now()
            await pa.claim_runs("dead", pool=None, now=now, lease_until=now + TTL, limit=12)
            await clock.advance(TTL + timedelta(seconds=1))
            results: dict[str, list[str]] = {}

            async def sweep(name: str, probe: Probe) -> None:
                results[name] = [r.run_id for r in await probe.expire_old_leases(clock.now())]

            async with anyio.create_task_group() as tg:
                tg.start_soon(sweep, "a", pa)
                tg.start_soon(sweep, "b", pb)
            assert sorted(results["a"] + results["b"]) == sorted(run_ids)
            for run_id in run_ids:
                events = await a.events(run_id)
                assert [e.event_type for e in events] == ["runner_lost"]


class TestInlineResetsClaims:
    """An inline wake or retry resets claim_attempts, as a queued one does."""

    async def lose_runner(self, sf: Starflow, probe: Probe, clock: FakeClock, run_id: str,
                          drive: Callable[[], Awaitable[object]], tag: str) -> None:
        """``drive()`` (in this process) reaches the gated step; its runner dies there."""
        async with anyio.create_task_group() as tg:
            async def driven() -> None:
                with pytest.raises(LeaseLostError):
                    await drive()

            tg.start_soon(driven)
            await flows.started(tag).wait()
            sf.runner.engines[run_id].kill()  # as with SIGKILL: the lease stays
        await clock.advance(TTL + timedelta(seconds=1))
        [swept] = await probe.expire_old_leases(clock.now())
        assert swept.action == "requeued"

    async def claim_and_lose(self, probe: Probe, clock: FakeClock) -> str:
        now = clock.now()
        assert await probe.claim_runs("dead", pool=None, now=now, lease_until=now + TTL)
        await clock.advance(TTL + timedelta(seconds=1))
        [swept] = await probe.expire_old_leases(clock.now())
        return swept.action

    async def test_inline_wake(self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            # A run started inline whose runner was lost once, then a worker drove it
            # to its wait: two claims used.
            run_id = await queue_raw(probe, "wt-signal-gated", 1, clock, start_mode="inline")
            assert await self.claim_and_lose(probe, clock) == "requeued"
            await claim_all(sf.worker())
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_attempts) == ("paused", 2)
            # The signal wakes it inline (driven here); this runner dies after the wake.
            await self.lose_runner(sf, probe, clock, run_id,
                                   lambda: sf.signal(run_id, "go", {}), "x")
            # The wake reset the count; the lost inline execution is its first attempt.
            assert (await sf.get_run(run_id)).claim_attempts == 1
            # So the next lost worker is its second since the wake, not its fourth.
            assert await self.claim_and_lose(probe, clock) == "requeued"

    async def test_inline_retry(self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = await queue_raw(probe, "wt-gated", 1, clock, start_mode="inline")
            actions = [await self.claim_and_lose(probe, clock) for _ in range(3)]
            assert actions == ["requeued", "requeued", "abandoned"]
            # Retried inline (driven here); this runner dies too.
            await self.lose_runner(sf, probe, clock, run_id, lambda: sf.retry(run_id), "x")
            run = await sf.get_run(run_id)
            # The retry reset the count; the lost inline execution counts as one.
            assert (run.status, run.claim_state, run.claim_attempts) == ("queued", "queued", 1)


class TestSweepTiming:
    """Under a fake clock: swept within one interval past expiry, never before."""

    async def test_boundary(self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.one_step, "b")).run_id
            now = clock.now()
            await probe.claim_runs("dead", pool=None, now=now, lease_until=now + TTL)
            await clock.advance(TTL)  # lease_until == now: not expired yet
            assert await sf.sweep() == 0
            await clock.advance(timedelta(microseconds=1))
            assert await sf.sweep() == 1
            assert (await sf.get_run(run_id)).status == "queued"

    async def test_maintenance_sweeps_within_one_interval(
            self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            maintenance = Maintenance(sf.runner)
            interval = CONFIG.sweep_interval.total_seconds()
            async with anyio.create_task_group() as tg:
                tg.start_soon(maintenance.run)
                await probe.until(lambda: len(probe.sweeps) == 1, "boot-time pass")
                await clock.advance(7)
                run_id = (await sf.start(flows.one_step, "late")).run_id
                now = clock.now()
                await probe.claim_runs("dead", pool=None, now=now, lease_until=now + TTL)
                expiry = now + TTL
                swept_at = None
                for second in range(8, 181):
                    await clock.advance(1)
                    if second % interval == 0:
                        passes = 1 + second // int(interval)
                        await probe.at_least(lambda: len(probe.sweeps), passes)
                    for at, results in probe.sweeps:
                        if any(r.run_id == run_id for r in results) and swept_at is None:
                            swept_at = at
                tg.cancel_scope.cancel()
            assert swept_at is not None
            assert expiry < swept_at <= expiry + CONFIG.sweep_interval
            assert all(at <= expiry for at, results in probe.sweeps
                       if at < swept_at and not results)

    async def test_paused_run_is_never_swept(self, open_app: OpenApp,
                                             clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.signal_flow, "p")).run_id
            from .test_worker_claims import claim_all

            await claim_all(sf.worker())
            assert (await sf.get_run(run_id)).lease_until is None
            maintenance = Maintenance(sf.runner)
            async with anyio.create_task_group() as tg:
                tg.start_soon(maintenance.run)
                await probe.until(lambda: len(probe.sweeps) >= 1, "boot-time pass")
                for k in range(1, 21):
                    await clock.advance(CONFIG.sweep_interval)
                    await probe.at_least(lambda: len(probe.sweeps), k + 1)
                tg.cancel_scope.cancel()
            assert all(not results for _, results in probe.sweeps)
            run = await sf.get_run(run_id)
            assert run.status == "paused"
            assert "runner_lost" not in [e.event_type for e in await sf.events(run_id)]

    async def test_healthy_run_with_heartbeats_is_never_swept(
            self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.gated_flow, "hb")).run_id
            worker = sf.worker(maintenance=True)
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await flows.started("hb").wait()
                beats = 0
                for second in range(5, 301, 5):
                    await clock.advance(5)
                    if second % 10 == 0:
                        beats += 1
                        await probe.at_least(lambda: probe.count("refresh_lease"), beats)
                    if second % 30 == 0:
                        await probe.at_least(lambda: len(probe.sweeps), second // 30 + 1)
                    run = await probe.inner.get_run(run_id)
                    assert run is not None and run.status == "running"
                    assert run.lease_until is not None and run.lease_until > clock.now()
                flows.gate("hb").set()
                await probe.until_run(run_id, lambda r: r.status == "success")
                await worker.drain()
            assert all(not results for _, results in probe.sweeps)
            assert probe.count("refresh_lease") >= 30
