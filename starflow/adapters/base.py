"""The state adapter port: the seed's write boundaries over one atomic write seam.

Every lifecycle method of the state model (``on_run_start``, ``write_lease``,
``on_node_complete``…) is concrete here: it describes its writes as
:class:`Op` values and submits them. Concrete adapters implement one write
method, :meth:`WorkflowStateAdapter.execute`, which applies a :class:`Unit`
(a list of ops plus an optional :class:`Guard`) atomically and reports whether
the guard held, plus the reads.

Several boundary calls made inside ``async with adapter.unit(...)`` become one
unit and therefore one transaction. That single seam is what group commit,
the mirror outbox, fault injection and the durability level build on.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Collection, Mapping, Sequence
from contextvars import ContextVar, Token
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any

import msgspec

from ..clock import Clock
from ..context import WorkflowContext

if TYPE_CHECKING:  # pages builds on this module's records
    from .pages import RunPage, RunPageQuery

__all__ = [
    "DefinitionRecord",
    "DelegatingAdapter",
    "Guard",
    "JobRecord",
    "JobSpec",
    "Op",
    "OutboxLag",
    "OutboxRow",
    "RunEvent",
    "RunInfo",
    "SignalRecord",
    "StartOptions",
    "SweepResult",
    "Unit",
    "WaitRecord",
    "WorkflowStateAdapter",
]

# ---------------------------------------------------------------------------
# Records returned by reads
# ---------------------------------------------------------------------------

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

    @property
    def run_id(self) -> str:
        """Alias of ``id``."""
        return self.id

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
    }
)
#: Columns holding JSON (encoded by the adapter).
JSON_RUN_COLUMNS = frozenset({"checkpoint_json", "input_json", "result_json"})


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
    """Insert a ``worker_jobs`` row; a second insert with the same idempotency key is a no-op."""

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
    """

    run_id: str
    leased_by: str | None = None
    status_in: tuple[str, ...] | None = None
    wait_node: str | None = None
    no_signal: str | None = None


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

_pending: ContextVar[Unit | None] = ContextVar("starflow_pending_unit", default=None)


class UnitScope:
    """``async with adapter.unit(...) as unit``: collects the block's writes, then executes.

    A plain class rather than an ``asynccontextmanager``: every boundary of
    every run enters one, and a generator-based manager costs several
    microseconds more each time.
    """

    __slots__ = ("_adapter", "_token", "_unit")

    def __init__(self, adapter: WorkflowStateAdapter, unit: Unit) -> None:
        self._adapter = adapter
        self._unit = unit
        self._token: Token[Unit | None] | None = None

    async def __aenter__(self) -> Unit:
        if _pending.get() is not None:
            raise RuntimeError("adapter units do not nest")
        self._token = _pending.set(self._unit)
        return self._unit

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._token is not None
        _pending.reset(self._token)
        self._token = None
        if exc_type is None:
            unit = self._unit
            unit.held = (await self._adapter.execute(unit)
                         if unit.ops or unit.guard is not None else True)


class WorkflowStateAdapter(abc.ABC):
    """Port to the cold tier, bound to one (``workspace_id``, ``env``).

    Subclasses implement :meth:`execute` and the abstract reads; every
    lifecycle method of the state model is concrete and goes through
    :meth:`execute`, so an adapter cannot skip a boundary.
    """

    #: URL scheme(s) this adapter serves, for ``Starflow.open``.
    durable: bool = True

    def __init__(self, *, workspace_id: str = "celestial", env: str = "prod") -> None:
        if not workspace_id or not env:
            from ..errors import ConfigError

            raise ConfigError(
                f"workspace_id and env must be non-empty: workspace_id={workspace_id!r}, "
                f"env={env!r}"
            )
        self.workspace_id = workspace_id
        self.env = env

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect and apply migrations. Called once by ``Starflow.open``."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied (none by default)."""
        return []

    #: The migration versions :meth:`open` applied (``starflow migrate`` reports them).
    applied_migrations: tuple[int, ...] = ()

    @property
    def shared(self) -> bool:
        """Whether other processes may write this database (so background loops poll it)."""
        return self.durable

    async def wait_for_work(self, clock: Clock, timeout: float) -> None:
        """Return when queued runs may be claimable, or after ``timeout`` clock seconds.

        The default polls; PostgreSQL overrides it with ``LISTEN/NOTIFY``.
        """
        await clock.sleep(timeout)

    async def idle(self) -> None:  # noqa: B027 - optional hook
        """Return once no call of this adapter is waiting on the database.

        Test harnesses use it to tell "every task is blocked" from "a query is in
        flight on a driver thread or socket". Implementations must return
        without yielding when nothing is in flight. The default (no tracking)
        returns at once.
        """

    async def __aenter__(self) -> WorkflowStateAdapter:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the write seam ------------------------------------------------------

    @abc.abstractmethod
    async def execute(self, unit: Unit) -> bool:
        """Apply ``unit`` atomically.

        Returns:
            True if the guard held (or there was none) and every op was
            written; False if the guard failed, in which case nothing was.

        Raises:
            StorageError: the database failed; nothing was written.
        """

    def unit(self, *, guard: Guard | None = None, durable: bool = True) -> UnitScope:
        """Group the boundary calls made inside the block into one atomic unit.

        The unit is executed when the block exits normally; if the block raises,
        nothing is written. ``unit.held`` tells whether its guard held::

            async with adapter.unit(guard=Guard(run_id=r, leased_by=me)) as u:
                await adapter.on_node_complete(r, node, output, now=t)
            if not u.held: ...
        """
        return UnitScope(self, Unit(guard=guard, durable=durable))

    async def _submit(self, op: Op) -> None:
        pending = _pending.get()
        if pending is not None:
            pending.ops.append(op)
        else:
            await self.execute(Unit(ops=[op]))

    # -- the state model's write boundaries ----------------------------------

    async def on_run_start(
        self, run_id: str, ctx: WorkflowContext, options: StartOptions | None = None,
        *, now: datetime,
    ) -> None:
        """INSERT workflow_runs (status running, or queued for workers)."""
        opts = options or StartOptions()
        await self._submit(
            InsertRun(
                method="on_run_start",
                run_id=run_id,
                values={
                    "template_id": ctx.workflow,
                    "status": opts.status,
                    "started_at": now,
                    "claim_state": opts.claim_state,
                    "runner_pool": opts.runner_pool,
                    "definition_id": opts.definition_id,
                    "input_json": opts.input,
                    "start_mode": opts.start_mode,
                    "max_claim_attempts": opts.max_claim_attempts,
                    "workflow_version": ctx.version,
                },
            )
        )

    async def write_lease(self, run_id: str, runner_id: str, until: datetime,
                          *, now: datetime) -> None:
        """UPDATE claim_state, leased_by, lease_until, last_heartbeat."""
        await self._submit(
            UpdateRun(
                method="write_lease",
                run_id=run_id,
                values={
                    "claim_state": "running",
                    "leased_by": runner_id,
                    "lease_until": until,
                    "last_heartbeat": now,
                },
            )
        )

    async def refresh_lease(self, run_id: str, until: datetime, *, now: datetime) -> None:
        """UPDATE lease_until, last_heartbeat."""
        await self._submit(
            UpdateRun(
                method="refresh_lease",
                run_id=run_id,
                values={"lease_until": until, "last_heartbeat": now},
            )
        )

    async def on_node_start(self, run_id: str, node_id: str, input: Any,
                            *, now: datetime) -> None:
        """INSERT a node_start event."""
        await self._event("on_node_start", run_id, "node_start", node_id, input, now)

    async def on_node_complete(self, run_id: str, node_id: str, output: Any,
                               *, now: datetime) -> None:
        """INSERT a node_complete event."""
        await self._event("on_node_complete", run_id, "node_complete", node_id, output, now)

    async def on_node_error(self, run_id: str, node_id: str, error: Any,
                            *, now: datetime) -> None:
        """INSERT a node_error event (terminal: past the last retry)."""
        await self._event("on_node_error", run_id, "node_error", node_id, error, now)

    async def save_checkpoint(self, run_id: str, ctx: WorkflowContext) -> None:
        """UPSERT workflow_runs.checkpoint_json."""
        await self._submit(
            UpdateRun(method="save_checkpoint", run_id=run_id,
                      values={"checkpoint_json": ctx.snapshot()})
        )

    async def on_run_paused(self, run_id: str, ctx: WorkflowContext, *, now: datetime,
                            payload: Any = None) -> None:
        """UPDATE status paused; INSERT a run_paused event."""
        await self._submit(
            UpdateRun(method="on_run_paused", run_id=run_id, values={"status": "paused"})
        )
        await self._event("on_run_paused", run_id, "run_paused", None, payload, now,
                          same_call=True)

    async def on_run_resumed(self, run_id: str, *, now: datetime, payload: Any = None) -> None:
        """UPDATE status running, clear checkpoint; INSERT a run_resumed event."""
        await self._submit(
            UpdateRun(method="on_run_resumed", run_id=run_id,
                      values={"status": "running", "checkpoint_json": None})
        )
        await self._event("on_run_resumed", run_id, "run_resumed", None, payload, now,
                          same_call=True)

    async def on_run_complete(self, run_id: str, ctx: WorkflowContext, duration_ms: int,
                              *, now: datetime, result: Any = None) -> None:
        """UPDATE status success, duration; clear the checkpoint; drop run-scoped session vars."""
        await self._submit(
            UpdateRun(
                method="on_run_complete",
                run_id=run_id,
                values={
                    "status": "success",
                    "claim_state": "complete",
                    "completed_at": now,
                    "duration_ms": duration_ms,
                    "checkpoint_json": None,
                    "result_json": result,
                },
            )
        )
        await self._submit(DeleteSessionVars(method="on_run_complete", run_id=run_id,
                                             same_call=True))

    async def on_run_error(self, run_id: str, error: str, *, now: datetime,
                           duration_ms: int | None = None, status: str = "error",
                           claim_state: str = "failed") -> None:
        """UPDATE status error (or cancelled), message; clear the checkpoint; drop
        run-scoped session vars (an ended run's vars would otherwise live forever)."""
        await self._submit(
            UpdateRun(
                method="on_run_error",
                run_id=run_id,
                values={
                    "status": status,
                    "claim_state": claim_state,
                    "error": error,
                    "completed_at": now,
                    "duration_ms": duration_ms,
                    "checkpoint_json": None,
                },
            )
        )
        await self._submit(DeleteSessionVars(method="on_run_error", run_id=run_id, same_call=True))

    async def clear_lease(self, run_id: str) -> None:
        """UPDATE clear leased_by + lease_until."""
        await self._submit(
            UpdateRun(method="clear_lease", run_id=run_id,
                      values={"leased_by": None, "lease_until": None})
        )

    async def record_phase_if_changed(self, run_id: str, ctx: WorkflowContext,
                                      meta: Mapping[str, Any], *, now: datetime) -> bool:
        """INSERT a phase event when ``ctx.phase`` differs from ``meta["previous"]``.

        Returns:
            Whether an event was recorded.
        """
        previous = meta.get("previous")
        if ctx.phase == previous:
            await self._submit(Mark(method="record_phase_if_changed"))
            return False
        await self._event("record_phase_if_changed", run_id, "phase", None,
                          {"phase": ctx.phase, "previous": previous}, now)
        return True

    async def session_set(self, session_id: str, key: str, value: Any, *, now: datetime,
                          run_id: str | None = None, keep_until: datetime | None = None
                          ) -> None:
        """UPSERT workflow_session_vars.

        A var written by a run (``run_id`` set) without ``keep_until`` is dropped
        when that run completes; with ``keep_until`` it lives until then.
        """
        await self._submit(
            UpsertSessionVar(method="session_set", session_id=session_id, key=key,
                             value=value, run_id=run_id, keep_until=keep_until,
                             updated_at=now)
        )

    @abc.abstractmethod
    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        """SELECT from workflow_session_vars (``None`` if absent or expired)."""

    # -- starflow's additions to the write path ------------------------------

    async def emit_wait_wake(self, run_id: str, node_id: str, event: str | None,
                             deadline: datetime | None, *, now: datetime) -> None:
        """Register the wake of a paused run (the state model's emitWaitWake)."""
        await self._submit(InsertWait(method="emit_wait_wake", run_id=run_id, node_id=node_id,
                                      event=event, deadline=deadline, created_at=now))

    async def clear_waits(self, run_id: str) -> None:
        """Remove the run's wake registrations (a wake won, or the run ended)."""
        await self._submit(DeleteWaits(method="clear_waits", run_id=run_id))

    async def enqueue_signal(self, run_id: str, event: str, payload: Any,
                             *, now: datetime) -> None:
        """Add a signal to the run's inbox."""
        await self._submit(InsertSignal(method="enqueue_signal", run_id=run_id, event=event,
                                        payload=payload, created_at=now))

    async def consume_signal(self, signal_id: int) -> None:
        """Remove a delivered signal from the inbox."""
        await self._submit(DeleteSignal(method="consume_signal", signal_id=signal_id))

    async def insert_job(self, job: JobSpec, *, now: datetime) -> None:
        """INSERT a ``worker_jobs`` row (status queued); no-op if its key exists."""
        await self._submit(InsertJob(method="insert_job", job=job, created_at=now))

    async def finish_job(self, job_id: str, *, status: str, result: Any = None,
                         error: Any = None, now: datetime) -> None:
        """Record a job's outcome (``complete`` or ``failed``) unless it already has one."""
        if status not in ("complete", "failed"):
            raise ValueError(f"job status must be 'complete' or 'failed': {status!r}")
        await self._submit(FinishJob(method="finish_job", job_id=job_id, status=status,
                                     result=result, error=error, completed_at=now))

    async def fail_run_jobs(self, run_id: str, *, error: Any, now: datetime) -> None:
        """Fail the run's unfinished jobs (its run was cancelled): no job worker claims
        them again, and one running a job finds its lease gone at its next heartbeat."""
        await self._submit(FailRunJobs(method="fail_run_jobs", run_id=run_id, error=error,
                                       completed_at=now))

    async def update_run(self, run_id: str, method: str, **values: Any) -> None:
        """Set columns of the run row (queueing, cancelling, results)."""
        unknown = set(values) - UPDATABLE_RUN_COLUMNS
        if unknown:
            raise ValueError(f"not updatable workflow_runs columns: {sorted(unknown)}")
        await self._submit(UpdateRun(method=method, run_id=run_id, values=values))

    async def record_event(self, run_id: str, event_type: str, node_id: str | None,
                           payload: Any, *, now: datetime, method: str = "record_event"
                           ) -> None:
        """INSERT a run event of any type (``runner_lost``, ``run_cancelled``…)."""
        await self._event(method, run_id, event_type, node_id, payload, now)

    async def _event(self, method: str, run_id: str, event_type: str, node_id: str | None,
                     payload: Any, now: datetime, *, same_call: bool = False) -> None:
        await self._submit(InsertEvent(method=method, same_call=same_call, run_id=run_id,
                                       event_type=event_type,
                                       node_id=node_id, payload=payload, created_at=now))

    # -- reads and read-modify-writes ----------------------------------------

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run row, or None if it does not exist in this scope."""

    @abc.abstractmethod
    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50) -> list[RunInfo]:
        """Runs in scope, newest first."""

    @abc.abstractmethod
    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        """One page of runs in scope, newest first, by keyset (see ``adapters.pages``).

        Raises:
            StarflowError: the query is invalid (every problem named; nothing read).
        """

    @abc.abstractmethod
    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        """The run's events in order (one query; the journal is rebuilt from it)."""

    @abc.abstractmethod
    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        """The run's registered wakes."""

    @abc.abstractmethod
    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        """Wakes whose deadline is at or before ``now``, earliest first."""

    @abc.abstractmethod
    async def next_deadline(self) -> datetime | None:
        """The earliest wait deadline in scope, if any."""

    @abc.abstractmethod
    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        """The oldest undelivered signal for ``event``."""

    @abc.abstractmethod
    async def claim_runs(self, runner_id: str, *, pool: str | None, now: datetime,
                         lease_until: datetime, limit: int = 1,
                         workflows: Collection[str] | None = None,
                         after: AfterClaim | None = None) -> list[RunInfo]:
        """Claim queued runs for ``pool`` (runs with a NULL pool fit every pool).

        ``after``, if given, maps the claimed runs to more ops written in the
        same transaction (the mirror's outbox rows).

        In one statement: ``claim_state`` claimed, ``status`` running,
        ``claim_attempts`` + 1, and the lease, so a runner that dies right after
        claiming is swept like any other. The runner then moves ``claim_state``
        to running with a guarded :meth:`write_lease` when it starts the engine.
        Each queued run is claimed by exactly one caller.

        Args:
            workflows: If set, only runs whose ``template_id`` is one of these
                names (the workflows registered in the claiming process).
        """

    @abc.abstractmethod
    async def expire_old_leases(self, now: datetime, reason: str = "runner_lost",
                                *, after: AfterSweep | None = None) -> list[SweepResult]:
        """The lease sweep: runs running/paused whose ``lease_until < now``.

        ``after``, if given, maps the results to more ops written in the same
        transaction (the mirror's outbox rows).

        Under their ``max_claim_attempts`` they are requeued; past it they get
        status error, claim_state abandoned, error ``reason``. Each gets a
        ``runner_lost`` event. Safe with several sweepers at once.
        """

    @abc.abstractmethod
    async def ensure_definition(self, name: str, version: int, code_hash: str,
                                *, now: datetime) -> str:
        """The id of the (name, version) definition, inserting it if new."""

    @abc.abstractmethod
    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        """A definition row by id."""

    @abc.abstractmethod
    async def expire_session_vars(self, now: datetime) -> int:
        """Delete session vars whose ``keep_until`` has passed; return how many."""

    @abc.abstractmethod
    async def get_secret(self, key_id: str, *, now: datetime, create: bool = True
                         ) -> str | None:
        """A stored HMAC secret for wake tokens, created on first use if asked."""

    # -- worker jobs (ADR-047 §8) ---------------------------------------------

    @abc.abstractmethod
    async def claim_jobs(self, worker_id: str, *, pool: str, now: datetime,
                         lease_until: datetime, limit: int = 1) -> list[JobRecord]:
        """Claim jobs of ``pool``: queued ones, and claimed ones whose lease expired.

        In one statement: status claimed, ``attempts`` + 1, ``leased_by``,
        ``lease_until``, ``last_heartbeat``. Each job is claimed by exactly one
        caller at a time; oldest first.
        """

    @abc.abstractmethod
    async def heartbeat_job(self, job_id: str, worker_id: str, *, now: datetime,
                            lease_until: datetime) -> bool:
        """Extend a claimed job's lease; False (nothing written) if ``worker_id`` lost it."""

    @abc.abstractmethod
    async def get_job(self, job_id: str) -> JobRecord | None:
        """A job row by id, in scope."""

    @abc.abstractmethod
    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        """Jobs in scope, oldest first, optionally for one run or in one status."""

    # -- the mirror outbox (read by the drainer) -------------------------------

    @abc.abstractmethod
    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        """Unapplied ``mirror_outbox`` rows in scope, in ``id`` order (oldest first)."""

    @abc.abstractmethod
    async def mark_outbox_applied(self, ids: Sequence[int], *, now: datetime) -> int:
        """Set ``applied_at = now`` on these rows (in scope, still unapplied); return how many."""

    @abc.abstractmethod
    async def prune_outbox(self, applied_before: datetime) -> int:
        """Delete rows in scope applied before ``applied_before``; return how many."""

    @abc.abstractmethod
    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        """Count unapplied rows in scope, and how many are older than each edge (seconds)."""


class DelegatingAdapter(WorkflowStateAdapter):
    """Base for adapters that wrap another one (spies, fault injection, mirror).

    Every boundary method is inherited, so it reaches :meth:`execute` here,
    which forwards to the inner adapter; override :meth:`execute` to observe or
    change units, or any read to observe reads.
    """

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(workspace_id=inner.workspace_id, env=inner.env)
        self.inner = inner
        self.durable = inner.durable

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

    async def idle(self) -> None:
        await self.inner.idle()

    async def execute(self, unit: Unit) -> bool:
        return await self.inner.execute(unit)

    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        return await self.inner.session_get(session_id, key, now=now)

    async def get_run(self, run_id: str) -> RunInfo | None:
        return await self.inner.get_run(run_id)

    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50) -> list[RunInfo]:
        return await self.inner.list_runs(status=status, template_id=template_id,
                                          since=since, limit=limit)

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        return await self.inner.list_runs_page(query)

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        return await self.inner.list_events(run_id, after_id=after_id)

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        return await self.inner.list_waits(run_id)

    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        return await self.inner.due_waits(now, limit=limit)

    async def next_deadline(self) -> datetime | None:
        return await self.inner.next_deadline()

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        return await self.inner.find_signal(run_id, event)

    async def claim_runs(self, runner_id: str, *, pool: str | None, now: datetime,
                         lease_until: datetime, limit: int = 1,
                         workflows: Collection[str] | None = None,
                         after: AfterClaim | None = None) -> list[RunInfo]:
        return await self.inner.claim_runs(runner_id, pool=pool, now=now,
                                           lease_until=lease_until, limit=limit, after=after,
                                           workflows=workflows)

    async def expire_old_leases(self, now: datetime, reason: str = "runner_lost",
                                *, after: AfterSweep | None = None) -> list[SweepResult]:
        return await self.inner.expire_old_leases(now, reason, after=after)

    async def ensure_definition(self, name: str, version: int, code_hash: str,
                                *, now: datetime) -> str:
        return await self.inner.ensure_definition(name, version, code_hash, now=now)

    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        return await self.inner.get_definition(definition_id)

    async def expire_session_vars(self, now: datetime) -> int:
        return await self.inner.expire_session_vars(now)

    async def get_secret(self, key_id: str, *, now: datetime, create: bool = True
                         ) -> str | None:
        return await self.inner.get_secret(key_id, now=now, create=create)

    async def claim_jobs(self, worker_id: str, *, pool: str, now: datetime,
                         lease_until: datetime, limit: int = 1) -> list[JobRecord]:
        return await self.inner.claim_jobs(worker_id, pool=pool, now=now,
                                           lease_until=lease_until, limit=limit)

    async def heartbeat_job(self, job_id: str, worker_id: str, *, now: datetime,
                            lease_until: datetime) -> bool:
        return await self.inner.heartbeat_job(job_id, worker_id, now=now,
                                              lease_until=lease_until)

    async def get_job(self, job_id: str) -> JobRecord | None:
        return await self.inner.get_job(job_id)

    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        return await self.inner.list_jobs(run_id=run_id, status=status, limit=limit)

    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        return await self.inner.pending_outbox(limit=limit)

    async def mark_outbox_applied(self, ids: Sequence[int], *, now: datetime) -> int:
        return await self.inner.mark_outbox_applied(ids, now=now)

    async def prune_outbox(self, applied_before: datetime) -> int:
        return await self.inner.prune_outbox(applied_before)

    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        return await self.inner.outbox_lag(now, edges)


def ops_of(units: Sequence[Unit]) -> list[str]:
    """Flatten the boundary method names of several units (for tests and logs)."""
    return [m for u in units for m in u.methods]
