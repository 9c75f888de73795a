"""The state model's records: typed rows the adapters return and take.

:class:`RunInfo` (a ``workflow_runs`` row), :class:`RunEvent`, waits, signals,
definitions, worker jobs, outbox rows, schedules and pool limits, the run
statuses and claim states. They
are plain ``msgspec`` structs with no behaviour beyond aliases, in the base
layer so that every layer above (adapters, warm tier, runtime, CLI) can use
them without depending on the adapter port.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import msgspec

from .failure import RunFailure
from .tokens import redact_wake_tokens

__all__ = [
    "BULK_STATUSES",
    "CLAIM_STATES",
    "MAX_REPORTED",
    "RUN_STATUSES",
    "TERMINAL_STATUSES",
    "BulkResult",
    "DefinitionRecord",
    "DueStarts",
    "EventValue",
    "JobRecord",
    "JobSpec",
    "OutboxLag",
    "OutboxRow",
    "PoolLimits",
    "PoolUsage",
    "PrunedBatch",
    "QueueStats",
    "QueuedRun",
    "RunEvent",
    "RunFilter",
    "RunInfo",
    "ScheduleRecord",
    "SignalRecord",
    "StartOptions",
    "StreamItem",
    "SweepResult",
    "WaitRecord",
]


RUN_STATUSES = ("queued", "running", "paused", "success", "error", "cancelled")
TERMINAL_STATUSES = frozenset({"success", "error", "cancelled"})
#: ``scheduled``: a run started for later (#30), ``queued`` once its time comes.
CLAIM_STATES = ("scheduled", "queued", "claimed", "running", "complete", "failed",
                "abandoned")
#: The statuses each bulk action applies to (a run in another is never matched).
BULK_STATUSES = {
    "cancel": ("queued", "running", "paused"),
    "retry": ("error",),
    "fork": ("success", "error", "cancelled"),
}


class RunFilter(msgspec.Struct, frozen=True, kw_only=True):
    """Which runs a bulk action (``Starflow.cancel_runs``, ``retry_runs``,
    ``fork_runs``) acts on: those matching every criterion given.

    At least one criterion, or ``all=True``, is required: an empty filter is
    refused rather than taken to mean every run.

    Attributes:
        status: Only runs in this status (it must be one the action applies
            to: ``cancel`` queued, running or paused runs; ``retry`` error
            runs; ``fork`` ended runs). Without it, every status the action
            applies to.
        template_id: Only runs of this workflow name.
        since: Only runs started at or after this timezone-aware time.
        until: Only runs started before this timezone-aware time.
        attributes: Only runs whose workflow set every one of these
            (``starflow.set_attributes``); values match exactly, type included.
        pool: Only runs queued for this runner pool.
        all: Match every run the action applies to (required when no other
            criterion is given).
    """

    status: str | None = None
    template_id: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    attributes: Mapping[str, str | int | bool] | None = None
    pool: str | None = None
    all: bool = False

    @property
    def empty(self) -> bool:
        """No criterion given (``all`` aside)."""
        return (self.status is None and self.template_id is None and self.since is None
                and self.until is None and not self.attributes and self.pool is None)


class BulkResult(msgspec.Struct, frozen=True, kw_only=True):
    """What a bulk action did.

    Attributes:
        action: ``cancel``, ``retry`` or ``fork``.
        dry_run: Nothing was written: ``matched`` is how many runs the action
            would be tried on.
        matched: Runs the filter matched (in a status the action applies to).
        acted: Runs the action was applied to.
        skipped: Runs left alone, by run id, with the reason: a run that ended
            (or was retried, cancelled) between the match and the action, a
            run whose history lacks ``fork_runs``' node. At most
            :data:`MAX_REPORTED` are listed; ``skipped_count`` counts them all.
        skipped_count: How many runs were skipped.
        failed: Runs the action raised an error for, by run id, with the
            error (the others were still acted on); at most :data:`MAX_REPORTED`.
        failed_count: How many runs failed.
        forks: ``fork_runs`` only: the new run of each source run (at most
            :data:`MAX_REPORTED`).
    """

    action: str
    dry_run: bool
    matched: int
    acted: int = 0
    skipped: dict[str, str] = msgspec.field(default_factory=dict)
    skipped_count: int = 0
    failed: dict[str, str] = msgspec.field(default_factory=dict)
    failed_count: int = 0
    forks: dict[str, str] = msgspec.field(default_factory=dict)


#: The most run ids a :class:`BulkResult` lists per kind (counts stay exact).
MAX_REPORTED = 1000


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
    #: The run that started this one as a child (migration 033), else ``None``.
    parent_run_id: str | None = None
    #: A child started with ``detached=True``: not cancelled with its parent.
    detached: bool = False
    #: When the run times out (``@workflow(timeout=)``, ``sf.options(timeout=)``).
    deadline_at: datetime | None = None
    #: The run this one continued as (``starflow.continue_as_new``, migration 034).
    continued_as: str | None = None
    #: The run's current phase (``starflow.context().phase``), set in the unit that
    #: records its ``phase`` event (migration 041); ``None`` if it never set one.
    phase: Any = None
    #: When the run may start, for a run started for later (``sf.start(...,
    #: start_at=)`` / ``start_after=``, migration 042) or debounced; else ``None``.
    #: Until then its ``status`` is ``queued`` and its ``claim_state``
    #: ``scheduled`` (a debounced run's stays ``queued``): no worker claims it.
    not_before: datetime | None = None
    #: The run key the run was started with (``sf.options(run_id="order-123")``,
    #: migration 048): its id is derived from it. ``None`` for a run started
    #: without one or with a UUID.
    run_key: str | None = None

    def _shown(self) -> list[tuple[str, Any]]:
        """The fields as a repr shows them: a paused run's checkpoint carries its
        live wake token (a bearer secret), redacted as the CLI and page show it."""
        return [(name, redact_wake_tokens(value) if name == "checkpoint_json" else value)
                for name, value in ((f, getattr(self, f)) for f in self.__struct_fields__)]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self._shown())
        return f"{type(self).__name__}({fields})"

    def __rich_repr__(self) -> Any:
        yield from self._shown()

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

    @property
    def starts_at(self) -> datetime | None:
        """When a run still queued for later may start (``not_before``); ``None``
        once it runs or ended, or for a run queued to start at once."""
        return self.not_before if self.status == "queued" else None


#: ``claim_state`` of a run paused by an operator (``Starflow.pause``): its status
#: is ``paused``; no worker claims it, no signal, timer or child's end wakes it
#: (signals stay queued), until ``Starflow.resume(run_id)``.
HELD = "held"


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


class QueuedRun(msgspec.Struct, frozen=True, kw_only=True):
    """A queued run and when its newest event was written (None: it has none)."""

    run: RunInfo
    last_event_at: datetime | None


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


class EventValue(msgspec.Struct, frozen=True, kw_only=True):
    """A durable event of a run (``starflow.set_event``): the latest value of its key."""

    run_id: str
    key: str
    value: Any
    #: The history node that set it (``event:<key>#n``).
    node_id: str | None
    updated_at: datetime


class StreamItem(msgspec.Struct, frozen=True, kw_only=True):
    """One item of a run's stream (``starflow.write_stream`` / ``close_stream``).

    ``seq`` numbers a key's items from 1 in write order; the closing item
    (``closed``) carries no value and is the key's last. Items written from
    inside a step (migration 047) take the ``seq`` of the workflow's last
    write to the key before the step started (0 if none) and a ``sub`` from
    1; the workflow's own writes have ``sub`` 0. Items are read in
    ``(seq, sub)`` order.
    """

    run_id: str
    key: str
    seq: int
    value: Any
    closed: bool
    #: The history node that wrote it (``stream:<key>#n``, or the step's node).
    node_id: str | None
    created_at: datetime
    #: 0 for a workflow-level write; from 1, in write order, for a step's.
    sub: int = 0


class DefinitionRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A ``workflow_definitions`` row."""

    id: str
    name: str
    version: int
    code_hash: str
    created_at: datetime


class ChildWait(msgspec.Struct, frozen=True, kw_only=True):
    """A run paused on a child run (``await handle.result()``), for the
    stranded-parent pass: whether the chain of the child it waits on has ended."""

    #: The paused parent.
    run_id: str
    #: The child its wait names.
    child_run_id: str
    #: The run that ends that child's chain (the child, or the last run it
    #: continued as) if it has ended; ``None`` while the chain goes on.
    ended_run_id: str | None


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


class DueStarts(msgspec.Struct, frozen=True, kw_only=True):
    """What queueing the due delayed starts did (``queue_due_starts``, #30).

    Attributes:
        queued: The ids of the runs whose start time came and that were queued.
        next_start: The earliest start time still ahead in the scope (``None``:
            no run waits for its time): when a worker should look again.
    """

    queued: tuple[str, ...] = ()
    next_start: datetime | None = None


class StartOptions(msgspec.Struct, frozen=True, kw_only=True):
    """What ``on_run_start`` records besides the context."""

    input: Any = None
    status: str = "running"
    claim_state: str = "running"
    runner_pool: str | None = None
    definition_id: str | None = None
    start_mode: str = "inline"
    max_claim_attempts: int = 3
    # Flow control (#18); written only when set, so other starts' rows are unchanged.
    priority: int = 0
    concurrency_key: str | None = None
    dedup_key: str | None = None
    debounce_key: str | None = None
    not_before: datetime | None = None
    # Child runs and deadlines (#17); written only when set.
    parent_run_id: str | None = None
    detached: bool = False
    deadline_at: datetime | None = None
    # The caller's run key (sf.options(run_id="order-123"), migration 048).
    run_key: str | None = None


class ScheduleRecord(msgspec.Struct, frozen=True, kw_only=True):
    """A ``starflow_schedules`` row: a cron schedule (``sf.schedule``).

    Attributes:
        id: The schedule's name, unique in its workspace.
        workflow: The workflow's name; ``workflow_version`` and ``definition_id``
            the definition registered when the schedule was written (a process
            that has a newer version registered starts that one).
        input: The encoded arguments (``{"args": [...], "kwargs": {...}}``).
        cron: The cron expression; ``timezone`` the IANA zone it is read in.
        overlap: ``skip``, ``buffer_one`` or ``allow``.
        catchup: How far back missed ticks still start after downtime.
        pool: The pool its runs are queued for.
        paused: Whether ticks are skipped (no catch-up on resume).
        next_fire_at: The earliest tick not yet handled (UTC).
        due_at: When a maintenance loop must look at the row again.
        pending_tick: A tick decided to start whose run may not exist yet.
        buffered_tick: ``buffer_one``: the tick waiting for the active run to end.
        last_tick: The last tick a run was started for; ``last_run_id`` its run.
        started: Runs started by ticks (not by ``trigger``).
        skipped_missed: Ticks skipped because they were older than ``catchup``.
        skipped_overlap: Ticks skipped because the previous run was still active.
        revision: Grows by one with every write (compare-and-set).
    """

    id: str
    workflow: str
    workflow_version: int
    definition_id: str | None
    input: Any
    cron: str
    timezone: str
    overlap: str
    catchup: timedelta
    pool: str | None
    paused: bool = False
    next_fire_at: datetime | None = None
    due_at: datetime | None = None
    pending_tick: datetime | None = None
    buffered_tick: datetime | None = None
    last_tick: datetime | None = None
    last_run_id: str | None = None
    started: int = 0
    skipped_missed: int = 0
    skipped_overlap: int = 0
    revision: int = 1
    created_at: datetime | None = None
    updated_at: datetime | None = None


class PoolLimits(msgspec.Struct, frozen=True, kw_only=True):
    """A pool's stored limits (``None``: no limit of that kind).

    Attributes:
        pool: The pool.
        concurrency: Runs of the pool executing at once, across every worker.
        rate_limit: Claims of runs of the pool per ``rate_period``.
        rate_period: The rate limit's sliding window.
        key_concurrency: Runs with one ``concurrency_key`` executing at once.
        key_rate_limit: Claims of runs with one ``concurrency_key`` per
            ``key_rate_period``.
        key_rate_period: The per-key rate limit's sliding window.
        fair: Claims go round robin across concurrency keys (weighted by
            ``key_weights``), not oldest first: one key's backlog cannot
            starve another key's runs.
        key_weights: Relative shares of the fair claim per key (default 1).
        keep_slot: A run of the pool keeps its slot (``concurrency``,
            ``key_concurrency``) from its first claim to its end, while it
            sleeps or waits too; by default a paused run releases it.
        paused: The pool is paused (``sf.pause_pool``): workers claim none of its
            runs until ``sf.resume_pool``; its running runs go on.
    """

    pool: str
    concurrency: int | None = None
    rate_limit: int | None = None
    rate_period: timedelta | None = None
    key_concurrency: int | None = None
    key_rate_limit: int | None = None
    key_rate_period: timedelta | None = None
    fair: bool = False
    key_weights: dict[str, int] | None = None
    keep_slot: bool = False
    updated_at: datetime | None = None
    paused: bool = False

    @property
    def limited(self) -> bool:
        """Whether any limit is set or the pool is paused (a pool with neither is
        not stored)."""
        return self.paused or self.fair or self.keep_slot or any(v is not None for v in (
            self.concurrency, self.rate_limit, self.key_concurrency, self.key_rate_limit))

    def weight(self, key: str) -> int:
        """The fair-claim weight of ``key`` (1 unless ``key_weights`` names it)."""
        return (self.key_weights or {}).get(key, 1)


class QueueStats(msgspec.Struct, frozen=True, kw_only=True):
    """One pool's queue as the queue metrics read it (``adapter.queue_stats``).

    ``pool`` None: runs queued for no pool (any worker may claim them).
    """

    pool: str | None
    #: Queued runs a worker may claim now: not those started for later whose
    #: time has not come (claim_state scheduled) nor debounced ones not yet due.
    queued: int
    #: When the longest-waiting of those was last queued: the latest of its
    #: start, its start time (``not_before``) and its last runner's heartbeat.
    oldest_queued_at: datetime | None
    #: Runs executing now (claimed or running).
    running: int


class PoolUsage(msgspec.Struct, frozen=True, kw_only=True):
    """What a pool uses now (``sf.pools()``, ``starflow pools``)."""

    pool: str
    limits: PoolLimits | None
    queued: int
    active: int
    claimed_in_window: int
    #: Runs of a ``keep_slot`` pool holding a slot while paused or queued again
    #: (counted against its concurrency besides ``active``).
    kept: int = 0
