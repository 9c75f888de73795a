"""The write seam's vocabulary: the :class:`Op` values a boundary writes, the
:class:`Guard` a :class:`Unit` needs, and the :class:`Command` read-modify-writes
served by :meth:`~starflow.adapters.base.WorkflowStateAdapter.perform`.

Plain data, no I/O: the port (``base.py``) builds them, each adapter turns them
into its dialect's statements (``_sql.py``), wrappers (the mirror, the fault
injector) inspect them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Generic, TypeVar

import msgspec

from ..records import (
    DueStarts,
    JobRecord,
    JobSpec,
    PoolLimits,
    PrunedBatch,
    RunInfo,
    ScheduleRecord,
    SweepResult,
)

__all__ = [
    "JSON_RUN_COLUMNS",
    "UPDATABLE_RUN_COLUMNS",
    "AfterClaim",
    "AfterPrune",
    "AfterQueueDue",
    "AfterRearm",
    "AfterSweep",
    "ClaimJobs",
    "ClaimRuns",
    "Command",
    "DeleteSchedule",
    "DeleteSessionVars",
    "DeleteSignal",
    "DeleteWaits",
    "EnsureDefinition",
    "ExpireSessionVars",
    "FailRunJobs",
    "FinishJob",
    "GetSecret",
    "Guard",
    "HeartbeatJob",
    "InsertEvent",
    "InsertJob",
    "InsertOutbox",
    "InsertRun",
    "InsertSignal",
    "InsertStreamItem",
    "InsertWait",
    "Mark",
    "MarkOutboxApplied",
    "Op",
    "PruneOutbox",
    "PruneRuns",
    "QueueDueStarts",
    "RearmDebounced",
    "SetPoolLimits",
    "SetPoolPaused",
    "SweepLeases",
    "Unit",
    "UpdateRun",
    "UpdateSchedule",
    "UpsertAttribute",
    "UpsertEventValue",
    "UpsertSchedule",
    "UpsertSessionVar",
]

# ---------------------------------------------------------------------------
# The write seam
# ---------------------------------------------------------------------------

#: Columns of ``workflow_runs`` an :class:`UpdateRun` may set.
UPDATABLE_RUN_COLUMNS = frozenset(
    {
        "status",
        "completed_at",
        "duration_ms",
        "checkpoint_json",
        "error",
        "claim_state",
        "runner_pool",
        "leased_by",
        "lease_until",
        "last_heartbeat",
        "result_json",
        "definition_id",
        "claim_attempts",
        "failure_json",
        "continued_as",
        "deadline_at",
        "phase",
        # The time of the run's latest claim: cleared by a retry, so a retried
        # run does not count as keeping a pool slot (keep_slot) it gave up at its end.
        "claimed_at",
    }
)
#: Columns holding JSON (encoded by the adapter).
JSON_RUN_COLUMNS = frozenset({"checkpoint_json", "input_json", "result_json", "failure_json",
                              "phase"})


class Op(msgspec.Struct, frozen=True, kw_only=True, tag=True):
    """One write of a unit. ``method`` names the boundary that produced it.

    ``same_call`` marks the second and later ops of one boundary call that
    writes several (``on_run_paused``: the row update and its event), so
    :attr:`Unit.methods` counts calls exactly, however a unit's calls repeat.
    """

    method: str
    same_call: bool = False


class Mark(Op, frozen=True, kw_only=True):
    """A boundary call that had nothing to write (e.g. an unchanged phase).

    Adapters ignore it; it keeps the call visible to wrappers that observe units.
    """


class InsertRun(Op, frozen=True, kw_only=True):
    run_id: str
    values: dict[str, Any]


class UpdateRun(Op, frozen=True, kw_only=True):
    run_id: str
    values: dict[str, Any]


class InsertEvent(Op, frozen=True, kw_only=True):
    run_id: str
    event_type: str
    node_id: str | None
    payload: Any
    created_at: datetime


class UpsertAttribute(Op, frozen=True, kw_only=True):
    """Set one searchable attribute of a run (``value`` is its JSON text)."""

    run_id: str
    key: str
    value: str
    updated_at: datetime


class UpsertEventValue(Op, frozen=True, kw_only=True):
    """Set a run's durable event ``key`` to ``value`` (last write wins)."""

    run_id: str
    key: str
    value: Any
    node_id: str | None
    updated_at: datetime


class InsertStreamItem(Op, frozen=True, kw_only=True):
    """Append item ``(seq, sub)`` to a run's stream ``key``; a second insert of it is a
    no-op. ``sub`` None (a write from inside a step): one past the highest of ``seq``'s."""

    run_id: str
    key: str
    seq: int
    value: Any
    closed: bool
    node_id: str | None
    created_at: datetime
    sub: int | None = 0


class UpsertSessionVar(Op, frozen=True, kw_only=True):
    session_id: str
    key: str
    value: Any
    run_id: str | None
    keep_until: datetime | None
    updated_at: datetime


class DeleteSessionVars(Op, frozen=True, kw_only=True):
    """Drop the session vars a run created that were not kept past it."""

    run_id: str


class InsertWait(Op, frozen=True, kw_only=True):
    run_id: str
    node_id: str
    event: str | None
    deadline: datetime | None
    created_at: datetime


class DeleteWaits(Op, frozen=True, kw_only=True):
    run_id: str


class InsertSignal(Op, frozen=True, kw_only=True):
    run_id: str
    event: str
    payload: Any
    created_at: datetime


class DeleteSignal(Op, frozen=True, kw_only=True):
    signal_id: int


class InsertOutbox(Op, frozen=True, kw_only=True):
    run_id: str | None
    kind: str
    payload: Any
    created_at: datetime


class InsertJob(Op, frozen=True, kw_only=True):
    """Insert a ``worker_jobs`` row; a second insert with the same idempotency key is a
    no-op while the job is queued or claimed, and queues a finished one again (a
    retried run's dispatch)."""

    job: JobSpec
    created_at: datetime


class FinishJob(Op, frozen=True, kw_only=True):
    """Record a job's outcome (only while it is queued or claimed) and drop its lease."""

    job_id: str
    status: str  # complete | failed
    result: Any
    error: Any
    completed_at: datetime


class FailRunJobs(Op, frozen=True, kw_only=True):
    """Fail every unfinished (queued or claimed) job of a run and drop their leases."""

    run_id: str
    error: Any
    completed_at: datetime


class Guard(msgspec.Struct, frozen=True, kw_only=True):
    """The condition a unit needs, checked in the same transaction as its writes.

    Attributes:
        run_id: The run row the condition is about (it must exist in scope).
        leased_by: If set, the row's ``leased_by`` must equal it (lease fencing).
        status_in: If set, the row's ``status`` must be one of these.
        wait_node: If set, a wait registration for this node must exist
            (exactly one wake wins it, because the wake deletes it).
        no_signal: If set, no signal for this event may be queued for the run
            (of two early wakes of one wait, exactly one is kept).
        not_held: If set, the run may not be paused by an operator
            (``claim_state`` held, ``Starflow.pause``): a wake then writes
            nothing and the run's signal stays queued until it is resumed.
        held: If set, the run must be paused by an operator (its resume).
    """

    run_id: str
    leased_by: str | None = None
    status_in: tuple[str, ...] | None = None
    wait_node: str | None = None
    no_signal: str | None = None
    not_held: bool = False
    held: bool = False


class Unit(msgspec.Struct, kw_only=True):
    """Writes that commit together or not at all.

    Attributes:
        ops: The writes, in order.
        guard: Condition checked first; when it fails nothing is written.
        durable: False for writes that carry no durability promise (a
            ``node_start``): committed in order but without waiting for a flush.
        held: After execution through :meth:`WorkflowStateAdapter.unit`:
            whether the guard held and the ops were written.
    """

    ops: list[Op] = msgspec.field(default_factory=list)
    guard: Guard | None = None
    durable: bool = True
    held: bool | None = None

    @property
    def run_id(self) -> str | None:
        """The run this unit writes for: its guard's, else its first op's (None if neither)."""
        if self.guard is not None:
            return self.guard.run_id
        for op in self.ops:
            run_id = getattr(op, "run_id", None)
            if isinstance(run_id, str):
                return run_id
        return None

    @property
    def releases_lease(self) -> bool:
        """Whether the unit clears its run's lease (the run ends, pauses or is handed back)."""
        return any(isinstance(op, UpdateRun) and "leased_by" in op.values
                   and op.values["leased_by"] is None for op in self.ops)

    @property
    def methods(self) -> list[str]:
        """The boundary methods that built this unit, in call order (one entry per call).

        Exact: two calls of one method back to back (a ``patched()`` marker's
        ``on_node_complete`` and a step's) are two entries; the several ops of
        one call (``Op.same_call``) are one.
        """
        return [op.method for op in self.ops if not op.same_call]

#: Extra ops for a claim / sweep transaction, computed from what it changed.
AfterClaim = Callable[[list[RunInfo]], list[Op]]
AfterSweep = Callable[[list[SweepResult]], list[Op]]
#: Extra ops for a debounce re-arm, from the id of the run it changed.
AfterRearm = Callable[[str], list[Op]]
#: Extra ops for a prune batch, from the ids of the runs it deleted.
AfterPrune = Callable[[list[str]], list[Op]]
#: The ids of the delayed starts a :class:`QueueDueStarts` queued → more ops
#: written in the same transaction (the mirror's outbox rows).
AfterQueueDue = Callable[[list[str]], list[Op]]

# ---------------------------------------------------------------------------
# The sibling seam: read-modify-writes
# ---------------------------------------------------------------------------

R = TypeVar("R")


class Command(Generic[R]):
    """A read-modify-write: one transaction whose writes depend on what it reads.

    The sibling of :class:`Unit` for the writes a list of ops cannot describe
    (a claim picks its rows, a sweep computes each run's outcome, an insert
    returns the id that won). Every such write of the port reaches the adapter
    as a command through :meth:`WorkflowStateAdapter.perform`, so wrappers
    (fault injection, the mirror, spies) see all of them in one place.
    ``method`` is the public method that builds the command (``claim_runs``);
    ``R`` is what :meth:`~WorkflowStateAdapter.perform` returns for it.
    """

    __slots__ = ()
    method: ClassVar[str]


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRuns(Command[list[RunInfo]]):
    """Claim queued runs (see :meth:`WorkflowStateAdapter.claim_runs`)."""

    method: ClassVar[str] = "claim_runs"
    runner_id: str
    pool: str | None
    now: datetime
    lease_until: datetime
    limit: int = 1
    #: Sorted workflow names the claimer serves; None: every workflow.
    workflows: tuple[str, ...] | None = None
    after: AfterClaim | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SweepLeases(Command[list[SweepResult]]):
    """One lease-sweep pass (see :meth:`WorkflowStateAdapter.expire_old_leases`)."""

    method: ClassVar[str] = "expire_old_leases"
    now: datetime
    reason: str = "runner_lost"
    after: AfterSweep | None = None
    #: False (``StarflowConfig.lost_runs="fail"``): abandon every lost run.
    requeue: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class EnsureDefinition(Command[str]):
    """Insert a workflow definition unless it exists; its id."""

    method: ClassVar[str] = "ensure_definition"
    name: str
    version: int
    code_hash: str
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ExpireSessionVars(Command[int]):
    """Delete the session vars whose ``keep_until`` has passed; how many."""

    method: ClassVar[str] = "expire_session_vars"
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class GetSecret(Command["str | None"]):
    """Read a wake-token secret, creating it on first use if ``create``."""

    method: ClassVar[str] = "get_secret"
    key_id: str
    now: datetime
    create: bool = True


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimJobs(Command[list[JobRecord]]):
    """Claim worker jobs of a pool (see :meth:`WorkflowStateAdapter.claim_jobs`)."""

    method: ClassVar[str] = "claim_jobs"
    worker_id: str
    pool: str
    now: datetime
    lease_until: datetime
    limit: int = 1


@dataclass(frozen=True, slots=True, kw_only=True)
class HeartbeatJob(Command[bool]):
    """Extend a claimed job's lease if ``worker_id`` still holds it."""

    method: ClassVar[str] = "heartbeat_job"
    job_id: str
    worker_id: str
    now: datetime
    lease_until: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class MarkOutboxApplied(Command[int]):
    """Set ``applied_at`` on unapplied outbox rows; how many."""

    method: ClassVar[str] = "mark_outbox_applied"
    ids: tuple[int, ...]
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class PruneOutbox(Command[int]):
    """Delete outbox rows applied before ``applied_before``; how many."""

    method: ClassVar[str] = "prune_outbox"
    applied_before: datetime


# -- schedules and flow control (#18) -------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UpsertSchedule(Command[ScheduleRecord]):
    """Create a schedule or update the one with its id; the stored row."""

    method: ClassVar[str] = "upsert_schedule"
    schedule: ScheduleRecord
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class UpdateSchedule(Command[bool]):
    """Compare-and-set a schedule: write ``values`` only while it is at ``revision``."""

    method: ClassVar[str] = "update_schedule"
    schedule_id: str
    revision: int
    values: Mapping[str, Any]
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class DeleteSchedule(Command[bool]):
    """Delete a schedule; whether there was one."""

    method: ClassVar[str] = "delete_schedule"
    schedule_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class SetPoolLimits(Command[None]):
    """Store a pool's limits (replacing them); limits with none set delete the row."""

    method: ClassVar[str] = "set_pool_limits"
    limits: PoolLimits
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class SetPoolPaused(Command[None]):
    """Pause or resume a pool (``sf.pause_pool``), keeping its limits."""

    method: ClassVar[str] = "set_pool_paused"
    pool: str
    paused: bool
    now: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class RearmDebounced(Command["str | None"]):
    """Replace the input and ``not_before`` of the pending debounced run; its id, or None.

    Pending: queued and never claimed. ``after`` maps the changed run's id to
    more ops written in the same transaction (the mirror's outbox row).
    """

    method: ClassVar[str] = "rearm_debounced"
    template_id: str
    pool: str | None
    debounce_key: str
    input: Any
    not_before: datetime
    after: AfterRearm | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueDueStarts(Command[DueStarts]):
    """Queue the runs started for later whose time has come (#30).

    Runs of claim_state ``scheduled`` whose ``not_before`` is at or before
    ``now`` move to claim_state ``queued`` (their status stays ``queued``),
    announced like any queued run. The result also names the earliest start
    still ahead, for the caller's next wake-up. ``after`` maps the queued
    runs' ids to more ops written in the same transaction.
    """

    method: ClassVar[str] = "queue_due_starts"
    now: datetime
    after: AfterQueueDue | None = None
@dataclass(frozen=True, slots=True, kw_only=True)
class PruneRuns(Command[PrunedBatch]):
    """Delete one batch of ended runs with every row that belongs to them.

    A run qualifies when its status is one of ``statuses`` (ended ones only),
    it ended (``completed_at``) before ``ended_before``, it is of ``workflow``
    (if given), it is one of ``run_ids`` (if given), it comes after ``cursor``
    in ``(completed_at, id)`` order, and (where runs have parents) neither its
    parent nor any of its children is still active. At most ``limit`` runs,
    oldest end first, in one short transaction; on PostgreSQL rows another
    pruner holds are skipped (``SKIP LOCKED``). Session vars bound to a run are
    deleted unless kept past ``now`` (``keep_until``). ``dry_run``: select
    only, delete nothing. ``after`` maps the deleted runs' ids to more ops
    written in the same transaction, after the deletes (the mirror's outbox
    rows that make the warm tier forget them).
    """

    method: ClassVar[str] = "prune_runs"
    ended_before: datetime
    now: datetime
    statuses: tuple[str, ...] = ("cancelled", "error", "success")
    workflow: str | None = None
    run_ids: tuple[str, ...] | None = None
    cursor: tuple[datetime, str] | None = None
    limit: int = 500
    dry_run: bool = False
    after: AfterPrune | None = None
