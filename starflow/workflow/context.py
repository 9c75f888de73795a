"""The workflow context: run identity plus user variables, and the contextvar
that tells decorated functions whether they run inside a workflow.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from datetime import datetime, timedelta
from typing import Any, NoReturn, Protocol

import msgspec

from ..adapters.base import WorkflowStateAdapter
from ..clock import Clock
from ..errors import InvalidArgument, OutsideWorkflow, ReservedKeyError, StarflowError
from ..limits import check_name

__all__ = [
    "CANCEL_EVENT",
    "RESERVED_EVENT_PREFIX",
    "RESERVED_KEYS",
    "RESERVED_PREFIX",
    "CheckpointWait",
    "RunningEngine",
    "Variables",
    "WorkflowContext",
    "check_event",
    "checkpoint_wait",
    "context",
    "current_engine",
    "current_node",
    "running_engine",
]

RESERVED_PREFIX = "__celestial"
WAIT_KEY = "__celestialWait"
CHECKOUT_KEY = "__celestialCheckout"
LEASES_KEY = "__celestialLeases"
IDEMPOTENCY_KEY = "__celestialIdempotency"
RESERVED_KEYS = (WAIT_KEY, CHECKOUT_KEY, LEASES_KEY, IDEMPOTENCY_KEY)


#: Signal names starting with this are the engine's (a cancel request is one).
RESERVED_EVENT_PREFIX = "__starflow"
#: The inbox entry of a pending (non-forced) cancel: ``Starflow.cancel`` queues it,
#: the engine consumes it with the node the cancellation is recorded on.
CANCEL_EVENT = "__starflow.cancel"
#: The inbox entry of a pending operator pause (``Starflow.pause`` of a run that is
#: executing): the engine consumes it when it parks the run at its next boundary.
PAUSE_EVENT = "__starflow.pause"


def check_event(event: object, what: str, *, run_id: str | None = None) -> str:
    """The one rule for a signal name: a non-empty string without ``#`` (node ids
    are ``wait:<event>#<n>``). Shared by ``wait_for``, ``wake_token`` and
    ``Starflow.signal``, so a signal is never kept for a wait that cannot exist."""
    if not isinstance(event, str) or not event or "#" in event:
        raise InvalidArgument(f"{what} event must be a non-empty string without '#': "
                              f"{event!r}", run_id=run_id)
    check_name(f"{what} event", event, run_id=run_id)
    if event.startswith(RESERVED_EVENT_PREFIX):
        raise InvalidArgument(f"{what} event names starting with {RESERVED_EVENT_PREFIX!r} "
                              f"are reserved for starflow: {event!r}", run_id=run_id)
    return event


class CheckpointWait(msgspec.Struct, frozen=True, kw_only=True):
    """The durable wait a run pauses on, as its checkpoint records it (``__celestialWait``).

    Written by the engine when the run suspends (:meth:`variable`), read back
    by :func:`checkpoint_wait`: the one place that knows the shape.
    """

    node_id: str | None
    event: str | None = None
    #: ISO-8601 text, as stored.
    deadline: str | None = None
    wake_token: str | None = None
    #: The worker job that is the wait's wake source (a ``@step(pool=...)`` call).
    job_id: str | None = None
    #: ``module:qualname`` of the ``type=`` a ``wait_for`` converts its payload to
    #: (:func:`starflow.serde.type_name`); ``None`` for an untyped wait.
    payload_type: str | None = None
    #: The same per event of a ``wait_for_any`` (its ``types=``), for typed events only.
    payload_types: dict[str, str] | None = None
    #: Signal names of untimed waits that concurrent branches reached while the
    #: run paused here (each is reached again after this wait's wake): a signal
    #: for one of them is expected, and kept until then.
    also_events: tuple[str, ...] = ()
    #: The workflow's ``@workflow(signals=)``, for a sender without its code.
    signals: tuple[str, ...] | None = None

    def type_for(self, event: str) -> str | None:
        """The recorded type a payload of signal ``event`` must convert to here."""
        if self.payload_types is not None:
            return self.payload_types.get(event)
        return self.payload_type if event == self.event else None

    def variable(self) -> dict[str, Any]:
        """The ``__celestialWait`` variable (status ``pending``) the checkpoint holds."""
        value: dict[str, Any] = {"status": "pending", "node_id": self.node_id,
                                 "event": self.event, "deadline": self.deadline,
                                 "wake_token": self.wake_token}
        if self.job_id is not None:
            value["job_id"] = self.job_id
        if self.payload_type is not None:
            value["payload_type"] = self.payload_type
        if self.payload_types:
            value["payload_types"] = dict(self.payload_types)
        if self.also_events:
            value["also_events"] = list(self.also_events)
        if self.signals is not None:
            value["signals"] = list(self.signals)
        return value


def checkpoint_wait(checkpoint: Mapping[str, Any] | None) -> CheckpointWait | None:
    """The wait a ``checkpoint_json`` records the run paused on; ``None`` if none."""
    variables = (checkpoint or {}).get("variables")
    wait = variables.get(WAIT_KEY) if isinstance(variables, Mapping) else None
    if not isinstance(wait, Mapping) or not wait:
        return None
    return CheckpointWait(node_id=wait.get("node_id"), event=wait.get("event"),
                          deadline=wait.get("deadline"), wake_token=wait.get("wake_token"),
                          job_id=wait.get("job_id"), payload_type=wait.get("payload_type"),
                          payload_types=_type_names(wait.get("payload_types")),
                          also_events=tuple(e for e in wait.get("also_events") or ()
                                            if isinstance(e, str)),
                          signals=_names(wait.get("signals")))


def _names(value: Any) -> tuple[str, ...] | None:
    if not isinstance(value, list | tuple):
        return None
    return tuple(e for e in value if isinstance(e, str))


def _type_names(value: Any) -> dict[str, str] | None:
    if not isinstance(value, Mapping):
        return None
    return {str(k): v for k, v in value.items() if isinstance(v, str)} or None


class Variables(dict[str, Any]):
    """A dict that refuses user writes to the engine's ``__celestial`` namespace."""

    run_id: str | None = None

    def _check(self, key: object) -> None:
        if isinstance(key, str) and key.startswith(RESERVED_PREFIX):
            raise ReservedKeyError(key, run_id=self.run_id)

    def __setitem__(self, key: str, value: Any) -> None:
        self._check(key)
        super().__setitem__(key, value)

    def __delitem__(self, key: str) -> None:
        self._check(key)
        super().__delitem__(key)

    def setdefault(self, key: str, default: Any = None) -> Any:
        self._check(key)
        return super().setdefault(key, default)

    def update(self, *args: Any, **kwargs: Any) -> None:
        incoming = dict(*args, **kwargs)
        for key in incoming:
            self._check(key)
        super().update(incoming)

    def __ior__(self, other: Any) -> Variables:  # type: ignore[override,misc]
        self.update(other)
        return self

    def pop(self, key: str, *default: Any) -> Any:
        self._check(key)
        return super().pop(key, *default)

    def popitem(self) -> tuple[str, Any]:
        """Remove the last user variable (engine keys stay)."""
        for key in reversed(self):
            if not key.startswith(RESERVED_PREFIX):
                return key, super().pop(key)
        raise KeyError("popitem(): no user variables")

    def clear(self) -> None:
        """Remove every user variable (engine keys stay)."""
        for key in [k for k in self if not k.startswith(RESERVED_PREFIX)]:
            super().pop(key)

    def replaced(self, items: Mapping[str, Any]) -> Variables:
        """A copy holding this dict's engine keys and ``items``, checked like any write."""
        for key in items:
            self._check(key)
        fresh = _variables((k, v) for k, v in self.items() if k.startswith(RESERVED_PREFIX))
        dict.update(fresh, items)
        fresh.run_id = self.run_id
        return fresh

    def _engine_set(self, key: str, value: Any) -> None:
        """Write any key, reserved ones included (engine use only)."""
        dict.__setitem__(self, key, value)

    def _engine_pop(self, key: str) -> Any:
        return dict.pop(self, key, None)


def _variables(items: Mapping[str, Any] | Iterable[tuple[str, Any]] = ()) -> Variables:
    v = Variables()
    dict.update(v, items)
    return v


class WorkflowContext(msgspec.Struct, kw_only=True):
    """What a running workflow knows about itself; its snapshot is the checkpoint.

    Attributes:
        run_id: The run's id (``workflow_runs.id``).
        workflow: The workflow's registered name (``workflow_runs.template_id``).
        version: The workflow definition's version.
        workspace_id: Tenant scope.
        env: Environment scope.
        run_key: The run key the run was started with (``run_id="order-123"``),
            or ``None`` for a run started without one (#30). Not part of the
            checkpoint: read from the run's row each time the run executes.
        variables: User variables. ``variables["phase"]`` (or ``ctx.phase``) is
            recorded as ``phase`` events when it changes. Keys starting with
            ``__celestial`` are reserved for the engine.
    """

    run_id: str
    workflow: str
    version: int = 1
    workspace_id: str = "celestial"
    env: str = "prod"
    variables: dict[str, Any] = msgspec.field(default_factory=Variables)
    run_key: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.variables, Variables):
            self.variables = _variables(self.variables)
        self.variables.run_id = self.run_id

    def __setattr__(self, name: str, value: Any) -> None:
        # ``ctx.variables = {...}`` from user code: keep the guard (a plain dict would
        # let reserved keys in and lose the engine's own) and the engine's keys.
        if name == "variables" and not isinstance(value, Variables):
            value = self.variables.replaced(value)  # type: ignore[attr-defined]
        super().__setattr__(name, value)

    @property
    def phase(self) -> Any:
        """The run's current phase (``variables["phase"]``)."""
        return self.variables.get("phase")

    @phase.setter
    def phase(self, value: Any) -> None:
        self.variables["phase"] = value

    def set(self, key: str, value: Any) -> None:
        """Set a user variable (``ReservedKeyError`` for ``__celestial…`` keys)."""
        self.variables[key] = value

    @property
    def node_id(self) -> str | None:
        """Inside a step: the step's node id (``step:charge#1``); else ``None``."""
        return current_node.get()

    @property
    def idempotency_key(self) -> str:
        """A key stable across retries and replays: ``run_id:node_id`` inside a step.

        Pass it to external systems (payment APIs, emails) so that a step re-run
        after a crash does not act twice.
        """
        node = current_node.get()
        return f"{self.run_id}:{node}" if node else self.run_id

    @property
    def wake_token(self) -> str | None:
        """The wake token of the wait the run is paused on, if any.

        A running workflow has not reached its next wait yet: to hand a token
        to an external system before waiting, use :meth:`wake_token_for`.
        """
        wait = self.variables.get(WAIT_KEY)
        return wait.get("wake_token") if isinstance(wait, dict) else None

    def wake_token_for(self, event: str, *, timeout: Any = None) -> str:
        """The wake token of the next ``wait_for(event)`` of this run (see
        :func:`starflow.wake_token`)."""
        engine = current_engine.get()
        if engine is None or engine.ctx is not self:
            raise StarflowError(
                "wake_token_for() needs the running workflow: call it on starflow.context() "
                f"inside run {self.run_id}", run_id=self.run_id)
        check_event(event, "wake_token")
        return engine.wake_token_for(event, timeout)

    def snapshot(self) -> dict[str, Any]:
        """The JSON-ready snapshot stored as ``checkpoint_json``."""
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "workspace_id": self.workspace_id,
            "env": self.env,
            "variables": dict(self.variables),
        }

    @classmethod
    def from_snapshot(cls, data: Mapping[str, Any]) -> WorkflowContext:
        return cls(
            run_id=data["run_id"],
            workflow=data["workflow"],
            version=data.get("version", 1),
            workspace_id=data.get("workspace_id", "celestial"),
            env=data.get("env", "prod"),
            variables=_variables(data.get("variables") or {}),
        )


class RunningEngine(Protocol):
    """What workflow code reaches through :data:`current_engine`: the running
    execution (``starflow.engine.engine.Engine`` is the one implementation). A Protocol,
    so the primitives below the engine (context, waits, decorators, session,
    progress) do not import it."""

    @property
    def ctx(self) -> WorkflowContext: ...

    @property
    def run_id(self) -> str: ...

    @property
    def adapter(self) -> WorkflowStateAdapter: ...

    @property
    def replaying(self) -> bool: ...

    @property
    def clock(self) -> Clock: ...

    #: The latest node id the workflow code reached (None before the first).
    position: str | None

    def now(self) -> datetime: ...

    def patched(self, change_id: str) -> bool: ...

    def set_attributes(self, values: dict[str, str]) -> None: ...

    def set_event(self, key: str, value: Any) -> None: ...

    def write_stream(self, key: str, value: Any, *, closed: bool = False) -> None: ...

    def continue_as_new(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> NoReturn: ...

    def wake_token_for(self, event: str | None, timeout: timedelta | None = None) -> str: ...

    async def wait(self, event: str | None, timeout: timedelta | None, type_: Any, *,
                   kind: str | None = None, node_name: str | None = None) -> Any: ...

    async def answer_update(self, name: str, update_id: str,
                            outcome: dict[str, Any]) -> None: ...

    async def wait_any(self, events: tuple[str, ...], timeout: timedelta | None,
                       types: Mapping[str, Any]) -> tuple[str, Any]: ...

    # ``definition`` is a ``decorators.WorkflowDefinition`` (decorators imports this module).
    async def start_child(self, definition: Any, args: tuple[Any, ...], kwargs: dict[str, Any],
                          *, run_id: str | None, pool: str | None, detached: bool,
                          timeout: timedelta | None = None) -> str: ...

    async def child_result(self, child_run_id: str, return_type: Any) -> Any: ...

    # ``sdef`` is a ``decorators.StepDefinition``; decorators imports this module.
    async def run_step(self, sdef: Any, fn: Callable[..., Awaitable[Any]],
                       args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any: ...


#: The engine executing the current task's workflow run (None outside a run).
current_engine: ContextVar[RunningEngine | None] = ContextVar("starflow_engine", default=None)
current_node: ContextVar[str | None] = ContextVar("starflow_node", default=None)


def running_engine(call: str, *, in_step: bool = True) -> RunningEngine:
    """The engine running this task's workflow run, for workflow code's
    ``starflow.<call>()``: the one way the primitives reach it.

    Raises:
        OutsideWorkflow: outside a workflow run, or (``in_step=False``: calls
            recorded once in the workflow's history) inside a step.
    """
    engine = current_engine.get()
    if engine is None:
        raise OutsideWorkflow(call)
    if not in_step:
        node = current_node.get()
        if node is not None:
            raise OutsideWorkflow(call, run_id=engine.run_id, node_id=node)
    return engine


def context() -> WorkflowContext:
    """The :class:`WorkflowContext` of the workflow run executing this code.

    Raises:
        OutsideWorkflow: when called outside a workflow run.
    """
    return running_engine("context").ctx
