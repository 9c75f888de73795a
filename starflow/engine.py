"""One :class:`Engine` per run execution: boundaries, replay, heartbeat, finalize.

The engine runs the workflow body with the run's journal. Every durable
operation (step, wait, sleep) gets a node id; recorded ones return their
recorded outcome, new ones write their boundary through the state adapter,
awaited, guarded by this runner's lease. A heartbeat refreshes the lease; if
another runner (or a cancel) took the run, the body is cancelled and nothing
more is written.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn

import anyio

from . import children, logs, observability, requeue, serde
from .adapters.base import WorkflowStateAdapter
from .adapters.units import Guard
from .attributes import ATTRIBUTES_KIND
from .clock import format_ts
from .context import (
    CANCEL_EVENT,
    IDEMPOTENCY_KEY,
    RESERVED_PREFIX,
    WAIT_KEY,
    CheckpointWait,
    WorkflowContext,
    current_engine,
    current_node,
)
from .decorators import StepDefinition, WorkflowDefinition
from .errors import (
    NonDeterminismError,
    RunCancelled,
    SerializationError,
    StarflowError,
    StepFailed,
    StorageError,
    StreamClosed,
    WaitTimeout,
    WorkflowDefinitionError,
    WorkflowTimeout,
)
from .events import EVENT_KIND, STREAM_KIND, DataWrite
from .execution import (
    Abort,
    ContinueAsNew,
    Outcome,
    PendingWait,
    Runtime,
    Suspend,
    find_unwinding,
    timed_attempt,
)
from .failure import CANCELLED_TYPE, cancelled_error, error_info, format_traceback, run_failure
from .heartbeats import Heartbeats
from .limits import storable_text
from .logs import get_logger
from .records import JobSpec, StartOptions
from .replay import (
    DIVERGENCE_FIX,
    Journal,
    NodeRecord,
    check_recorded,
    node_id,
    replay_variables,
    variables_diff,
    variables_snapshot,
)
from .requeue import lease_guard
from .tokens import WakeClaims
from .waits import ANY_KIND, ANY_SEPARATOR, first_signal

# Outcome, PendingWait and Runtime live in execution.py and Heartbeats in heartbeats.py;
# they are re-exported here for the modules that import them from the engine.
__all__ = ["Engine", "Heartbeats", "Outcome", "PendingWait", "Runtime"]

log = get_logger("starflow.engine")

@dataclass
class Engine:
    """Drives one execution of one run (a first run, a resume or a replay)."""

    runtime: Runtime
    definition: WorkflowDefinition
    ctx: WorkflowContext
    journal: Journal
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    started_at: datetime
    _counters: dict[tuple[str, str | None], int] = field(default_factory=dict)
    _last_time: datetime | None = None
    _suspending: bool = False
    _body_scope: anyio.CancelScope | None = None
    _lease_lost: bool = False
    #: Set by :meth:`kill` with an error: the owner stopped this execution.
    _stop_error: StarflowError | None = None
    _body_done: bool = False
    #: A non-forced cancel is pending: delivered at the next new node (or step await).
    cancel_requested: bool = False
    #: RunCancelled reached the workflow code: its cleanup runs, then the run ends.
    _cancelled: bool = False
    _cleanup_deadline: datetime | None = None
    _cleanup_timed_out: bool = False
    _step_scopes: set[anyio.CancelScope] = field(default_factory=set)
    #: The latest node the workflow code reached (``starflow.logger`` names it).
    position: str | None = None
    node_status: dict[str, str] = field(default_factory=dict)
    #: ``patched()`` answers of this execution, by change id.
    _patches: dict[str, bool] = field(default_factory=dict)
    #: Patch markers decided but not yet written (they ride on the next unit).
    _markers: list[tuple[str, str]] = field(default_factory=list)
    #: ``set_attributes`` calls not yet written (they ride on the next unit too).
    _attributes: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    #: ``set_event`` / ``write_stream`` / ``close_stream`` calls not yet written
    #: (with the next unit, which they make durable).
    _data: list[DataWrite] = field(default_factory=list)
    #: Streams this execution closed (or replayed the closing of).
    _closed_streams: set[str] = field(default_factory=set)
    #: Asked before each new step starts: True hands the run back to the queue
    #: there (a draining worker), so the step runs once, on the next runner.
    should_yield: Callable[[], bool] | None = None
    #: A worker's claim left the run ``claimed``: the first boundary unit also
    #: writes the lease that moves it to ``running`` (one commit instead of two).
    claimed: bool = False
    #: The run's recorded input could not be decoded for this code: the body
    #: raises it instead of running, so the run fails with it (lease-guarded).
    input_error: StarflowError | None = None
    #: The W3C ``traceparent`` stored with the run at its start, continued by
    #: this execution's ``starflow.run`` span (OpenTelemetry only).
    traceparent: str | None = None
    #: The run that started this one as a child (its end wakes that run).
    parent_run_id: str | None = None
    #: The run's deadline (``@workflow(timeout=)``): past it the run ends in error.
    deadline: datetime | None = None
    #: This execution started or replayed a child run (its end cascades to them).
    has_children: bool = False
    _timed_out: bool = False

    def __post_init__(self) -> None:
        self._last_time = self.started_at
        self.journal.replaying = bool(self.journal.nodes)
        self._log = log.bind(run_id=self.run_id, runner_id=self.runtime.runner_id,
                             workspace=self.ctx.workspace_id, workflow=self.definition.name)
        # Every boundary of this execution carries the same guard: build it once.
        self._lease_guard = lease_guard(self.run_id, self.runtime.runner_id)

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    @property
    def adapter(self) -> WorkflowStateAdapter:
        return self.runtime.adapter

    @property
    def replaying(self) -> bool:
        """Whether the workflow code is replaying recorded history (nodes lie ahead)."""
        return self.journal.replaying and bool(self.journal.unconsumed())

    @property
    def _guard(self) -> Guard:
        return self._lease_guard

    # -- time --------------------------------------------------------------------

    def now(self) -> datetime:
        """Deterministic time: the latest boundary this execution passed."""
        assert self._last_time is not None
        return self._last_time

    def _advance(self, ts: datetime | None) -> None:
        if ts is not None and (self._last_time is None or ts > self._last_time):
            self._last_time = ts

    # -- writes ------------------------------------------------------------------

    async def _commit(self, build: Callable[[datetime], Awaitable[None]], *,
                      durable: bool = True, guard: Guard | None = None) -> datetime:
        """Write one unit guarded by this runner's lease; retry storage failures.

        Returns the timestamp the unit was written with.
        """
        clock = self.runtime.clock
        retries = self.runtime.config.storage_retries
        # Patch markers decided since the last boundary commit with this one, before
        # its own writes: the history then shows the marker ahead of the new path.
        markers, self._markers = self._markers, []
        attributes, self._attributes = self._attributes, []
        data, self._data = self._data, []
        # A reader waits for these: commit them now, not at the next flush.
        durable = durable or bool(data)
        for attempt in range(retries + 1):
            if self._lease_lost:  # killed, cancelled or taken over: write nothing more
                raise Abort("lease_lost")
            ts = clock.now()
            try:
                async with self.adapter.unit(guard=guard or self._guard, durable=durable) as unit:
                    if self.claimed:
                        await self.adapter.write_lease(
                            self.run_id, self.runtime.runner_id,
                            ts + self.runtime.config.lease_ttl, now=ts)
                    for marker_id, change_id in markers:
                        await self.adapter.on_node_complete(
                            self.run_id, marker_id,
                            {"output": True, "kind": "patch", "name": change_id}, now=ts)
                    for attrs_id, values in attributes:
                        await self.adapter.on_node_complete(
                            self.run_id, attrs_id,
                            {"output": values, "kind": ATTRIBUTES_KIND}, now=ts)
                        await self.adapter.set_attributes(self.run_id, values, now=ts)
                    for write in data:
                        await write.submit(self.adapter, self.run_id, ts)
                    await build(ts)
            except StorageError as exc:
                if not exc.transient:
                    # Refused for what it is: it would be refused again, here or by the
                    # runner the sweep hands the run to. Raised into the workflow body,
                    # which ends the run with this error (once).
                    self._log.error("boundary write refused by the database; failing the "
                                    "run", error=str(exc))
                    raise
                if attempt == retries:
                    self._log.error("boundary write failed; giving the run up to the sweep",
                                    error=str(exc), attempts=attempt + 1)
                    raise Abort("storage", exc) from exc
                self._log.warning("boundary write failed; retrying", error=str(exc),
                                  attempt=attempt + 1)
                await clock.sleep(min(0.05 * 2**attempt, 2.0))
                continue
            if not unit.held:
                self._lease_lost = True
                raise Abort("lease_lost")
            # Every engine unit records the phase if it changed (see _phase).
            self.journal.last_phase = self.ctx.phase
            self.claimed = False
            if data and self.runtime.notify is not None:
                self.runtime.notify()  # get_event / read_stream callers in this process
            return ts
        raise AssertionError("unreachable")  # pragma: no cover

    async def _phase(self, ts: datetime, *, strict: bool = True) -> None:
        """Add a phase event to the unit being built if the phase changed.

        Args:
            strict: Raise :class:`SerializationError` for a phase the database
                cannot hold; else (the run's final error) leave the event out.
        """
        if self.ctx.phase != self.journal.last_phase:
            try:
                serde.check_storable(self.ctx.phase, what="the run's phase",
                                     run_id=self.run_id)
            except SerializationError:
                if strict:
                    raise
                return
            await self.adapter.record_phase_if_changed(
                self.run_id, self.ctx, {"previous": self.journal.last_phase}, now=ts)

    # -- determinism -------------------------------------------------------------

    def _next_id(self, kind: str, name: str | None) -> str:
        key = (kind, name)
        n = self._counters.get(key, 0) + 1
        self._counters[key] = n
        self.position = node_id(kind, name, n)
        return self.position

    def patched(self, change_id: str) -> bool:
        """``starflow.patched``: whether this run takes the new path of a code change.

        True (and a ``patch:<change_id>#1`` marker is recorded with the next
        boundary) when the run reaches this point for the first time with this
        code, or when its history holds the marker. False when the history
        already goes past this point without the marker: old code ran here, so
        the old path is replayed. The answer is fixed for the whole execution.
        """
        known = self._patches.get(change_id)
        if known is None:
            known, marker = self.journal.decide_patch(change_id)
            if marker is not None:
                self._markers.append((marker, change_id))
            self._patches[change_id] = known
            self._log.debug("patch decided", change_id=change_id, patched=known)
        return known

    def set_attributes(self, values: dict[str, str]) -> None:
        """``starflow.set_attributes``: record node ``attributes#n`` and the run's
        attributes with the next boundary; nothing when the history holds it, or
        when a replay meets it before the end of its history (code added since)."""
        self._guard_suspending()
        nid = self._next_id(ATTRIBUTES_KIND, None)
        if self._recorded_or_skipped(nid, "set_attributes"):
            return
        self.journal.record(NodeRecord(node_id=nid, kind=ATTRIBUTES_KIND, status="complete",
                                       output=values))
        self._attributes.append((nid, values))

    def _recorded_or_skipped(self, nid: str, what: str) -> bool:
        """Whether a recorded-only node (attributes, event, stream) needs no write:
        the history holds it, or a replay meets it before the end of its history."""
        if self.journal.get(nid) is not None:
            self.journal.consume(nid)
            return True
        if self.journal.replaying and self.journal.unconsumed():
            self._log.debug(f"{what} added under a run in flight: skipped on replay",
                            node_id=nid)
            return True
        return False

    def set_event(self, key: str, value: Any) -> None:
        """``starflow.set_event``: record node ``event:<key>#n`` and the run's event
        with the next boundary (which is made durable); nothing on replay."""
        self._guard_suspending()
        nid = self._next_id(EVENT_KIND, key)
        if self._recorded_or_skipped(nid, "set_event"):
            return
        self.journal.record(NodeRecord(node_id=nid, kind=EVENT_KIND, name=key,
                                       status="complete", output=value))
        self._data.append(DataWrite(node_id=nid, kind=EVENT_KIND, key=key, value=value))

    def write_stream(self, key: str, value: Any, *, closed: bool = False) -> None:
        """``starflow.write_stream`` / ``close_stream``: record node
        ``stream:<key>#n`` and item ``n`` of the stream with the next boundary;
        nothing on replay (the item is there: exactly once per value)."""
        self._guard_suspending()
        if key in self._closed_streams:
            raise StreamClosed(key, run_id=self.run_id, closing=closed)
        nid = self._next_id(STREAM_KIND, key)
        seq = self._counters[(STREAM_KIND, key)]
        if closed:
            self._closed_streams.add(key)
        if self._recorded_or_skipped(nid, "write_stream"):
            return
        output = {"seq": seq, "closed": closed}
        self.journal.record(NodeRecord(node_id=nid, kind=STREAM_KIND, name=key,
                                       status="complete", output=output))
        self._data.append(DataWrite(node_id=nid, kind=STREAM_KIND, key=key, value=value,
                                    seq=seq, closed=closed))

    def continue_as_new(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> NoReturn:
        """``starflow.continue_as_new``: check and encode the new run's arguments
        (before anything is written), then unwind the body."""
        self._guard_suspending()
        if self.parent_run_id is not None:
            # The parent awaits this run's id; a chain's later runs are not wired to
            # wake it yet, so a child continuing would leave its parent waiting.
            raise StarflowError(
                f"run {self.run_id} is a child of run {self.parent_run_id}: "
                "continue_as_new is not supported in child runs yet; loop in the child, "
                "or have the parent start a new child for the next round",
                run_id=self.run_id)
        try:
            self.definition.check_call(args, kwargs)
        except TypeError as exc:
            raise WorkflowDefinitionError(
                f"run {self.run_id}: continue_as_new arguments do not fit workflow "
                f"{self.definition.name!r}: {exc}", run_id=self.run_id) from exc
        encoded: dict[str, Any] = serde.to_builtins(
            {"args": list(args), "kwargs": kwargs},
            what=f"continue_as_new arguments of workflow {self.definition.name!r}",
            run_id=self.run_id)
        raise ContinueAsNew(encoded)

    def next_wait_id(self, event: str | None) -> str:
        """The node id the next ``wait_for(event)`` (``sleep`` for None) will get."""
        kind = "wait" if event is not None else "sleep"
        return node_id(kind, event, self._counters.get((kind, event), 0) + 1)

    def wake_token_for(self, event: str | None, timeout: timedelta | None = None) -> str:
        """The wake token of the next ``wait_for(event)``, before the run reaches it.

        Deterministic for a given history and signing key: its expiry derives
        from :meth:`now` (``timeout`` + 1 day, or ``wake_token_ttl``).
        """
        nid = self.next_wait_id(event)
        base = self.now()
        try:
            expiry = (base + timeout + timedelta(days=1) if timeout is not None
                      else base + self.runtime.config.wake_token_ttl)
        except OverflowError:
            raise self._too_far(nid, timeout) from None
        return self._sign(nid, expiry)

    def _sign(self, nid: str, expiry: datetime) -> str:
        return self.runtime.keyring.sign(WakeClaims(
            r=self.run_id, n=nid, w=self.ctx.workspace_id, e=self.ctx.env,
            x=math.ceil(expiry.timestamp())))

    def _guard_suspending(self) -> None:
        if self._suspending:
            raise Suspend(self._pending_wait)

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

        await self._commit(retried, durable=False)
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
        encoded = serde.to_builtins({"args": list(args), "kwargs": kwargs},
                                    what=f"arguments of step {sdef.name}", run_id=self.run_id,
                                    node_id=nid)
        h = serde.args_hash(encoded)
        rec = self.journal.get(nid)
        if rec is not None:
            check_recorded(self.run_id, rec, "step", sdef.name, h, encoded)
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
        if self.should_yield is not None and self.should_yield():
            raise Abort("released")
        if sdef.pool is not None:
            self._dispatch(sdef, nid, h, encoded)

        async def start(ts: datetime) -> None:
            await self._phase(ts)
            await self.adapter.on_node_start(
                self.run_id, nid,
                {"kind": "step", "name": sdef.name, "args_hash": h, "input": encoded}, now=ts)

        await self._commit(start, durable=False)
        self.node_status[nid] = "running"
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
                    finally:
                        self._step_scopes.discard(step_scope)
                if step_scope.cancelled_caught:
                    await self._deliver_cancel(nid, "step", sdef.name)
            except Exception as exc:
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

                ts = await self._commit(failed)
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
            await self._phase(ts)

        ts = await self._commit(complete)
        self._advance(ts)
        self.node_status[nid] = "complete"
        self.journal.record(NodeRecord(node_id=nid, kind="step", name=sdef.name, args_hash=h,
                                       status="complete", output=output, recorded_at=ts))
        return serde.convert(output, sdef.return_type, what=f"output of {nid}",
                             run_id=self.run_id, node_id=nid)

    async def _attempt(self, sdef: StepDefinition, nid: str, fn: Callable[..., Awaitable[Any]],
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """One attempt of a step, cancelled past its ``timeout`` (on the runtime's clock)."""
        return await timed_attempt(self.runtime.clock, sdef, fn, args, kwargs,
                                   run_id=self.run_id, node_id=nid)

    # -- child runs (starflow.children) ------------------------------------------

    async def start_child(self, definition: WorkflowDefinition, args: tuple[Any, ...],
                          kwargs: dict[str, Any], *, run_id: str | None, pool: str | None,
                          detached: bool) -> str:
        """``starflow.start_child``: see :func:`starflow.children.start_child_node`."""
        return await children.start_child_node(self, definition, args, kwargs,
                                               run_id=run_id, pool=pool, detached=detached)

    async def child_result(self, child_run_id: str, return_type: Any) -> Any:
        """``ChildHandle.result``: see :func:`starflow.children.child_result_node`."""
        return await children.child_result_node(self, child_run_id, return_type)

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

    def _suspend(self, nid: str, event: str | None, deadline: datetime | None,
                 expiry: datetime, job: JobSpec | None = None,
                 payload_type: str | None = None) -> NoReturn:
        token = self._sign(nid, expiry)
        pending = PendingWait(node_id=nid, event=event, deadline=deadline, wake_token=token,
                              job=job)
        # enterDurableWait steps 1-2 (in memory); the engine writes steps 3-6.
        recorded = CheckpointWait(node_id=nid, event=event,
                                  deadline=format_ts(deadline) if deadline else None,
                                  wake_token=token, job_id=job.id if job is not None else None,
                                  payload_type=payload_type)
        self.ctx.variables._engine_set(WAIT_KEY, recorded.variable())  # type: ignore[attr-defined]
        self.node_status[nid] = "waiting"
        self._pending_wait = pending
        self._suspending = True
        raise Suspend(pending)

    # -- waits -------------------------------------------------------------------

    async def wait(self, event: str | None, timeout: timedelta | None,
                   type_: Any, *, kind: str | None = None, node_name: str | None = None) -> Any:
        """``wait_for`` (event set) or ``sleep`` (event None).

        ``kind`` and ``node_name`` name the node otherwise (``receive:<name>#n``
        for an update, whose inbox event is reserved).
        """
        step_node = current_node.get()
        if step_node is not None:
            # A pause here would unwind the step half done and, on the wake, run it
            # again from its start (its effects before the wait twice).
            what = f"wait_for({event!r})" if event is not None else "sleep()"
            raise StarflowError(
                f"{what.split('(')[0]}() called inside step {step_node} of run {self.run_id}: "
                f"a durable wait pauses the whole run, so {what} must be called from the "
                "@workflow function, between steps (a step may hand out "
                "starflow.wake_token() for the wait that follows it)",
                run_id=self.run_id, node_id=step_node)
        self._guard_suspending()
        kind = kind or ("wait" if event is not None else "sleep")
        nid = self._next_id(kind, node_name or event)
        rec = self.journal.get(nid)
        if rec is not None and rec.finished:
            self.journal.consume(nid)
            self._advance(rec.recorded_at)
            if rec.status == "error":
                self._replayed_cancel(rec)
                raise WaitTimeout(
                    f"run {self.run_id}: wait {nid} timed out before {event!r} was signalled",
                    run_id=self.run_id, node_id=nid)
            return serde.convert(rec.output, type_, what=f"payload of {nid}",
                                 run_id=self.run_id, node_id=nid)
        if rec is not None:
            self.journal.consume(nid)
        else:
            await self.journal.reach_frontier(self.run_id, nid,
                                              f"{kind} {event!r}" if event else "sleep")
        self._guard_suspending()
        await self._reach_cancel(nid, kind, event)
        if event is None and timeout is not None and timeout <= timedelta(0):
            return None  # sleep(0) does not pause (a recorded one above replays as before)
        if event is not None:
            signal = await self.adapter.find_signal(self.run_id, event)
            if signal is not None and not await self._accepts(nid, event, signal, type_):
                signal = None
            if signal is not None:
                async def deliver(ts: datetime) -> None:
                    await self.adapter.consume_signal(signal.id)
                    await self.adapter.on_node_complete(
                        self.run_id, nid, {"output": signal.payload, "via": "signal"}, now=ts)
                    await self._phase(ts)

                ts = await self._commit(deliver)
                self._advance(ts)
                self.journal.record(NodeRecord(node_id=nid, kind=kind, name=event,
                                               status="complete", output=signal.payload,
                                               recorded_at=ts))
                return serde.convert(signal.payload, type_, what=f"payload of {nid}",
                                     run_id=self.run_id, node_id=nid)
        try:
            deadline = self.now() + timeout if timeout is not None else None
            expiry = deadline + timedelta(days=1) if deadline is not None else (
                self.runtime.clock.now() + self.runtime.config.wake_token_ttl)
        except OverflowError:
            raise self._too_far(nid, timeout) from None
        self._suspend(nid, event, deadline, expiry, payload_type=serde.type_name(type_))

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

            ts = await self._commit(reject)
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
        (:func:`starflow.waits.wait_events`) and a wake guarded by that row
        decides which signal wins.
        """
        step_node = current_node.get()
        if step_node is not None:
            raise StarflowError(
                f"wait_for_any() called inside step {step_node} of run {self.run_id}: a "
                "durable wait pauses the whole run, so it must be called from the @workflow "
                "function, between steps", run_id=self.run_id, node_id=step_node)
        self._guard_suspending()
        name = ANY_SEPARATOR.join(events)
        nid = self._next_id(ANY_KIND, name)
        rec = self.journal.get(nid)
        if rec is not None and rec.finished:
            self.journal.consume(nid)
            self._advance(rec.recorded_at)
            if rec.status == "error":
                self._replayed_cancel(rec)
                raise WaitTimeout(
                    f"run {self.run_id}: wait {nid} timed out before any of "
                    f"{', '.join(map(repr, events))} was signalled",
                    run_id=self.run_id, node_id=nid)
            return self._any_result(nid, rec.output, events, types)
        if rec is not None:
            self.journal.consume(nid)
        else:
            await self.journal.reach_frontier(self.run_id, nid, f"wait_for_any {name!r}")
        self._guard_suspending()
        await self._reach_cancel(nid, ANY_KIND, name)
        signal = await first_signal(self.adapter, self.run_id, events)
        if signal is not None:
            output = {"event": signal.event, "payload": signal.payload}

            async def deliver(ts: datetime) -> None:
                await self.adapter.consume_signal(signal.id)
                await self.adapter.on_node_complete(
                    self.run_id, nid, {"output": output, "via": "signal"}, now=ts)
                await self._phase(ts)

            ts = await self._commit(deliver)
            self._advance(ts)
            self.journal.record(NodeRecord(node_id=nid, kind=ANY_KIND, name=name,
                                           status="complete", output=output, recorded_at=ts))
            return self._any_result(nid, output, events, types)
        try:
            deadline = self.now() + timeout if timeout is not None else None
            expiry = deadline + timedelta(days=1) if deadline is not None else (
                self.runtime.clock.now() + self.runtime.config.wake_token_ttl)
        except OverflowError:
            raise self._too_far(nid, timeout) from None
        self._suspend(nid, name, deadline, expiry)

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
                raise NonDeterminismError(
                    f"run {self.run_id}: {nid} was recorded as the answer to update "
                    f"{recorded!r}, but the code now answers {update_id!r}. {DIVERGENCE_FIX}",
                    run_id=self.run_id, node_id=nid, recorded=str(recorded), current=update_id)
            self._advance(rec.recorded_at)
            return
        await self.journal.reach_frontier(self.run_id, nid, f"reply to update {name!r}")
        serde.check_storable(output, what=f"the answer to update {name!r}",
                             run_id=self.run_id, node_id=nid)

        async def record(ts: datetime) -> None:
            await self.adapter.on_node_complete(
                self.run_id, nid, {"output": output, "kind": "reply", "name": name}, now=ts)
            await self._phase(ts)

        ts = await self._commit(record)
        self._advance(ts)
        self.journal.record(NodeRecord(node_id=nid, kind="reply", name=name,
                                       status="complete", output=output, recorded_at=ts))
        if self.runtime.notify is not None:
            self.runtime.notify()

    def _any_result(self, nid: str, output: Any, events: tuple[str, ...],
                    types: Mapping[str, Any]) -> tuple[str, Any]:
        event = output.get("event") if isinstance(output, dict) else None
        if event not in events:
            raise NonDeterminismError(
                f"run {self.run_id}: {nid} was recorded with {output!r}, not one of the "
                f"events {', '.join(map(repr, events))}. {DIVERGENCE_FIX}",
                run_id=self.run_id, node_id=nid, recorded=repr(output), current=nid)
        assert isinstance(output, dict)
        payload = serde.convert(output.get("payload"), types.get(event, Any),
                                what=f"payload of {event!r} at {nid}", run_id=self.run_id,
                                node_id=nid)
        return event, payload

    # -- cancellation (Starflow.cancel without force) ----------------------------

    def request_cancel(self) -> None:
        """A cancel was requested: a step in flight is cancelled at its next await, and
        the next new node raises :class:`RunCancelled` into the workflow code."""
        if self.cancel_requested or self._cancelled:
            return
        self.cancel_requested = True
        self._log.info("cancel requested; delivering it at the run's current await")
        for scope in list(self._step_scopes):
            scope.cancel()

    def _cancel_error(self, nid: str) -> RunCancelled:
        return RunCancelled(self.run_id, node_id=nid, message=(
            f"run {self.run_id} was cancelled at {nid}: catch RunCancelled (or use finally) "
            "to run compensation steps; the run then ends cancelled"))

    def _cancel_delivered(self) -> None:
        """The workflow code got (or replayed) RunCancelled: its cleanup runs now."""
        self.cancel_requested = False
        if not self._cancelled:
            self._cancelled = True
            self._cleanup_deadline = (self.runtime.clock.now()
                                      + self.runtime.config.cancel_cleanup_timeout)

    def _replayed_cancel(self, rec: NodeRecord) -> None:
        """A replayed wait recorded as reached by a cancel raises RunCancelled again."""
        if (rec.error or {}).get("type") == CANCELLED_TYPE:
            self._cancel_delivered()
            raise self._cancel_error(rec.node_id)

    async def _reach_cancel(self, nid: str, kind: str, name: str | None) -> None:
        """At a new node: deliver a pending cancel here; during the cleanup, refuse a
        durable wait (the run is ending: only steps may run)."""
        if self._cancelled:
            if kind != "step":
                raise RunCancelled(self.run_id, node_id=nid, message=(
                    f"run {self.run_id} is cancelled: {nid} is a durable wait, which cannot "
                    "run in the cleanup of a cancelled run (call steps only)"))
            return
        if self.cancel_requested:
            await self._deliver_cancel(nid, kind, name)

    async def _deliver_cancel(self, nid: str, kind: str, name: str | None) -> NoReturn:
        """Record the cancel as ``nid``'s failure (consuming the request) and raise it."""
        signal = await self.adapter.find_signal(self.run_id, CANCEL_EVENT)
        info = cancelled_error(nid)

        async def record(ts: datetime) -> None:
            if signal is not None:
                await self.adapter.consume_signal(signal.id)
            await self.adapter.on_node_error(self.run_id, nid, {"error": info, "via": "cancel"},
                                             now=ts)
            await self._phase(ts)

        ts = await self._commit(record)
        self._advance(ts)
        self.node_status[nid] = "error"
        self.journal.record(NodeRecord(node_id=nid, kind=kind, name=name, status="error",
                                       error=info, recorded_at=ts))
        self._cancel_delivered()
        raise self._cancel_error(nid)

    def _too_far(self, nid: str, duration: timedelta | None) -> StarflowError:
        return StarflowError(
            f"run {self.run_id}: {nid} with a duration of {duration} ends past the year "
            "9999, which cannot be stored: use a shorter timeout or sleep (a wait_for "
            "without a timeout waits for ever)", run_id=self.run_id, node_id=nid)

    # -- the run -----------------------------------------------------------------

    async def refresh_lease_once(self) -> bool:
        """One heartbeat: refresh the lease. False once the lease is found lost.

        A transient storage blip is logged, not raised: a healthy run must not
        fail for it; if it lasts past the TTL, the sweep treats this runner as lost.
        """
        cfg = self.runtime.config
        ts = self.runtime.clock.now()
        try:
            async with self.adapter.unit(guard=self._guard) as unit:
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
        except StarflowError as exc:
            self._log.warning("could not look for a cancel request", error=str(exc))
            return
        if pending is not None:
            self.request_cancel()

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
        self._lease_lost = True
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

    async def _body(self) -> Outcome:
        with anyio.CancelScope() as scope:
            self._body_scope = scope
            try:
                if self.input_error is not None:
                    raise self.input_error
                value = await self.definition.fn(*self.args, **self.kwargs)
            except BaseException as exc:
                suspend = find_unwinding(exc, Suspend)
                abort = find_unwinding(exc, Abort)
                if isinstance(abort, Abort):
                    return Outcome(abort.reason, exception=abort.cause)
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
            exc4 = WorkflowTimeout(
                f"run {self.run_id} passed its deadline ({self.deadline}) and was "
                "stopped: raise the workflow's timeout (@workflow(timeout=) or "
                "sf.options(timeout=)) if it needs longer", run_id=self.run_id,
                node_id=self.position)
            return Outcome("error", error=f"WorkflowTimeout: {exc4}", exception=exc4)
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
            if self._lease_lost and outcome.status not in ("lease_lost", "storage"):
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

    def wake_deadline(self, deadline: datetime | None) -> datetime | None:
        """A paused wait's timer: its own deadline, or the run's if that comes first
        (the timer then ends the run: :meth:`starflow.waking.Waker.fire_timer`)."""
        if self.deadline is None:
            return deadline
        return self.deadline if deadline is None else min(deadline, self.deadline)

    async def _release(self) -> None:
        """Hand the run back to the queue when this execution is cancelled from outside."""
        if self._lease_lost:
            return
        ts = self.runtime.clock.now()
        try:
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
            # transient failure became _Abort in _commit). Record the failure instead;
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
        run = await self.adapter.get_run(self.run_id)
        if run is None:  # pragma: no cover - the lease guard fails the unit anyway
            raise Abort("lease_lost")
        new_id = str(uuid.uuid4())
        inline = run.start_mode == "inline"
        ctx = WorkflowContext(run_id=new_id, workflow=self.ctx.workflow,
                              version=self.ctx.version, workspace_id=self.ctx.workspace_id,
                              env=self.ctx.env)
        options = StartOptions(
            input=encoded, status="running" if inline else "queued",
            claim_state="running" if inline else "queued", runner_pool=run.runner_pool,
            definition_id=run.definition_id, start_mode=run.start_mode,
            max_claim_attempts=run.max_claim_attempts)

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
            if inline:  # this runner drives the chain on (Driver.settle)
                await self.adapter.write_lease(new_id, self.runtime.runner_id,
                                               ts + self.runtime.config.lease_ttl, now=ts)
            await self.adapter.record_event(new_id, "run_continued_from", None,
                                            {"run_id": self.run_id}, now=ts,
                                            method="continue_as_new")

        await self._commit(continued)
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
                        await self._phase(ts)
                        await self.adapter.on_run_complete(
                            self.run_id, self.ctx, self._duration_ms(ts), now=ts, result=result)
                        await self.adapter.clear_lease(self.run_id)

                    await self._commit(complete)
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

                await self._commit(failed)
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

                await self._commit(cancelled)
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

                await self._commit(pause)
                return outcome
            return outcome
        except Abort as abort:
            return Outcome(abort.reason, exception=abort.cause)
