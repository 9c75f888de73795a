"""``Replayer``: replay recorded run histories against the current workflow code.

A replay runs the workflow function with the run's journal: recorded steps
return their recorded outcomes, recorded waits their payloads. It stops at
the history's frontier, the first point the history does not cover: no step
handler runs, nothing is written. A replay that diverges from the history
raises :class:`~starflow.NonDeterminismError`, which is what a deployment
would hit when it resumes a paused run with changed code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

import anyio.lowlevel

from ..adapters.base import WorkflowStateAdapter
from ..adapters.coding import open_event, open_run
from ..adapters.null import NullWorkflowStateAdapter
from ..adapters.units import Unit
from ..codec import PayloadCodec, Payloads
from ..config import StarflowConfig
from ..engine.engine import Engine, Outcome, Runtime
from ..engine.execution import decode_input
from ..engine.replay import Journal
from ..engine.writes import ReadOnlyWrite
from ..errors import (
    CodecError,
    NonDeterminismError,
    StarflowError,
    StorageError,
    WorkflowDefinitionError,
)
from ..tokens import Keyring
from ..workflow.context import WorkflowContext, current_engine
from ..workflow.decorators import WorkflowDefinition, definition_of, registry
from .history import RunHistory, load_history, read_history

__all__ = ["ReplayResult", "Replayer"]

HistoryLike = RunHistory | Mapping[str, Any] | str | bytes
#: The replay's time for a run with no recorded start (none of its steps ran).
_NO_START = datetime(2030, 1, 1, tzinfo=UTC)
ReplayOutcome = Literal["success", "error", "paused", "frontier", "nondeterminism", "failed"]


class _HasAdapter(Protocol):
    @property
    def adapter(self) -> WorkflowStateAdapter: ...


@dataclass(frozen=True)
class ReplayResult:
    """How the replay of one recorded run went.

    Attributes:
        run_id: The run replayed.
        workflow: Its workflow name.
        ok: False if the replay diverged from the history (or could not run).
        error: The :class:`~starflow.NonDeterminismError` (or why the run could
            not be replayed, e.g. its workflow is not registered); None if ok.
        outcome: Where the replay stopped: ``success`` / ``error`` (the workflow
            returned or raised past its whole history), ``paused`` (at the wait
            the run is paused on), ``frontier`` (at the first step the history
            does not hold), ``nondeterminism`` or ``failed``.
    """

    run_id: str
    workflow: str | None
    ok: bool
    error: StarflowError | None = None
    outcome: ReplayOutcome = "success"


class _Frontier(BaseException):
    """Unwinds the replay where the history ends (never caught by user code)."""


class _FrozenClock:
    """The replay's :class:`~starflow.Clock`: time stands at the run's start.

    A replay reads recorded outcomes only, so nothing in it should wait; a wait
    that needs time to pass means the code went past the history, so it stops
    the replay at its frontier (zero-length sleeps return at once).
    """

    def __init__(self, start: datetime) -> None:
        self._now = start.astimezone(UTC)

    def now(self) -> datetime:
        return self._now

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self._now + timedelta(seconds=max(0.0, seconds)))

    async def sleep_until(self, deadline: datetime) -> None:
        if deadline > self._now:
            raise _Frontier()
        await anyio.lowlevel.checkpoint()


class _ReadOnlyAdapter(NullWorkflowStateAdapter):
    """Serves the history's reads; refuses every write."""

    def __init__(self, history: RunHistory) -> None:
        super().__init__(workspace_id=history.run.workspace_id, env=history.run.env)
        self.history = history
        self.attempted: list[list[str]] = []

    async def execute(self, unit: Unit) -> bool:
        self.attempted.append(unit.methods)
        raise StorageError("the replayer is read-only: nothing is written during a replay")


def _contains(exc: BaseException,
              kind: type[BaseException] | tuple[type[BaseException], ...]) -> bool:
    if isinstance(exc, kind):
        return True
    if isinstance(exc, BaseExceptionGroup):
        return any(_contains(e, kind) for e in exc.exceptions)
    return False


class Replayer:
    """Replays recorded histories against the workflow code of this process.

    Args:
        workflows: The ``@workflow`` functions to replay with. A history is
            matched by workflow name (and version, when several are given).
            Default: the process's registry, by the run's name and version.
        codec: The :class:`~starflow.PayloadCodec` the runs were written with
            (``Starflow.open(codec=...)``), to decode their encoded arguments,
            results and recorded outputs. Not needed for a source opened with it.

    Example::

        replayer = Replayer(workflows=[order])
        results = await replayer.replay_workflow(env, "order")
        assert all(r.ok for r in results), [r.error for r in results if not r.ok]
    """

    def __init__(self, workflows: Iterable[Callable[..., Any]] = (), *,
                 codec: PayloadCodec | None = None) -> None:
        self._payloads = Payloads(codec) if codec is not None else None
        self._definitions: dict[str, list[WorkflowDefinition]] = {}
        for wf in workflows:
            definition = definition_of(wf)
            self._definitions.setdefault(definition.name, []).append(definition)

    def _definition(self, name: str, version: int | None) -> WorkflowDefinition:
        candidates = self._definitions.get(name)
        if candidates:
            for definition in candidates:
                if definition.version == version:
                    return definition
            if len(candidates) == 1:
                return candidates[0]
        elif not self._definitions:
            found = registry.get(name, version)
            if found is not None:
                return found
        raise WorkflowDefinitionError(
            f"no workflow {name!r} version {version} to replay with: pass it in "
            "Replayer(workflows=[...]) or import the module that defines it")

    # -- sources -------------------------------------------------------------------

    async def replay_history(self, history: HistoryLike) -> ReplayResult:
        """Replay one history (a :class:`~starflow.admin.history.RunHistory`, an export
        dict or its JSON text)."""
        parsed = load_history(history)
        run = parsed.run
        try:
            definition = self._definition(run.template_id or "", run.workflow_version)
        except WorkflowDefinitionError as exc:
            return ReplayResult(run_id=run.id, workflow=run.template_id, ok=False, error=exc,
                                outcome="failed")
        if self._payloads is not None:
            try:
                parsed = RunHistory(run=open_run(self._payloads, run),
                                    events=[open_event(self._payloads, e)
                                            for e in parsed.events],
                                    format=parsed.format)
            except CodecError as exc:
                return ReplayResult(run_id=run.id, workflow=run.template_id, ok=False,
                                    error=exc, outcome="failed")
        return await self._replay(parsed, definition)

    async def replay_histories(self, histories: Iterable[HistoryLike]) -> list[ReplayResult]:
        """Replay several histories; one result each, in order."""
        return [await self.replay_history(h) for h in histories]

    async def replay_run(self, source: WorkflowStateAdapter | _HasAdapter, run_id: str
                         ) -> ReplayResult:
        """Replay a run read from a database (an adapter, a ``Starflow`` or an environment)."""
        adapter = source if isinstance(source, WorkflowStateAdapter) else source.adapter
        return await self.replay_history(await read_history(adapter, run_id))

    async def replay_workflow(self, source: WorkflowStateAdapter | _HasAdapter,
                              workflow: str | Callable[..., Any], *, limit: int = 1000
                              ) -> list[ReplayResult]:
        """Replay every recorded run of a workflow (newest first, up to ``limit``)."""
        name = workflow if isinstance(workflow, str) else definition_of(workflow).name
        adapter = source if isinstance(source, WorkflowStateAdapter) else source.adapter
        runs = await adapter.list_runs(template_id=name, limit=limit)
        return [await self.replay_history(await read_history(adapter, r.id)) for r in runs]

    # -- the replay ----------------------------------------------------------------

    async def _replay(self, history: RunHistory, definition: WorkflowDefinition
                      ) -> ReplayResult:
        run = history.run
        started = run.started_at or (history.events[0].created_at if history.events else None)
        clock = _FrozenClock(started or _NO_START)
        adapter = _ReadOnlyAdapter(history)
        runtime = Runtime(adapter=adapter, clock=clock, config=StarflowConfig(),
                          runner_id="starflow-replayer",
                          keyring=Keyring({"replay": "starflow-replayer-key"}))
        ctx = WorkflowContext(run_id=run.id, workflow=definition.name,
                              version=definition.version, workspace_id=run.workspace_id,
                              env=run.env, run_key=run.run_key)
        journal = Journal.from_events(history.events, started_at=started)

        def result(ok: bool, outcome: ReplayOutcome, error: StarflowError | None = None
                   ) -> ReplayResult:
            return ReplayResult(run_id=run.id, workflow=definition.name, ok=ok, error=error,
                                outcome=outcome)

        try:
            args, kwargs = decode_input(definition, run.input_json)
        except StarflowError as exc:
            return result(False, "failed", exc)
        # Read-only: a write means the code went past the history (its frontier).
        engine = Engine(runtime=runtime, definition=definition, ctx=ctx, journal=journal,
                        args=args, kwargs=kwargs, started_at=clock.now(), read_only=True)
        token = current_engine.set(engine)
        try:
            outcome: Outcome = await engine._body()
        except BaseException as exc:
            if not _contains(exc, (_Frontier, ReadOnlyWrite)):
                raise
            outcome = Outcome("paused")
            stopped: ReplayOutcome = "frontier"
        else:
            # A run that continued as new ended as success (its chain goes on).
            stopped = "paused" if outcome.status == "paused" else (
                "success" if outcome.status in ("success", "continued") else "error")
        finally:
            current_engine.reset(token)
        # The first divergence met, even one the workflow code caught.
        nde = engine.journal.divergence
        if nde is None and isinstance(outcome.exception, NonDeterminismError):
            nde = outcome.exception
        if nde is not None:
            return result(False, "nondeterminism", nde)
        if isinstance(outcome.exception, CodecError):
            # A recorded value it could not decode (no codec, a key it lacks): the
            # replay did not check the code against the history past that point.
            return result(False, "failed", outcome.exception)
        return result(True, stopped)
