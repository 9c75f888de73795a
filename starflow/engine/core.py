"""The state of one run execution and its primitives: time, writes, node ids.

:class:`EngineCore` holds what an execution knows (its journal, counters,
cancel state) and the primitives every operation uses: the deterministic
clock, the one write path (:attr:`EngineCore.writes`, a
:class:`~starflow.engine.writes.WritePath`), node ids, patches,
attributes, wake tokens, the suspension at a durable wait
(:meth:`EngineCore._suspend`) and the delivery of a cooperative cancel at a
node (a request, its delivery, the cleanup that follows). :mod:`starflow.engine.nodes` builds the
operations on it, :mod:`starflow.engine.engine` the run around them.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import InitVar, dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn, TypeVar

import anyio
from anyio.abc import TaskGroup

from .. import serde
from ..adapters.base import WorkflowStateAdapter
from ..clock import Clock, format_ts
from ..errors import (
    ConcurrentWaits,
    InvalidArgument,
    RunCancelled,
    SerializationError,
    StarflowError,
    StreamClosed,
    WaitTimeout,
    WorkflowDefinitionError,
)
from ..failure import CANCELLED_TYPE, cancelled_error
from ..limits import duration_problem
from ..logs import get_logger
from ..records import JobSpec
from ..tokens import WakeClaims
from ..workflow.attributes import ATTRIBUTES_KIND
from ..workflow.context import CANCEL_EVENT, WAIT_KEY, CheckpointWait, WorkflowContext, current_node
from ..workflow.decorators import WorkflowDefinition
from ..workflow.events import EVENT_KIND, STREAM_KIND, DataWrite
from ..workflow.waits import wait_events
from .execution import ContinueAsNew, PendingWait, Runtime, Suspend
from .replay import Journal, NodeRecord, node_id
from .step_data import StepWrites, hosting_writers
from .writes import AttributesWrite, PatchMarker, WritePath

__all__ = ["EngineCore", "log"]

log = get_logger("starflow.engine")

T = TypeVar("T")


@dataclass
class EngineCore:
    """What one execution of one run knows, and the primitives its operations use."""


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
    #: Durable waits this execution is entering now (between their call and their
    #: return or pause), by node id: True for a timed one (a sleep, a timeout).
    _entering: dict[str, bool] = field(default_factory=dict)
    #: Timed durable waits were reached at once: the run fails with this.
    wait_conflict: ConcurrentWaits | None = None
    #: Set when the last wait being entered is done (see :meth:`_settle_waits`).
    _entering_done: anyio.Event | None = None
    #: The wait this execution is suspending on (set when it suspends).
    _pending_wait: PendingWait = field(init=False, repr=False)
    _body_scope: anyio.CancelScope | None = None
    #: Set by :meth:`kill` with an error: the owner stopped this execution.
    _stop_error: StarflowError | None = None
    _body_done: bool = False
    #: A non-forced cancel is pending: delivered at the next new node (or step await).
    cancel_requested: bool = False
    #: An operator paused the run (``Starflow.pause``): it is parked at the next
    #: new step (status paused, claim_state held) instead of starting it.
    pause_requested: bool = False
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
    #: Per stream key, the last ``seq`` the workflow wrote (or replayed): a starting
    #: step's slots. Replaced, never changed in place, so a step keeps the one it
    #: started with at no cost.
    _stream_slots: dict[str, int] = field(default_factory=dict)
    #: Streams this execution closed (or replayed the closing of).
    _closed_streams: set[str] = field(default_factory=set)
    #: The publishing calls of the steps running now, by step node id.
    _step_writes: dict[str, StepWrites] = field(default_factory=dict)
    #: The task group their writer tasks run in (:meth:`_hosting_step_writes`).
    _writer_group: TaskGroup | None = None
    #: One unit of step writes at a time: a stream item's sub-number is computed
    #: at its insert, from the items already there.
    _step_writes_lock: anyio.Lock = field(default_factory=anyio.Lock)
    #: Asked before each new step starts: True hands the run back to the queue
    #: there (a draining worker), so the step runs once, on the next runner.
    should_yield: Callable[[], bool] | None = None
    #: A worker's claim left the run ``claimed``: the first boundary unit also
    #: writes the lease that moves it to ``running`` (one commit instead of two).
    claimed: InitVar[bool] = False
    #: Write nothing (a replay): every unit raises
    #: :class:`~starflow.engine.writes.ReadOnlyWrite`.
    read_only: InitVar[bool] = False
    #: The run's recorded input could not be decoded for this code: the body
    #: raises it instead of running, so the run fails with it (lease-guarded).
    input_error: StarflowError | None = None
    #: The W3C ``traceparent`` stored with the run at its start, continued by
    #: this execution's ``starflow.run`` span (OpenTelemetry only).
    traceparent: str | None = None
    #: Steps of this execution between their ``node_start`` and their outcome.
    _steps_in_flight: int = 0
    #: The run that started this one as a child (its end wakes that run).
    parent_run_id: str | None = None
    #: The run's deadline (``@workflow(timeout=)``): past it the run ends in error.
    deadline: datetime | None = None
    #: This execution started or replayed a child run (its end cascades to them).
    has_children: bool = False
    #: This run continued an earlier one (``continue_as_new``): see ``Outcome.continuation``.
    continuation: bool = False
    _timed_out: bool = False

    def __post_init__(self, claimed: bool, read_only: bool) -> None:
        self._last_time = self.started_at
        self.journal.replaying = bool(self.journal.nodes)
        self._log = log.bind(run_id=self.run_id, runner_id=self.runtime.runner_id,
                             workspace=self.ctx.workspace_id, workflow=self.definition.name)
        #: Every write of this execution, and what it has pending for its next unit.
        self.writes = WritePath(self.runtime, self.ctx, self.journal, self._log,
                                claimed=claimed, read_only=read_only)

    @property
    def _lease_lost(self) -> bool:
        """This runner may write nothing more (killed, cancelled or taken over)."""
        return self.writes.lease_lost

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    @property
    def adapter(self) -> WorkflowStateAdapter:
        return self.runtime.adapter

    @property
    def clock(self) -> Clock:
        """The runtime's clock (wall time; :meth:`now` is the deterministic one)."""
        return self.runtime.clock

    @property
    def replaying(self) -> bool:
        """Whether the workflow code is replaying recorded history (nodes lie ahead)."""
        return self.journal.replaying and bool(self.journal.unconsumed())

    # -- time --------------------------------------------------------------------

    def now(self) -> datetime:
        """Deterministic time: the latest boundary this execution passed (a retry
        is one, once the nodes recorded before it are replayed)."""
        assert self._last_time is not None
        floor = self.journal.time_floor()
        if floor is not None and floor > self._last_time:
            self._last_time = floor
        return self._last_time

    def _advance(self, ts: datetime | None) -> None:
        if ts is not None and (self._last_time is None or ts > self._last_time):
            self._last_time = ts

    # -- writes ------------------------------------------------------------------

    def _phase_changed(self) -> bool:
        """Whether :meth:`_phase` has an event to add (checked first on the hot
        boundaries, which then skip awaiting it)."""
        return bool(self.ctx.phase != self.journal.last_phase)

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
                self.writes.add(PatchMarker(marker, change_id))
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
        self.writes.add(AttributesWrite(nid, values))

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
        with the next boundary (which is made durable); nothing on replay. Inside
        a step: written at once, no node of its own (see :mod:`.step_data`)."""
        step = current_node.get()
        if step is not None:
            self._writes_of(step).submit(DataWrite(node_id=step, kind=EVENT_KIND, key=key,
                                                   value=value, in_step=True))
            return
        self._guard_suspending()
        nid = self._next_id(EVENT_KIND, key)
        if self._recorded_or_skipped(nid, "set_event"):
            return
        self.journal.record(NodeRecord(node_id=nid, kind=EVENT_KIND, name=key,
                                       status="complete", output=value))
        self.writes.add(DataWrite(node_id=nid, kind=EVENT_KIND, key=key, value=value))

    def write_stream(self, key: str, value: Any, *, closed: bool = False) -> None:
        """``starflow.write_stream`` / ``close_stream``: record node
        ``stream:<key>#n`` and item ``n`` of the stream with the next boundary;
        nothing on replay (the item is there: exactly once per value). Inside a
        step: written at once, in the step's slot (see :mod:`.step_data`)."""
        step = current_node.get()
        if step is None:
            self._guard_suspending()
        if key in self._closed_streams:
            raise StreamClosed(key, run_id=self.run_id, closing=closed)
        if step is not None:
            writes = self._writes_of(step)
            write = DataWrite(node_id=step, kind=STREAM_KIND, key=key, value=value,
                              seq=writes.slot(key), closed=closed, in_step=True)
            writes.submit(write)
            if closed:
                self._closed_streams.add(key)
            return
        nid = self._next_id(STREAM_KIND, key)
        seq = self._counters[(STREAM_KIND, key)]
        self._stream_slots = {**self._stream_slots, key: seq}
        if closed:
            self._closed_streams.add(key)
        if self._recorded_or_skipped(nid, "write_stream"):
            return
        output = {"seq": seq, "closed": closed}
        self.journal.record(NodeRecord(node_id=nid, kind=STREAM_KIND, name=key,
                                       status="complete", output=output))
        self.writes.add(DataWrite(node_id=nid, kind=STREAM_KIND, key=key, value=value,
                                    seq=seq, closed=closed))

    def _writes_of(self, step: str) -> StepWrites:
        writes = self._step_writes.get(step)
        if writes is None:  # a task the step left running, after the step ended
            raise StarflowError(f"run {self.run_id}: step {step} has ended: publish from "
                                "a step before it returns", run_id=self.run_id, node_id=step)
        return writes

    async def _hosting_step_writes(self, body: Callable[[], Awaitable[T]]) -> T:
        """Run the workflow body with the task group of its steps' writers."""
        async def hosted(group: TaskGroup) -> T:
            self._writer_group = group
            try:
                return await body()
            finally:
                self._writer_group = None

        return await hosting_writers(hosted)

    async def _commit_step_writes(self, batch: list[DataWrite]) -> None:
        """Write a step's queued calls in one unit under the lease (see :mod:`.step_data`),
        then wake this process's readers."""
        async def build(ts: datetime) -> None:
            for write in batch:
                await write.submit(self.adapter, self.run_id, ts)

        async with self._step_writes_lock:
            await self.writes.commit(build)
        if self.runtime.notify is not None:
            self.runtime.notify()

    def continue_as_new(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> NoReturn:
        """``starflow.continue_as_new``: check and encode the new run's arguments
        (before anything is written), then unwind the body."""
        self._guard_suspending()
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
        self.check_wait_duration(nid, timeout)
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

    def _unwind_with_pause(self, events: tuple[str, ...]) -> NoReturn:
        """This wait, in a concurrent branch, unwinds with the pause another branch
        wrote; its events are recorded with that wait (``also_events``) so a
        signal for them is expected while the run is paused there."""
        self._note_also(events)
        raise Suspend(self._pending_wait)

    def _note_also(self, events: tuple[str, ...]) -> None:
        if events:
            current = self.ctx.variables.get(WAIT_KEY)
            if isinstance(current, dict):
                also = list(current.get("also_events") or [])
                also += [e for e in events if e not in also]
                self.ctx.variables._engine_set(  # type: ignore[attr-defined]
                    WAIT_KEY, {**current, "also_events": also})

    @contextlib.contextmanager
    def _entering_wait(self, nid: str, timed: bool,
                       events: tuple[str, ...] = ()) -> Iterator[None]:
        """Mark durable wait ``nid`` as being entered until it returns or pauses.

        A run pauses at one wait at a time. Untimed waits reached at once in
        concurrent branches (a task group, ``asyncio.gather``) pause one after
        the other: the first to pause wins (:meth:`_suspend`), the others are
        reached again on the replay after its wake, and their events are noted
        with the paused wait (``also_events``: a signal for them is expected
        meanwhile). A timer would then start
        only once the wait before it ended, so a timed one among them fails the
        run with :class:`ConcurrentWaits` instead, before anything is written.
        """
        others = [n for n in self._entering if n != nid]
        if self._suspending:
            # Another branch paused already: this wait runs concurrently with it.
            paused = self._pending_wait
            if not timed and paused.deadline is None:
                self._unwind_with_pause(events)
            others = [paused.node_id]
            timed = True
        if others and (timed or any(self._entering[n] for n in others)):
            raise self._conflict((*others, nid))
        self._entering[nid] = timed
        try:
            yield
        except BaseException:
            if self._suspending and self._pending_wait.node_id != nid:
                # Unwound (a task group cancels its other branches) by the pause
                # another branch wrote: this wait is reached again after its wake.
                if timed or self._pending_wait.deadline is not None:
                    self._conflict((self._pending_wait.node_id, nid))
                self._note_also(events)
            raise
        finally:
            self._entering.pop(nid, None)
            if not self._entering and self._entering_done is not None:
                self._entering_done.set()

    def _conflict(self, nodes: tuple[str, ...]) -> ConcurrentWaits:
        """Record (the run fails with it) and return the error for timed waits
        ``nodes`` reached at once."""
        exc = ConcurrentWaits(
            f"run {self.run_id}: durable waits {', '.join(nodes)} were reached at once "
            "in concurrent branches (a task group or asyncio.gather), and a timed one "
            "(a sleep, or a timeout) cannot run concurrently: a run pauses at one wait "
            "at a time, so its timer would start late. Wait in one place instead: "
            "starflow.wait_for_any(..., timeout=) for the first of several signals, "
            "or one sleep for the longest delay (untimed waits in concurrent branches "
            "are fine)", run_id=self.run_id, node_ids=nodes)
        if self.wait_conflict is None:
            self.wait_conflict = exc
        return exc

    async def _settle_waits(self) -> None:
        """Before the pause is written: let the waits other branches are still
        entering finish their reads (``asyncio.gather`` does not cancel its other
        awaitables when one pauses); each then unwinds at its pause check, so no
        query of this execution is left in flight after it ends."""
        while self._entering:
            self._entering_done = anyio.Event()
            await self._entering_done.wait()

    def _refuse_in_step(self, what: str, why: str) -> None:
        """Raise if called from inside a step: ``what`` is recorded in the workflow's
        history, so it belongs to the ``@workflow`` function, between steps."""
        step_node = current_node.get()
        if step_node is not None:
            raise StarflowError(f"{what} called inside step {step_node} of run {self.run_id}: "
                                f"{why}", run_id=self.run_id, node_id=step_node)

    async def _enter_wait(self, nid: str, kind: str, name: str | None, reaching: str,
                          timed_out: str) -> NodeRecord | None:
        """The replay side of a durable wait at ``nid``: its finished record (a
        recorded timeout raises :class:`WaitTimeout` "timed out before
        ``timed_out``", a recorded cancel :class:`RunCancelled`), or None once
        the wait is reached for real (``reaching`` names it at the frontier)."""
        rec = self.journal.get(nid)
        if rec is not None and rec.finished:
            self.journal.consume(nid)
            self._advance(rec.recorded_at)
            if rec.status == "error":
                self._replayed_cancel(rec)
                raise WaitTimeout(f"run {self.run_id}: wait {nid} timed out before {timed_out}",
                                  run_id=self.run_id, node_id=nid)
            return rec
        if rec is not None:
            self.journal.consume(nid)
        else:
            await self.journal.reach_frontier(self.run_id, nid, reaching)
        self._guard_suspending()
        await self._reach_cancel(nid, kind, name)
        return None

    def check_wait_duration(self, nid: str, duration: timedelta | None) -> None:
        """Refuse a wait's timeout (or a sleep) longer than starflow can add to the
        clock (:data:`~starflow.limits.MAX_DURATION`), before the wait is written."""
        if duration is not None and duration_problem("timeout", duration) is not None:
            raise self._too_far(nid, duration)

    def _too_far(self, nid: str, duration: timedelta | None) -> InvalidArgument:
        param = "duration" if nid.startswith("sleep") else "timeout"
        problem = None if duration is None else duration_problem(param, duration)
        return InvalidArgument(
            f"run {self.run_id}: {nid}: " + (problem or (
                f"{param} {duration} ends past the year 9999, which cannot be stored: use a "
                f"shorter one")) + " (a wait_for without a timeout waits for ever)",
            run_id=self.run_id, node_id=nid)

    # -- suspending at a durable wait -------------------------------------------

    def _suspend(self, nid: str, event: str | None, deadline: datetime | None,
                 expiry: datetime, job: JobSpec | None = None,
                 payload_type: str | None = None,
                 payload_types: dict[str, str] | None = None) -> NoReturn:
        # A wait in a concurrent branch that got here after another one paused
        # unwinds with that pause (and is reached again after its wake); writing
        # its own wait over the first would leave the run paused on neither.
        if self._suspending:
            self._unwind_with_pause(wait_events(nid, event))
        token = self._sign(nid, expiry)
        pending = PendingWait(node_id=nid, event=event, deadline=deadline, wake_token=token,
                              job=job)
        # enterDurableWait steps 1-2 (in memory); the engine writes steps 3-6.
        recorded = CheckpointWait(node_id=nid, event=event,
                                  deadline=format_ts(deadline) if deadline else None,
                                  wake_token=token, job_id=job.id if job is not None else None,
                                  payload_type=payload_type, payload_types=payload_types,
                                  signals=self.definition.signals)
        self.ctx.variables._engine_set(WAIT_KEY, recorded.variable())  # type: ignore[attr-defined]
        self.node_status[nid] = "waiting"
        self._pending_wait = pending
        self._suspending = True
        raise Suspend(pending)

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

    def request_pause(self) -> None:
        """An operator paused the run: the step in flight finishes and is recorded,
        then the run parks before the next new step (``Starflow.pause``)."""
        if not self.pause_requested:
            self.pause_requested = True
            self._log.info("pause requested; parking the run at its next step")

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

        ts = await self.writes.commit(record)
        self._advance(ts)
        self.node_status[nid] = "error"
        self.journal.record(NodeRecord(node_id=nid, kind=kind, name=name, status="error",
                                       error=info, recorded_at=ts))
        self._cancel_delivered()
        raise self._cancel_error(nid)
