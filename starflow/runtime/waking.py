"""Waking paused runs: signals, wake tokens and timers.

One of the two parts :class:`~starflow.runtime.runner.Runner` is composed of
(the other is :mod:`starflow.runtime.driving`): :class:`Waker` is the only
place a paused run becomes running again. One unit records the wake (the
wait's payload, or its failure), and either this runner's lease (an inline
run, driven here through the ``drive`` it is given: the runner's whole settle
pipeline) or the queue (a worker run). :meth:`Waker.after_pause` is the
pipeline's step for an execution that paused: what was asked of the run while
it executed (a cancel, an operator pause, a signal or a child's end that raced
the pause) reaches the wait it paused on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import msgspec

from .. import serde
from ..adapters.units import Guard
from ..engine.child_nodes import chain_end, child_of_event, child_outcome
from ..engine.requeue import PAUSED_EVENT
from ..errors import (
    InvalidWakeToken,
    RunFinished,
    SerializationError,
    UnexpectedSignal,
    WorkflowDefinitionError,
)
from ..failure import CANCELLED_TYPE, cancelled_error, wait_timeout_error
from ..limits import storable_text
from ..records import HELD, RunEvent, RunInfo, WaitRecord
from ..workflow.context import CANCEL_EVENT, PAUSE_EVENT, CheckpointWait, checkpoint_wait
from ..workflow.decorators import registry
from ..workflow.updates import UPDATE_PREFIX, check_update_id, update_event, update_marker
from ..workflow.waits import ANY_KIND, check_event, first_signal, wait_events
from .driving import ACTIVE_STATUSES, Driver, RunHandle

__all__ = ["Waker"]


def _next_wait_event(node_id: str, events: list[RunEvent]) -> str | None:
    """The event of ``wait:<event>#n`` if that is the next wait on it the run will reach.

    The run has finished ``n - 1`` waits on ``<event>`` and not this one; any
    other node (a later occurrence, a sleep, a step) gives None.
    """
    kind, _, rest = node_id.partition(":")
    event, sep, occurrence = rest.rpartition("#")
    if kind != "wait" or not sep or not event or not occurrence.isdigit():
        return None
    prefix = f"wait:{event}#"
    finished = {e.node_id for e in events
                if e.node_id is not None and e.node_id.startswith(prefix)
                and e.event_type in ("node_complete", "node_error")}
    return event if int(occurrence) == len(finished) + 1 else None


def _check_payload(run_id: str, wait: CheckpointWait, encoded: Any, what: str,
                   event: str | None = None) -> None:
    """Refuse, before anything is written, a payload that does not decode to the
    ``type=`` of the wait it would wake (when this process holds that type).

    Raises:
        SerializationError: naming the field that does not fit.
    """
    name = wait.payload_type if event is None else wait.type_for(event)
    expected = serde.loaded_type(name)
    if expected is not None:
        serde.convert(encoded, expected,
                      what=f"{what} (run {run_id} waits at {wait.node_id} for a "
                           f"{name}; nothing was written)",
                      run_id=run_id, node_id=wait.node_id)


class Waker:
    """Wakes paused runs of one adapter in this process (see the module docstring).

    Args:
        driver: This process's driver (identity, definitions, handles, notifications).
        drive: Drives a run this runner now holds the lease of to its settled
            handle (the runner's ``drive``): an inline run is driven on after its wake.
    """

    def __init__(self, driver: Driver,
                 drive: Callable[[RunInfo], Awaitable[RunHandle[Any]]]) -> None:
        self.driver = driver
        self.adapter = driver.adapter
        self.clock = driver.clock
        self.config = driver.config
        self.keyring = driver.keyring
        self.runner_id = driver.runner_id
        self._log = driver.log
        self._drive = drive

    async def drives_here(self, run: RunInfo) -> bool:
        """The ``drive`` of :meth:`wake`: False only for an inline run whose workflow's
        code this process lacks (the workers, which have it, drive it then)."""
        if run.start_mode != "inline":
            return True
        try:
            await self.driver.resolve(run)
        except WorkflowDefinitionError:
            return False
        return True

    async def after_pause(self, handle: RunHandle[Any]) -> RunHandle[Any]:
        """What reaches the wait an execution just paused on (``handle``: paused).

        Asked while the run executed, too late for it to see: a cancel (its
        wait fails with ``RunCancelled``), an operator pause (the run is held
        at the wait), the end of the child it waits on, or a signal that
        arrived after ``wait_for`` looked at the inbox but before the pause
        committed. Returns the handle of the woken run, or ``handle``.
        """
        run_id = handle.run_id
        woke = await self.deliver_cancel(run_id)
        if woke is not None:
            return woke
        if await self.park_at_wait(run_id):
            return await self.driver.handle(run_id)
        child_id = child_of_event(handle.waiting_for)
        if child_id is not None:
            woke = await self.wake_parent(run_id, child_id)
        elif handle.waiting_for is not None:
            woke = await self.deliver(run_id, handle.waiting_for)
        return woke if woke is not None else handle

    async def wake_parent(self, parent_run_id: str, child_run_id: str, *,
                          chained: bool = True) -> RunHandle[Any] | None:
        """Wake ``parent_run_id`` with the outcome of ``child_run_id`` if the parent is
        paused awaiting that child and the child has ended; else ``None``.

        The outcome (status, result, error, failure) is read from the child's
        row, cold, and recorded as the parent's ``result:<child>#n`` node by the
        wake's unit; the guard (the parent's wait row) lets one of two racing
        wakes (the child's runner, the parent's own settle) win. A child that
        continued as new (``continue_as_new``) is followed to the last run of
        its chain: that run's end is the outcome.

        Args:
            chained: ``child_run_id`` may be a later run of the chain the parent
                waits on (it continued an earlier run), so a parent waiting on
                another run id is looked at too. False (a run that continued
                nothing) returns at once when the parent waits on another run.
        """
        for _ in range(3):
            run = await self.adapter.get_run(parent_run_id)
            if run is None or run.status != "paused" or run.claim_state == HELD:
                return None  # (held: resuming it looks at its child again)
            wait = checkpoint_wait(run.checkpoint_json)
            awaited = child_of_event(wait.event) if wait is not None else None
            if wait is None or wait.node_id is None or awaited is None:
                return None
            if awaited != child_run_id and not chained:
                return None
            child = await chain_end(self.adapter, awaited)
            outcome = child_outcome(child) if child is not None else None
            if outcome is None:
                return None
            drive = await self.drives_here(run)  # else a process with the parent's code
            handle = await self.wake(run, wait.node_id, via="child", output=outcome,
                                     drive=drive)
            if handle is not None:
                return handle
        return None

    async def park_at_wait(self, run_id: str) -> bool:
        """Hold a run paused at a wait whose operator pause is pending (requested
        while it executed): ``claim_state`` held, the request consumed, a
        ``run_paused_by_operator`` event. False, writing nothing, without a request."""
        request = await self.adapter.find_signal(run_id, PAUSE_EVENT)
        if request is None:
            return False
        now = self.clock.now()
        guard = Guard(run_id=run_id, status_in=("paused",), not_held=True)
        async with self.adapter.unit(guard=guard) as unit:
            await self.adapter.consume_signal(request.id)
            await self.adapter.update_run(run_id, "hold", claim_state=HELD)
            await self.adapter.record_event(run_id, PAUSED_EVENT, None, {"at": "wait"},
                                            now=now, method="hold")
        return bool(unit.held)

    async def deliver_cancel(self, run_id: str) -> RunHandle[Any] | None:
        """Wake a paused run with a pending cancel: its wait fails with RunCancelled.

        The request (an inbox entry) is consumed by the wake; the workflow code
        then gets :class:`~starflow.RunCancelled` at that wait and runs its
        cleanup. A worker job the run waits on is failed in the same unit.
        """
        for _ in range(3):
            signal = await self.adapter.find_signal(run_id, CANCEL_EVENT)
            if signal is None:
                return None
            run = await self.adapter.get_run(run_id)
            if run is None or run.status != "paused":
                return None
            wait = checkpoint_wait(run.checkpoint_json)
            if wait is None or wait.node_id is None:
                return None

            async def fail_jobs(now: datetime, run_id: str = run_id) -> None:
                await self.adapter.fail_run_jobs(run_id, error={
                    "type": CANCELLED_TYPE, "attempts": 0,
                    "message": f"run {run_id} was cancelled before this job finished"},
                    now=now)

            # In a process without the workflow's code (the CLI without --app) the
            # cleanup runs where the code is (the workers).
            drive = await self.drives_here(run)
            handle = await self.wake(run, wait.node_id, via="cancel",
                                     error=cancelled_error(wait.node_id), signal_id=signal.id,
                                     also=fail_jobs if wait.job_id is not None else None,
                                     drive=drive)
            if handle is not None:
                return handle
        return None

    async def wake(self, run: RunInfo, node_id: str, *, via: str, output: Any = None,
                   timed_out: bool = False, signal_id: int | None = None,
                   error: dict[str, Any] | None = None,
                   also: Callable[[datetime], Awaitable[None]] | None = None,
                   drive: bool = True) -> RunHandle[Any] | None:
        """Resume a paused run at ``node_id``; ``None`` if another wake won the race.

        Reads cold: the run row and its checkpoint. One unit records the wake
        payload (or ``error``, recorded as the node's failure), ``on_run_resumed``
        and either this runner's lease (inline runs, driven here) or the queue
        (worker runs, and inline runs when ``drive`` is False). ``also`` adds
        writes to that unit (a job worker's job outcome).
        """
        wait = checkpoint_wait(run.checkpoint_json)
        if wait is not None and wait.node_id != node_id:
            return None
        inline = run.start_mode == "inline" and drive
        if inline:
            # Driven here: fail before writing if this process lacks the run's version.
            await self.driver.resolve(run)
        now = self.clock.now()
        # A run paused by an operator is not woken (its signal stays queued), except
        # by a cancel, which ends the pause too.
        guard = Guard(run_id=run.id, status_in=("paused",), wait_node=node_id,
                      not_held=via != "cancel")
        async with self.adapter.unit(guard=guard) as unit:
            if signal_id is not None:
                await self.adapter.consume_signal(signal_id)
            if also is not None:
                await also(now)
            if error is not None:
                await self.adapter.on_node_error(run.id, node_id, {"error": error, "via": via},
                                                 now=now)
            elif timed_out:
                await self.adapter.on_node_error(
                    run.id, node_id, {"error": wait_timeout_error(node_id)}, now=now)
            else:
                await self.adapter.on_node_complete(run.id, node_id,
                                                    {"output": output, "via": via}, now=now)
            await self.adapter.clear_waits(run.id)
            await self.adapter.on_run_resumed(run.id, now=now,
                                              payload={"node_id": node_id, "via": via})
            # A wake is progress, not a failure: claim attempts count the claims
            # since the run last woke, so a long-lived run that waits many times
            # is not abandoned after its first lost runner (driven here or not).
            if inline:
                if run.claim_attempts:  # claimed by workers before (its runner was lost)
                    await self.adapter.update_run(run.id, "reset_claims", claim_attempts=0)
                await self.adapter.write_lease(run.id, self.runner_id,
                                               now + self.config.lease_ttl, now=now)
            else:
                await self.adapter.update_run(run.id, "requeue", status="queued",
                                              claim_state="queued", claim_attempts=0)
        if not unit.held:
            return None
        self._log.debug("run resumed", run_id=run.id, node_id=node_id, via=via)
        if not inline:
            self.driver.notify_settled()
            if run.deadline_at is not None:
                self.driver.notify_timers()  # queued again: the timer loop's deadline
            return RunHandle(run_id=run.id, status="queued")
        # The unit above held, so the row is what it wrote: no need to read it back.
        fresh = msgspec.structs.replace(
            run, status="running", claim_state="running", checkpoint_json=None,
            leased_by=self.runner_id, lease_until=now + self.config.lease_ttl,
            last_heartbeat=now)
        return await self._drive(fresh)

    async def deliver(self, run_id: str, event: str) -> RunHandle[Any] | None:
        """Wake the run if it is paused on ``event`` and a signal for it is queued.

        ``event`` is a signal name, or the ``waiting_for`` of a paused handle
        (for a ``wait_for_any``, its events joined by ``|``). A ``wait_for_any``
        is woken by the oldest signal among its events, with ``{"event",
        "payload"}``; the wake's guard (the wait row still there) lets exactly
        one of two racing signals win, and the other stays queued.
        """
        for _ in range(3):
            run = await self.adapter.get_run(run_id)
            if run is None or run.status != "paused" or run.claim_state == HELD:
                return None  # (held: the signal stays queued until the run is resumed)
            waits = await self.adapter.list_waits(run_id)
            wait = next((w for w in waits if w.event == event
                         or event in wait_events(w.node_id, w.event)), None)
            if wait is None:
                return None
            events = wait_events(wait.node_id, wait.event)
            signal = await first_signal(self.adapter, run_id, events)
            if signal is None:
                return None
            output = signal.payload
            if wait.node_id.startswith(ANY_KIND + ":"):
                output = {"event": signal.event, "payload": signal.payload}
            paused = checkpoint_wait(run.checkpoint_json)
            if (paused is not None and paused.node_id == wait.node_id
                    and paused.type_for(signal.event)):
                checked = await self._checked(run, paused, signal.id, signal.event,
                                              signal.payload)
                if isinstance(checked, RunHandle):
                    return checked  # handed to a worker, which checks it
                if not checked:
                    continue  # refused, or another wake won: look again
            handle = await self.wake(run, wait.node_id, via="signal", output=output,
                                     signal_id=signal.id)
            if handle is not None:
                return handle
        return None

    async def check_signal_name(self, run: RunInfo, event: str) -> None:
        """Refuse, before anything is written, a signal name the run does not take.

        Only a workflow that declares its signals (``@workflow(signals=...)``,
        read from this process's registry or, for a paused run, from its
        checkpoint) refuses names: any name outside the declared ones, the
        events of the wait it is paused at (and of waits concurrent branches
        reached, ``also_events``) and the waits recorded in its history. A
        workflow that declares none keeps every signal for the wait it may
        reach later (a signal sent early is never lost).

        Raises:
            UnexpectedSignal: naming the run, the event and the names it takes.
        """
        paused = checkpoint_wait(run.checkpoint_json) if run.status == "paused" else None
        declared = paused.signals if paused is not None else None
        if declared is None:
            definition = (registry.get(run.template_id, run.workflow_version)
                          if run.template_id else None)
            declared = definition.signals if definition is not None else None
        if declared is None or event in declared:
            return
        if paused is not None and event in paused.also_events:
            return
        waits = await self.adapter.list_waits(run.id)
        current = {e for w in waits for e in wait_events(w.node_id, w.event)
                   if child_of_event(e) is None}
        seen: set[str] = set()
        for recorded in await self.adapter.list_events(run.id):
            node = recorded.node_id or ""
            kind, _, rest = node.partition(":")
            if kind in ("wait", ANY_KIND) and "#" in rest:
                seen.update(wait_events(node, rest.rpartition("#")[0]))
        if event in current or event in seen:
            return
        expected = tuple(sorted(set(declared) | current | seen))
        raise UnexpectedSignal(
            f"run {run.id} ({run.template_id}) takes the signals "
            f"{', '.join(map(repr, expected))}, not {event!r}: no wait of it can take "
            f"this signal; check the name, or add it to @workflow(signals=...); "
            "nothing was written", run_id=run.id, event=event, expected=expected)

    async def _checked(self, run: RunInfo, wait: CheckpointWait, signal_id: int, event: str,
                       payload: Any) -> RunHandle[Any] | bool | None:
        """Check a queued signal against the ``type=`` of the typed wait it would wake,
        before it is recorded as that wait's outcome.

        True: it fits, wake the run with it. None: it does not fit; it was taken
        out of the inbox and recorded as a ``signal_rejected`` event (with why)
        in one unit guarded by the wait, and the run stays paused. A handle:
        this process cannot load the type (a CLI or web page without the
        workflow's code), so the run went back to the queue with the signal
        still queued and the wait unrecorded; the worker that replays it checks
        the payload at the wait (accepted, or rejected as above) and pauses
        again for one that fits.
        """
        type_name = wait.type_for(event)
        expected = serde.loaded_type(type_name)
        node_id = wait.node_id
        assert node_id is not None
        if expected is not None:
            try:
                _check_payload(run.id, wait, payload, f"payload of signal {event!r}", event)
            except SerializationError as exc:
                await self._reject(run, node_id, signal_id, event, exc)
                return None
            return True
        if run.start_mode == "inline" and await self.drives_here(run):
            return True  # driven here: the engine converts it (the code is here)
        handle = await self._hand_over(run, wait, "signal")
        return handle if handle is not None else False  # None: another wake won

    async def _hand_over(self, run: RunInfo, wait: CheckpointWait, via: str,
                         payload: Any = None, *, enqueue: bool = False
                         ) -> RunHandle[Any] | None:
        """Send a paused run back to the queue without recording its wait, so a worker
        (which holds the wait's type) checks the queued payload at the wait.

        ``enqueue`` puts ``payload`` in the inbox under the wait's event in the
        same unit (a wake by token). None if another wake won the race.
        """
        node_id = wait.node_id
        assert node_id is not None and wait.event is not None
        guard = Guard(run_id=run.id, status_in=("paused",), wait_node=node_id,
                      not_held=via != "cancel")
        now = self.clock.now()
        async with self.adapter.unit(guard=guard) as unit:
            if enqueue:
                await self.adapter.enqueue_signal(run.id, wait.event, payload, now=now)
            await self.adapter.clear_waits(run.id)
            await self.adapter.on_run_resumed(run.id, now=now, payload={
                "node_id": node_id, "via": via, "unchecked": True})
            await self.adapter.update_run(run.id, "requeue", status="queued",
                                          claim_state="queued", claim_attempts=0)
        if not unit.held:
            return None
        self._log.info("payload handed to a worker unchecked: this process cannot load "
                       "the wait's type", run_id=run.id, node_id=node_id, via=via,
                       payload_type=wait.type_for(wait.event or ""))
        self.driver.notify_settled()
        if run.deadline_at is not None:
            self.driver.notify_timers()
        return RunHandle(run_id=run.id, status="queued")

    async def _reject(self, run: RunInfo, node_id: str, signal_id: int, event: str,
                      exc: SerializationError) -> None:
        """Take a signal whose payload does not fit its wait out of the inbox, recorded
        as a ``signal_rejected`` event; the run stays paused at the wait."""
        reason = {"event": event, "signal_id": signal_id, "error": storable_text(str(exc))}
        guard = Guard(run_id=run.id, status_in=("paused",), wait_node=node_id)
        async with self.adapter.unit(guard=guard) as unit:
            await self.adapter.consume_signal(signal_id)
            await self.adapter.record_event(run.id, "signal_rejected", node_id, reason,
                                            now=self.clock.now(), method="reject_signal")
        if unit.held:
            self._log.warning("signal rejected: its payload does not match the wait's type; "
                              "the run stays paused", run_id=run.id, node_id=node_id,
                              signal=event, error=str(exc))

    async def signal(self, run_id: str, event: str, payload: Any) -> RunHandle[Any]:
        """Queue a signal for the run, or (``continue_as_new``) for the chain's
        current run, and deliver it if that run waits for it."""
        check_event(event, "signal", run_id=run_id)
        encoded = serde.to_builtins(payload, what=f"payload of signal {event!r}", run_id=run_id)
        while True:  # again if the run continued as new meanwhile
            run = await self.driver.current(run_id, "signal")
            run_id = run.id
            wait = checkpoint_wait(run.checkpoint_json)
            if wait is not None and wait.node_id is not None and (
                    event in wait_events(wait.node_id, wait.event)):
                _check_payload(run.id, wait, encoded, f"payload of signal {event!r}", event)
            await self.check_signal_name(run, event)
            now = self.clock.now()
            async with self.adapter.unit(guard=Guard(run_id=run_id,
                                                     status_in=ACTIVE_STATUSES)) as unit:
                await self.adapter.enqueue_signal(run_id, event, encoded, now=now)
            if unit.held:
                break
            ended = await self.adapter.get_run(run_id)
            if ended is None or ended.continued_as is None:
                raise RunFinished(run_id, ended.status if ended else "gone", "signal")
        self._log.debug("signal queued", run_id=run_id, signal=event)
        handle = await self.deliver(run_id, event)
        return handle if handle is not None else await self.driver.handle(run_id)

    async def request_update(self, run_id: str, name: str, payload: Any,
                             update_id: str) -> RunHandle[Any] | None:
        """Queue update ``update_id`` for the run ``run_id`` (once per id; the
        caller resolved a ``continue_as_new`` chain to its current run) and
        deliver it if the run is paused receiving ``name``; ``None`` if it was
        queued before."""
        check_event(name, "update", run_id=run_id)
        check_update_id(update_id, run_id=run_id)
        encoded = serde.to_builtins(payload, what=f"payload of update {name!r}", run_id=run_id)
        run = await self.driver.unfinished(run_id, "update")
        now = self.clock.now()
        # The marker and the guard make a second call with this id queue nothing (the
        # guard locks the run row, so two concurrent calls cannot both pass it).
        guard = Guard(run_id=run_id, status_in=ACTIVE_STATUSES,
                      no_signal=update_marker(update_id))
        async with self.adapter.unit(guard=guard) as unit:
            await self.adapter.enqueue_signal(run_id, update_event(name),
                                              {"id": update_id, "payload": encoded}, now=now)
            await self.adapter.enqueue_signal(run_id, update_marker(update_id), None, now=now)
        if not unit.held:
            current = await self.adapter.get_run(run_id)
            if current is None or current.is_terminal:
                raise RunFinished(run_id, current.status if current else "gone", "update")
            return None
        self._log.debug("update queued", run_id=run.id, update=name, update_id=update_id)
        return await self.deliver(run_id, update_event(name))

    async def update_answer(self, run_id: str, update_id: str
                            ) -> tuple[str, dict[str, Any]] | None:
        """The recorded answer to update ``update_id``: its node id and output."""
        for event in await self.adapter.list_events(run_id):
            if (event.event_type == "node_complete" and event.node_id is not None
                    and event.node_id.startswith("reply:")):
                body = event.payload_json if isinstance(event.payload_json, dict) else {}
                output = body.get("output")
                if isinstance(output, dict) and output.get("update_id") == update_id:
                    return event.node_id, output
        return None

    async def update_receipt(self, run_id: str, update_id: str) -> str | None:
        """The node that received update ``update_id`` (a ``receive`` or
        ``wait_for_message`` wait), or None if the run never took it."""
        for event in await self.adapter.list_events(run_id):
            if event.event_type != "node_complete" or event.node_id is None:
                continue
            body = event.payload_json if isinstance(event.payload_json, dict) else {}
            output = body.get("output")
            if not isinstance(output, dict):
                continue
            request = output.get("payload")
            if (str(output.get("event", "")).startswith(UPDATE_PREFIX)
                    and isinstance(request, dict) and request.get("id") == update_id):
                return event.node_id
        return None

    async def resume(self, token: str, payload: Any) -> RunHandle[Any]:
        claims = self.keyring.verify(token, workspace_id=self.adapter.workspace_id,
                                     env=self.adapter.env, now=self.clock.now())
        encoded = serde.to_builtins(payload, what="resume payload", run_id=claims.r)
        run = await self.adapter.get_run(claims.r)
        if run is None:
            raise InvalidWakeToken("not_found", f"run {claims.r} does not exist in this scope",
                                   run_id=claims.r, node_id=claims.n)
        waits = [] if run.is_terminal else await self.adapter.list_waits(run.id)
        if not any(w.node_id == claims.n for w in waits):
            events = await self.adapter.list_events(run.id)
            used = any(e.node_id == claims.n and e.event_type in ("node_complete", "node_error")
                       for e in events)
            if run.is_terminal:
                if used:  # woken (by this token, a signal or its timeout), then the run ended
                    raise InvalidWakeToken(
                        "already_used",
                        f"run {run.id} has ended ({run.status}); its wait {claims.n} was "
                        "woken before", run_id=run.id, node_id=claims.n)
                # It ended (cancelled, failed) without that wait ever being woken.
                raise RunFinished(run.id, run.status, "resume")
            early = None if used else _next_wait_event(claims.n, events)
            if early is not None:
                return await self._resume_early(run, claims.n, early, encoded)
            raise InvalidWakeToken(
                "already_used" if used else "wrong_wait",
                f"run {run.id} is not waiting at {claims.n}"
                + (": that wait was already woken" if used else ""),
                run_id=run.id, node_id=claims.n)
        if claims.n.startswith((ANY_KIND + ":", "receive:")):
            raise InvalidWakeToken(
                "wrong_wait", f"run {run.id} waits at {claims.n}, which is woken by a signal "
                "(wait_for_any) or an update (receive), not by a wake token",
                run_id=run.id, node_id=claims.n)
        wait = checkpoint_wait(run.checkpoint_json)
        if run.claim_state == HELD and wait is not None and wait.event is not None:
            # Paused by an operator: the wake is kept in the inbox, like a signal,
            # and delivered when the run is resumed (Starflow.resume(run_id)).
            if wait.node_id == claims.n:
                _check_payload(run.id, wait, encoded, f"resume payload for {claims.n}")
            return await self._resume_early(run, claims.n, wait.event, encoded)
        if wait is not None and wait.node_id == claims.n:
            _check_payload(run.id, wait, encoded, f"resume payload for {claims.n}")
            if (wait.payload_type and wait.event is not None
                    and serde.loaded_type(wait.payload_type) is None
                    and not (run.start_mode == "inline" and await self.drives_here(run))):
                handed = await self._hand_over(run, wait, "token", encoded, enqueue=True)
                if handed is None:
                    raise InvalidWakeToken("already_used",
                                           f"another wake of {claims.n} won the race",
                                           run_id=run.id, node_id=claims.n)
                return handed
        handle = await self.wake(run, claims.n, via="token", output=encoded)
        if handle is None:
            raise InvalidWakeToken("already_used", f"another wake of {claims.n} won the race",
                                   run_id=run.id, node_id=claims.n)
        return handle

    async def _resume_early(self, run: RunInfo, node_id: str, event: str, payload: Any
                            ) -> RunHandle[Any]:
        """A token for the wait the run will reach next (``starflow.wake_token``) came
        before the run got there: keep its payload in the inbox, like a signal sent
        early, so that wait returns it."""
        if await self.adapter.find_signal(run.id, event) is not None:
            raise InvalidWakeToken(
                "already_used", f"a wake for {node_id} is already queued for run {run.id}",
                run_id=run.id, node_id=node_id)
        now = self.clock.now()
        # The check above is a read: two early wakes of one wait racing past it
        # would both be queued, and the second would wake the *next* wait on this
        # event. The guard repeats it in the unit, so exactly one is kept.
        guard = Guard(run_id=run.id, status_in=ACTIVE_STATUSES, no_signal=event)
        async with self.adapter.unit(guard=guard) as unit:
            await self.adapter.enqueue_signal(run.id, event, payload, now=now)
        if not unit.held:
            current = await self.adapter.get_run(run.id)
            if current is None or current.is_terminal:
                # It ended before reaching the wait this early wake was for.
                raise RunFinished(run.id, current.status if current else "gone", "resume")
            raise InvalidWakeToken(
                "already_used", f"a wake for {node_id} is already queued for run {run.id}",
                run_id=run.id, node_id=node_id)
        self._log.debug("early wake kept for the next wait", run_id=run.id, node_id=node_id)
        handle = await self.deliver(run.id, event)
        return handle if handle is not None else await self.driver.handle(run.id)

    async def fire_timer(self, wait: WaitRecord) -> RunHandle[Any] | None:
        """Fire one due wait: a sleep completes, a wait_for times out."""
        run = await self.adapter.get_run(wait.run_id)
        if run is None or run.status != "paused" or run.claim_state == HELD:
            return None
        # A maintenance process without the workflow's code (`starflow server`
        # without --app) hands the woken run to the workers instead.
        return await self.wake(run, wait.node_id, via="timer", timed_out=wait.event is not None,
                               drive=await self.drives_here(run))

    async def due_timers(self) -> list[WaitRecord]:
        return await self.adapter.due_waits(self.clock.now())
