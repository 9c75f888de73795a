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

from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

from ..errors import TransactionalStartUnsupported
from ..failure import RunFailure
from ..records import (
    RUN_STATUSES,
    ChildWait,
    DefinitionRecord,
    DueStarts,
    EventValue,
    JobRecord,
    JobSpec,
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
    StartOptions,
    StreamItem,
    SweepResult,
    WaitRecord,
)
from .caller import CallerTransaction
from .pages import RunPage, RunPageQuery
from .seam import AdapterSeam, RunContext, RunWatch, UnitScope, WatchWhenWaiting
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
    QueueDueStarts,
    RearmDebounced,
    SetPoolLimits,
    SetPoolPaused,
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
    "READS",
    "ClaimJobs",
    "ClaimRuns",
    "Command",
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
    "UnitScope",
    "WatchWhenWaiting",
    "WorkflowStateAdapter",
]


_Read = TypeVar("_Read", bound=Callable[..., Awaitable[Any]])
_READS: list[str] = []


def read(method: _Read) -> _Read:
    """Mark a read of the port. Its body is what an adapter that stores nothing
    answers (:class:`~starflow.adapters.null.NullWorkflowStateAdapter`); an
    adapter that stores overrides every read (``tests/adapters/test_reads.py``
    checks), and :class:`~starflow.adapters.delegating.DelegatingAdapter`
    forwards every read to its inner adapter. So a new read is written in three
    files: here, its SQL in ``sql/queries.py`` and its method in ``sql/adapter.py``.
    """
    _READS.append(method.__name__)
    return method


class WorkflowStateAdapter(AdapterSeam):
    """Port to the cold tier, bound to one (``workspace_id``, ``env``).

    Subclasses implement :meth:`execute` and override the reads (marked
    :func:`read`; their bodies here answer "nothing stored"); every lifecycle
    method of the state model is concrete and goes through :meth:`execute`, so
    an adapter cannot skip a boundary.
    """

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
        # The run row carries the phase too (RunInfo.phase), in the same unit.
        await self._submit(UpdateRun(method="record_phase_if_changed", run_id=run_id,
                                     values={"phase": ctx.phase}, same_call=True))
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
                            closed: bool = False, node_id: str | None, now: datetime,
                            sub: int | None = 0) -> None:
        """INSERT item ``(seq, sub)`` of the run's stream ``key`` (``starflow.write_stream``,
        or its closing item); a no-op if that item exists (a replayed write).
        ``sub`` None: a write from inside a step, numbered one past ``seq``'s highest."""
        await self._submit(InsertStreamItem(method="append_stream", run_id=run_id, key=key,
                                            seq=seq, value=value, closed=closed,
                                            node_id=node_id, created_at=now, sub=sub))

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

    @read
    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        """SELECT from workflow_session_vars (``None`` if absent or expired)."""
        return None

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
        op = InsertEvent(method=method, same_call=same_call, run_id=run_id,
                         event_type=event_type, node_id=node_id, payload=payload,
                         created_at=now)
        if not self._collected(op):  # (inside a unit, as every boundary's: no await)
            await self._submit(op)

    # -- reads and read-modify-writes ----------------------------------------

    @read
    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run row, or None if it does not exist in this scope."""
        return None

    @read
    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50,
                        attributes: Mapping[str, str] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        """Runs in scope, newest first; ``attributes`` (key -> JSON text of the value)
        keeps the runs that have every one of them; ``parent_run_id`` the children
        of that run (child runs, #17)."""
        return []

    @read
    async def list_queued_runs(self, limit: int) -> list[QueuedRun]:
        """The ``limit`` newest runs with status ``queued``, newest first, each with
        the time of its newest event: one query (the stuck-run check reads it)."""
        return []

    @read
    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        """One page of runs in scope, newest first, by keyset (see ``adapters.pages``).

        Raises:
            StarflowError: the query is invalid (every problem named; nothing read).
        """
        query.check()
        return RunPage(runs=[], counts=dict.fromkeys(RUN_STATUSES, 0) if query.counts else None)

    @read
    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        """The run's events in order (one query; the journal is rebuilt from it)."""
        return []

    @read
    async def list_waits(self, run_id: str) -> list[WaitRecord]:
        """The run's registered wakes."""
        return []

    @read
    async def get_run_attributes(self, run_id: str) -> dict[str, str]:
        """The run's searchable attributes, key -> the JSON text of its value
        (empty for a run without any, or no such run)."""
        return {}

    @read
    async def get_event_value(self, run_id: str, key: str) -> EventValue | None:
        """The run's durable event ``key``, if it was set."""
        return None

    @read
    async def list_event_values(self, run_id: str) -> list[EventValue]:
        """Every durable event of the run, by key."""
        return []

    @read
    async def read_stream(self, run_id: str, key: str, *, after_seq: int = 0,
                          after_sub: int = 0, limit: int = 500) -> list[StreamItem]:
        """Items of the run's stream ``key`` after ``(after_seq, after_sub)``, in
        ``(seq, sub)`` order (at most ``limit``)."""
        return []

    @read
    async def list_stream_items(self, run_id: str) -> list[StreamItem]:
        """Every stream item of the run, by key then seq."""
        return []

    @read
    async def due_waits(self, now: datetime, *, limit: int = 100) -> list[WaitRecord]:
        """Wakes whose deadline is at or before ``now``, earliest first."""
        return []

    @read
    async def next_deadline(self) -> datetime | None:
        """The earliest timer in scope, if any: a wait's deadline, or the deadline
        of a queued run (see :meth:`due_run_deadlines`)."""
        return None

    @read
    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        """The oldest undelivered signal for ``event``."""
        return None

    @read
    async def due_run_deadlines(self, now: datetime, *, limit: int = 100) -> list[RunInfo]:
        """Queued runs whose deadline (``deadline_at``) is at or before ``now``,
        earliest first (the timer loop ends them with ``WorkflowTimeout``)."""
        return []

    @read
    async def child_waits(self, *, after: str | None, limit: int = 1000) -> list[ChildWait]:
        """One keyset batch of the runs paused on a child run, by run id after
        ``after`` (``None``: from the first): ``limit`` rows at most, and fewer
        only for the last batch."""
        return []

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

    @read
    async def get_definition(self, definition_id: str) -> DefinitionRecord | None:
        """A definition row by id."""
        return None

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

    @read
    async def get_job(self, job_id: str) -> JobRecord | None:
        """A job row by id, in scope."""
        return None

    @read
    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        """Jobs in scope, oldest first, optionally for one run or in one status."""
        return []

    # -- the mirror outbox (read by the drainer) -------------------------------

    @read
    async def pending_outbox(self, *, limit: int = 500) -> list[OutboxRow]:
        """Unapplied ``mirror_outbox`` rows in scope, in ``id`` order (oldest first)."""
        return []

    async def mark_outbox_applied(self, ids: Sequence[int], *, now: datetime) -> int:
        """Set ``applied_at = now`` on these rows (in scope, still unapplied); return how many."""
        return await self.perform(MarkOutboxApplied(ids=tuple(int(i) for i in ids), now=now))

    async def prune_outbox(self, applied_before: datetime) -> int:
        """Delete rows in scope applied before ``applied_before``; return how many."""
        return await self.perform(PruneOutbox(applied_before=applied_before))

    @read
    async def outbox_lag(self, now: datetime, edges: Sequence[float] = ()) -> OutboxLag:
        """Count unapplied rows in scope, and how many are older than each edge (seconds)."""
        return OutboxLag(pending=0, oldest_created_at=None, older_than=tuple(0 for _ in edges))


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

    @read
    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        """The schedule with this id, if any."""
        return None

    @read
    async def list_schedules(self) -> list[ScheduleRecord]:
        """Every schedule in scope, by id."""
        return []

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

    @read
    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        """Schedules not paused whose ``due_at <= now``, earliest first."""
        return []

    @read
    async def next_schedule_due(self) -> datetime | None:
        """The earliest ``due_at`` of a schedule not paused, if any."""
        return None

    async def set_pool_limits(self, limits: PoolLimits, *, now: datetime) -> None:
        """Store a pool's limits (replacing them); limits with none set delete the row."""
        await self.perform(SetPoolLimits(limits=limits, now=now))

    async def set_pool_paused(self, pool: str, paused: bool, *, now: datetime) -> None:
        """Pause or resume a pool (its limits kept): a paused pool's queued runs are
        not claimed (``sf.pause_pool``)."""
        await self.perform(SetPoolPaused(pool=pool, paused=paused, now=now))

    @read
    async def get_pool_limits(self, pool: str) -> PoolLimits | None:
        """A pool's stored limits, if any."""
        return None

    @read
    async def pool_usage(self, now: datetime) -> list[PoolUsage]:
        """Every pool with limits or with queued or executing runs: limits and current use."""
        return []

    @read
    async def queue_stats(self, now: datetime) -> list[QueueStats]:
        """Per pool: queued runs claimable at ``now``, when the oldest of them was
        queued, and runs executing (the queue metrics). One statement, served by
        the partial indexes of queued and of executing runs."""
        return []

    @read
    async def find_active_dedup(self, pool: str | None, dedup_key: str) -> str | None:
        """The id of the active (queued, running or paused) run with this dedup key."""
        return None

    async def caller_transaction(self, connection: object) -> CallerTransaction:
        """A start written through the caller's own ``connection``, in its open transaction.

        Checks, before anything is written, that ``connection`` is this
        database's driver's, connected to this database, and in a transaction.
        Only SQL adapters can: the default refuses.

        Raises:
            TransactionalStartUnsupported: this adapter has no database to share.
            ForeignConnection: another driver's connection, or another database.
            NotInTransaction: the connection has no open transaction.
        """
        raise TransactionalStartUnsupported(
            f"{type(self).__name__} cannot start a run in the caller's transaction "
            "(connection=): it keeps no database the caller can write to. Open the app "
            "on sqlite:///… or postgresql://…, or start the run after your commit. "
            "Nothing was written")

    async def rearm_debounced(self, template_id: str, pool: str | None, debounce_key: str,
                              input: Any, not_before: datetime) -> str | None:
        """Replace the input and ``not_before`` of the pending debounced run, if one exists.

        Pending: queued and never claimed. Returns its id, or None if there is
        none (the caller then starts one).
        """
        return await self.perform(RearmDebounced(
            template_id=template_id, pool=pool, debounce_key=debounce_key, input=input,
            not_before=not_before))

    async def queue_due_starts(self, now: datetime) -> DueStarts:
        """Queue the runs started for later whose start time is at or before ``now``.

        Workers call it before they claim (#30): the due runs move from
        claim_state ``scheduled`` to ``queued`` and are announced to waiting
        workers; the result names them and the earliest start still ahead.
        """
        return await self.perform(QueueDueStarts(now=now))


def _flow_values(opts: StartOptions) -> dict[str, Any]:
    """The flow-control columns a start sets (none for a start that sets none, #18)."""
    values: dict[str, Any] = {}
    if opts.priority:
        values["priority"] = opts.priority
    if opts.detached:
        values["detached"] = True
    for column in ("concurrency_key", "dedup_key", "debounce_key", "not_before",
                   "parent_run_id", "deadline_at", "run_key"):
        if getattr(opts, column) is not None:
            values[column] = getattr(opts, column)
    return values


def ops_of(units: Sequence[Unit]) -> list[str]:
    """Flatten the boundary method names of several units (for tests and logs)."""
    return [m for u in units for m in u.methods]


#: The names of the port's reads (every method marked :func:`read`).
READS: tuple[str, ...] = tuple(_READS)
