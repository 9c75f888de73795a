"""The runner: starts, wakes and drives runs in this process.

Shared by the application API (``sf.run``, ``sf.signal``, ``sf.resume``), the
maintenance loops (timers, sweep) and workers (claims). :class:`Runner` is
composed of two parts, one job each, and adds the run lifecycle (start,
failure, retry, cancel, pause, sweep):

- :attr:`Runner.driver` (:class:`~starflow.runtime.driving.Driver`): the runner's
  identity, its executing engines, the work in flight and the notifications;
  building and executing an execution (its :class:`~starflow.engine.execution.Outcome`),
  turning an outcome into a handle; handing a run back (:mod:`starflow.engine.requeue`);
- :attr:`Runner.waker` (:class:`~starflow.runtime.waking.Waker`): signals, wake
  tokens and timers, the only place a paused run becomes running again.

Every execution this process drives is settled by one pipeline,
:meth:`Runner.settle`: follow an inline ``continue_as_new`` chain, conclude
the last run's outcome as a handle, then what follows a pause (the waker) or
an end (wake the parent, cancel the children).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import anyio

from .. import observability
from ..adapters.base import WorkflowStateAdapter
from ..adapters.caller import CallerTransaction
from ..adapters.units import Guard
from ..clock import Clock
from ..config import StarflowConfig
from ..engine.child_nodes import child_of_event
from ..engine.engine import Engine
from ..engine.execution import Outcome
from ..engine.replay import RESULT_KIND, RETRIED_EVENT, Journal
from ..engine.requeue import PAUSE_REQUESTED_EVENT, PAUSED_EVENT, RESUMED_EVENT
from ..errors import (
    DuplicateRun,
    RunFinished,
    RunIdConflict,
    RunNotFound,
    StarflowError,
    StorageError,
    WorkflowFailed,
    WorkflowTimeout,
)
from ..failure import CANCELLED_TYPE, RunFailure, run_failure
from ..limits import storable_text
from ..records import HELD, TERMINAL_STATUSES, RunInfo, StartOptions, WaitRecord
from ..tokens import Keyring
from ..workflow.context import CANCEL_EVENT, PAUSE_EVENT, WorkflowContext, checkpoint_wait
from ..workflow.decorators import WorkflowDefinition
from .driving import ACTIVE_STATUSES, Driver, RunHandle, new_runner_id
from .waking import Waker

__all__ = ["RunHandle", "Runner", "new_runner_id"]


class Runner:
    """Starts, wakes and drives runs for one adapter in this process.

    Composed of a :class:`~starflow.runtime.driving.Driver` (:attr:`driver`) and a
    :class:`~starflow.runtime.waking.Waker` (:attr:`waker`); the loops that share
    the runner (workers, maintenance, schedules, the application) reach their
    state and operations through it: the attributes set in ``__init__`` are the
    driver's and the waker's own objects and bound methods.
    """

    def __init__(self, adapter: WorkflowStateAdapter, *, clock: Clock,
                 config: StarflowConfig, keyring: Keyring, runner_id: str | None = None
                 ) -> None:
        driver = self.driver = Driver(adapter, clock=clock, config=config, keyring=keyring,
                                      runner_id=runner_id)
        waker = self.waker = Waker(driver, drive=self.drive)
        self.adapter, self.clock, self.config, self.keyring = adapter, clock, config, keyring
        self.runner_id, self.runtime = driver.runner_id, driver.runtime
        self.heartbeats, self.engines = driver.heartbeats, driver.engines
        self._log = driver.log
        # The driver's operations.
        self.busy_scope, self.notify_settled = driver.busy_scope, driver.notify_settled
        self.notify_timers, self.wait_settled = driver.notify_timers, driver.wait_settled
        self.wait_for_work, self.definition_id = driver.wait_for_work, driver.definition_id
        self.decode_result, self.resolve = driver.decode_result, driver.resolve
        self.handle, self.handle_of, self.chain = driver.handle, driver.handle_of, driver.chain
        self.prepare, self.hand_back = driver.prepare, driver.hand_back
        self.release, self.stop, self.stopped = driver.release, driver.stop, driver.stopped
        # The waker's.
        self.signal, self.resume, self.deliver = waker.signal, waker.resume, waker.deliver
        self.request_update, self.update_answer = waker.request_update, waker.update_answer
        self.update_receipt = waker.update_receipt
        self.check_signal_name, self.wake = waker.check_signal_name, waker.wake
        self.wake_parent, self.due_timers = waker.wake_parent, waker.due_timers

    encode_input = staticmethod(Driver.encode_input)
    decode_input = staticmethod(Driver.decode_input)

    @property
    def busy(self) -> int:
        """Work in flight in this process (see :meth:`Driver.busy_scope`)."""
        return self.driver.busy

    @property
    def settled(self) -> anyio.Event:
        """Set when a run changes in this process (replaced after each change)."""
        return self.driver.settled

    @property
    def timers_changed(self) -> anyio.Event:
        """Set when a deadline was registered in this process (replaced each time)."""
        return self.driver.timers_changed

    # -- driving and settling --------------------------------------------------------

    async def drive(self, run: RunInfo, *, should_yield: Callable[[], bool] | None = None
                    ) -> RunHandle[Any]:
        """Replay a run this runner holds the lease of, until it pauses or ends.

        A run a worker just claimed (``claim_state`` claimed) moves to running
        with the engine's first boundary unit, guarded by the lease; if the
        lease is gone already (a cancel, or the sweep after a long stall) that
        unit writes nothing and no step runs. ``should_yield`` is asked before
        each new step: True hands the run back to the queue there.

        Raises:
            WorkflowDefinitionError: the run's workflow (name and version) is not
                registered in this process; nothing was written.
            StorageError: reading the run's definition or history failed; nothing
                was written (see :meth:`Driver.hand_back`).
        """
        return await self.drive_engine(await self.driver.prepare(run, should_yield=should_yield))

    async def drive_engine(self, engine: Engine) -> RunHandle[Any]:
        """Execute an engine built by :meth:`Driver.prepare` and settle its outcome."""
        return await self.settle(engine.run_id, await self.driver.execute(engine))

    async def settle(self, run_id: str, outcome: Outcome) -> RunHandle[Any]:
        """The one settle pipeline: what follows every execution this process drives.

        1. An inline ``continue_as_new`` chain is executed on here; from then on
           the run settled is the chain's last run executed here, with its outcome.
        2. The outcome becomes a handle (:meth:`Driver.conclude`; it raises for
           a storage failure, a takeover or a stop).
        3. A run that paused: what was asked of it while it ran reaches its wait
           (:meth:`Waker.after_pause`; a run woken there is driven, and so settled,
           by this pipeline again).
        4. A run that ended: its parent is woken and its children cancelled
           (:meth:`after_end`).
        """
        if outcome.status == "continued":
            run_id, outcome = await self.driver.follow_chain(run_id, outcome)
        handle = await self.driver.conclude(run_id, outcome)
        if outcome.status == "continued":  # the chain goes on in the workers
            return handle
        if handle.status == "paused":
            return await self.waker.after_pause(handle)
        if handle.status in TERMINAL_STATUSES:
            await self.after_end(run_id, outcome.parent_run_id, outcome.has_children,
                                 chained=outcome.continuation)
        return handle

    @staticmethod
    def failure(run: RunInfo) -> WorkflowFailed:
        """The ``WorkflowFailed`` for a run that ended in ``error``, with its cause.

        The cause is the run's recorded :class:`~starflow.failure.RunFailure`
        (``failure_json``): node id, type, message, attempts and traceback. A
        run that failed without an exception (``runner_lost``) has none.
        """
        cause = run.failure
        if cause is None:
            return WorkflowFailed(run.id, run.status, run.error)
        return WorkflowFailed(run.id, run.status, run.error, node_id=cause.node_id,
                              error_type=cause.type, error_message=cause.message,
                              attempts=cause.attempts, traceback=cause.traceback)

    async def start(self, definition: WorkflowDefinition, args: tuple[Any, ...],
                    kwargs: dict[str, Any], *, run_id: str | None, inline: bool,
                    pool: str | None = None, flow: Mapping[str, Any] | None = None,
                    timeout: timedelta | None = None, start_at: datetime | None = None,
                    attributes: Mapping[str, str] | None = None,
                    caller: CallerTransaction | None = None) -> RunHandle[Any]:
        """Record a new run (idempotent on ``run_id``) and, inline, drive it.

        ``caller`` (a queued start only, #30): write the start in the caller's
        open transaction, and read there what it reads (an earlier start of the
        same id in that transaction included). Workers can claim the run once
        the caller commits: PostgreSQL announces it then (``NOTIFY`` is
        transactional); this process's own workers are not told, and find it
        through that announcement or their next poll.

        ``attributes`` (checked by the caller: key -> JSON text) are written
        with the run's start, in its unit, as ``starflow.set_attributes`` would.

        The run takes ``definition``'s version (the caller resolves a name).
        ``timeout`` (else the workflow's) sets its deadline from its start:
        now, or ``start_at`` (a queued run no worker claims before then, #30;
        claim_state ``scheduled`` while that is ahead).
        """
        # A run key ("order-123") names the run whose id it derives (limits.run_ref).
        ref = self.adapter.run_ref(run_id) if run_id is not None else None
        rid = ref.id if ref is not None else str(uuid.uuid4())
        encoded = self.encode_input(definition, args, kwargs)
        # The caller's trace (OpenTelemetry), stored with the input so that every
        # execution and wake of the run, in any process, continues it.
        traceparent = observability.current_traceparent()
        stored = {**encoded, "trace": {"traceparent": traceparent}} if traceparent else encoded
        # Converted to the annotations before anything is written: an argument of the
        # wrong type must not leave a run behind that no runner can ever start.
        run_args, run_kwargs = self.decode_input(definition, encoded)
        assert caller is None or not inline
        if run_id is not None:
            existing = await (self.adapter if caller is None else caller).get_run(rid)
            if existing is not None:
                return await self._existing(existing, definition, encoded)
        now = self.clock.now()
        def_id = await self.definition_id(definition) if caller is None else \
            await self._caller_definition_id(caller, definition, now)
        timeout = timeout if timeout is not None else definition.timeout
        begins = now if start_at is None else max(now, start_at)
        deadline = begins + timeout if timeout is not None else None
        if start_at is not None:
            flow = {**(flow or {}), "not_before": start_at}
        ctx = WorkflowContext(run_id=rid, workflow=definition.name, version=definition.version,
                              workspace_id=self.adapter.workspace_id, env=self.adapter.env,
                              run_key=ref.key if ref is not None else None)
        options = StartOptions(
            input=stored,
            status="running" if inline else "queued",
            claim_state="running" if inline else "scheduled" if begins > now else "queued",
            runner_pool=pool if pool is not None else definition.pool,
            definition_id=def_id,
            start_mode="inline" if inline else "queued",
            max_claim_attempts=definition.max_claim_attempts or self.config.max_claim_attempts,
            deadline_at=deadline,
            run_key=ref.key if ref is not None else None,
            **(flow or {}),  # #18: priority, concurrency/dedup/debounce keys, not_before
        )
        if caller is not None:
            async with self.adapter.collect() as unit:
                await self.adapter.on_run_start(rid, ctx, options, now=now)
                if attributes:
                    await self.adapter.set_attributes(rid, attributes, now=now)
            try:
                await caller.write(unit, refusable=run_id is not None
                                   or options.dedup_key is not None)
            except StorageError as exc:
                return await self._start_refused(exc, rid, run_id, options, definition,
                                                 encoded, caller)
            self._log.debug("run started in the caller's transaction", run_id=rid,
                            workflow=definition.name, not_before=options.not_before)
            return RunHandle(run_id=rid, status="queued")
        # Fused (an inline run): the start is written with the run's first boundary
        # (its first node_start, its pause or its end), one commit instead of two.
        fused = inline and self.config.fused_boundaries and self.adapter.fuses_run_start
        try:
            async with (self.adapter.collect() if fused else self.adapter.unit()) as unit:
                await self.adapter.on_run_start(rid, ctx, options, now=now)
                if attributes:
                    await self.adapter.set_attributes(rid, attributes, now=now)
                if inline:
                    await self.adapter.write_lease(rid, self.runner_id,
                                                   now + self.config.lease_ttl, now=now)
        except StorageError as exc:
            return await self._start_refused(exc, rid, run_id, options, definition, encoded)
        assert fused or unit.held
        self._log.debug("run started", run_id=rid, workflow=definition.name,
                       mode=options.start_mode, not_before=options.not_before)
        if not inline:
            self.notify_settled()
            if deadline is not None:
                self.notify_timers()  # ended by the timer loop if still queued then
            return RunHandle(run_id=rid, status="queued")
        engine = Engine(runtime=self.runtime, definition=definition, ctx=ctx, journal=Journal(),
                        args=run_args, kwargs=run_kwargs, started_at=now,
                        traceparent=traceparent, deadline=deadline)
        if fused:
            engine.writes.defer_start(unit.ops)
        outcome = await self.driver.execute(engine)
        if outcome.status == "start_failed":
            assert isinstance(outcome.exception, StorageError)
            return await self._start_refused(outcome.exception, rid, run_id, options,
                                             definition, encoded)
        return await self.settle(rid, outcome)

    async def _caller_definition_id(self, caller: CallerTransaction,
                                    definition: WorkflowDefinition, now: datetime) -> str:
        """The definition id of a start in the caller's transaction.

        Known to this runner: that one. Else written in the caller's transaction,
        and not remembered: if the caller rolls back, the row is gone.
        """
        cached = self.driver.known_definition_id(definition)
        if cached is not None:
            return cached
        return await caller.definition_id(definition.name, definition.version,
                                          definition.code_hash, now=now,
                                          new_id=str(uuid.uuid4()))

    async def _start_refused(self, exc: StorageError, rid: str, run_id: str | None,
                             options: StartOptions, definition: WorkflowDefinition,
                             encoded: dict[str, Any],
                             caller: CallerTransaction | None = None) -> RunHandle[Any]:
        """The database refused a run's start: the run that holds its id or dedup key."""
        reads = self.adapter if caller is None else caller
        existing = await reads.get_run(rid) if run_id is not None else None
        if existing is not None:  # lost a race to start the same run id
            return await self._existing(existing, definition, encoded)
        if options.dedup_key is not None:  # #18: the unique dedup index refused it
            active = await reads.find_active_dedup(options.runner_pool,
                                                   options.dedup_key)
            if active is not None:
                raise DuplicateRun(active, options.dedup_key, options.runner_pool) from None
        raise exc

    # -- child runs and deadlines (#17) ---------------------------------------------

    async def after_end(self, run_id: str, parent_run_id: str | None,
                        has_children: bool = True, *, chained: bool = True) -> None:
        """A run ended: wake the parent awaiting it; cancel its attached children.

        ``chained``: the run may have continued an earlier one (see
        :meth:`Waker.wake_parent`). Failures are logged, not raised: the run's
        own end is already recorded.
        """
        if parent_run_id is not None:
            try:
                await self.wake_parent(parent_run_id, run_id, chained=chained)
            except StarflowError as exc:
                self._log.warning("could not wake the parent of an ended child run",
                                  run_id=run_id, parent_run_id=parent_run_id, error=str(exc))
        if has_children:
            await self.cancel_children(run_id)

    async def cancel_children(self, run_id: str, *, force: bool = False) -> int:
        """Cancel the attached (not detached) children of ``run_id`` that are still
        active, and theirs (each cancel cascades). Returns how many were cancelled."""
        try:
            kids = await self.adapter.list_runs(parent_run_id=run_id, limit=2**31 - 1)
        except StarflowError as exc:
            self._log.warning("could not list child runs to cancel", run_id=run_id,
                              error=str(exc))
            return 0
        done = 0
        for child in kids:
            if child.detached or child.is_terminal:
                continue
            try:
                await self.cancel(child.id, force=force)
                done += 1
            except (RunFinished, RunNotFound):
                continue
            except StarflowError as exc:
                self._log.warning("could not cancel a child run", run_id=child.id,
                                  parent_run_id=run_id, error=str(exc))
        return done

    async def fire_timer(self, wait: WaitRecord) -> RunHandle[Any] | None:
        """The run's deadline (it comes first: the pause registered the earlier of the
        two), else :meth:`Waker.fire_timer`."""
        run = await self.adapter.get_run(wait.run_id)
        if (run is not None and run.status == "paused" and run.deadline_at is not None
                and run.deadline_at <= self.clock.now()):
            return await self.time_out(run)
        return await self.waker.fire_timer(wait)

    async def due_run_deadlines(self, limit: int = 100) -> list[RunInfo]:
        """Queued runs past their deadline (the timer loop ends them: :meth:`time_out`)."""
        return await self.adapter.due_run_deadlines(self.clock.now(), limit=limit)

    async def time_out(self, run: RunInfo) -> RunHandle[Any] | None:
        """End a paused or queued run past its deadline: status ``error``,
        ``WorkflowTimeout``, without a runner having to claim it.

        One unit, guarded by the run being paused or queued (a wake or a claim
        that won the race lets the run's execution find the deadline instead);
        then its parent is woken and its attached children are cancelled.
        Returns ``None`` if the guard did not hold.
        """
        now = self.clock.now()
        exc = WorkflowTimeout(
            f"run {run.id} passed its deadline ({run.deadline_at}) while {run.status}: raise "
            "the workflow's timeout (@workflow(timeout=) or sf.options(timeout=)) if it needs "
            "longer", run_id=run.id)
        message = storable_text(f"WorkflowTimeout: {exc}")
        duration = (max(0, int((now - run.started_at).total_seconds() * 1000))
                    if run.started_at is not None else None)
        guard = Guard(run_id=run.id, status_in=("paused", "queued"))
        async with self.adapter.unit(guard=guard) as unit:
            await self.adapter.on_run_error(run.id, message, now=now, duration_ms=duration,
                                            failure=run_failure(exc))
            await self.adapter.clear_lease(run.id)
            await self.adapter.clear_waits(run.id)
            await self.adapter.fail_run_jobs(run.id, error={
                "type": CANCELLED_TYPE, "attempts": 0,
                "message": f"run {run.id} timed out before this job finished"}, now=now)
        if not unit.held:
            return None
        self._log.error("run failed", run_id=run.id, workflow=run.template_id,
                        error_type="WorkflowTimeout", error=message)
        self.notify_settled()
        await self.after_end(run.id, run.parent_run_id)
        return RunHandle(run_id=run.id, status="error", error=message)

    async def _existing(self, run: RunInfo, definition: WorkflowDefinition,
                        encoded: dict[str, Any]) -> RunHandle[Any]:
        """The handle of the run an idempotent start found under its run id.

        Idempotent for the same workflow (name; any version, since a redeploy may
        have bumped it), whatever the arguments: the existing run is returned and
        the new arguments are ignored, with a warning when they differ. A run of
        another workflow under that id is a conflict, raised before any write.

        Raises:
            RunIdConflict: the run id names a run of another workflow.
        """
        name = run.template_id
        if name is None and run.definition_id is not None:
            record = await self.adapter.get_definition(run.definition_id)
            name = record.name if record is not None else None
        if name is not None and name != definition.name:
            raise RunIdConflict(run.id, name, definition.name, run.status, run_key=run.run_key)
        recorded = run.input_json
        if isinstance(recorded, dict):  # the arguments, without the stored trace context
            recorded = {k: v for k, v in recorded.items() if k != "trace"}
        if recorded is not None and recorded != encoded:
            self._log.warning(
                "run_id already names a run of this workflow, started with different "
                "arguments: returning that run; the new arguments are ignored",
                run_id=run.id, workflow=definition.name)
        return self.handle_of(run)

    async def retry(self, run_id: str) -> RunHandle[Any]:
        """Run a failed run again from its recorded history, with the code deployed now.

        The node whose recorded failure ended the run (a step that failed past
        its retries, a wait that timed out, the await of a child run that
        failed) runs again, and so does what follows it; the successes recorded
        before it, and beside it, are kept and not run again (like DBOS's resume
        or Temporal's reset). The ``run_retried`` event names that node
        (``from_node``) and replay rewinds the history before the event from it
        (:func:`starflow.engine.replay.rewind`): the earlier failure stays in the
        history, superseded. A failed child awaited there is retried too. A run
        that failed in the workflow body itself (or on a ``NonDeterminismError``
        after a bad deploy, or a runner lost past ``max_claim_attempts``) replays
        its whole history and runs the body again. A run past its deadline gets
        a new one, its first window's length from now. Inline runs are driven
        here; worker runs go back to the queue.

        Raises:
            RunNotFound: no such run.
            RunFinished: the run succeeded or was cancelled.
            StarflowError: the run has not ended.
        """
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        if run.status in ("success", "cancelled"):
            raise RunFinished(
                run_id, run.status, "retry",
                "only a run that ended in 'error' can be retried (it replays its history "
                "after a fix); to run workflow "
                f"{run.template_id!r} again, start a new run (sf.start, or "
                f"starflow start {run.template_id} --app MODULE --args JSON)")
        if run.status != "error":
            raise StarflowError(
                f"run {run_id} is still {run.status}: only a run that ended in error can be "
                "retried", run_id=run_id)
        from_node, child = await self.retry_point(run)
        inline = run.start_mode == "inline"
        if inline:
            await self.resolve(run)  # fail before writing if this process lacks the code
        if child is not None:
            await self.retry(child)  # queued: a worker runs it; the await below waits for it
        now = self.clock.now()
        extra: dict[str, Any] = {}
        if (run.deadline_at is not None and run.started_at is not None
                and run.deadline_at <= now):
            # Past its deadline, the retry would time out at once: a new window.
            extra["deadline_at"] = now + max(run.deadline_at - run.started_at,
                                             timedelta(seconds=1))
        payload: dict[str, Any] = {"previous_error": run.error}
        if from_node is not None:
            payload["from_node"] = from_node
        async with self.adapter.unit(guard=Guard(run_id=run_id, status_in=("error",))) as unit:
            await self.adapter.record_event(run_id, RETRIED_EVENT, None, payload, now=now,
                                            method="retry")
            if inline:
                await self.adapter.update_run(run_id, "retry", status="running",
                                              claim_state="running", error=None, failure_json=None,
                                              completed_at=None, duration_ms=None,
                                              claim_attempts=0, **extra)
                await self.adapter.write_lease(run_id, self.runner_id,
                                               now + self.config.lease_ttl, now=now)
            else:
                # claimed_at cleared: a run ended gave up its pool slot, and a
                # retried one queues for a new one (keep_slot pools, #30).
                await self.adapter.update_run(run_id, "retry", status="queued",
                                              claim_state="queued", error=None, failure_json=None,
                                              completed_at=None, duration_ms=None,
                                              claim_attempts=0, claimed_at=None, **extra)
        if not unit.held:  # another retry won, or the row changed under us
            return await self.handle(run_id)
        self._log.info("run retried", run_id=run_id, previous_error=run.error,
                       from_node=from_node)
        if not inline:
            self.notify_settled()
            if run.deadline_at is not None:
                self.notify_timers()
            return RunHandle(run_id=run_id, status="queued")
        fresh = await self.adapter.get_run(run_id)
        assert fresh is not None
        return await self.drive(fresh)

    async def retry_point(self, run: RunInfo) -> tuple[str | None, str | None]:
        """The node a retry of ``run`` runs again from (None: the body runs again
        over its whole history), and the failed child run to retry with it (when
        the run failed awaiting that child's result). Writes nothing."""
        failure = RunFailure.from_json(run.failure_json)
        if failure is not None and failure.node_id is not None:
            return failure.node_id, None  # a step's recorded failure, a wait's timeout
        if failure is None or failure.type != WorkflowFailed.__name__:
            return None, None  # the body's own exception: replay it all, run the body again
        # A failed child's outcome, re-raised by the body at its await (result:<child>#n).
        for ev in reversed(await self.adapter.list_events(run.id)):
            if ev.event_type == RETRIED_EVENT:
                break
            output = (ev.payload_json or {}).get("output") if isinstance(
                ev.payload_json, dict) else None
            if (ev.event_type == "node_complete" and ev.node_id is not None
                    and ev.node_id.startswith(f"{RESULT_KIND}:") and isinstance(output, dict)
                    and output.get("status") == "error"):
                child = await self.adapter.get_run(str(output.get("run_id")))
                return ev.node_id, (child.id if child is not None and child.status == "error"
                                    else None)
        return None, None

    async def cancel(self, run_id: str, *, force: bool = False) -> RunHandle[Any]:
        """Cancel a run: see :meth:`starflow.Starflow.cancel`."""
        if force:
            return await self._force_cancel(run_id)
        run = await self.driver.unfinished(run_id, "cancel")
        if (run.status == "queued" or run.claim_state == "claimed") and not any(
                e.node_id is not None for e in await self.adapter.list_events(run_id)):
            # Queued or claimed, and no workflow code ever ran: there is no cleanup
            # to run, so it ends now, as with force.
            return await self._force_cancel(run_id)
        now = self.clock.now()
        # One request per run (the guard): a second cancel while the first is pending
        # or being cleaned up changes nothing.
        guard = Guard(run_id=run_id, status_in=ACTIVE_STATUSES, no_signal=CANCEL_EVENT)
        async with self.adapter.unit(guard=guard) as unit:
            await self.adapter.enqueue_signal(run_id, CANCEL_EVENT, None, now=now)
            await self.adapter.record_event(run_id, "run_cancel_requested", None,
                                            {"previous_status": run.status}, now=now,
                                            method="cancel")
        if not unit.held:
            current = await self.handle(run_id)
            if current.status in ("success", "error", "cancelled"):
                raise RunFinished(run_id, current.status, "cancel")
            return current
        self._log.info("cancel requested", run_id=run_id, status=run.status)
        engine = self.engines.get(run_id)
        if engine is not None:
            engine.request_cancel()
        # The parent's own wait gets the cancel first (so its await of a child raises
        # RunCancelled for itself, not for the child); then its attached children are
        # cancelled, recursively (#17).
        woke = await self.waker.deliver_cancel(run_id)
        await self.cancel_children(run_id)
        if woke is not None:
            return woke
        if run.claim_state == HELD:
            # Paused by an operator between steps: the cancel resumes it, so its
            # code gets RunCancelled at its next step and its cleanup runs.
            return await self.resume_run(run_id)
        self.notify_settled()
        return await self.handle(run_id)

    async def _force_cancel(self, run_id: str) -> RunHandle[Any]:
        """End the run now, running none of its code (``cancel(force=True)``)."""
        run = await self.driver.unfinished(run_id, "cancel")
        now = self.clock.now()
        async with self.adapter.unit(guard=Guard(run_id=run_id, status_in=ACTIVE_STATUSES)
                                     ) as unit:
            await self.adapter.on_run_error(run_id, "cancelled", now=now, status="cancelled",
                                            claim_state="failed")
            await self.adapter.clear_lease(run_id)
            await self.adapter.clear_waits(run_id)
            # A worker job is the wake source of a wait: fail it with the wait, so
            # no job worker runs the step for a cancelled run (one running it now
            # finds its lease gone at its next heartbeat and stops the step).
            await self.adapter.fail_run_jobs(run_id, error={
                "type": "starflow.errors.RunCancelled",
                "message": f"run {run_id} was cancelled before this job finished",
                "attempts": 0}, now=now)
            await self.adapter.record_event(run_id, "run_cancelled", None,
                                            {"previous_status": run.status}, now=now,
                                            method="cancel")
        if not unit.held:
            ended = await self.handle(run_id)
            raise RunFinished(run_id, ended.status, "cancel")
        engine = self.engines.get(run_id)
        if engine is not None:
            engine.kill()
        self._log.info("run cancelled", run_id=run_id)
        self.notify_settled()
        await self.cancel_children(run_id, force=True)
        await self.after_end(run_id, run.parent_run_id, has_children=False)
        return await self.handle(run_id)

    # -- pause and resume by an operator (#30) ------------------------------------

    async def pause(self, run_id: str) -> RunHandle[Any]:
        """Pause a run: see :meth:`starflow.Starflow.pause`."""
        for _ in range(5):
            run = await self.driver.unfinished(run_id, "pause")
            if run.claim_state == HELD:
                return self.handle_of(run)  # paused already: nothing written
            now = self.clock.now()
            executing = run.status == "running"
            if executing:
                # Executing somewhere: ask its engine to park it at its next step (the
                # request is an inbox entry, so an engine in another process sees it).
                guard = Guard(run_id=run_id, status_in=("running",), no_signal=PAUSE_EVENT)
            else:
                guard = Guard(run_id=run_id, status_in=(run.status,), not_held=True)
            async with self.adapter.unit(guard=guard) as unit:
                if executing:
                    await self.adapter.enqueue_signal(run_id, PAUSE_EVENT, None, now=now)
                    await self.adapter.record_event(run_id, PAUSE_REQUESTED_EVENT, None,
                                                    {"previous_status": run.status},
                                                    now=now, method="pause")
                else:  # queued (never claimed while held) or paused at a wait
                    await self.adapter.update_run(run_id, "hold", status="paused",
                                                  claim_state=HELD)
                    await self.adapter.record_event(
                        run_id, PAUSED_EVENT, None,
                        {"at": "queue" if run.status == "queued" else "wait"},
                        now=now, method="pause")
            if unit.held:
                self._log.info("run paused by an operator", run_id=run_id, status=run.status)
                if executing:
                    engine = self.engines.get(run_id)
                    if engine is not None:
                        engine.request_pause()
                else:
                    self.notify_settled()
                return await self.handle(run_id)
            if executing and await self.adapter.find_signal(run_id, PAUSE_EVENT) is not None:
                return await self.handle(run_id)  # requested already: nothing written
        raise StarflowError(f"run {run_id} changed under 5 attempts to pause it; try again",
                            run_id=run_id)

    async def resume_run(self, run_id: str) -> RunHandle[Any]:
        """Resume a run an operator paused: see :meth:`starflow.Starflow.resume`."""
        run = await self.driver.unfinished(run_id, "resume")
        now = self.clock.now()
        if run.claim_state != HELD:
            # Not parked: a pause still pending (its engine has not reached a step
            # yet) is withdrawn; otherwise nothing is written.
            request = await self.adapter.find_signal(run_id, PAUSE_EVENT)
            if request is None:
                return self.handle_of(run)
            async with self.adapter.unit(guard=Guard(run_id=run_id, status_in=ACTIVE_STATUSES,
                                                     not_held=True)) as unit:
                await self.adapter.consume_signal(request.id)
                await self.adapter.record_event(run_id, RESUMED_EVENT, None,
                                                {"withdrawn": True}, now=now, method="resume")
            engine = self.engines.get(run_id)
            if unit.held and engine is not None:
                engine.pause_requested = False
            return await self.handle(run_id)
        waiting = checkpoint_wait(run.checkpoint_json) is not None
        inline = (not waiting and run.start_mode == "inline"
                  and await self.waker.drives_here(run))
        if inline:
            await self.resolve(run)  # driven here: fail before writing without its code
        guard = Guard(run_id=run_id, status_in=("paused",), held=True)
        async with self.adapter.unit(guard=guard) as unit:
            await self.adapter.record_event(run_id, RESUMED_EVENT, None, None, now=now,
                                            method="resume")
            if waiting:  # back to waiting: what it waits for may have come meanwhile
                await self.adapter.update_run(run_id, "resume", claim_state="complete")
            elif inline:  # driven on here, like an inline run woken by a signal
                await self.adapter.update_run(run_id, "resume", status="running",
                                              claim_attempts=0)
                await self.adapter.write_lease(run_id, self.runner_id,
                                               now + self.config.lease_ttl, now=now)
            else:  # back to the queue for workers
                await self.adapter.update_run(run_id, "resume", status="queued",
                                              claim_state="queued", claim_attempts=0)
        if not unit.held:
            return await self.handle(run_id)  # resumed by another call meanwhile
        self._log.info("run resumed by an operator", run_id=run_id)
        if inline:
            fresh = await self.adapter.get_run(run_id)
            assert fresh is not None
            return await self.drive(fresh)
        self.notify_settled()
        if not waiting:
            if run.deadline_at is not None:
                self.notify_timers()
            return await self.handle(run_id)
        return await self._wake_resumed(run_id)

    async def _wake_resumed(self, run_id: str) -> RunHandle[Any]:
        """A resumed run at a wait: deliver what came while it was paused (a cancel,
        its child's end, a signal) or fire its timer if it is past due."""
        handle = await self.handle(run_id)
        woke = await self.waker.deliver_cancel(run_id)
        child_id = child_of_event(handle.waiting_for)
        if woke is None and child_id is not None:
            woke = await self.wake_parent(run_id, child_id)
        elif woke is None and handle.waiting_for is not None:
            woke = await self.deliver(run_id, handle.waiting_for)
        if woke is None:
            now = self.clock.now()
            for wait in await self.adapter.list_waits(run_id):
                if wait.deadline is not None and wait.deadline <= now:
                    woke = await self.fire_timer(wait)
                    break
            self.notify_timers()  # its timer counts again
        return woke if woke is not None else await self.handle(run_id)

    async def sweep(self) -> int:
        """One pass of the lease sweep; returns how many runs it acted on.

        ``config.lost_runs`` decides between requeueing and failing a lost run.
        (Maintenance follows each pass with :meth:`warn_stuck`.)
        """
        results = await self.adapter.expire_old_leases(
            self.clock.now(), requeue=self.config.lost_runs == "requeue")
        obs = observability.current()
        for r in results:
            self._log.warning("runner lost", run_id=r.run_id, leased_by=r.leased_by,
                              action=r.action)
            obs.sweep_action(r.action)
        if results:
            self.notify_settled()
            self.notify_timers()  # a requeued run's deadline is the timer loop's again
        for r in results:
            if r.action == "abandoned":  # ended in error: its parent, its children
                lost = await self.adapter.get_run(r.run_id)
                if lost is not None:
                    await self.after_end(lost.id, lost.parent_run_id)
        return len(results)

    async def wake_stranded_parents(self, batch: int = 1000) -> int:
        """Wake paused parents whose awaited child has ended (maintenance, at the sweep
        interval).

        A child's runner wakes the parent right after the child's final unit;
        if that process died in between, the parent would wait for ever. This
        pass is the safety net: one statement per keyset batch of ``batch``
        runs paused on a child (all of them, in run id order) says which
        ones' child chain has ended (:meth:`~starflow.adapters.base.
        WorkflowStateAdapter.child_waits`); only those are read and woken.
        Returns how many parents it woke.
        """
        woke = 0
        after: str | None = None
        while True:
            try:
                rows = await self.adapter.child_waits(after=after, limit=batch)
            except StarflowError as exc:
                self._log.warning("could not list parents waiting on children", error=str(exc))
                return woke
            for row in rows:
                if row.ended_run_id is None:
                    continue
                try:
                    if await self.wake_parent(row.run_id, row.child_run_id) is not None:
                        woke += 1
                        self._log.info("woke a parent its child's runner did not",
                                       run_id=row.run_id, child_run_id=row.ended_run_id)
                except StarflowError as exc:
                    self._log.warning("could not wake a parent", run_id=row.run_id,
                                      error=str(exc))
            if len(rows) < batch:
                return woke
            after = rows[-1].run_id

    async def warn_stuck(self) -> list[RunInfo]:
        """Log a warning if queued runs have waited ``config.stuck_after`` for a
        worker (none runs, or none serves their pool); return them."""
        stuck = await self.stuck_runs()
        if stuck:
            pools = sorted({r.runner_pool or "(any)" for r in stuck})
            self._log.warning(
                "queued runs not claimed", count=len(stuck), oldest_run_id=stuck[0].id,
                pools=pools, stuck_after_s=self.config.stuck_after.total_seconds(),
                hint="start a worker for these pools (starflow worker --app ...), "
                     "or see `starflow runs list --stuck`")
        return stuck

    async def stuck_runs(self, limit: int = 1000) -> list[RunInfo]:
        """Queued runs nobody has claimed for ``config.stuck_after``, oldest first.

        A run counts from when it was last queued: its start, its start time if
        it was started for later (or debounced), the last heartbeat of the
        runner it was taken from, or its newest event (a wake that put it back
        in the queue), whichever is latest. A run whose start time has not
        come (claim_state scheduled) is not stuck. Looks at the ``limit``
        newest queued runs.
        """
        cutoff = self.clock.now() - self.config.stuck_after
        stuck: list[tuple[datetime, RunInfo]] = []
        # One query for the page: each run with its newest event's time.
        for queued in await self.adapter.list_queued_runs(limit):
            run = queued.run
            since = max((t for t in (run.started_at, run.not_before, run.last_heartbeat,
                                     queued.last_event_at) if t is not None), default=None)
            if run.claim_state == "queued" and since is not None and since < cutoff:
                stuck.append((since, run))
        stuck.sort(key=lambda pair: (pair[0], pair[1].id))
        return [run for _, run in stuck]
