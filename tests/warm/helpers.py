"""Helpers shared by the warm-tier tests."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starflow import Starflow
from starflow.adapters.base import WorkflowStateAdapter
from starflow.warm.base import Projection, WarmTier, event_row, run_columns, state_hash
from starflow.warm.drainer import OutboxDrainer
from starflow.warm.memory import InMemoryWarmTier

from .conftest import eventually


class FlakyWarm(WarmTier):
    """A real tier that fails every call while ``down`` (the warm tier is unreachable)."""

    def __init__(self, inner: WarmTier) -> None:
        super().__init__(workspace_id=inner.workspace_id, env=inner.env)
        self.inner = inner
        self.url = inner.url
        self.down = False
        self.failures = 0

    def _check(self) -> None:
        from starflow.errors import WarmTierError

        if self.down:
            self.failures += 1
            raise WarmTierError("injected: warm tier down")

    async def open(self) -> None:
        self._check()
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def apply(self, batch: Sequence[Projection]) -> None:
        self._check()
        await self.inner.apply(batch)

    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        self._check()
        return await self.inner.get_run(run_id)

    async def live_runs(self) -> list[dict[str, Any]]:
        self._check()
        return await self.inner.live_runs()

    def subscribe(self, run_id: str) -> Any:
        self._check()
        return self.inner.subscribe(run_id)

    async def hashes(self, run_ids: Sequence[str]) -> dict[str, str | None]:
        self._check()
        return await self.inner.hashes(run_ids)

    async def put_progress(self, run_id: str, node_id: str, data: Any) -> None:
        self._check()
        await self.inner.put_progress(run_id, node_id, data)

    async def session_var(self, session_id: str, key: str) -> Any:
        self._check()
        return await self.inner.session_var(session_id, key)


def drainer_of(sf: Starflow) -> OutboxDrainer:
    mt = sf._maintenance
    assert mt is not None and mt.drainer is not None, "maintenance with a warm tier expected"
    return mt.drainer


async def cold_hash(adapter: WorkflowStateAdapter, run_id: str) -> str | None:
    run = await adapter.get_run(run_id)
    if run is None:
        return None
    events = await adapter.list_events(run_id)
    return state_hash(run_columns(run), [event_row(e) for e in events])


async def in_step(sf: Starflow, run_ids: Sequence[str]) -> bool:
    """Whether the warm projection of every run equals cold."""
    warm = sf.warm
    assert warm is not None
    hashes = await warm.hashes(list(run_ids))
    for run_id in run_ids:
        if hashes[run_id] is None or hashes[run_id] != await cold_hash(sf.adapter, run_id):
            return False
    return True


async def drained(sf: Starflow) -> bool:
    return (await sf.outbox_status()).pending == 0


async def wait_drained(sf: Starflow, run_ids: Sequence[str]) -> None:
    async def done() -> bool:
        return await drained(sf) and await in_step(sf, run_ids)

    await eventually(done, what="outbox drained and warm equal to cold")


async def corrupt_by_hand(sf: Starflow, run_id: str, *, status: str = "error",
                          drop_events: bool = False) -> None:
    """Edit the warm tier's storage directly, behind the drainer's back."""
    warm = sf.warm
    if isinstance(warm, FlakyWarm):
        warm = warm.inner
    if isinstance(warm, InMemoryWarmTier):
        run = warm.store.scope(warm.workspace_id, warm.env).runs[run_id]
        run.columns["status"] = status
        if drop_events:
            run.events.clear()
        return
    from starflow.warm.redis_tier import RedisWarmTier

    assert isinstance(warm, RedisWarmTier)
    client = warm.client
    await client.hset(warm._k("run", run_id), "status", f'"{status}"')
    if drop_events:
        await client.delete(warm._k("events", run_id))
