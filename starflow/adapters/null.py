"""``NullWorkflowStateAdapter``: the no-op default of the state model.

Every write succeeds and is forgotten; every read finds nothing. Workflows run
(steps execute, results return) but nothing is durable: a run that pauses can
never be resumed, and queries find no runs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from .base import (
    RUN_STATUSES,
    AfterClaim,
    AfterSweep,
    DefinitionRecord,
    JobRecord,
    OutboxLag,
    OutboxRow,
    RunEvent,
    RunInfo,
    SignalRecord,
    SweepResult,
    Unit,
    WaitRecord,
    WorkflowStateAdapter,
)
from .pages import RunPage, RunPageQuery

__all__ = ["NullWorkflowStateAdapter"]


class NullWorkflowStateAdapter(WorkflowStateAdapter):
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
                        since: datetime | None = None, limit: int = 50) -> list[RunInfo]:
        return []

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        query.check()
        return RunPage(runs=[], counts=dict.fromkeys(RUN_STATUSES, 0) if query.counts else None)

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        return []

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        return []

    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        return []

    async def next_deadline(self) -> datetime | None:
        return None

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        return None

    async def claim_runs(self, runner_id: str, *, pool: str | None, now: datetime,
                         lease_until: datetime, limit: int = 1,
                         workflows: Collection[str] | None = None,
                         after: AfterClaim | None = None) -> list[RunInfo]:
        return []

    async def expire_old_leases(self, now: datetime, reason: str = "runner_lost",
                                *, after: AfterSweep | None = None) -> list[SweepResult]:
        return []

    async def ensure_definition(self, name: str, version: int, code_hash: str,
                                *, now: datetime) -> str:
        import uuid

        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"starflow:{name}:{version}:{code_hash}"))

    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        return None

    async def expire_session_vars(self, now: datetime) -> int:
        return 0

    async def get_secret(self, key_id: str, *, now: datetime, create: bool = True
                         ) -> str | None:
        return None

    async def claim_jobs(self, worker_id: str, *, pool: str, now: datetime,
                         lease_until: datetime, limit: int = 1) -> list[JobRecord]:
        return []

    async def heartbeat_job(self, job_id: str, worker_id: str, *, now: datetime,
                            lease_until: datetime) -> bool:
        return False

    async def get_job(self, job_id: str) -> JobRecord | None:
        return None

    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        return []

    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        return []

    async def mark_outbox_applied(self, ids: Sequence[int], *, now: datetime) -> int:
        return 0

    async def prune_outbox(self, applied_before: datetime) -> int:
        return 0

    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        return OutboxLag(pending=0, oldest_created_at=None, older_than=tuple(0 for _ in edges))
