"""``NullWorkflowStateAdapter``: the no-op default of the state model.

Every write succeeds and is forgotten; every read finds nothing. Workflows run
(steps execute, results return) but nothing is durable: a run that pauses can
never be resumed, and queries find no runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from ..records import (
    RUN_STATUSES,
    ChildWait,
    DefinitionRecord,
    DueStarts,
    EventValue,
    JobRecord,
    OutboxLag,
    OutboxRow,
    PoolLimits,
    PoolUsage,
    PrunedBatch,
    QueuedRun,
    QueueStats,
    RunEvent,
    RunInfo,
    ScheduleRecord,
    SignalRecord,
    StreamItem,
    SweepResult,
    WaitRecord,
)
from .base import WorkflowStateAdapter
from .pages import RunPage, RunPageQuery
from .units import (
    ClaimJobs,
    ClaimRuns,
    CommandHandler,
    DeleteSchedule,
    EnsureDefinition,
    ExpireSessionVars,
    GetSecret,
    HeartbeatJob,
    MarkOutboxApplied,
    PruneOutbox,
    PruneRuns,
    QueueDueStarts,
    RearmDebounced,
    SetPoolLimits,
    SetPoolPaused,
    SweepLeases,
    Unit,
    UpdateSchedule,
    UpsertSchedule,
)

__all__ = ["NullWorkflowStateAdapter"]


class NullWorkflowStateAdapter(WorkflowStateAdapter, CommandHandler):
    """Accepts every write, stores nothing."""

    durable = False

    async def execute(self, unit: Unit) -> bool:
        return True

    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        return None

    async def get_run(self, run_id: str) -> RunInfo | None:
        return None

    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50,
                        attributes: Mapping[str, str] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        return []

    async def list_queued_runs(self, limit: int) -> list[QueuedRun]:
        return []

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        query.check()
        return RunPage(runs=[], counts=dict.fromkeys(RUN_STATUSES, 0) if query.counts else None)

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        return []

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        return []

    async def get_run_attributes(self, run_id: str) -> dict[str, str]:
        return {}

    async def get_event_value(self, run_id: str, key: str) -> EventValue | None:
        return None

    async def list_event_values(self, run_id: str) -> list[EventValue]:
        return []

    async def read_stream(self, run_id: str, key: str, *, after_seq: int = 0,
                          after_sub: int = 0, limit: int = 500) -> list[StreamItem]:
        return []

    async def list_stream_items(self, run_id: str) -> list[StreamItem]:
        return []

    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        return []

    async def next_deadline(self) -> datetime | None:
        return None

    async def due_run_deadlines(self, now: datetime, *, limit: int = 100) -> list[RunInfo]:
        return []

    async def child_waits(self, *, after: str | None, limit: int = 1000) -> list[ChildWait]:
        return []

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        return None

    # Read-modify-writes (reached through ``perform``): nothing to claim or sweep.

    async def _claim_runs(self, command: ClaimRuns) -> list[RunInfo]:
        return []

    async def _expire_old_leases(self, command: SweepLeases) -> list[SweepResult]:
        return []

    async def _ensure_definition(self, c: EnsureDefinition) -> str:
        import uuid

        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"starflow:{c.name}:{c.version}:{c.code_hash}"))

    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        return None

    async def _expire_session_vars(self, command: ExpireSessionVars) -> int:
        return 0

    async def _get_secret(self, command: GetSecret) -> str | None:
        return None

    async def _claim_jobs(self, command: ClaimJobs) -> list[JobRecord]:
        return []

    async def _heartbeat_job(self, command: HeartbeatJob) -> bool:
        return False

    async def get_job(self, job_id: str) -> JobRecord | None:
        return None

    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        return []

    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        return []

    async def _mark_outbox_applied(self, command: MarkOutboxApplied) -> int:
        return 0

    async def _prune_outbox(self, command: PruneOutbox) -> int:
        return 0

    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        return OutboxLag(pending=0, oldest_created_at=None, older_than=tuple(0 for _ in edges))

    # -- schedules and flow control (#18): stored nowhere ---------------------

    async def _upsert_schedule(self, command: UpsertSchedule) -> ScheduleRecord:
        return command.schedule

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        return None

    async def list_schedules(self) -> list[ScheduleRecord]:
        return []

    async def _delete_schedule(self, command: DeleteSchedule) -> bool:
        return False

    async def _update_schedule(self, command: UpdateSchedule) -> bool:
        return False

    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        return []

    async def next_schedule_due(self) -> datetime | None:
        return None

    async def _set_pool_limits(self, command: SetPoolLimits) -> None:
        return None

    async def _set_pool_paused(self, command: SetPoolPaused) -> None:
        return None

    async def get_pool_limits(self, pool: str) -> PoolLimits | None:
        return None

    async def pool_usage(self, now: datetime) -> list[PoolUsage]:
        return []

    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        return []

    async def find_active_dedup(self, pool: str | None, dedup_key: str) -> str | None:
        return None

    async def _rearm_debounced(self, command: RearmDebounced) -> str | None:
        return None

    async def _queue_due_starts(self, command: QueueDueStarts) -> DueStarts:
        return DueStarts()

    async def _prune_runs(self, command: PruneRuns) -> PrunedBatch:
        raise NotImplementedError(
            f"{type(self).__name__} cannot perform {type(command).__name__}: "
            "it stores no runs to prune")
