"""The state model's records: typed rows the adapters return and take.

:class:`RunInfo` (a ``workflow_runs`` row), :class:`RunEvent`, waits, signals,
definitions, worker jobs, outbox rows, the run statuses and claim states. They
are plain ``msgspec`` structs with no behaviour beyond aliases, in the base
layer so that every layer above (adapters, warm tier, runtime, CLI) can use
them without depending on the adapter port.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec

from .failure import RunFailure

__all__ = [
    "CLAIM_STATES",
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "DefinitionRecord",
    "JobRecord",
    "JobSpec",
    "OutboxLag",
    "OutboxRow",
    "PrunedBatch",
    "RunEvent",
    "RunInfo",
    "SignalRecord",
    "StartOptions",
    "SweepResult",
    "WaitRecord",
]


RUN_STATUSES = ("queued", "running", "paused", "success", "error", "cancelled")
TERMINAL_STATUSES = frozenset({"success", "error", "cancelled"})
CLAIM_STATES = ("queued", "claimed", "running", "complete", "failed", "abandoned")


class RunInfo(msgspec.Struct, frozen=True, kw_only=True):
    """One ``workflow_runs`` row, typed. Column names are the state model's."""

    id: str
    template_id: str | None
    workspace_id: str
    env: str
    status: str
    started_at: datetime | None
    completed_at: datetime | None = None
    duration_ms: int | None = None
    checkpoint_json: dict[str, Any] | None = None
    error: str | None = None
    claim_state: str = "running"
    runner_pool: str | None = None
    leased_by: str | None = None
    lease_until: datetime | None = None
    last_heartbeat: datetime | None = None
    claim_attempts: int = 0
    definition_id: str | None = None
    input_json: Any = None
    result_json: Any = None
    start_mode: str = "inline"
    max_claim_attempts: int = 3
    workflow_version: int | None = None
    #: Why the run failed, as data (migration 024): see :attr:`failure`.
    failure_json: dict[str, Any] | None = None

    @property
    def run_id(self) -> str:
        """Alias of ``id``."""
        return self.id

    @property
    def failure(self) -> RunFailure | None:
        """Why the run ended in ``error``: type, message, node, attempts, traceback.

        ``None`` for a run that did not fail with an exception (``runner_lost``,
        ``cancelled``, a run that has not failed) or failed before migration 024.
        """
        return RunFailure.from_json(self.failure_json)

    @property
    def is_terminal(self) -> bool:
        """True once the run reached ``success``, ``error`` or ``cancelled``."""
        return self.status in TERMINAL_STATUSES


class RunEvent(msgspec.Struct, frozen=True, kw_only=True):
    """One ``workflow_run_events`` row."""

    id: int
    run_id: str
    event_type: str
    node_id: str | None
    payload_json: Any
    created_at: datetime

    @property
    def payload(self) -> Any:
        """Alias of ``payload_json``."""
        return self.payload_json


class WaitRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A registered wake: a run paused on a signal and/or a deadline."""

    run_id: str
    node_id: str
    event: str | None
    deadline: datetime | None
    created_at: datetime


class SignalRecord(msgspec.Struct, frozen=True, kw_only=True):
    """An undelivered signal in a run's inbox."""

    id: int
    run_id: str
    event: str
    payload: Any
    created_at: datetime


class DefinitionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A ``workflow_definitions`` row."""

    id: str
    name: str
    version: int
    code_hash: str
    created_at: datetime


class SweepResult(msgspec.Struct, frozen=True, kw_only=True):
    """One run the lease sweep acted on."""

    run_id: str
    leased_by: str | None
    action: str  # "requeued" or "abandoned"


class PrunedBatch(msgspec.Struct, frozen=True, kw_only=True):
    """One batch of a prune (:class:`~starflow.adapters.units.PruneRuns`).

    Attributes:
        run_ids: The runs deleted (a dry run: the runs that would be), oldest end first.
        cursor: ``(completed_at, id)`` of the last run the batch looked at; the
            next batch starts after it. None: the batch found no run.
        rows: Rows deleted per table (run rows under ``workflow_runs``); empty
            for a dry run.
    """

    run_ids: list[str]
    cursor: tuple[datetime, str] | None
    rows: dict[str, int] = msgspec.field(default_factory=dict)


class JobSpec(msgspec.Struct, frozen=True, kw_only=True):
    """A worker job a ``@step(pool=...)`` call dispatches (a ``worker_jobs`` row to insert).

    Attributes:
        id: The job id (a UUID derived from the idempotency key).
        run_id: The run waiting on the job.
        node_id: The step's node id (``step:render#1``); the run waits there.
        pool: Worker pool that serves it.
        step_name: Registered name of the step function.
        idempotency_key: ``run_id:node_id``; unique, so a job is never dispatched twice.
        input: The encoded call arguments ``{"args": [...], "kwargs": {...}}``.
        args_hash: Hash of ``input`` (recorded on the step's ``node_start``).
        max_attempts: Claims the job may use before a lost worker fails it.
    """

    id: str
    run_id: str
    node_id: str
    pool: str
    step_name: str
    idempotency_key: str
    input: Any
    args_hash: str | None = None
    max_attempts: int = 3


class JobRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One ``worker_jobs`` row.

    ``status`` is ``queued``, ``claimed`` (a worker holds the lease),
    ``complete`` or ``failed``.
    """

    id: str
    run_id: str
    node_id: str
    pool: str
    step_name: str
    idempotency_key: str
    input: Any
    status: str
    attempts: int
    max_attempts: int
    leased_by: str | None
    lease_until: datetime | None
    last_heartbeat: datetime | None
    result: Any
    error: Any
    created_at: datetime
    completed_at: datetime | None


class OutboxRow(msgspec.Struct, frozen=True, kw_only=True):
    """One ``mirror_outbox`` row: a projection waiting for (or pushed to) the warm tier."""

    id: int
    run_id: str | None
    kind: str
    payload: Any
    created_at: datetime
    applied_at: datetime | None = None


class OutboxLag(msgspec.Struct, frozen=True, kw_only=True):
    """Unapplied ``mirror_outbox`` rows by age (the drift signal).

    Attributes:
        pending: ``count(*) WHERE applied_at IS NULL`` in scope.
        oldest_created_at: ``created_at`` of the oldest pending row.
        older_than: For each age edge asked for (seconds, ascending), how many
            pending rows are at least that old.
    """

    pending: int
    oldest_created_at: datetime | None
    older_than: tuple[int, ...] = ()


class StartOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What ``on_run_start`` records besides the context."""

    input: Any = None
    status: str = "running"
    claim_state: str = "running"
    runner_pool: str | None = None
    definition_id: str | None = None
    start_mode: str = "inline"
    max_claim_attempts: int = 3
