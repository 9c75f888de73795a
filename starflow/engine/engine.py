"""One :class:`Engine` per run execution: boundaries, replay, heartbeat, finalize.

The engine runs the workflow body with the run's journal. Every durable
operation (step, wait, sleep) gets a node id; recorded ones return their
recorded outcome, new ones write their boundary through the state adapter,
awaited, guarded by this runner's lease. A heartbeat refreshes the lease; if
another runner (or a cancel) took the run, the body is cancelled and nothing
more is written.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

import anyio

from .. import observability, serde
from ..clock import format_ts
from ..errors import (
    NonDeterminismError,
    RunCancelled,
    SerializationError,
    StarflowError,
    StorageError,
    WorkflowTimeout,
)
from ..failure import run_failure
from ..limits import storable_text
from ..records import StartOptions
from ..workflow.context import (
    CANCEL_EVENT,
    PAUSE_EVENT,
    RESERVED_PREFIX,
    WorkflowContext,
    current_engine,
)
from ..workflow.threads import run_body_in_thread
from . import requeue
from .execution import (
    CONTINUED_FROM_EVENT,
    Abort,
    ContinueAsNew,
    Outcome,
    PendingWait,
    Runtime,
    Suspend,
    find_unwinding,
)
from .heartbeats import Heartbeats
from .nodes import EngineNodes
from .replay import DIVERGENCE_FIX

# Outcome, PendingWait and Runtime live in execution.py and Heartbeats in heartbeats.py;
# they are re-exported here for the modules that import them from the engine.
__all__ = ["Engine", "Heartbeats", "Outcome", "PendingWait", "Runtime"]


class Engine(EngineNodes):
    """Drives one execution of one run (a first run, a resume or a replay)."""

    # -- the run -----------------------------------------------------------------

    async def refresh_lease_once(self) -> bool:
        """One heartbeat: refresh the lease. False once the lease is found lost.

        A transient storage blip is logged, not raised: a healthy run must not
        fail for it; if it lasts past the TTL, the sweep treats this runner as lost.
        """
        cfg = self.runtime.config
        if self.writes.unstarted:
            return True  # no row yet: the first unit writes the lease with it
        ts = self.runtime.clock.now()
        try:
            async with self.adapter.unit(guard=self.writes.guard) as unit:
                await self.adapter.refresh_lease(self.run_id, ts + cfg.lease_ttl, now=ts)
        except StarflowError as exc:
            self._log.warning("lease refresh failed", error=str(exc))
            observability.current().lease_refreshed(False)
            return True
        if unit.held:
            observability.current().lease_refreshed(True)
            return True
        if self._body_done:
            return False  # raced the run's own final write, which cleared the lease
        self._log.warning("lease lost: another runner or a cancel took the run")
        self.kill()
        return False

    async def after_refresh(self) -> None:
        """Per heartbeat, after the refresh: see :meth:`_check_cancel`."""
        await self._check_cancel(self.runtime.clock.now())

    async def _check_cancel(self, now: datetime) -> None:
        """Per heartbeat: a cancel requested from another process, and the cleanup's
        deadline (past it the body is stopped and the run ends in ``error``)."""
        if self._cancelled:
            if (self._cleanup_deadline is not None and now >= self._cleanup_deadline
                    and not self._cleanup_timed_out):
                self._cleanup_timed_out = True
                self._log.warning("cancelled run's cleanup passed its deadline; stopping it",
                                  timeout=str(self.runtime.config.cancel_cleanup_timeout))
                if self._body_scope is not None:
                    self._body_scope.cancel()
            return
        if self.cancel_requested:
            return
        try:
            pending = await self.adapter.find_signal(self.run_id, CANCEL_EVENT)
            paused = (None if self.pause_requested
                      else await self.adapter.find_signal(self.run_id, PAUSE_EVENT))
        except StarflowError as exc:
            self._log.warning("could not look for a cancel request", error=str(exc))
            return
        if pending is not None:
            self.request_cancel()
        if paused is not None:
            self.request_pause()  # an operator paused it from another process

    async def _heartbeat(self) -> None:
        """This engine's own heartbeat, when the runner runs no shared loop."""
        interval = self.runtime.config.heartbeat_interval
        clock = self.runtime.clock
        due = clock.now() + interval
        while True:
            await clock.sleep(max(0.0, (due - clock.now()).total_seconds()))
            if not await self.refresh_lease_once():
                return
            due = clock.now() + interval  # taken before the check: its time adds no drift
            await self.after_refresh()

    def kill(self, error: StarflowError | None = None) -> None:
        """Stop this execution at once, writing nothing more.

        The body is cancelled: no final boundary, no release to the queue, the
        lease is left as it is. Used when the run was cancelled or reclaimed
        elsewhere (the outcome is ``lease_lost``).

        Args:
            error: Set by the owner of this process stopping the execution on
                purpose (``Runner.stop``; ``starflow_testing`` simulates a
                SIGKILL so): the outcome is ``stopped`` with it, and the call
                driving the run raises it. No other runner took the run over;
                once the lease expires, the sweep recovers it.
        """
        if error is not None:
            self._stop_error = error
        self.writes.lease_lost = True
        if self._body_scope is not None:
            self._body_scope.cancel()

    def _swallowed_pause(self, raised: BaseException | None) -> Outcome:
        """The body caught the pause's unwinding (``except BaseException``) and returned
        or raised something else: the wait was reached all the same, so the run pauses
        there. What the handler did is not recorded; on the wake the replay returns the
        wait's payload and the code after the wait runs instead."""
        wait = self._pending_wait
        self._log.warning(
            "workflow code caught the pause at a durable wait (except BaseException?) and "
            f"{'raised ' + type(raised).__name__ if raised is not None else 'returned'}; "
            "the run pauses there anyway. Let BaseException propagate from wait_for/sleep",
            node_id=wait.node_id)
        return Outcome("paused", wait=wait)

    def _conflict_outcome(self) -> Outcome:
        exc = self.wait_conflict
        assert exc is not None
        return Outcome("error", error=f"{type(exc).__name__}: {exc}", exception=exc)

    async def _body(self) -> Outcome:
        outcome = await self._hosting_step_writes(self._run_body)
        if outcome.status == "paused":
            await self._settle_waits()
        return outcome

    async def _run_body(self) -> Outcome:
        with anyio.CancelScope() as scope:
            self._body_scope = scope
            try:
                if self.input_error is not None:
                    raise self.input_error
                if self.definition.threaded:
                    value = await run_body_in_thread(
                        self.definition.fn, self.args, self.kwargs,
                        limiter=self.runtime.workflow_threads())
                else:
                    value = await self.definition.fn(*self.args, **self.kwargs)
            except BaseException as exc:
                suspend = find_unwinding(exc, Suspend)
                abort = find_unwinding(exc, Abort)
                if isinstance(abort, Abort):
                    return Outcome(abort.reason, exception=abort.cause)
                if self.wait_conflict is not None:  # even if another branch paused first
                    return self._conflict_outcome()
                if isinstance(suspend, Suspend):
                    return Outcome("paused", wait=suspend.wait)
                cont = find_unwinding(exc, ContinueAsNew)
                if isinstance(cont, ContinueAsNew):
                    # In a cancelled run's cleanup the run ends cancelled: no new run.
                    return (Outcome("cancelled") if self._cancelled
                            else Outcome("continued", result=cont.input))
                if isinstance(exc, anyio.get_cancelled_exc_class()) or not isinstance(
                    exc, Exception
                ):
                    raise
                if self._suspending:
                    return self._swallowed_pause(exc)
                if self._cancelled and isinstance(exc, RunCancelled):
                    return Outcome("cancelled")  # the cleanup ran and let it propagate
                return Outcome("error", error=f"{type(exc).__name__}: {exc}", exception=exc)
            if self.wait_conflict is not None:  # the workflow code caught it
                return self._conflict_outcome()
            if self._suspending:
                return self._swallowed_pause(None)
            if self._cancelled:
                return Outcome("cancelled")  # the cleanup caught RunCancelled and returned
            pending = self.journal.unconsumed()
            if pending:
                exc2 = NonDeterminismError(
                    f"run {self.run_id}: the workflow returned without reaching recorded "
                    f"node(s) {', '.join(pending[:5])}: the code changed under the run. "
                    f"{DIVERGENCE_FIX}",
                    run_id=self.run_id, node_id=pending[0], recorded=pending[0], current=None)
                return Outcome("error", error=f"NonDeterminismError: {exc2}", exception=exc2)
            return Outcome("success", result=value)
        if self._timed_out and not self._lease_lost:
            return self._deadline_outcome()
        if self._cleanup_timed_out and not self._lease_lost:
            timeout = self.runtime.config.cancel_cleanup_timeout
            exc3 = RunCancelled(self.run_id, message=(
                f"run {self.run_id} was cancelled and its cleanup did not finish within "
                f"{timeout} (StarflowConfig.cancel_cleanup_timeout): it was stopped"))
            return Outcome("error", error=f"RunCancelled: {exc3}", exception=exc3)
        return Outcome("lease_lost")

    async def execute(self) -> Outcome:
        """Run the body with a heartbeat, then write the final boundary.

        Traced and metered through :mod:`starflow.observability` when enabled.
        """
        obs = observability.current()
        scope = observability.RunScope(
            run_id=self.run_id, workflow=self.definition.name, version=self.definition.version,
            runner_id=self.runtime.runner_id, workspace=self.ctx.workspace_id, env=self.ctx.env,
            replay=bool(self.journal.nodes), traceparent=self.traceparent)
        with obs.execution(scope) as execution:
            outcome = await self._execute()
            outcome.parent_run_id = self.parent_run_id
            outcome.has_children = self.has_children
            outcome.deadline = self.deadline
            outcome.continuation = self.continuation
            execution.finish(outcome.status, outcome.error)
            if outcome.status == "lease_lost":
                obs.lease_lost()
            return outcome

    async def _execute(self) -> Outcome:
        token = current_engine.set(self)
        try:
            # A cancel requested while a run with history was paused or queued (a
            # first execution has none pending: a queued run that never ran is
            # cancelled at once, and an inline start runs before anyone knows its id).
            if self.journal.nodes:
                try:
                    if await self.adapter.find_signal(self.run_id, CANCEL_EVENT) is not None:
                        self.cancel_requested = True
                    # A pause requested while it was handed back to the queue.
                    if await self.adapter.find_signal(self.run_id, PAUSE_EVENT) is not None:
                        self.pause_requested = True
                except StarflowError as exc:
                    self._log.warning("could not look for a cancel request", error=str(exc))
            shared = self.runtime.heartbeats
            if shared is not None and shared.running:
                shared.add(self)
                try:
                    outcome = await self._timed_body()
                finally:
                    self._body_done = True
                    shared.remove(self)
            else:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._heartbeat)
                    try:
                        outcome = await self._timed_body()
                    finally:
                        tg.cancel_scope.cancel()
            if self._lease_lost and outcome.status not in ("lease_lost", "storage",
                                                           "start_failed"):
                outcome = Outcome("lease_lost")
            if outcome.status == "released":
                await self._release()
            outcome = await self._finalize(outcome)
            if self._stop_error is not None and outcome.status in ("lease_lost", "storage"):
                # Stopped by its owner, possibly while its final write was being built.
                outcome = Outcome("stopped", exception=self._stop_error)
            return outcome
        except anyio.get_cancelled_exc_class():
            with anyio.CancelScope(shield=True):
                await self._release()
            raise
        finally:
            current_engine.reset(token)

    async def _timed_body(self) -> Outcome:
        """The body, stopped at the run's deadline (a watchdog on the runtime's clock)."""
        deadline = self.deadline
        if deadline is None:
            return await self._body()
        clock = self.runtime.clock
        if clock.now() >= deadline:
            # Checked here, not left to the watchdog: a body that never yields (an
            # inline continue_as_new chain on SQLite or in memory, whose writes do
            # not suspend) ends before the watchdog's task gets to run, so each
            # run of the chain would start and continue past the deadline for ever.
            self._timed_out = True
            self._log.warning("run passed its deadline before this execution; not starting "
                              "its body", deadline=format_ts(deadline))
            return self._deadline_outcome()
        async with anyio.create_task_group() as tg:
            async def watchdog() -> None:
                await clock.sleep(max(0.0, (deadline - clock.now()).total_seconds()))
                if not self._body_done and not self._timed_out:
                    self._timed_out = True
                    self._log.warning("run passed its deadline; stopping it",
                                      deadline=format_ts(deadline))
                    if self._body_scope is not None:
                        self._body_scope.cancel()

            tg.start_soon(watchdog)
            try:
                outcome = await self._body()
            finally:
                tg.cancel_scope.cancel()
        return outcome

    def _deadline_outcome(self) -> Outcome:
        """The run passed its deadline (``@workflow(timeout=)``): it ends in error."""
        exc = WorkflowTimeout(
            f"run {self.run_id} passed its deadline ({self.deadline}) and was "
            "stopped: raise the workflow's timeout (@workflow(timeout=) or "
            "sf.options(timeout=)) if it needs longer", run_id=self.run_id,
            node_id=self.position)
        return Outcome("error", error=f"WorkflowTimeout: {exc}", exception=exc)

    def wake_deadline(self, deadline: datetime | None) -> datetime | None:
        """A paused wait's timer: its own deadline, or the run's if that comes first
        (the timer then ends the run: :meth:`starflow.runtime.waking.Waker.fire_timer`)."""
        if self.deadline is None:
            return deadline
        return self.deadline if deadline is None else min(deadline, self.deadline)

    async def _release(self) -> None:
        """Hand the run back to the queue when this execution is cancelled from outside."""
        if self._lease_lost:
            return
        ts = self.runtime.clock.now()
        try:
            try:
                await self.writes.flush()  # the steps already done stay done
            except Abort:
                return
            if self.pause_requested:
                if await requeue.hold(self.adapter, self.run_id, self.runtime.runner_id,
                                      now=ts):
                    self._log.info("run paused by an operator at its next step",
                                   at=format_ts(ts))
                return
            if await requeue.release(self.adapter, self.run_id, self.runtime.runner_id):
                self._log.info("run released to the queue", at=format_ts(ts))
        except StarflowError as exc:
            self._log.warning("could not release the lease; the sweep will", error=str(exc))

    def _duration_ms(self, ts: datetime) -> int:
        return max(0, int((ts - self.started_at).total_seconds() * 1000))

    def _unstorable_end(self, outcome: Outcome) -> Outcome | None:
        """The error outcome for a success or pause whose writes a database would
        refuse (the return value, the phase, a variable of the checkpoint), checked
        before the write: the run then fails once with the real error instead of
        losing its runner on a write that can never succeed."""
        try:
            if outcome.status == "success":  # (the value is checked as it is encoded)
                serde.check_storable(self.ctx.phase, what="the run's phase",
                                     run_id=self.run_id)
            elif outcome.status == "paused":
                variables = {k: v for k, v in self.ctx.variables.items()
                             if not k.startswith(RESERVED_PREFIX)}
                serde.to_builtins(variables, what="the workflow's variables (saved with "
                                  "the checkpoint of a durable wait)", run_id=self.run_id,
                                  node_id=outcome.wait.node_id if outcome.wait else None)
        except SerializationError as exc:
            return Outcome("error", error=f"SerializationError: {exc}", exception=exc)
        return None

    async def _finalize(self, outcome: Outcome) -> Outcome:
        try:
            return await self._finalize_once(outcome)
        except StorageError as exc:
            # A final write the database refused for what it held (permanent: a
            # transient failure became Abort in WritePath.commit). Record the failure instead;
            # if even that is refused, the run is left to the sweep.
            if outcome.status == "error":
                return Outcome("storage", exception=exc)
            try:
                return await self._finalize_once(
                    Outcome("error", error=f"StorageError: {exc}", exception=exc))
            except StorageError as again:
                return Outcome("storage", exception=again)

    async def _continue(self, encoded: dict[str, Any]) -> Outcome:
        """End the run as ``success`` continued as a new run with ``encoded`` input,
        in one unit (``starflow.continue_as_new``)."""
        if self.writes.unstarted:
            await self.writes.flush()  # the run row it reads (a fused start not written yet)
        run = await self.adapter.get_run(self.run_id)
        if run is None:  # pragma: no cover - the lease guard fails the unit anyway
            raise Abort("lease_lost")
        new_id = str(uuid.uuid4())
        inline = run.start_mode == "inline"
        ctx = WorkflowContext(run_id=new_id, workflow=self.ctx.workflow,
                              version=self.ctx.version, workspace_id=self.ctx.workspace_id,
                              env=self.ctx.env)
        # The new run takes the chain's place: a child's parent link (the parent
        # awaiting the child follows the chain to its last run) and the run's
        # deadline, which bounds the whole chain (Temporal's workflow execution
        # timeout), not each link.
        options = StartOptions(
            input=encoded, status="running" if inline else "queued",
            claim_state="running" if inline else "queued", runner_pool=run.runner_pool,
            definition_id=run.definition_id, start_mode=run.start_mode,
            max_claim_attempts=run.max_claim_attempts, parent_run_id=run.parent_run_id,
            detached=run.detached, deadline_at=run.deadline_at)

        async def continued(ts: datetime) -> None:
            await self._phase(ts)
            await self.adapter.on_run_complete(self.run_id, self.ctx, self._duration_ms(ts),
                                               now=ts, result=None)
            await self.adapter.update_run(self.run_id, "continue_as_new",
                                          continued_as=new_id)
            await self.adapter.clear_lease(self.run_id)
            await self.adapter.record_event(self.run_id, "run_continued", None,
                                            {"run_id": new_id}, now=ts,
                                            method="continue_as_new")
            await self.adapter.on_run_start(new_id, ctx, options, now=ts)
            if inline:  # this runner drives the chain on (Driver.follow_chain)
                await self.adapter.write_lease(new_id, self.runtime.runner_id,
                                               ts + self.runtime.config.lease_ttl, now=ts)
            await self.adapter.record_event(new_id, CONTINUED_FROM_EVENT, None,
                                            {"run_id": self.run_id}, now=ts,
                                            method="continue_as_new")

        await self.writes.commit(continued)
        return Outcome("continued", result=new_id, definition=self.definition)

    async def _finalize_once(self, outcome: Outcome) -> Outcome:
        try:
            outcome = self._unstorable_end(outcome) or outcome
            if outcome.status == "continued":
                return await self._continue(outcome.result)
            if outcome.status == "success":
                try:
                    result = serde.to_builtins(outcome.result, what="the workflow's return value",
                                               run_id=self.run_id)
                except SerializationError as exc:
                    outcome = Outcome("error", error=f"SerializationError: {exc}", exception=exc)
                else:
                    async def complete(ts: datetime) -> None:
                        if self._phase_changed():
                            await self._phase(ts)
                        await self.adapter.on_run_complete(
                            self.run_id, self.ctx, self._duration_ms(ts), now=ts, result=result)
                        await self.adapter.clear_lease(self.run_id)

                    await self.writes.commit(complete)
                    return Outcome("success", result=result, definition=self.definition)
            if outcome.status == "error":
                # Whatever the exception said, the run's error must be recorded.
                message = storable_text(outcome.error or "error")
                cause = (run_failure(outcome.exception) if outcome.exception is not None
                         else None)

                async def failed(ts: datetime) -> None:
                    await self._phase(ts, strict=False)
                    await self.adapter.on_run_error(self.run_id, message, now=ts,
                                                    duration_ms=self._duration_ms(ts),
                                                    failure=cause)
                    await self.adapter.clear_lease(self.run_id)

                await self.writes.commit(failed)
                # One line per failed run, at error level, whatever the host's level
                # for the rest of starflow: what failed, where, and the cause's type.
                self._log.error(
                    "run failed", workflow=self.definition.name,
                    version=self.definition.version,
                    node_id=cause.node_id if cause is not None else None,
                    error_type=cause.type if cause is not None else None,
                    error=message)
                return outcome
            if outcome.status == "cancelled":
                async def cancelled(ts: datetime) -> None:
                    await self._phase(ts, strict=False)
                    await self.adapter.on_run_error(self.run_id, "cancelled", now=ts,
                                                    duration_ms=self._duration_ms(ts),
                                                    status="cancelled", claim_state="failed")
                    await self.adapter.clear_lease(self.run_id)
                    await self.adapter.clear_waits(self.run_id)
                    await self.adapter.record_event(self.run_id, "run_cancelled", None,
                                                    {"cleanup": "done"}, now=ts,
                                                    method="cancel")

                await self.writes.commit(cancelled)
                return outcome
            if outcome.status == "paused":
                wait = outcome.wait
                assert wait is not None
                payload = {"node_id": wait.node_id, "event": wait.event,
                           "deadline": format_ts(wait.deadline) if wait.deadline else None,
                           "wake_token": wait.wake_token}
                job = wait.job
                if job is not None:
                    payload["job_id"] = job.id

                async def pause(ts: datetime) -> None:
                    if job is not None:
                        await self.adapter.on_node_start(
                            self.run_id, job.node_id,
                            {"kind": "step", "name": job.step_name, "args_hash": job.args_hash,
                             "input": job.input, "pool": job.pool, "job_id": job.id}, now=ts)
                    # enterDurableWait 3-6, then finalizeRun's clearLease: one atomic
                    # unit, so the wake can never be visible before the checkpoint.
                    await self.adapter.on_run_paused(self.run_id, self.ctx, now=ts,
                                                     payload=payload)
                    await self.adapter.save_checkpoint(self.run_id, self.ctx)
                    await self.adapter.record_phase_if_changed(
                        self.run_id, self.ctx, {"previous": self.journal.last_phase}, now=ts)
                    await self.adapter.emit_wait_wake(self.run_id, wait.node_id, wait.event,
                                                      self.wake_deadline(wait.deadline), now=ts)
                    if job is not None:
                        # The worker job is the wake registration of this wait: last.
                        await self.adapter.insert_job(job, now=ts)
                    await self.adapter.clear_lease(self.run_id)

                await self.writes.commit(pause)
                return outcome
            return outcome
        except Abort as abort:
            return Outcome(abort.reason, exception=abort.cause)
