"""The operations workflow code calls on its execution: steps, waits, child runs.

:class:`EngineNodes` adds to :class:`~starflow.engine.core.EngineCore` every
durable operation (a step with its retries, a wait or sleep, ``wait_for_any``,
an update's answer, a child run's start and result through
:mod:`starflow.engine.child_nodes`): each gets a node id, returns its recorded outcome
on replay, or writes its boundary. Suspending at a wait and delivering a
cancel are the core's primitives, which the child nodes use too.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, NoReturn

import anyio

from .. import logs, observability, serde
from ..errors import NonDeterminismError, RunCancelled, SerializationError, StepFailed
from ..failure import CANCELLED_TYPE, error_info, format_traceback
from ..limits import storable_text
from ..records import JobSpec
from ..workflow.context import IDEMPOTENCY_KEY, RESERVED_PREFIX, current_node
from ..workflow.decorators import StepDefinition, WorkflowDefinition
from ..workflow.waits import ANY_KIND, ANY_SEPARATOR, first_signal
from . import child_nodes
from .core import EngineCore
from .execution import Abort, timed_attempt
from .replay import (
    DIVERGENCE_FIX,
    NodeRecord,
    replay_variables,
    variables_diff,
    variables_snapshot,
)
from .step_data import StepWrites

__all__ = ["EngineNodes"]


class EngineNodes(EngineCore):
    """Steps, waits and cancellation of one execution."""

    # -- steps -------------------------------------------------------------------

    async def _record_retry(self, sdef: StepDefinition, nid: str, exc: Exception,
                            attempt: int, delay: float) -> None:
        """Log and record one failed attempt that will be retried, then wait ``delay``.

        The ``node_retry`` event (attempt, error with its traceback, delay chosen)
        is written before the backoff, so the history shows every failed attempt
        even if the process dies while waiting. It is not flushed (like
        ``node_start``): losing it in a crash loses only the record of an attempt
        whose step runs again.
        """
        info = error_info(exc, attempt)
        self._log.warning("step failed; retrying", node_id=nid, step=sdef.name,
                          attempt=attempt, max_attempts=sdef.retry.max_attempts,
                          delay_s=delay, error_type=info["type"], error=repr(exc))
        info["message"] = storable_text(info["message"])
        info["traceback"] = storable_text(format_traceback(exc))
        retry = {"attempt": attempt, "error": info, "delay_ms": int(delay * 1000)}

        async def retried(ts: datetime) -> None:
            await self._phase(ts)
            await self.adapter.on_node_retry(self.run_id, nid, retry, now=ts)

        await self.writes.commit(retried, durable=False)
        await self.runtime.clock.sleep(delay)

    async def run_step(self, sdef: StepDefinition, fn: Callable[..., Awaitable[Any]],
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """Execute or replay one step call; every log inside it carries its node id."""
        self._guard_suspending()
        nid = self._next_id("step", sdef.name)
        with logs.bound(run_id=self.run_id, node_id=nid):
            return await self._run_step(sdef, fn, args, kwargs, nid)

    async def _run_step(self, sdef: StepDefinition, fn: Callable[..., Awaitable[Any]],
                        args: tuple[Any, ...], kwargs: dict[str, Any], nid: str) -> Any:
        encoded, h = serde.to_builtins_hashed(
            {"args": list(args), "kwargs": kwargs}, what=f"arguments of step {sdef.name}",
            run_id=self.run_id, node_id=nid)
        rec = self.journal.get(nid)
        if rec is not None:
            self.journal.check_recorded(self.run_id, rec, "step", sdef.name, h, encoded)
            self.journal.consume(nid)
            if rec.finished and rec.variables:
                replay_variables(self.ctx.variables, rec.variables)
            if rec.status == "complete":
                self._advance(rec.recorded_at)
                return serde.convert(rec.output, sdef.return_type,
                                     what=f"recorded output of {nid}", run_id=self.run_id,
                                     node_id=nid)
            if rec.status == "error":
                self._advance(rec.recorded_at)
                err = rec.error or {}
                if err.get("type") == CANCELLED_TYPE:
                    self._cancel_delivered()
                    raise self._cancel_error(nid)
                raise StepFailed(str(err.get("type")), str(err.get("message")),
                                 run_id=self.run_id, node_id=nid,
                                 attempts=int(err.get("attempts", 1)))
        else:
            await self.journal.reach_frontier(self.run_id, nid, f"step {sdef.name!r}")
        self._guard_suspending()
        await self._reach_cancel(nid, "step", sdef.name)
        if self.pause_requested or (self.should_yield is not None and self.should_yield()):
            await self.writes.flush()  # the steps before this one stay done
            raise Abort("released")  # (paused by an operator: _release parks it instead)
        if sdef.pool is not None:
            self._dispatch(sdef, nid, h, encoded)

        async def start(ts: datetime) -> None:
            if self._phase_changed():
                await self._phase(ts)
            await self.adapter.on_node_start(
                self.run_id, nid,
                {"kind": "step", "name": sdef.name, "args_hash": h, "input": encoded}, now=ts)

        await self.writes.commit(start, durable=False)
        self.node_status[nid] = "running"
        self._steps_in_flight += 1
        writes = self._step_writes[nid] = StepWrites(nid, self._stream_slots,
                                                     self._commit_step_writes,
                                                     self._writer_group)
        try:
            return await self._step_body(sdef, fn, args, kwargs, nid, h, writes)
        finally:
            writes.close()
            del self._step_writes[nid]
            self._steps_in_flight -= 1

    async def _step_body(self, sdef: StepDefinition, fn: Callable[..., Awaitable[Any]],
                         args: tuple[Any, ...], kwargs: dict[str, Any], nid: str,
                         h: str, writes: StepWrites) -> Any:
        variables_before = variables_snapshot(self.ctx.variables, RESERVED_PREFIX)
        policy = sdef.retry
        attempt = 0
        while True:
            attempt += 1
            token = current_node.set(nid)
            try:
                # A cancel while the step runs cancels it at its next await (the scope).
                with anyio.CancelScope() as step_scope:
                    self._step_scopes.add(step_scope)
                    if self.cancel_requested:
                        step_scope.cancel()
                    try:
                        with observability.current().step_attempt(self.run_id, nid, sdef.name,
                                                                  attempt):
                            result = await self._attempt(sdef, nid, fn, args, kwargs)
                            # What it published is durable before its outcome is.
                            await writes.drain()
                    finally:
                        self._step_scopes.discard(step_scope)
                if step_scope.cancelled_caught:
                    await self._deliver_cancel(nid, "step", sdef.name)
            except Exception as exc:
                await self._settle_writes(writes, nid)
                if isinstance(exc, RunCancelled) and self._cancelled:
                    raise
                if (attempt < policy.max_attempts and policy.retryable(exc)
                        and not self.cancel_requested):
                    await self._record_retry(sdef, nid, exc, attempt, policy.delay(attempt))
                    continue
                info = error_info(exc, attempt)
                # The failure is recorded once, or the step ends here: a message the
                # database refused would fail the write and re-run the step elsewhere.
                serde.check_storable(info, what=f"the error raised by step {sdef.name}",
                                     run_id=self.run_id, node_id=nid)
                failure = {"error": info}
                changes = self._variable_changes(variables_before, nid)
                if changes is not None:
                    failure["variables"] = changes

                async def failed(ts: datetime, failure: dict[str, Any] = failure) -> None:
                    await self.adapter.on_node_error(self.run_id, nid, failure, now=ts)
                    await self._phase(ts)

                ts = await self.writes.commit(failed)
                self._advance(ts)
                self.node_status[nid] = "error"
                self.journal.record(NodeRecord(node_id=nid, kind="step", name=sdef.name,
                                               args_hash=h, status="error", error=info,
                                               recorded_at=ts))
                raise StepFailed(info["type"], info["message"], run_id=self.run_id,
                                 node_id=nid, attempts=attempt) from exc
            finally:
                current_node.reset(token)
            break
        output = serde.to_builtins(result, what=f"return value of step {sdef.name}",
                                   run_id=self.run_id, node_id=nid)
        outcome: dict[str, Any] = {"output": output}
        changes = self._variable_changes(variables_before, nid)
        if changes is not None:
            outcome["variables"] = changes

        async def complete(ts: datetime) -> None:
            await self.adapter.on_node_complete(self.run_id, nid, outcome, now=ts)
            if self._phase_changed():
                await self._phase(ts)

        # Held for the next unit only while no other step of this run is in flight
        # (the count includes this one): see WritePath.commit_or_defer.
        ts = await self.writes.commit_or_defer(complete, may_defer=self._steps_in_flight <= 1)
        self._advance(ts)
        self.node_status[nid] = "complete"
        self.journal.record(NodeRecord(node_id=nid, kind="step", name=sdef.name, args_hash=h,
                                       status="complete", output=output, recorded_at=ts))
        return serde.convert(output, sdef.return_type, what=f"output of {nid}",
                             run_id=self.run_id, node_id=nid)

    async def _settle_writes(self, writes: StepWrites, nid: str) -> None:
        """A failed attempt's publishing calls are durable before its failure or
        retry is recorded; a failure to write them is logged (the attempt failed
        anyway, and the next one publishes again)."""
        try:
            await writes.drain()
        except Exception as exc:
            self._log.warning("could not write what a failed step attempt published",
                              node_id=nid, error=str(exc))

    async def _attempt(self, sdef: StepDefinition, nid: str, fn: Callable[..., Awaitable[Any]],
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One attempt of a step, cancelled past its ``timeout`` (on the runtime's clock)."""
        return await timed_attempt(self.runtime.clock, sdef, fn, args, kwargs,
                                   run_id=self.run_id, node_id=nid,
                                   threads=self.runtime.step_threads())

    # -- child runs (starflow.engine.child_nodes) ---------------------------------------

    async def start_child(self, definition: WorkflowDefinition, args: tuple[Any, ...],
                          kwargs: dict[str, Any], *, run_id: str | None, pool: str | None,
                          detached: bool, timeout: timedelta | None = None) -> str:
        """``starflow.start_child``: see :func:`starflow.engine.child_nodes.start_child_node`."""
        return await child_nodes.start_child_node(self, definition, args, kwargs,
                                               run_id=run_id, pool=pool, detached=detached,
                                               timeout=timeout)

    async def child_result(self, child_run_id: str, return_type: Any) -> Any:
        """``ChildHandle.result``: see :func:`starflow.engine.child_nodes.child_result_node`."""
        return await child_nodes.child_result_node(self, child_run_id, return_type)

    # -- variables written by steps (see replay.variables_snapshot) --------------

    def _variable_changes(self, before: dict[str, bytes] | None, nid: str
                          ) -> dict[str, Any] | None:
        """What the step changed in the user variables since ``before``, if anything."""
        after = variables_snapshot(self.ctx.variables, RESERVED_PREFIX)
        if before is None or after is None:
            if before != after:
                self._log.warning("a workflow variable is not JSON-encodable: the step's "
                                  "variable writes are not recorded for replay", node_id=nid)
            return None
        return variables_diff(before, after)

    def _dispatch(self, sdef: StepDefinition, nid: str, h: str, encoded: Any) -> NoReturn:
        """Hand a ``@step(pool=...)`` call to that pool's job workers and wait durably.

        The job row is written in the pause unit, after the wait registration,
        so no worker can finish the job before the run is paused on it.
        """
        assert sdef.pool is not None
        key = f"{self.run_id}:{nid}"
        keys = dict(self.ctx.variables.get(IDEMPOTENCY_KEY) or {})
        keys[nid] = key
        self.ctx.variables._engine_set(IDEMPOTENCY_KEY, keys)  # type: ignore[attr-defined]
        job = JobSpec(
            id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"starflow-job:{key}")),
            run_id=self.run_id, node_id=nid, pool=sdef.pool, step_name=sdef.name,
            idempotency_key=key, input=encoded, args_hash=h,
            # A job's claims follow its run's: the workflow's own max_claim_attempts,
            # else the config's (what the run row was started with).
            max_attempts=(self.definition.max_claim_attempts
                          or self.runtime.config.max_claim_attempts),
        )
        expiry = self.runtime.clock.now() + self.runtime.config.wake_token_ttl
        self._suspend(nid, None, None, expiry, job=job)

    # -- waits -------------------------------------------------------------------

    async def wait(self, event: str | None, timeout: timedelta | None,
                   type_: Any, *, kind: str | None = None, node_name: str | None = None) -> Any:
        """``wait_for`` (event set) or ``sleep`` (event None).

        ``kind`` and ``node_name`` name the node otherwise (``receive:<name>#n``
        for an update, whose inbox event is reserved).
        """
        # A pause inside a step would unwind the step half done and, on the wake,
        # run it again from its start (its effects before the wait twice).
        what = f"wait_for({event!r})" if event is not None else "sleep()"
        self._refuse_in_step(
            f"{what.split('(')[0]}()",
            f"a durable wait pauses the whole run, so {what} must be called from the "
            "@workflow function, between steps (a step may hand out "
            "starflow.wake_token() for the wait that follows it)")
        kind = kind or ("wait" if event is not None else "sleep")
        nid = self._next_id(kind, node_name or event)
        timed = timeout is not None and timeout > timedelta(0)
        with self._entering_wait(nid, timed, (event,) if event is not None else ()):
            return await self._wait(nid, kind, event, timeout, type_)

    async def _wait(self, nid: str, kind: str, event: str | None, timeout: timedelta | None,
                    type_: Any) -> Any:
        done = await self._enter_wait(nid, kind, event,
                                      f"{kind} {event!r}" if event else "sleep",
                                      f"{event!r} was signalled")
        if done is not None:
            return serde.convert(done.output, type_, what=f"payload of {nid}",
                                 run_id=self.run_id, node_id=nid)
        if event is None and timeout is not None and timeout <= timedelta(0):
            return None  # sleep(0) does not pause (a recorded one above replays as before)
        if event is not None:
            signal = await self.adapter.find_signal(self.run_id, event)
            if signal is not None and not await self._accepts(nid, event, signal, type_):
                signal = None
            if signal is not None:
                await self._take_early_signal(nid, kind, event, signal.id, signal.payload)
                return serde.convert(signal.payload, type_, what=f"payload of {nid}",
                                     run_id=self.run_id, node_id=nid)
        deadline, expiry = self._wait_times(nid, timeout)
        self._suspend(nid, event, deadline, expiry, payload_type=serde.type_name(type_))

    async def _take_early_signal(self, nid: str, kind: str, name: str | None,
                                 signal_id: int, output: Any) -> None:
        """Complete wait ``nid`` with a signal that was in the inbox before it: the
        signal consumed and the node recorded in one unit, no pause."""
        async def deliver(ts: datetime) -> None:
            await self.adapter.consume_signal(signal_id)
            await self.adapter.on_node_complete(
                self.run_id, nid, {"output": output, "via": "signal"}, now=ts)
            await self._phase(ts)

        ts = await self.writes.commit(deliver)
        self._advance(ts)
        self.journal.record(NodeRecord(node_id=nid, kind=kind, name=name, status="complete",
                                       output=output, recorded_at=ts))

    def _wait_times(self, nid: str, timeout: timedelta | None
                    ) -> tuple[datetime | None, datetime]:
        """A pausing wait's deadline (None without a timeout) and its wake token's
        expiry (a day past the deadline, else the token lifetime)."""
        self.check_wait_duration(nid, timeout)
        try:
            deadline = self.now() + timeout if timeout is not None else None
            expiry = deadline + timedelta(days=1) if deadline is not None else (
                self.runtime.clock.now() + self.runtime.config.wake_token_ttl)
        except OverflowError:
            raise self._too_far(nid, timeout) from None
        return deadline, expiry

    async def _accepts(self, nid: str, event: str, signal: Any, type_: Any) -> bool:
        """Whether a signal that came before its wait decodes to the wait's type.

        One that does not is taken out of the inbox and recorded as a
        ``signal_rejected`` event (with why) in one unit: it fails only this
        wait's delivery, and the run goes on to pause at the wait for a payload
        that fits, never failing for a sender's mistake.
        """
        try:
            serde.convert(signal.payload, type_, what=f"payload of signal {event!r} for {nid}",
                          run_id=self.run_id, node_id=nid)
        except SerializationError as exc:
            reason = {"event": event, "signal_id": signal.id, "error": storable_text(str(exc))}

            async def reject(ts: datetime) -> None:
                await self.adapter.consume_signal(signal.id)
                await self.adapter.record_event(self.run_id, "signal_rejected", nid, reason,
                                                now=ts, method="reject_signal")

            ts = await self.writes.commit(reject)
            self._advance(ts)
            self._log.warning("early signal rejected: its payload does not match the wait's "
                              "type; the run waits for another", node_id=nid, signal=event,
                              error=str(exc))
            return False
        return True

    async def wait_any(self, events: tuple[str, ...], timeout: timedelta | None,
                       types: Mapping[str, Any]) -> tuple[str, Any]:
        """``wait_for_any``: the first of ``events`` signalled, as ``(event, payload)``.

        One node, ``any:<e1>|<e2>…#n``, recorded like a ``wait_for``: its output
        is ``{"event": …, "payload": …}``. Signals for the other events stay in
        the inbox. While paused, the one wait row lists every event
        (:func:`starflow.workflow.waits.wait_events`) and a wake guarded by that row
        decides which signal wins.
        """
        self._refuse_in_step("wait_for_any()", "a durable wait pauses the whole run, so it "
                             "must be called from the @workflow function, between steps")
        name = ANY_SEPARATOR.join(events)
        nid = self._next_id(ANY_KIND, name)
        with self._entering_wait(nid, timeout is not None, events):
            return await self._wait_any(nid, name, events, timeout, types)

    async def _wait_any(self, nid: str, name: str, events: tuple[str, ...],
                        timeout: timedelta | None, types: Mapping[str, Any]
                        ) -> tuple[str, Any]:
        done = await self._enter_wait(nid, ANY_KIND, name, f"wait_for_any {name!r}",
                                      f"any of {', '.join(map(repr, events))} was signalled")
        if done is not None:
            return self._any_result(nid, done.output, events, types)
        while True:  # the oldest queued signal whose payload fits its event's type
            signal = await first_signal(self.adapter, self.run_id, events)
            if signal is None:
                break
            if await self._accepts(nid, signal.event, signal, types.get(signal.event, Any)):
                output = {"event": signal.event, "payload": signal.payload}
                await self._take_early_signal(nid, ANY_KIND, name, signal.id, output)
                return self._any_result(nid, output, events, types)
        deadline, expiry = self._wait_times(nid, timeout)
        names = {e: n for e, n in ((e, serde.type_name(t)) for e, t in types.items()) if n}
        self._suspend(nid, name, deadline, expiry, payload_types=names or None)

    async def answer_update(self, name: str, update_id: str, outcome: dict[str, Any]) -> None:
        """Record the answer to an update as node ``reply:<name>#n`` (once; a replay
        finds it recorded) and tell this process's callers waiting for it."""
        self._guard_suspending()
        nid = self._next_id("reply", name)
        output = {"update_id": update_id, **outcome}
        rec = self.journal.get(nid)
        if rec is not None:
            self.journal.consume(nid)
            recorded = rec.output.get("update_id") if isinstance(rec.output, dict) else None
            if recorded != update_id:
                raise self.journal.diverged(NonDeterminismError(
                    f"run {self.run_id}: {nid} was recorded as the answer to update "
                    f"{recorded!r}, but the code now answers {update_id!r}. {DIVERGENCE_FIX}",
                    run_id=self.run_id, node_id=nid, recorded=str(recorded), current=update_id))
            self._advance(rec.recorded_at)
            return
        await self.journal.reach_frontier(self.run_id, nid, f"reply to update {name!r}")
        serde.check_storable(output, what=f"the answer to update {name!r}",
                             run_id=self.run_id, node_id=nid)

        async def record(ts: datetime) -> None:
            await self.adapter.on_node_complete(
                self.run_id, nid, {"output": output, "kind": "reply", "name": name}, now=ts)
            await self._phase(ts)

        ts = await self.writes.commit(record)
        self._advance(ts)
        self.journal.record(NodeRecord(node_id=nid, kind="reply", name=name,
                                       status="complete", output=output, recorded_at=ts))
        if self.runtime.notify is not None:
            self.runtime.notify()

    def _any_result(self, nid: str, output: Any, events: tuple[str, ...],
                    types: Mapping[str, Any]) -> tuple[str, Any]:
        event = output.get("event") if isinstance(output, dict) else None
        if event not in events:
            raise self.journal.diverged(NonDeterminismError(
                f"run {self.run_id}: {nid} was recorded with {output!r}, not one of the "
                f"events {', '.join(map(repr, events))}. {DIVERGENCE_FIX}",
                run_id=self.run_id, node_id=nid, recorded=repr(output), current=nid))
        assert isinstance(output, dict)
        payload = serde.convert(output.get("payload"), types.get(event, Any),
                                what=f"payload of {event!r} at {nid}", run_id=self.run_id,
                                node_id=nid)
        return event, payload
