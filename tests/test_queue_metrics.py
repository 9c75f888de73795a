"""Queue metrics per pool (#30 item 9): ``starflow_queue_depth``,
``starflow_queue_oldest_age_seconds`` and ``starflow_runs_running``, read by
workers every ``metrics_interval`` (one ``queue_stats`` query) on the fake clock."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import anyio
import pytest

import starflow
from starflow import ConfigError, Starflow
from starflow import observability as obs
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.records import QueueStats
from starflow_testing import FakeClock
from starflow_testing._quiesce import quiesce

prometheus_client = pytest.importorskip("prometheus_client")

from prometheus_client import CollectorRegistry  # noqa: E402

START = datetime(2030, 1, 1, tzinfo=UTC)


@starflow.workflow(name="qm-job")
async def job(n: int) -> int:
    return n


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    obs.disable()


@pytest.fixture
def registry() -> CollectorRegistry:
    registry = CollectorRegistry()
    obs.enable_metrics(registry)
    return registry


def gauges(registry: CollectorRegistry, pool: str) -> tuple[float | None, ...]:
    return tuple(registry.get_sample_value(name, {"pool": pool}) for name in (
        "starflow_queue_depth", "starflow_queue_oldest_age_seconds", "starflow_runs_running"))


class Counting(DelegatingAdapter):
    """Counts the queue reads."""

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self.reads = 0

    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        self.reads += 1
        return await self.inner.queue_stats(now)


@asynccontextmanager
async def app(db_url: str, workspace_id: str) -> AsyncIterator[tuple[Starflow, FakeClock,
                                                                    Counting]]:
    adapter = Counting(adapter_from_url(db_url, workspace_id=workspace_id))
    # Time moves on only once the queries in flight are answered.
    clock = FakeClock(START, settle=lambda: quiesce(adapter.idle))
    async with Starflow(adapter, clock=clock, maintenance=False) as sf:
        yield sf, clock, adapter


class TestValues:
    async def test_depth_age_and_running_per_pool(self, db_url: str, workspace_id: str,
                                                  registry: CollectorRegistry) -> None:
        async with app(db_url, workspace_id) as (sf, clock, adapter):
            # One run of pool cpu executing (claimed by another runner).
            await sf.options(pool="cpu").start(job, 0)
            claimed = await adapter.claim_runs("elsewhere", pool="cpu", now=clock.now(),
                                               lease_until=clock.now() + timedelta(minutes=1))
            assert len(claimed) == 1
            await sf.start(job, 1)                            # no pool, queued at +0 s
            await clock.advance(10)
            await sf.options(pool="gpu").start(job, 2)        # gpu, +10 s
            await clock.advance(10)
            await sf.options(pool="gpu").start(job, 3)        # gpu, +20 s
            # Not claimable now: started for later, and debounced until +80 s.
            await sf.options(start_after=timedelta(hours=1)).start(job, 4)
            await sf.options(pool="gpu", debounce=timedelta(seconds=60),
                             debounce_key="k").start(job, 5)
            await clock.advance(10)                           # now: +30 s

            worker = sf.worker(timers=False)
            await worker.publish_queue_metrics()
            assert adapter.reads == 1
            assert gauges(registry, "") == (1, 30, 0)
            assert gauges(registry, "gpu") == (2, 20, 0)
            assert gauges(registry, "cpu") == (0, 0, 1)

            # Two hours on: the delayed start is queued (by a worker's claim pass,
            # here the adapter call it makes) and the debounced run is due: both count.
            await clock.advance(7200)                         # now: +7230 s
            await adapter.queue_due_starts(clock.now())
            await worker.publish_queue_metrics()
            assert gauges(registry, "") == (2, 7230, 0)
            assert gauges(registry, "gpu") == (3, 7220, 0)

            # A pool that emptied reads 0, not its last value.
            await adapter.claim_runs("elsewhere", pool="gpu", now=clock.now(), limit=10,
                                     lease_until=clock.now() + timedelta(minutes=1))
            await worker.publish_queue_metrics()
            assert gauges(registry, "gpu") == (0, 0, 3)
            assert gauges(registry, "") == (0, 0, 2)  # its runs fit the gpu claim too

    async def test_requeued_run_counts_from_its_last_heartbeat(
            self, db_url: str, workspace_id: str, registry: CollectorRegistry) -> None:
        """A run taken back from a lost runner was queued again when the sweep found
        it: it counts from its runner's last heartbeat, not from its start."""
        async with app(db_url, workspace_id) as (sf, clock, adapter):
            await sf.start(job, 1)
            await clock.advance(600)
            await adapter.claim_runs("lost", pool=None, now=clock.now(),
                                     lease_until=clock.now() + timedelta(seconds=30))
            await clock.advance(60)
            assert len(await adapter.expire_old_leases(clock.now())) == 1
            await clock.advance(5)
            await sf.worker(timers=False).publish_queue_metrics()
            assert gauges(registry, "") == (1, 65, 0)


class TestRefresh:
    async def test_one_read_per_interval_only_with_metrics(self, db_url: str,
                                                            workspace_id: str) -> None:
        async with app(db_url, workspace_id) as (sf, clock, adapter):
            worker = sf.worker(timers=False, metrics_interval=15)
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await clock.advance(60)
                assert adapter.reads == 0  # metrics not enabled: nothing is read
                await worker.drain()

            registry = CollectorRegistry()
            obs.enable_metrics(registry)
            await sf.start(job, 1)
            await clock.advance(3)
            worker = sf.worker(timers=False, metrics_interval=15)
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await quiesce(adapter.idle)
                assert adapter.reads == 1
                for reads in range(2, 6):  # one at start, then one per 15 s
                    await clock.advance(14.9)
                    assert adapter.reads == reads - 1
                    await clock.advance(0.1)
                    assert adapter.reads == reads
                assert gauges(registry, "")[0] == 0  # the run was claimed
                await worker.drain()
            assert adapter.reads == 5

    async def test_interval_must_be_positive(self) -> None:
        async with Starflow.open("memory://", maintenance=False) as sf:
            with pytest.raises(ConfigError, match="metrics_interval must be > 0"):
                sf.worker(metrics_interval=0)
