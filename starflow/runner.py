"""The runner: starts, wakes and drives runs in this process.

Shared by the application API (``sf.run``, ``sf.signal``, ``sf.resume``), the
maintenance loops (timers, sweep) and workers (claims). It owns this process's
runner identity, the active engines and the wake logic, which is the only
place a paused run becomes running again.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime
from typing import Any

import anyio
import msgspec

from . import observability, serde
from .adapters.base import (
    DefinitionRecord,
    Guard,
    RunEvent,
    RunInfo,
    StartOptions,
    WaitRecord,
    WorkflowStateAdapter,
)
from .clock import Clock, wait_event
from .config import StarflowConfig
from .context import WAIT_KEY, WorkflowContext
from .decorators import WorkflowDefinition, registry
from .engine import Engine, Heartbeats, Outcome, Runtime
from .errors import (
    DuplicateRun,
    InvalidWakeToken,
    LeaseLostError,
    RunFinished,
    RunIdConflict,
    RunnerKilled,
    RunNotFound,
    SerializationError,
    StarflowError,
    StorageError,
    WorkflowDefinitionError,
    WorkflowFailed,
)
from .logs import get_logger
from .replay import Journal
from .waits import Keyring, check_event

__all__ = ["RunHandle", "Runner", "new_runner_id"]

log = get_logger("starflow.runner")

ACTIVE_STATUSES = ("queued", "running", "paused")


class RunHandle(msgspec.Struct, frozen=True, kw_only=True):
    """Where a run stands after ``run``, ``start``, ``signal`` or ``resume`` returned.

    Attributes:
        run_id: The run's id.
        status: ``queued``, ``running``, ``paused``, ``success``, ``error`` or
            ``cancelled``.
        result: The workflow's return value when ``status == "success"``.
        error: The error message when ``status`` is ``error`` or ``cancelled``.
        waiting_for: The signal name the run is paused on (``None`` for a sleep).
        wake_token: While paused: a bearer token for ``Starflow.resume``.
    """

    run_id: str
    status: str
    result: Any = None
    error: str | None = None
    waiting_for: str | None = None
    wake_token: str | None = None


def new_runner_id() -> str:
    """An opaque identity for this process's runner: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


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


#: The run error the engine writes when a recorded node failure ended the run:
#: ``StepFailed``'s message (errors.py) or ``WaitTimeout``'s (engine.wait).
_NODE_FAILURE = re.compile(
    r"^(?:StepFailed: step|WaitTimeout: run \S+: wait) (\S+) (?:failed after|timed out)")
#: The run error the engine writes for any other exception: ``Type: message``.
_EXCEPTION = re.compile(r"^([A-Za-z_][\w.]*): (.*)\Z", re.DOTALL)


def _validate_run_id(run_id: str | None) -> str:
    if run_id is None:
        return str(uuid.uuid4())
    try:
        return str(uuid.UUID(str(run_id)))
    except ValueError:
        raise StarflowError(
            f"run_id must be a UUID (it is workflow_runs.id): {run_id!r}; omit it to get one, "
            "or derive one with uuid.uuid5(namespace, your_key)",
            run_id=str(run_id),
        ) from None


class Runner:
    """Starts, wakes and drives runs for one adapter in this process."""

    def __init__(self, adapter: WorkflowStateAdapter, *, clock: Clock, config: StarflowConfig,
                 keyring: Keyring, runner_id: str | None = None) -> None:
        self.adapter = adapter
        self.clock = clock
        self.config = config
        self.keyring = keyring
        self.runner_id = runner_id or new_runner_id()
        #: One task refreshes every engine's lease; run it with ``heartbeats.run()``
        #: (the application does). Without it each engine runs its own heartbeat.
        self.heartbeats = Heartbeats(clock, config)
        self.runtime = Runtime(adapter=adapter, clock=clock, config=config,
                               runner_id=self.runner_id, keyring=keyring,
                               heartbeats=self.heartbeats)
        self.engines: dict[str, Engine] = {}
        self.busy = 0
        self._settled = anyio.Event()
        self.timers_changed = anyio.Event()
        self._definition_ids: dict[tuple[str, int], str] = {}
        self._definition_rows: dict[str, DefinitionRecord] = {}
        self._log = log.bind(runner_id=self.runner_id, workspace=adapter.workspace_id)

    # -- notifications -------------------------------------------------------------

    def notify_timers(self) -> None:
        """Tell the timer loop a new deadline was registered in this process."""
        self.timers_changed.set()
        self.timers_changed = anyio.Event()

    def notify_settled(self) -> None:
        """Wake everything waiting for a run in this process to change."""
        self._settled.set()
        self._settled = anyio.Event()

    @property
    def settled(self) -> anyio.Event:
        return self._settled

    # -- definitions and inputs ----------------------------------------------------

    async def definition_id(self, definition: WorkflowDefinition) -> str:
        key = (definition.name, definition.version)
        cached = self._definition_ids.get(key)
        if cached is None:
            cached = await self.adapter.ensure_definition(
                definition.name, definition.version, definition.code_hash, now=self.clock.now())
            self._definition_ids[key] = cached
        return cached

    @staticmethod
    def encode_input(definition: WorkflowDefinition, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> dict[str, Any]:
        """Check arguments against the signature and encode them; raise before any write."""
        try:
            definition.check_call(args, kwargs)
        except TypeError as exc:
            raise WorkflowDefinitionError(
                f"bad arguments for workflow {definition.name!r}: {exc}") from exc
        encoded: dict[str, Any] = serde.to_builtins(
            {"args": list(args), "kwargs": kwargs},
            what=f"arguments of workflow {definition.name!r}")
        return encoded

    @staticmethod
    def decode_input(definition: WorkflowDefinition, data: Any
                     ) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Rebuild call arguments, each converted to its annotated type."""
        return serde.convert_call(definition.signature, definition.hints, data,
                                  what=f"workflow {definition.name!r}")

    async def resolve(self, run: RunInfo) -> WorkflowDefinition:
        """The registered definition a run started with (never a newer version).

        By the run's ``definition_id`` (its ``workflow_definitions`` row gives
        name and version); for a run without one, by ``template_id`` and
        ``workflow_version``; a run with no version at all (written before
        versions were recorded) takes the oldest registered version.

        Raises:
            WorkflowDefinitionError: that name and version are not registered in
                this process; nothing was written.
        """
        name, version, code_hash = run.template_id or "", run.workflow_version, None
        if run.definition_id is not None:
            record = self._definition_rows.get(run.definition_id)
            if record is None:
                record = await self.adapter.get_definition(run.definition_id)
                if record is not None:  # rows never change: cache them
                    self._definition_rows[run.definition_id] = record
            if record is not None:
                name, version, code_hash = record.name, record.version, record.code_hash
        known = registry.versions(name)
        if version is None and known:
            version = known[0]
        definition = registry.get(name, version) if version is not None else None
        if definition is None:
            raise WorkflowDefinitionError(
                f"run {run.id} needs workflow {name!r} version {version}, which is not "
                f"registered in this process (registered versions: {known or 'none'}): keep "
                f"the code of version {version} deployed (and imported) until its runs have "
                "ended",
                run_id=run.id,
            )
        if code_hash is not None and code_hash != definition.code_hash:
            self._log.info("workflow code changed since its definition was recorded; replay "
                           "checks determinism", run_id=run.id, workflow=name, version=version)
        return definition

    def decode_result(self, run: RunInfo) -> Any:
        definition = registry.get(run.template_id or "", run.workflow_version)
        if definition is None:
            return run.result_json
        return serde.convert(run.result_json, definition.return_type,
                             what=f"result of run {run.id}", run_id=run.id)

    async def failure(self, run: RunInfo) -> WorkflowFailed:
        """The ``WorkflowFailed`` for a run that ended in ``error``, with its cause.

        When a step's (or a wait's) recorded failure ended the run, the cause is
        that node's ``node_error`` payload: node id, qualified exception type,
        message and attempts. Otherwise it is the exception the workflow raised,
        as the run's error records it (``Type: message``).
        """
        text = run.error or ""
        match = _NODE_FAILURE.match(text)
        if match is not None:
            node_id = match.group(1)
            events = await self.adapter.list_events(run.id)
            recorded = next((e for e in reversed(events)
                             if e.event_type == "node_error" and e.node_id == node_id), None)
            payload = recorded.payload_json if recorded is not None else None
            cause = payload.get("error") if isinstance(payload, dict) else None
            if isinstance(cause, dict):
                attempts = cause.get("attempts")
                return WorkflowFailed(
                    run.id, run.status, run.error, node_id=node_id,
                    error_type=str(cause.get("type")), error_message=str(cause.get("message")),
                    attempts=attempts if isinstance(attempts, int) else None)
        match = _EXCEPTION.match(text)
        if match is not None:
            return WorkflowFailed(run.id, run.status, run.error, error_type=match.group(1),
                                  error_message=match.group(2))
        return WorkflowFailed(run.id, run.status, run.error)

    # -- handles -------------------------------------------------------------------

    async def handle(self, run_id: str) -> RunHandle:
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return self.handle_of(run)

    def handle_of(self, run: RunInfo) -> RunHandle:
        waiting_for = token = None
        if run.status == "paused" and run.checkpoint_json:
            wait = (run.checkpoint_json.get("variables") or {}).get(WAIT_KEY) or {}
            waiting_for = wait.get("event")
            token = wait.get("wake_token")
        result = self.decode_result(run) if run.status == "success" else None
        return RunHandle(run_id=run.id, status=run.status, result=result, error=run.error,
                         waiting_for=waiting_for, wake_token=token)

    # -- starting ------------------------------------------------------------------

    async def start(self, definition: WorkflowDefinition, args: tuple[Any, ...],
                    kwargs: dict[str, Any], *, run_id: str | None, inline: bool,
                    pool: str | None = None, flow: Mapping[str, Any] | None = None
                    ) -> RunHandle:
        """Record a new run (idempotent on ``run_id``) and, inline, drive it.

        A new run takes the newest registered version of the workflow's name.
        """
        definition = registry.get(definition.name) or definition
        rid = _validate_run_id(run_id)
        encoded = self.encode_input(definition, args, kwargs)
        # Converted to the annotations before anything is written: an argument of the
        # wrong type must not leave a run behind that no runner can ever start.
        run_args, run_kwargs = self.decode_input(definition, encoded)
        if run_id is not None:
            existing = await self.adapter.get_run(rid)
            if existing is not None:
                return await self._existing(existing, definition, encoded)
        def_id = await self.definition_id(definition)
        now = self.clock.now()
        ctx = WorkflowContext(run_id=rid, workflow=definition.name, version=definition.version,
                              workspace_id=self.adapter.workspace_id, env=self.adapter.env)
        options = StartOptions(
            input=encoded,
            status="running" if inline else "queued",
            claim_state="running" if inline else "queued",
            runner_pool=pool if pool is not None else definition.pool,
            definition_id=def_id,
            start_mode="inline" if inline else "queued",
            max_claim_attempts=definition.max_claim_attempts or self.config.max_claim_attempts,
            **(flow or {}),  # #18: priority, concurrency/dedup/debounce keys, not_before
        )
        try:
            async with self.adapter.unit() as unit:
                await self.adapter.on_run_start(rid, ctx, options, now=now)
                if inline:
                    await self.adapter.write_lease(rid, self.runner_id,
                                                   now + self.config.lease_ttl, now=now)
        except StorageError:
            existing = await self.adapter.get_run(rid) if run_id is not None else None
            if existing is not None:  # lost a race to start the same run id
                return await self._existing(existing, definition, encoded)
            if options.dedup_key is not None:  # #18: the unique dedup index refused it
                active = await self.adapter.find_active_dedup(options.runner_pool,
                                                              options.dedup_key)
                if active is not None:
                    raise DuplicateRun(active, options.dedup_key, options.runner_pool) from None
            raise
        assert unit.held
        self._log.debug("run started", run_id=rid, workflow=definition.name,
                       mode=options.start_mode)
        if not inline:
            self.notify_settled()
            return RunHandle(run_id=rid, status="queued")
        engine = Engine(runtime=self.runtime, definition=definition, ctx=ctx, journal=Journal(),
                        args=run_args, kwargs=run_kwargs, started_at=now)
        outcome = await self._execute(engine)
        return await self.settle(rid, outcome)

    async def _existing(self, run: RunInfo, definition: WorkflowDefinition,
                        encoded: dict[str, Any]) -> RunHandle:
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
            raise RunIdConflict(run.id, name, definition.name, run.status)
        if run.input_json is not None and run.input_json != encoded:
            self._log.warning(
                "run_id already names a run of this workflow, started with different "
                "arguments: returning that run; the new arguments are ignored",
                run_id=run.id, workflow=definition.name)
        return self.handle_of(run)

    # -- driving -------------------------------------------------------------------

    async def _execute(self, engine: Engine) -> Outcome:
        self.busy += 1
        self.engines[engine.run_id] = engine
        try:
            return await engine.execute()
        finally:
            self.engines.pop(engine.run_id, None)
            self.busy -= 1
            self.notify_settled()

    async def drive(self, run: RunInfo, *, should_yield: Callable[[], bool] | None = None
                    ) -> RunHandle:
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
                was written (see :meth:`hand_back`).
        """
        return await self.drive_engine(await self.prepare(run, should_yield=should_yield))

    async def drive_engine(self, engine: Engine) -> RunHandle:
        """Execute an engine built by :meth:`prepare` and settle its outcome."""
        outcome = await self._execute(engine)
        return await self.settle(engine.run_id, outcome)

    async def prepare(self, run: RunInfo, *, should_yield: Callable[[], bool] | None = None
                      ) -> Engine:
        """Read what an execution of ``run`` needs (definition, history); build its engine.

        Writes nothing.

        Raises:
            WorkflowDefinitionError: the run's workflow (name and version) is not
                registered in this process.
            StorageError: a read failed.
        """
        definition = await self.resolve(run)
        events = await self.adapter.list_events(run.id)
        journal = Journal.from_events(events, started_at=run.started_at)
        ctx = WorkflowContext(run_id=run.id, workflow=definition.name,
                              version=definition.version,
                              workspace_id=self.adapter.workspace_id, env=self.adapter.env)
        input_error: SerializationError | None = None
        try:
            args, kwargs = self.decode_input(definition, run.input_json)
        except SerializationError as exc:
            # Not a lost runner: the engine fails the run with why (a retry with the
            # same code would fail the same way), instead of leaving it claimed for
            # the sweep to requeue until it is abandoned as runner_lost.
            args, kwargs = (), {}
            input_error = SerializationError(
                f"run {run.id}: its recorded input does not fit workflow "
                f"{definition.name!r} version {definition.version} as deployed ({exc}); "
                "the signature changed under the run: restore it, or give the new "
                "signature a new version", run_id=run.id)
        engine = Engine(runtime=self.runtime, definition=definition, ctx=ctx, journal=journal,
                        args=args, kwargs=kwargs, started_at=run.started_at or self.clock.now(),
                        should_yield=should_yield, claimed=run.claim_state == "claimed",
                        input_error=input_error)
        return engine

    async def hand_back(self, run: RunInfo, error: StarflowError) -> str | None:
        """Give back a run this runner claimed but could not start (a read failed).

        One write, guarded by the lease: the run goes straight back to the queue
        with its lease cleared (``"requeued"``), instead of holding the lease
        until it expires and the sweep requeues it. The claim still counts
        (``claim_attempts`` grows by one per claim, and only then): once the
        run's claims since it last made progress are used up
        (``claim_attempts >= max_claim_attempts``), it is abandoned instead
        (``"abandoned"``: status error, claim_state abandoned, the error says
        why), so a run whose start always fails does not go round forever.
        Returns None, writing nothing, if this runner no longer holds the lease.
        """
        now = self.clock.now()
        guard = Guard(run_id=run.id, leased_by=self.runner_id, status_in=("running",))
        abandon = run.claim_attempts >= run.max_claim_attempts
        async with self.adapter.unit(guard=guard) as unit:
            if abandon:
                await self.adapter.on_run_error(
                    run.id, f"could not start: reading the run failed on each of its "
                    f"{run.claim_attempts} claim(s) (max_claim_attempts="
                    f"{run.max_claim_attempts}); last error: {error}",
                    now=now, claim_state="abandoned")
                await self.adapter.clear_lease(run.id)
            else:
                await self.adapter.update_run(run.id, "hand_back", status="queued",
                                              claim_state="queued", leased_by=None,
                                              lease_until=None)
        if not unit.held:
            return None
        self.notify_settled()
        return "abandoned" if abandon else "requeued"

    async def release(self, run_id: str, reason: str) -> bool:
        """Hand a run this runner holds back to the queue (another runner may take it).

        Guarded by the lease: returns False, writing nothing, if this runner no
        longer holds it. ``claim_attempts`` is left as it is: it counts claims.
        """
        async with self.adapter.unit(guard=Guard(run_id=run_id, leased_by=self.runner_id,
                                                 status_in=("running",))) as unit:
            await self.adapter.update_run(run_id, "release_lease", status="queued",
                                          claim_state="queued", leased_by=None,
                                          lease_until=None)
        if unit.held:
            self._log.info("run released to the queue", run_id=run_id, reason=reason)
            self.notify_settled()
        return bool(unit.held)

    async def settle(self, run_id: str, outcome: Outcome) -> RunHandle:
        """Turn an execution's outcome into a handle; deliver a signal that raced a pause."""
        if outcome.status == "success":
            engine_def = outcome.definition
            result = outcome.result if engine_def is None else serde.convert(
                outcome.result, engine_def.return_type, what=f"result of run {run_id}",
                run_id=run_id)
            return RunHandle(run_id=run_id, status="success", result=result)
        if outcome.status == "paused" and outcome.wait is not None:
            wait = outcome.wait
            if wait.deadline is not None:
                self.notify_timers()
            if wait.event is not None:
                # A signal that arrived after wait_for looked at the inbox but before
                # the pause committed would otherwise sit there: deliver it now.
                woke = await self.deliver(run_id, wait.event)
                if woke is not None:
                    return woke
            return RunHandle(run_id=run_id, status="paused", waiting_for=wait.event,
                             wake_token=wait.wake_token)
        if outcome.status == "storage":
            raise StorageError(
                f"run {run_id} could not record its progress ({outcome.exception}); it keeps "
                "its lease until it expires, then the sweep hands it to another runner",
                run_id=run_id,
            ) from outcome.exception
        if outcome.status == "error":
            return RunHandle(run_id=run_id, status="error", error=outcome.error)
        if outcome.status == "killed":
            # A simulated SIGKILL: no takeover happened, and a real killed process
            # would read nothing more (the row still shows this runner's lease).
            raise RunnerKilled(run_id)
        handle = await self.handle(run_id)
        if outcome.status == "lease_lost" and handle.status != "cancelled":
            raise LeaseLostError(
                f"run {run_id} is no longer leased by this runner ({self.runner_id}): another "
                f"runner or the sweep took it over and it goes on there (now {handle.status})",
                run_id=run_id)
        return handle

    # -- waking --------------------------------------------------------------------

    async def wake(self, run: RunInfo, node_id: str, *, via: str, output: Any = None,
                   timed_out: bool = False, signal_id: int | None = None,
                   error: dict[str, Any] | None = None,
                   also: Callable[[datetime], Awaitable[None]] | None = None,
                   drive: bool = True) -> RunHandle | None:
        """Resume a paused run at ``node_id``; ``None`` if another wake won the race.

        Reads cold: the run row and its checkpoint. One unit records the wake
        payload (or ``error``, recorded as the node's failure), ``on_run_resumed``
        and either this runner's lease (inline runs, driven here) or the queue
        (worker runs, and inline runs when ``drive`` is False). ``also`` adds
        writes to that unit (a job worker's job outcome).
        """
        checkpoint = run.checkpoint_json or {}
        wait = (checkpoint.get("variables") or {}).get(WAIT_KEY) or {}
        if wait and wait.get("node_id") != node_id:
            return None
        inline = run.start_mode == "inline" and drive
        if inline:
            # Driven here: fail before writing if this process lacks the run's version.
            await self.resolve(run)
        now = self.clock.now()
        guard = Guard(run_id=run.id, status_in=("paused",), wait_node=node_id)
        async with self.adapter.unit(guard=guard) as unit:
            if signal_id is not None:
                await self.adapter.consume_signal(signal_id)
            if also is not None:
                await also(now)
            if error is not None:
                await self.adapter.on_node_error(run.id, node_id, {"error": error, "via": via},
                                                 now=now)
            elif timed_out:
                await self.adapter.on_node_error(run.id, node_id, {"error": {
                    "type": "starflow.errors.WaitTimeout",
                    "message": f"{node_id} timed out"}}, now=now)
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
            self.notify_settled()
            return RunHandle(run_id=run.id, status="queued")
        # The unit above held, so the row is what it wrote: no need to read it back.
        fresh = msgspec.structs.replace(
            run, status="running", claim_state="running", checkpoint_json=None,
            leased_by=self.runner_id, lease_until=now + self.config.lease_ttl,
            last_heartbeat=now)
        return await self.drive(fresh)

    async def deliver(self, run_id: str, event: str) -> RunHandle | None:
        """Wake the run if it is paused on ``event`` and a signal for it is queued."""
        for _ in range(3):
            signal = await self.adapter.find_signal(run_id, event)
            if signal is None:
                return None
            run = await self.adapter.get_run(run_id)
            if run is None or run.status != "paused":
                return None
            waits = await self.adapter.list_waits(run_id)
            wait = next((w for w in waits if w.event == event), None)
            if wait is None:
                return None
            handle = await self.wake(run, wait.node_id, via="signal", output=signal.payload,
                                     signal_id=signal.id)
            if handle is not None:
                return handle
        return None

    async def _unfinished(self, run_id: str, action: str) -> RunInfo:
        """The run row, if the run exists and has not ended (else a clear error)."""
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        if run.is_terminal:
            raise RunFinished(run_id, run.status, action)
        return run

    async def signal(self, run_id: str, event: str, payload: Any) -> RunHandle:
        check_event(event, "signal", run_id=run_id)
        encoded = serde.to_builtins(payload, what=f"payload of signal {event!r}", run_id=run_id)
        await self._unfinished(run_id, "signal")
        now = self.clock.now()
        async with self.adapter.unit(guard=Guard(run_id=run_id, status_in=ACTIVE_STATUSES)
                                     ) as unit:
            await self.adapter.enqueue_signal(run_id, event, encoded, now=now)
        if not unit.held:
            ended = await self.handle(run_id)
            raise RunFinished(run_id, ended.status, "signal")
        self._log.debug("signal queued", run_id=run_id, signal=event)
        handle = await self.deliver(run_id, event)
        return handle if handle is not None else await self.handle(run_id)

    async def resume(self, token: str, payload: Any) -> RunHandle:
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
        handle = await self.wake(run, claims.n, via="token", output=encoded)
        if handle is None:
            raise InvalidWakeToken("already_used", f"another wake of {claims.n} won the race",
                                   run_id=run.id, node_id=claims.n)
        return handle

    async def _resume_early(self, run: RunInfo, node_id: str, event: str, payload: Any
                            ) -> RunHandle:
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
        return handle if handle is not None else await self.handle(run.id)

    async def fire_timer(self, wait: WaitRecord) -> RunHandle | None:
        """Fire one due wait: a sleep completes, a wait_for times out."""
        run = await self.adapter.get_run(wait.run_id)
        if run is None or run.status != "paused":
            return None
        drive = True
        if run.start_mode == "inline":
            try:
                await self.resolve(run)
            except WorkflowDefinitionError:
                # A maintenance process without the workflow's code (`starflow server`
                # without --app): hand the woken run to the workers instead.
                drive = False
        return await self.wake(run, wait.node_id, via="timer", timed_out=wait.event is not None,
                               drive=drive)

    async def due_timers(self) -> list[WaitRecord]:
        return await self.adapter.due_waits(self.clock.now())

    async def retry(self, run_id: str) -> RunHandle:
        """Run a failed run again from its recorded history, with the code deployed now.

        For runs that ended in ``error`` because of the workflow code or the
        runtime (a ``NonDeterminismError`` after a bad deploy, an exception in the
        workflow body, a runner lost past ``max_claim_attempts``): the history
        is kept, so recorded steps are not run again. A step that failed past
        its retries is part of the history and fails again. Inline runs are
        driven here; worker runs go back to the queue.

        Raises:
            RunNotFound: no such run.
            RunFinished: the run succeeded or was cancelled.
            StarflowError: the run has not ended.
        """
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        if run.status in ("success", "cancelled"):
            raise RunFinished(run_id, run.status, "retry")
        if run.status != "error":
            raise StarflowError(
                f"run {run_id} is still {run.status}: only a run that ended in error can be "
                "retried", run_id=run_id)
        inline = run.start_mode == "inline"
        if inline:
            await self.resolve(run)  # fail before writing if this process lacks the code
        now = self.clock.now()
        async with self.adapter.unit(guard=Guard(run_id=run_id, status_in=("error",))) as unit:
            await self.adapter.record_event(run_id, "run_retried", None,
                                            {"previous_error": run.error}, now=now,
                                            method="retry")
            if inline:
                await self.adapter.update_run(run_id, "retry", status="running",
                                              claim_state="running", error=None,
                                              completed_at=None, duration_ms=None,
                                              claim_attempts=0)
                await self.adapter.write_lease(run_id, self.runner_id,
                                               now + self.config.lease_ttl, now=now)
            else:
                await self.adapter.update_run(run_id, "retry", status="queued",
                                              claim_state="queued", error=None,
                                              completed_at=None, duration_ms=None,
                                              claim_attempts=0)
        if not unit.held:  # another retry won, or the row changed under us
            return await self.handle(run_id)
        self._log.info("run retried", run_id=run_id, previous_error=run.error)
        if not inline:
            self.notify_settled()
            return RunHandle(run_id=run_id, status="queued")
        fresh = await self.adapter.get_run(run_id)
        assert fresh is not None
        return await self.drive(fresh)

    async def cancel(self, run_id: str) -> RunHandle:
        run = await self._unfinished(run_id, "cancel")
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
        return await self.handle(run_id)

    async def sweep(self) -> int:
        """One pass of the lease sweep; returns how many runs it acted on."""
        results = await self.adapter.expire_old_leases(self.clock.now())
        obs = observability.current()
        for r in results:
            self._log.warning("runner lost", run_id=r.run_id, leased_by=r.leased_by,
                              action=r.action)
            obs.sweep_action(r.action)
        if results:
            self.notify_settled()
        return len(results)

    async def wait_settled(self, seconds: float, event: anyio.Event | None = None) -> None:
        """Return when a run changes in this process, or after ``seconds`` of clock time.

        Pass the ``settled`` event taken *before* reading the state being waited
        on, so a change in between is not missed.
        """
        await wait_event(self.clock, event or self._settled, seconds)

    async def wait_for_work(self, stopping: anyio.Event, settled: anyio.Event | None = None
                            ) -> None:
        """Return when work may be claimable: a NOTIFY or a poll interval, a run
        settling in this process, or ``stopping`` being set.

        Pass the ``settled`` event taken *before* the claim that found nothing, so
        work queued in this process between that claim and this wait is not missed.
        """
        settled = settled or self.settled
        async with anyio.create_task_group() as tg:
            async def poll() -> None:
                await self.adapter.wait_for_work(self.clock,
                                                 self.config.poll_interval.total_seconds())
                tg.cancel_scope.cancel()

            async def stopped() -> None:
                await stopping.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(poll)
            tg.start_soon(stopped)
            await settled.wait()
            tg.cancel_scope.cancel()
