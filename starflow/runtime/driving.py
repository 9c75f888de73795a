"""Driving runs in this process: build an engine, execute it, conclude its outcome.

One of the two parts :class:`~starflow.runtime.runner.Runner` is composed of
(the other is :mod:`starflow.runtime.waking`): :class:`Driver` owns this
process's runner identity, its executing engines, the count of work in flight
(:meth:`Driver.busy_scope`) and the notifications other loops wait on; it
resolves a run's workflow definition, reads what an execution needs, executes
it (:meth:`Driver.execute` returns the engine's :class:`~starflow.engine.execution.Outcome`),
drives an inline ``continue_as_new`` chain on (:meth:`Driver.follow_chain`) and
turns an outcome into a :class:`RunHandle` (:meth:`Driver.conclude`). It calls
nothing above it: what follows a pause or an end is the runner's settle
pipeline. It hands runs back to the queue through :mod:`starflow.engine.requeue`.

The owner of the process may stop an execution on purpose (:meth:`Driver.stop`):
``starflow_testing`` simulates a SIGKILL through it, and that is the one seam
the simulation goes through.
"""

from __future__ import annotations

import os
import socket
import uuid
import weakref
from collections.abc import Callable
from types import TracebackType
from typing import Any, Generic, TypeVar

import anyio
import msgspec

from .. import serde
from ..adapters.base import WorkflowStateAdapter
from ..clock import Clock, wait_event
from ..config import StarflowConfig
from ..engine import requeue
from ..engine.engine import Engine
from ..engine.execution import CONTINUED_FROM_EVENT, Outcome, Runtime, decode_input
from ..engine.heartbeats import Heartbeats
from ..engine.replay import Journal
from ..errors import (
    CodecError,
    LeaseLostError,
    RunFinished,
    RunNotFound,
    SerializationError,
    StarflowError,
    StorageError,
    WorkflowDefinitionError,
)
from ..logs import get_logger
from ..records import DefinitionRecord, RunInfo
from ..tokens import REDACTED, Keyring
from ..workflow.context import WorkflowContext, checkpoint_wait
from ..workflow.decorators import WorkflowDefinition, registry

__all__ = ["ACTIVE_STATUSES", "BusyScope", "Driver", "RunHandle", "new_runner_id"]

log = get_logger("starflow.runner")

ACTIVE_STATUSES = ("queued", "running", "paused")


ResultT = TypeVar("ResultT")


class RunHandle(msgspec.Struct, Generic[ResultT], frozen=True, kw_only=True):
    """Where a run stands after ``run``, ``start``, ``signal`` or ``resume`` returned.

    Generic in the workflow's result: ``sf.run(wf)`` of a workflow returning
    ``int`` gives a ``RunHandle[int]``, and ``sf.result(handle)`` is an ``int``
    for a type checker.

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
    result: ResultT | None = None
    error: str | None = None
    waiting_for: str | None = None
    wake_token: str | None = None

    def _shown(self) -> list[tuple[str, Any]]:
        """The fields as a repr shows them: the wake token (a bearer secret) redacted,
        as the CLI and the web page show it."""
        return [(name, REDACTED if name == "wake_token" and value is not None else value)
                for name, value in ((f, getattr(self, f)) for f in self.__struct_fields__)]

    def __repr__(self) -> str:
        fields = ", ".join(f"{name}={value!r}" for name, value in self._shown())
        return f"{type(self).__name__}({fields})"

    def __rich_repr__(self) -> Any:
        yield from self._shown()


def new_runner_id() -> str:
    """An opaque identity for this process's runner: host, pid and a random suffix."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def stored_traceparent(input_json: Any) -> str | None:
    """The W3C ``traceparent`` a run's recorded input carries (``sf.run`` / ``sf.start``
    store the caller's with the arguments, under ``"trace"``), if any."""
    trace = input_json.get("trace") if isinstance(input_json, dict) else None
    value = trace.get("traceparent") if isinstance(trace, dict) else None
    return value if isinstance(value, str) else None


class BusyScope:
    """One piece of work in flight in this process, counted in :attr:`Driver.busy`
    from its creation until its ``with`` block exits.

    Counted at creation, not at entry, so a loop can count a task before it
    spawns it (``busy = runner.busy_scope(); tg.start_soon(task, busy)``, the task
    doing ``with busy:``): there is no moment between the two at which the
    process looks idle (``starflow_testing`` advances time when it is).
    """

    def __init__(self, driver: Driver) -> None:
        self._driver = driver
        self._open = True
        driver.busy += 1

    def __enter__(self) -> BusyScope:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._open:  # the work is done (counted off once)
            self._open = False
            self._driver.busy -= 1


class Driver:
    """Drives runs for one adapter in this process (see the module docstring)."""

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
                               heartbeats=self.heartbeats, notify=self.notify_settled,
                               notify_timers=self.notify_timers,
                               definition_id=self.definition_id)
        self.engines: dict[str, Engine] = {}
        #: Work in flight in this process (executions, timer wakes, sweeps, schedule
        #: ticks): changed only through :meth:`busy_scope`.
        self.busy = 0
        self._settled = anyio.Event()
        self.timers_changed = anyio.Event()
        self._definition_ids: dict[tuple[str, int], str] = {}
        self._definition_rows: dict[str, DefinitionRecord] = {}
        #: This runner's logger (runner id and workspace bound), shared by its parts.
        self.log = self._log = log.bind(runner_id=self.runner_id,
                                        workspace=adapter.workspace_id)
        #: The errors raised for executions stopped with :meth:`stop`.
        self._stop_errors: weakref.WeakSet[BaseException] = weakref.WeakSet()

    def busy_scope(self) -> BusyScope:
        """Count a piece of work in :attr:`busy` until the returned scope exits."""
        return BusyScope(self)

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

    def known_definition_id(self, definition: WorkflowDefinition) -> str | None:
        """The definition id this runner has written or read already, if any."""
        return self._definition_ids.get((definition.name, definition.version))

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
        return decode_input(definition, data)

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

    # -- handles -------------------------------------------------------------------

    async def handle(self, run_id: str) -> RunHandle[Any]:
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return self.handle_of(run)

    def handle_of(self, run: RunInfo) -> RunHandle[Any]:
        waiting_for = token = None
        wait = checkpoint_wait(run.checkpoint_json) if run.status == "paused" else None
        if wait is not None:
            waiting_for, token = wait.event, wait.wake_token
        result = self.decode_result(run) if run.status == "success" else None
        return RunHandle(run_id=run.id, status=run.status, result=result, error=run.error,
                         waiting_for=waiting_for, wake_token=token)

    async def unfinished(self, run_id: str, action: str) -> RunInfo:
        """The run row, if the run exists and has not ended (else a clear error)."""
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        if run.is_terminal:
            raise RunFinished(run_id, run.status, action)
        return run

    async def chain(self, run_id: str) -> list[RunInfo]:
        """The run and the runs it continued as (``continue_as_new``), in order: the
        last is the chain's current run.

        Raises:
            RunNotFound: no such run.
        """
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        runs = [run]
        while run.continued_as is not None:
            nxt = await self.adapter.get_run(run.continued_as)
            if nxt is None:  # pruned, or another scope's: the chain ends here for us
                break
            run = nxt
            runs.append(run)
        return runs

    async def current(self, run_id: str, action: str) -> RunInfo:
        """The chain's current run (the run itself, or the last one it continued
        as), if it has not ended (else a clear error naming that run)."""
        run = (await self.chain(run_id))[-1]
        if run.is_terminal:
            raise RunFinished(run.id, run.status, action)
        return run

    # -- driving -------------------------------------------------------------------

    async def execute(self, engine: Engine) -> Outcome:
        """Execute an engine built by :meth:`prepare` (or by the runner's start) in
        this process: counted busy, listed in :attr:`engines` while it runs."""
        with self.busy_scope():
            self.engines[engine.run_id] = engine
            try:
                return await engine.execute()
            finally:
                self.engines.pop(engine.run_id, None)
                self.notify_settled()

    async def prepare(self, run: RunInfo, *, should_yield: Callable[[], bool] | None = None
                      ) -> Engine:
        """Read what an execution of ``run`` needs (definition, history); build its engine.

        Writes nothing.

        Raises:
            WorkflowDefinitionError: the run's workflow (name and version) is not
                registered in this process.
            CodecError: the run's stored values are encoded and this process's
                codec (if any) cannot decode them.
            StorageError: a read failed.
        """
        definition = await self.resolve(run)
        events = await self.adapter.list_events(run.id)
        journal = Journal.from_events(events, started_at=run.started_at)
        ctx = WorkflowContext(run_id=run.id, workflow=definition.name,
                              version=definition.version,
                              workspace_id=self.adapter.workspace_id, env=self.adapter.env,
                              run_key=run.run_key)
        input_error: SerializationError | None = None
        try:
            serde.refuse_envelope(run.input_json, "arguments", run.id)
            args, kwargs = self.decode_input(definition, run.input_json)
        except CodecError:
            raise  # this process cannot decode it (no codec, a key it lacks): not the run's fault
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
                        input_error=input_error, traceparent=stored_traceparent(run.input_json),
                        parent_run_id=run.parent_run_id, deadline=run.deadline_at,
                        continuation=any(e.event_type == CONTINUED_FROM_EVENT for e in events))
        return engine

    async def hand_back(self, run: RunInfo, error: StarflowError) -> str | None:
        """Give back a run this runner claimed but could not start (a read failed).

        ``"requeued"`` or ``"abandoned"`` (its claims are used up), or None,
        writing nothing, if this runner no longer holds the lease: see
        :func:`starflow.engine.requeue.hand_back`.
        """
        action = await requeue.hand_back(self.adapter, run, self.runner_id, error,
                                         now=self.clock.now())
        if action is not None:
            self.notify_settled()
            self.notify_timers()  # queued again: its deadline is the timer loop's
        return action

    async def release(self, run_id: str, reason: str) -> bool:
        """Hand a run this runner holds back to the queue (another runner may take it).

        Guarded by the lease: returns False, writing nothing, if this runner no
        longer holds it. ``claim_attempts`` is left as it is: it counts claims.
        """
        held = await requeue.release(self.adapter, run_id, self.runner_id)
        if held:
            self._log.info("run released to the queue", run_id=run_id, reason=reason)
            self.notify_settled()
            self.notify_timers()  # queued again: its deadline is the timer loop's
        return held

    async def follow_chain(self, run_id: str, outcome: Outcome) -> tuple[str, Outcome]:
        """An execution that continued as new (``continue_as_new``) whose next run is
        inline and leased to this runner: execute that run, and its next, here.

        A loop, not a recursion: a chain may be long. Returns the id and the
        outcome of the last run executed here: the one to settle. Its status is
        ``continued`` only when the chain goes on elsewhere (its next run, in
        ``outcome.result``, is for the workers).
        """
        while outcome.status == "continued":
            nxt = await self.adapter.get_run(str(outcome.result))
            if nxt is None or nxt.start_mode != "inline" or nxt.leased_by != self.runner_id:
                break
            run_id, outcome = nxt.id, await self.execute(await self.prepare(nxt))
        return run_id, outcome

    async def conclude(self, run_id: str, outcome: Outcome) -> RunHandle[Any]:
        """Turn the outcome of ``run_id``'s execution into a handle (reads the row only
        when the outcome does not say where the run stands).

        Raises:
            StorageError: the execution could not record its progress.
            LeaseLostError: another runner or the sweep took the run over.
            StarflowError: the error :meth:`stop` was given, for a stopped execution.
        """
        if outcome.status == "continued":
            return await self._continued(outcome)
        if outcome.status == "success":
            return RunHandle(run_id=run_id, status="success",
                             result=self._result(run_id, outcome))
        if outcome.status == "paused" and outcome.wait is not None:
            wait = outcome.wait
            if wait.deadline is not None or outcome.deadline is not None:
                self.notify_timers()
            return RunHandle(run_id=run_id, status="paused", waiting_for=wait.event,
                             wake_token=wait.wake_token)
        if outcome.status == "error":
            return RunHandle(run_id=run_id, status="error", error=outcome.error)
        self._raise_unrecorded(run_id, outcome)
        handle = await self.handle(run_id)
        if outcome.status == "lease_lost" and handle.status != "cancelled":
            raise LeaseLostError(
                f"run {run_id} is no longer leased by this runner ({self.runner_id}): another "
                f"runner or the sweep took it over and it goes on there (now {handle.status})",
                run_id=run_id)
        return handle

    @staticmethod
    def _result(run_id: str, outcome: Outcome) -> Any:
        """A successful execution's result, converted to the workflow's return type."""
        if outcome.definition is None:
            return outcome.result
        return serde.convert(outcome.result, outcome.definition.return_type,
                             what=f"result of run {run_id}", run_id=run_id)

    async def _continued(self, outcome: Outcome) -> RunHandle[Any]:
        """The handle of a chain's next run, which is the workers' (``outcome.result``)."""
        self.notify_settled()
        nxt = await self.adapter.get_run(str(outcome.result))
        if nxt is None:
            raise RunNotFound(str(outcome.result))
        if nxt.deadline_at is not None:
            self.notify_timers()  # a queued run's deadline (the timer loop's)
        return self.handle_of(nxt)

    def _raise_unrecorded(self, run_id: str, outcome: Outcome) -> None:
        """Raise for an execution whose progress was not recorded: a storage failure,
        or a stop by this process's owner."""
        if outcome.status == "storage":
            raise StorageError(
                f"run {run_id} could not record its progress ({outcome.exception}); it keeps "
                "its lease until it expires, then the sweep hands it to another runner",
                run_id=run_id,
            ) from outcome.exception
        if outcome.status == "stopped":
            # Stopped by this process's owner (stop()): no takeover happened, and
            # nothing more is read or written (the row still shows the lease).
            assert outcome.exception is not None
            self._stop_errors.add(outcome.exception)
            raise outcome.exception

    async def wait_settled(self, seconds: float, event: anyio.Event | None = None,
                           *more: anyio.Event) -> None:
        """Return when a run changes in this process (or any of ``more`` is set,
        such as a :class:`~starflow.adapters.base.RunWatch`'s announcement from
        another process), or after ``seconds`` of clock time.

        Pass the ``settled`` event taken *before* reading the state being waited
        on, so a change in between is not missed.
        """
        await wait_event(self.clock, event or self._settled, seconds, *more)

    async def wait_for_work(self, stopping: anyio.Event, settled: anyio.Event | None = None,
                            *, timeout: float | None = None) -> None:
        """Return when work may be claimable: a NOTIFY or a poll interval (or
        ``timeout`` seconds, if sooner: a delayed start due then), a run settling
        in this process, or ``stopping`` being set.

        Pass the ``settled`` event taken *before* the claim that found nothing, so
        work queued in this process between that claim and this wait is not missed.
        """
        settled = settled or self.settled
        wait = self.config.poll_interval.total_seconds()
        if timeout is not None:
            wait = min(wait, timeout)
        async with anyio.create_task_group() as tg:
            async def poll() -> None:
                await self.adapter.wait_for_work(self.clock, wait)
                tg.cancel_scope.cancel()

            async def stopped() -> None:
                await stopping.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(poll)
            tg.start_soon(stopped)
            await settled.wait()
            tg.cancel_scope.cancel()

    # -- stopping on purpose -------------------------------------------------------

    def stop(self, run_id: str, error: StarflowError) -> bool:
        """Stop this process's execution of ``run_id`` at once, as its owner.

        The execution writes nothing more (no final boundary, no release): the
        run keeps this runner's lease until it expires and the sweep recovers
        it. The call driving the run raises ``error`` instead of a takeover's
        :class:`~starflow.LeaseLostError`. ``starflow_testing`` simulates a
        SIGKILL with it (``WorkflowEnvironment.kill_runner``).

        Returns:
            False if no execution of the run is in progress in this process.
        """
        engine = self.engines.get(run_id)
        if engine is None:
            return False
        engine.kill(error)
        return True

    def stopped(self, error: BaseException) -> bool:
        """Whether ``error`` is one :meth:`stop` had the driving call raise (not a failure)."""
        return error in self._stop_errors
