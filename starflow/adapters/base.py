"""The state adapter port: the seed's write boundaries over one atomic write seam.

Every lifecycle method of the state model (``on_run_start``, ``write_lease``,
``on_node_complete``…) is concrete here: it describes its writes as
:class:`Op` values and submits them. Concrete adapters implement one write
method, :meth:`WorkflowStateAdapter.execute`, which applies a :class:`Unit`
(a list of ops plus an optional :class:`Guard`) atomically and reports whether
the guard held, plus the reads.

Several boundary calls made inside ``async with adapter.unit(...)`` become one
unit and therefore one transaction (only calls on that adapter). That single
seam is what group commit, the mirror outbox, fault injection and the
durability level build on.

The read-modify-writes (claims, the lease sweep, job claims and heartbeats,
outbox drains, definitions, secrets, session GC) are concrete here too: each
builds a :class:`Command` and submits it to the sibling seam
:meth:`WorkflowStateAdapter.perform`, which a concrete adapter serves with one
``_<method>`` handler per command. Wrappers override ``execute`` and
``perform`` and see every write.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator, Collection, Mapping, Sequence
from contextvars import ContextVar, Token
from datetime import datetime
from types import TracebackType
from typing import Any, Protocol, cast

import anyio

from ..clock import Clock
from ..failure import RunFailure
from ..limits import check_tenant
from ..records import (
    DefinitionRecord,
    EventValue,
    JobRecord,
    JobSpec,
    OutboxLag,
    OutboxRow,
    PoolLimits,
    PoolUsage,
    RunEvent,
    RunInfo,
    ScheduleRecord,
    SignalRecord,
    StartOptions,
    StreamItem,
    SweepResult,
    WaitRecord,
)
from .pages import RunPage, RunPageQuery
from .units import (
    UPDATABLE_RUN_COLUMNS,
    AfterClaim,
    AfterSweep,
    ClaimJobs,
    ClaimRuns,
    Command,
    DeleteSchedule,
    DeleteSessionVars,
    DeleteSignal,
    DeleteWaits,
    EnsureDefinition,
    ExpireSessionVars,
    FailRunJobs,
    FinishJob,
    GetSecret,
    Guard,
    HeartbeatJob,
    InsertEvent,
    InsertJob,
    InsertRun,
    InsertSignal,
    InsertStreamItem,
    InsertWait,
    Mark,
    MarkOutboxApplied,
    Op,
    PruneOutbox,
    R,
    RearmDebounced,
    SetPoolLimits,
    SweepLeases,
    Unit,
    UpdateRun,
    UpdateSchedule,
    UpsertAttribute,
    UpsertEventValue,
    UpsertSchedule,
    UpsertSessionVar,
)

__all__ = [
    "ClaimJobs",
    "ClaimRuns",
    "Command",
    "DelegatingAdapter",
    "EnsureDefinition",
    "ExpireSessionVars",
    "GetSecret",
    "Guard",
    "HeartbeatJob",
    "MarkOutboxApplied",
    "Op",
    "PruneOutbox",
    "RunContext",
    "RunWatch",
    "SweepLeases",
    "Unit",
    "WorkflowStateAdapter",
]


class RunContext(Protocol):
    """What the boundaries read from a run's context (the runtime's
    :class:`~starflow.WorkflowContext` is one): the adapters know no runtime type."""

    @property
    def workflow(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def phase(self) -> Any: ...

    def snapshot(self) -> dict[str, Any]:
        """The JSON-ready snapshot stored as ``checkpoint_json``."""
        ...


class RunWatch:
    """Announcements that one run changed in another process (see
    :meth:`WorkflowStateAdapter.watch_run`).

    :attr:`changed` is set when the run ended, an update's answer to it was
    recorded or it wrote an event or stream item (#17), and when the
    announcements may have been missed (the listening connection was lost), so
    the watcher reads again. Take :meth:`arm` *before*
    reading the state being waited on: an announcement after the read sets it.
    """

    __slots__ = ("changed", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.changed = anyio.Event()

    def arm(self) -> anyio.Event:
        """The event to wait on after the next read (a fresh one once it fired)."""
        if self.changed.is_set():
            self.changed = anyio.Event()
        return self.changed


#: The unit being collected in this context and the adapter it belongs to: only
#: that adapter's boundary calls join it (another adapter's are its own writes).
_pending: ContextVar[tuple[WorkflowStateAdapter, Unit] | None] = ContextVar(
    "starflow_pending_unit", default=None)


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
        self._token: Token[tuple[WorkflowStateAdapter, Unit] | None] | None = None

    async def __aenter__(self) -> Unit:
        if _pending.get() is not None:
            raise RuntimeError("adapter units do not nest")
        self._token = _pending.set((self._adapter, self._unit))
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
        check_tenant(workspace_id, env)
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

    @contextlib.asynccontextmanager
    async def watch_run(self, run_id: str) -> AsyncIterator[RunWatch | None]:
        """Be told when ``run_id`` changes in another process, while in the block.

        Yields a :class:`RunWatch`, or None where this database cannot announce
        changes (the default; SQLite, or PostgreSQL behind a transaction pooler
        without ``listen_url``): the caller then polls. Changes made through
        this adapter's own process are the runtime's to announce.
        """
        yield None

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
        nothing is written. Only this adapter's boundary calls join it: a call on
        another adapter inside the block is that adapter's own write, at once.
        ``unit.held`` tells whether its guard held::

            async with adapter.unit(guard=Guard(run_id=r, leased_by=me)) as u:
                await adapter.on_node_complete(r, node, output, now=t)
            if not u.held: ...
        """
        return UnitScope(self, Unit(guard=guard, durable=durable))

    async def perform(self, command: Command[R]) -> R:
        """Run one read-modify-write ``command`` atomically; what it returns.

        The sibling of :meth:`execute`: claims, sweeps, job claims and
        heartbeats, outbox drains, definitions, secrets and session GC all
        arrive here, whichever public method built them. A concrete adapter
        handles command ``C`` in a method named after ``C.method`` with a
        leading underscore (``_claim_runs(command)``); wrappers override this
        method to see every command.

        Raises:
            StorageError: the database failed; nothing was written.
        """
        handler = getattr(self, "_" + command.method, None)
        if handler is None:
            raise NotImplementedError(
                f"{type(self).__name__} cannot perform {type(command).__name__}: "
                f"it has no _{command.method} method")
        return cast(R, await handler(command))

    async def _submit(self, op: Op) -> None:
        pending = _pending.get()
        if pending is not None and pending[0] is self:
            pending[1].ops.append(op)
        else:
            await self.execute(Unit(ops=[op]))

    # -- the state model's write boundaries ----------------------------------

    async def on_run_start(
        self, run_id: str, ctx: RunContext, options: StartOptions | None = None,
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
                    **_flow_values(opts),
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

    async def on_node_retry(self, run_id: str, node_id: str, attempt: Any,
                            *, now: datetime) -> None:
        """INSERT a node_retry event: one failed attempt of a step that will be retried.

        Not in the seed's table (its engine keeps retries in memory): an addition
        a reader of the event log must tolerate. The journal ignores it; only the
        step's ``node_complete`` / ``node_error`` decide its recorded outcome.
        """
        await self._event("on_node_retry", run_id, "node_retry", node_id, attempt, now)

    async def save_checkpoint(self, run_id: str, ctx: RunContext) -> None:
        """UPSERT workflow_runs.checkpoint_json."""
        await self._submit(
            UpdateRun(method="save_checkpoint", run_id=run_id,
                      values={"checkpoint_json": ctx.snapshot()})
        )

    async def on_run_paused(self, run_id: str, ctx: RunContext, *, now: datetime,
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

    async def on_run_complete(self, run_id: str, ctx: RunContext, duration_ms: int,
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
                           claim_state: str = "failed", failure: RunFailure | None = None
                           ) -> None:
        """UPDATE status error (or cancelled), message; clear the checkpoint; drop
        run-scoped session vars (an ended run's vars would otherwise live forever).

        ``failure``, the structured cause, goes to ``failure_json`` (migration
        024); without one the column is cleared.
        """
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
                    "failure_json": failure.to_json() if failure is not None else None,
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

    async def record_phase_if_changed(self, run_id: str, ctx: RunContext,
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

    async def set_attributes(self, run_id: str, attributes: Mapping[str, str], *,
                             now: datetime) -> None:
        """UPSERT the run's searchable attributes (values are their JSON text)."""
        for key, value in attributes.items():
            await self._submit(UpsertAttribute(method="set_attributes", run_id=run_id, key=key,
                                               value=value, updated_at=now))

    async def set_event(self, run_id: str, key: str, value: Any, *, node_id: str | None,
                        now: datetime) -> None:
        """UPSERT the run's durable event ``key`` (``starflow.set_event``; last write wins)."""
        await self._submit(UpsertEventValue(method="set_event", run_id=run_id, key=key,
                                            value=value, node_id=node_id, updated_at=now))

    async def append_stream(self, run_id: str, key: str, seq: int, value: Any, *,
                            closed: bool = False, node_id: str | None, now: datetime) -> None:
        """INSERT item ``seq`` of the run's stream ``key`` (``starflow.write_stream``,
        or its closing item); a no-op if that item exists (a replayed write)."""
        await self._submit(InsertStreamItem(method="append_stream", run_id=run_id, key=key,
                                            seq=seq, value=value, closed=closed,
                                            node_id=node_id, created_at=now))

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
                        since: datetime | None = None, limit: int = 50,
                        attributes: Mapping[str, str] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        """Runs in scope, newest first; ``attributes`` (key -> JSON text of the value)
        keeps the runs that have every one of them; ``parent_run_id`` the children
        of that run (child runs, #17)."""

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
    async def get_event_value(self, run_id: str, key: str) -> EventValue | None:
        """The run's durable event ``key``, if it was set."""

    @abc.abstractmethod
    async def list_event_values(self, run_id: str) -> list[EventValue]:
        """Every durable event of the run, by key."""

    @abc.abstractmethod
    async def read_stream(self, run_id: str, key: str, *, after_seq: int = 0,
                          limit: int = 500) -> list[StreamItem]:
        """Items of the run's stream ``key`` after ``after_seq``, in order (at most ``limit``)."""

    @abc.abstractmethod
    async def list_stream_items(self, run_id: str) -> list[StreamItem]:
        """Every stream item of the run, by key then seq."""

    @abc.abstractmethod
    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        """Wakes whose deadline is at or before ``now``, earliest first."""

    @abc.abstractmethod
    async def next_deadline(self) -> datetime | None:
        """The earliest wait deadline in scope, if any."""

    @abc.abstractmethod
    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        """The oldest undelivered signal for ``event``."""

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
        names = tuple(sorted(set(workflows))) if workflows is not None else None
        return await self.perform(ClaimRuns(runner_id=runner_id, pool=pool, now=now,
                                            lease_until=lease_until, limit=int(limit),
                                            workflows=names, after=after))

    async def expire_old_leases(self, now: datetime, reason: str = "runner_lost",
                                *, after: AfterSweep | None = None,
                                requeue: bool = True) -> list[SweepResult]:
        """The lease sweep: runs running/paused whose ``lease_until < now``.

        ``after``, if given, maps the results to more ops written in the same
        transaction (the mirror's outbox rows).

        The lost execution counts as a claim attempt (an inline run never
        claimed since it last made progress counts one: ``claim_attempts``
        becomes 1). Under their ``max_claim_attempts`` they are requeued; at it
        (or always, with ``requeue=False``: ``StarflowConfig.lost_runs="fail"``)
        they get status error, claim_state abandoned, error ``reason``. Each gets
        a ``runner_lost`` event. Safe with several sweepers at once.
        """
        return await self.perform(SweepLeases(now=now, reason=reason, after=after,
                                              requeue=requeue))

    async def ensure_definition(self, name: str, version: int, code_hash: str,
                                *, now: datetime) -> str:
        """The id of the (name, version) definition, inserting it if new."""
        return await self.perform(EnsureDefinition(name=name, version=version,
                                                   code_hash=code_hash, now=now))

    @abc.abstractmethod
    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        """A definition row by id."""

    async def expire_session_vars(self, now: datetime) -> int:
        """Delete session vars whose ``keep_until`` has passed; return how many."""
        return await self.perform(ExpireSessionVars(now=now))

    async def get_secret(self, key_id: str, *, now: datetime, create: bool = True
                         ) -> str | None:
        """A stored HMAC secret for wake tokens, created on first use if asked."""
        return await self.perform(GetSecret(key_id=key_id, now=now, create=create))

    # -- worker jobs (ADR-047 §8) ---------------------------------------------

    async def claim_jobs(self, worker_id: str, *, pool: str, now: datetime,
                         lease_until: datetime, limit: int = 1) -> list[JobRecord]:
        """Claim jobs of ``pool``: queued ones, and claimed ones whose lease expired.

        In one statement: status claimed, ``attempts`` + 1, ``leased_by``,
        ``lease_until``, ``last_heartbeat``. Each job is claimed by exactly one
        caller at a time; oldest first.
        """
        return await self.perform(ClaimJobs(worker_id=worker_id, pool=pool, now=now,
                                            lease_until=lease_until, limit=int(limit)))

    async def heartbeat_job(self, job_id: str, worker_id: str, *, now: datetime,
                            lease_until: datetime) -> bool:
        """Extend a claimed job's lease; False (nothing written) if ``worker_id`` lost it."""
        return await self.perform(HeartbeatJob(job_id=job_id, worker_id=worker_id, now=now,
                                               lease_until=lease_until))

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

    async def mark_outbox_applied(self, ids: Sequence[int], *, now: datetime) -> int:
        """Set ``applied_at = now`` on these rows (in scope, still unapplied); return how many."""
        return await self.perform(MarkOutboxApplied(ids=tuple(int(i) for i in ids), now=now))

    async def prune_outbox(self, applied_before: datetime) -> int:
        """Delete rows in scope applied before ``applied_before``; return how many."""
        return await self.perform(PruneOutbox(applied_before=applied_before))

    @abc.abstractmethod
    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        """Count unapplied rows in scope, and how many are older than each edge (seconds)."""


    # -- schedules and flow control (#18) ------------------------------------

    async def upsert_schedule(self, schedule: ScheduleRecord, *, now: datetime
                              ) -> ScheduleRecord:
        """Create a schedule, or update the one with its id; return the stored row.

        An update keeps the counters, ``paused`` and any decided tick; it keeps
        the cursor (``next_fire_at``) when the cron and time zone are unchanged,
        so a process that writes its schedules at every start still catches up
        on ticks missed while it was down. ``revision`` grows by one.
        """
        return await self.perform(UpsertSchedule(schedule=schedule, now=now))

    @abc.abstractmethod
    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        """The schedule with this id, if any."""

    @abc.abstractmethod
    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule in scope, by id."""

    async def delete_schedule(self, schedule_id: str) -> bool:
        """Delete a schedule; False if there was none. Its runs are kept."""
        return await self.perform(DeleteSchedule(schedule_id=schedule_id))

    async def update_schedule(self, schedule_id: str, revision: int, values: Mapping[str, Any],
                              *, now: datetime) -> bool:
        """Compare-and-set: write ``values`` only if the row is still at ``revision``.

        ``values`` names columns of ``SCHEDULE_UPDATABLE``; ``revision`` grows by
        one. Returns whether the row was written.
        """
        return await self.perform(UpdateSchedule(schedule_id=schedule_id, revision=revision,
                                                 values=dict(values), now=now))

    @abc.abstractmethod
    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        """Schedules not paused whose ``due_at <= now``, earliest first."""

    @abc.abstractmethod
    async def next_schedule_due(self) -> datetime | None:
        """The earliest ``due_at`` of a schedule not paused, if any."""

    async def set_pool_limits(self, limits: PoolLimits, *, now: datetime) -> None:
        """Store a pool's limits (replacing them); limits with none set delete the row."""
        await self.perform(SetPoolLimits(limits=limits, now=now))

    @abc.abstractmethod
    async def get_pool_limits(self, pool: str) -> PoolLimits | None:
        """A pool's stored limits, if any."""

    @abc.abstractmethod
    async def pool_usage(self, now: datetime) -> list[PoolUsage]:
        """Every pool with limits or with queued or executing runs: limits and current use."""

    @abc.abstractmethod
    async def find_active_dedup(self, pool: str | None, dedup_key: str) -> str | None:
        """The id of the active (queued, running or paused) run with this dedup key."""

    async def rearm_debounced(self, template_id: str, pool: str | None, debounce_key: str,
                              input: Any, not_before: datetime) -> str | None:
        """Replace the input and ``not_before`` of the pending debounced run, if one exists.

        Pending: queued and never claimed. Returns its id, or None if there is
        none (the caller then starts one).
        """
        return await self.perform(RearmDebounced(
            template_id=template_id, pool=pool, debounce_key=debounce_key, input=input,
            not_before=not_before))


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

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        return await self.inner.list_runs_page(query)

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        return await self.inner.list_events(run_id, after_id=after_id)

    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        return await self.inner.list_waits(run_id)

    async def get_event_value(self, run_id: str, key: str) -> EventValue | None:
        return await self.inner.get_event_value(run_id, key)

    async def list_event_values(self, run_id: str) -> list[EventValue]:
        return await self.inner.list_event_values(run_id)

    async def read_stream(self, run_id: str, key: str, *, after_seq: int = 0,
                          limit: int = 500) -> list[StreamItem]:
        return await self.inner.read_stream(run_id, key, after_seq=after_seq, limit=limit)

    async def list_stream_items(self, run_id: str) -> list[StreamItem]:
        return await self.inner.list_stream_items(run_id)


    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        return await self.inner.due_waits(now, limit=limit)

    async def next_deadline(self) -> datetime | None:
        return await self.inner.next_deadline()

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

    async def find_active_dedup(self, pool: str | None, dedup_key: str) -> str | None:
        return await self.inner.find_active_dedup(pool, dedup_key)


def _flow_values(opts: StartOptions) -> dict[str, Any]:
    """The flow-control columns a start sets (none for a start that sets none, #18)."""
    values: dict[str, Any] = {}
    if opts.priority:
        values["priority"] = opts.priority
    if opts.detached:
        values["detached"] = True
    for column in ("concurrency_key", "dedup_key", "debounce_key", "not_before",
                   "parent_run_id", "deadline_at"):
        if getattr(opts, column) is not None:
            values[column] = getattr(opts, column)
    return values


def ops_of(units: Sequence[Unit]) -> list[str]:
    """Flatten the boundary method names of several units (for tests and logs)."""
    return [m for u in units for m in u.methods]
