"""Adapters that wrap another one: spies, fault injection, the warm-tier mirror."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from ..clock import Clock
from ..records import (
    ChildWait,
    DefinitionRecord,
    EventValue,
    JobRecord,
    OutboxLag,
    OutboxRow,
    PoolLimits,
    PoolUsage,
    QueuedRun,
    QueueStats,
    RunEvent,
    RunInfo,
    ScheduleRecord,
    SignalRecord,
    StreamItem,
    WaitRecord,
)
from .base import WorkflowStateAdapter
from .caller import CallerTransaction
from .pages import RunPage, RunPageQuery
from .seam import RunWatch
from .units import (
    Command,
    R,
    Unit,
)

__all__ = ["DelegatingAdapter"]


class DelegatingAdapter(WorkflowStateAdapter):
    """Base for adapters that wrap another one (spies, fault injection, mirror).

    Every boundary method is inherited, so it reaches :meth:`execute` here,
    which forwards to the inner adapter; likewise every read-modify-write
    reaches :meth:`perform`. Override :meth:`execute` and :meth:`perform` to
    observe or change writes, or any read to observe reads.
    """

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(workspace_id=inner.workspace_id, env=inner.env)
        self.inner = inner
        self.durable = inner.durable
        self.fuses_run_start = inner.fuses_run_start

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def migrate(self) -> list[int]:
        return await self.inner.migrate()

    @property
    def shared(self) -> bool:
        return self.inner.shared

    async def wait_for_work(self, clock: Clock, timeout: float) -> None:
        await self.inner.wait_for_work(clock, timeout)

    @contextlib.asynccontextmanager
    async def watch_run(self, run_id: str) -> AsyncIterator[RunWatch | None]:
        async with self.inner.watch_run(run_id) as watch:
            yield watch

    async def idle(self) -> None:
        await self.inner.idle()

    async def execute(self, unit: Unit) -> bool:
        return await self.inner.execute(unit)

    async def perform(self, command: Command[R]) -> R:
        return await self.inner.perform(command)

    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        return await self.inner.session_get(session_id, key, now=now)

    async def get_run(self, run_id: str) -> RunInfo | None:
        return await self.inner.get_run(run_id)

    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50,
                        attributes: Mapping[str, str] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        return await self.inner.list_runs(status=status, template_id=template_id,
                                          since=since, limit=limit, attributes=attributes,
                                          parent_run_id=parent_run_id)

    async def list_queued_runs(self, limit: int) -> list[QueuedRun]:
        return await self.inner.list_queued_runs(limit)

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        return await self.inner.list_runs_page(query)

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        return await self.inner.list_events(run_id, after_id=after_id)

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        return await self.inner.list_waits(run_id)

    async def get_run_attributes(self, run_id: str) -> dict[str, str]:
        return await self.inner.get_run_attributes(run_id)

    async def get_event_value(self, run_id: str, key: str) -> EventValue | None:
        return await self.inner.get_event_value(run_id, key)

    async def list_event_values(self, run_id: str) -> list[EventValue]:
        return await self.inner.list_event_values(run_id)

    async def read_stream(self, run_id: str, key: str, *, after_seq: int = 0,
                          after_sub: int = 0, limit: int = 500) -> list[StreamItem]:
        return await self.inner.read_stream(run_id, key, after_seq=after_seq,
                                            after_sub=after_sub, limit=limit)

    async def list_stream_items(self, run_id: str) -> list[StreamItem]:
        return await self.inner.list_stream_items(run_id)


    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        return await self.inner.due_waits(now, limit=limit)

    async def next_deadline(self) -> datetime | None:
        return await self.inner.next_deadline()

    async def due_run_deadlines(self, now: datetime, *, limit: int = 100) -> list[RunInfo]:
        return await self.inner.due_run_deadlines(now, limit=limit)

    async def child_waits(self, *, after: str | None, limit: int = 1000) -> list[ChildWait]:
        return await self.inner.child_waits(after=after, limit=limit)

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        return await self.inner.find_signal(run_id, event)

    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        return await self.inner.get_definition(definition_id)

    async def get_job(self, job_id: str) -> JobRecord | None:
        return await self.inner.get_job(job_id)

    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        return await self.inner.list_jobs(run_id=run_id, status=status, limit=limit)

    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        return await self.inner.pending_outbox(limit=limit)

    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        return await self.inner.outbox_lag(now, edges)


    # -- schedules and flow control (#18): reads ------------------------------

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        return await self.inner.get_schedule(schedule_id)

    async def list_schedules(self) -> list[ScheduleRecord]:
        return await self.inner.list_schedules()

    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        return await self.inner.due_schedules(now, limit=limit)

    async def next_schedule_due(self) -> datetime | None:
        return await self.inner.next_schedule_due()

    async def get_pool_limits(self, pool: str) -> PoolLimits | None:
        return await self.inner.get_pool_limits(pool)

    async def pool_usage(self, now: datetime) -> list[PoolUsage]:
        return await self.inner.pool_usage(now)

    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        return await self.inner.queue_stats(now)

    async def find_active_dedup(self, pool: str | None, dedup_key: str) -> str | None:
        return await self.inner.find_active_dedup(pool, dedup_key)

    async def caller_transaction(self, connection: object) -> CallerTransaction:
        # The start's ops are collected through this wrapper, then written by the
        # inner adapter's database on the caller's connection.
        return await self.inner.caller_transaction(connection)
