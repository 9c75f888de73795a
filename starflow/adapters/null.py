"""``NullWorkflowStateAdapter``: the no-op default of the state model.

Every write succeeds and is forgotten; every read finds nothing (the reads'
bodies in :class:`~starflow.adapters.base.WorkflowStateAdapter` are its answers). Workflows run
(steps execute, results return) but nothing is durable: a run that pauses can
never be resumed, and queries find no runs.
"""

from __future__ import annotations

from ..records import (
    DueStarts,
    JobRecord,
    PrunedBatch,
    RunInfo,
    ScheduleRecord,
    SweepResult,
)
from .base import WorkflowStateAdapter
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

    # Read-modify-writes (reached through ``perform``): nothing to claim or sweep.

    async def _claim_runs(self, command: ClaimRuns) -> list[RunInfo]:
        return []

    async def _expire_old_leases(self, command: SweepLeases) -> list[SweepResult]:
        return []

    async def _ensure_definition(self, c: EnsureDefinition) -> str:
        import uuid

        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"starflow:{c.name}:{c.version}:{c.code_hash}"))

    async def _expire_session_vars(self, command: ExpireSessionVars) -> int:
        return 0

    async def _get_secret(self, command: GetSecret) -> str | None:
        return None

    async def _claim_jobs(self, command: ClaimJobs) -> list[JobRecord]:
        return []

    async def _heartbeat_job(self, command: HeartbeatJob) -> bool:
        return False

    async def _mark_outbox_applied(self, command: MarkOutboxApplied) -> int:
        return 0

    async def _prune_outbox(self, command: PruneOutbox) -> int:
        return 0

    # -- schedules and flow control (#18): stored nowhere ---------------------

    async def _upsert_schedule(self, command: UpsertSchedule) -> ScheduleRecord:
        return command.schedule

    async def _delete_schedule(self, command: DeleteSchedule) -> bool:
        return False

    async def _update_schedule(self, command: UpdateSchedule) -> bool:
        return False

    async def _set_pool_limits(self, command: SetPoolLimits) -> None:
        return None

    async def _set_pool_paused(self, command: SetPoolPaused) -> None:
        return None

    async def _rearm_debounced(self, command: RearmDebounced) -> str | None:
        return None

    async def _queue_due_starts(self, command: QueueDueStarts) -> DueStarts:
        return DueStarts()

    async def _prune_runs(self, command: PruneRuns) -> PrunedBatch:
        raise NotImplementedError(
            f"{type(self).__name__} cannot perform {type(command).__name__}: "
            "it stores no runs to prune")
