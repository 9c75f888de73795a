"""Drift: the hash sweep and end-of-run reconciliation correct the warm tier from cold;
nothing the warm tier holds can change a resume."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from starflow import Starflow, StarflowConfig
from starflow.adapters import adapter_from_url
from starflow.warm.base import Projection, WarmTier
from starflow.warm.mirror import mirror

from .conftest import FakeClock, eventually, open_warm
from .flows import approval_flow, sum_flow
from .helpers import cold_hash, corrupt_by_hand, drainer_of, in_step, wait_drained


@pytest.fixture
async def app(warm_url: str, clock: FakeClock, redis_cleanup: list[str]
              ) -> AsyncIterator[Starflow]:
    ws = f"ws-{uuid.uuid4().hex[:10]}"
    redis_cleanup.append(ws)
    cold = adapter_from_url("memory://", workspace_id=ws)
    async with Starflow(mirror(cold, open_warm(warm_url, ws), clock=clock), clock=clock,
                        config=StarflowConfig()) as sf:
        yield sf


async def _warm_hash(sf: Starflow, run_id: str) -> str | None:
    assert sf.warm is not None
    return (await sf.warm.hashes([run_id]))[run_id]


class TestHashSweep:
    """A projection corrupted by hand is corrected within one drift_sweep_interval."""

    async def test_corrupted_finished_run_is_corrected(self, app: Starflow,
                                                       clock: FakeClock) -> None:
        """Status edited in warm storage: the next sweep resets it from cold."""
        sf = app
        handle = await sf.run(sum_flow, 2, 2)
        await wait_drained(sf, [handle.run_id])
        await corrupt_by_hand(sf, handle.run_id, status="running")
        assert await _warm_hash(sf, handle.run_id) != await cold_hash(sf.adapter, handle.run_id)
        drainer = drainer_of(sf)
        assert drainer.corrections == 0

        await clock.advance(sf.config.drift_sweep_interval.total_seconds())
        await eventually(lambda: in_step(sf, [handle.run_id]), what="sweep corrected warm")
        assert drainer.corrections == 1
        assert (await sf.outbox_status()).drift_corrections == 1
        assert sf.warm is not None
        state = await sf.warm.get_run(handle.run_id)
        assert state is not None and state["status"] == "success"
        assert await sf.live_runs() == []  # no longer shown as live

    async def test_long_paused_run_is_covered(self, app: Starflow, clock: FakeClock) -> None:
        """A run paused for hours (outside the recent window) is still compared and fixed."""
        sf = app
        handle = await sf.run(approval_flow, "o-9")
        await wait_drained(sf, [handle.run_id])
        await clock.advance(3 * 3600)
        await eventually(lambda: _swept(sf), what="sweeps ran while paused")
        await corrupt_by_hand(sf, handle.run_id, status="success", drop_events=True)
        fixed = drainer_of(sf).corrections
        await clock.advance(sf.config.drift_sweep_interval.total_seconds())
        await eventually(lambda: in_step(sf, [handle.run_id]), what="paused run corrected")
        assert drainer_of(sf).corrections == fixed + 1
        live = await sf.live_runs()
        assert [r.run_id for r in live] == [handle.run_id] and live[0].status == "paused"

    async def test_phantom_live_run_is_removed(self, app: Starflow, clock: FakeClock) -> None:
        """A run the warm tier shows as live but cold does not have is forgotten."""
        sf = app
        ghost = str(uuid.uuid4())
        assert sf.warm is not None
        await sf.warm.apply([Projection(seq=0, kind="reset", run_id=ghost, payload={
            "run_id": ghost, "columns": {"id": ghost, "status": "running"}, "events": []})])
        assert [r.run_id for r in await sf.live_runs()] == [ghost]
        await clock.advance(sf.config.drift_sweep_interval.total_seconds())

        async def gone() -> bool:
            assert sf.warm is not None
            return await sf.warm.get_run(ghost) is None

        await eventually(gone, what="phantom removed")
        assert await sf.live_runs() == []


class TestEndOfRunReconciliation:
    """When a run ends, its projection is compared with cold and fixed (the per-run net)."""

    async def test_run_end_fixes_drift_without_a_sweep(self, app: Starflow) -> None:
        """Events dropped from warm while paused come back when the run completes."""
        sf = app
        handle = await sf.run(approval_flow, "o-3")
        await wait_drained(sf, [handle.run_id])
        await corrupt_by_hand(sf, handle.run_id, status="paused", drop_events=True)
        done = await sf.signal(handle.run_id, "approval", {"ok": True})
        assert done.status == "success"
        # No clock advance: no sweep ran; reconciliation on the terminal projection did it.
        await wait_drained(sf, [handle.run_id])
        assert drainer_of(sf).corrections == 1
        assert drainer_of(sf).sweeps == 0


class ExplodingWarm(WarmTier):
    """A warm tier that fails the test if anything reads it."""

    url = "exploding://"

    def __init__(self, inner: WarmTier) -> None:
        super().__init__(workspace_id=inner.workspace_id, env=inner.env)
        self.inner = inner
        self.reads = 0

    def _read(self) -> None:
        self.reads += 1
        raise AssertionError("the warm tier was read")

    async def close(self) -> None:
        await self.inner.close()

    async def apply(self, batch: Sequence[Projection]) -> None:
        await self.inner.apply(batch)

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        self._read()
        return None

    async def live_runs(self) -> list[dict[str, Any]]:
        self._read()
        return []

    def subscribe(self, run_id: str) -> Any:
        self._read()

    async def hashes(self, run_ids: Sequence[str]) -> dict[str, str | None]:
        self._read()
        return {}

    async def put_progress(self, run_id: str, node_id: str, data: Any) -> None:
        await self.inner.put_progress(run_id, node_id, data)

    async def session_var(self, session_id: str, key: str) -> Any:
        self._read()


class TestAuthority:
    """Resume, history and audit read cold: the warm tier cannot change them."""

    async def test_corrupted_warm_tier_cannot_change_a_resume(
            self, app: Starflow) -> None:
        """Warm says the run succeeded, at another wait, with no history: resume ignores it."""
        sf = app
        handle = await sf.run(approval_flow, "o-7")
        await wait_drained(sf, [handle.run_id])
        assert sf.warm is not None and handle.wake_token
        forged = {"id": handle.run_id, "status": "success", "result_json": {"forged": True},
                  "checkpoint_json": {"variables": {"__celestialWait": {
                      "node_id": "wait:other#1", "event": "other", "wake_token": "forged"}}}}
        await sf.warm.apply([Projection(seq=0, kind="reset", run_id=handle.run_id,
                                        payload={"run_id": handle.run_id, "columns": forged,
                                                 "events": []})])
        resumed = await sf.resume(handle.wake_token, {"ok": True})
        assert resumed.status == "success"
        assert resumed.result == {"order": "o-7", "total": 3, "decision": {"ok": True}}
        events = [e.event_type for e in await sf.events(handle.run_id)]
        assert events.count("node_complete") == 2 and "run_resumed" in events
        assert (await sf.get_run(handle.run_id)).result_json == resumed.result

    async def test_resume_never_reads_the_warm_tier(self, clock: FakeClock) -> None:
        """With a tier that fails on any read: pause, signal, resume, history all work."""
        ws = f"ws-{uuid.uuid4().hex[:10]}"
        warm = ExplodingWarm(open_warm("memory://", ws))
        cold = adapter_from_url("memory://", workspace_id=ws)
        async with Starflow(mirror(cold, warm, clock=clock), clock=clock,
                            maintenance=False) as sf:
            first = await sf.run(approval_flow, "o-1")
            assert (await sf.signal(first.run_id, "approval", True)).status == "success"
            second = await sf.run(approval_flow, "o-2")
            assert second.wake_token
            assert (await sf.resume(second.wake_token, False)).status == "success"
            assert await sf.result(second.run_id) == {"order": "o-2", "total": 3,
                                                      "decision": False}
            assert len(await sf.events(first.run_id)) > 0
            assert len(await sf.list_runs()) == 2
        assert warm.reads == 0


async def _swept(sf: Starflow) -> bool:
    return drainer_of(sf).sweeps >= 1
