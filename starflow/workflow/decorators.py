"""``@workflow`` and ``@step``: definitions, validation and the registry.

Decorated functions keep their signature (wrapt) and, called outside a
workflow run, are plain async functions. Inside a run, a step call goes
through the engine, which records it or returns its recorded outcome. A plain
``def`` workflow's body runs in a worker thread, where a step or workflow call
returns its value (:mod:`starflow.workflow.threads`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ParamSpec, Protocol, TypeVar, overload

import anyio.to_thread
import wrapt

from ..config import int_problem
from ..errors import WorkflowDefinitionError
from ..limits import duration_problem, name_problem
from .context import current_engine, current_node
from .threads import call_on_loop, in_workflow_thread, run_body_in_thread

__all__ = [
    "RetryPolicy",
    "StepDecorator",
    "StepDefinition",
    "WorkflowDecorator",
    "WorkflowDefinition",
    "registry",
    "step",
    "timeout_problem",
    "workflow",
]

P = ParamSpec("P")
R = TypeVar("R")


@dataclass(frozen=True)
class RetryPolicy:
    """How a step is retried before its failure is recorded.

    Attributes:
        max_attempts: Total attempts, the first included (1: no retry).
        initial_interval: Delay before the second attempt.
        backoff_coefficient: Each further delay is the previous one times this.
        maximum_interval: Upper bound of a delay.
        non_retryable: Exception types that are recorded at once, without retry
            (a tuple; one class or a list is accepted too).
    """

    max_attempts: int = 1
    initial_interval: timedelta = timedelta(seconds=1)
    backoff_coefficient: float = 2.0
    maximum_interval: timedelta = timedelta(seconds=100)
    non_retryable: tuple[type[BaseException], ...] = ()

    def __post_init__(self) -> None:
        problems = []
        if (problem := int_problem("max_attempts", self.max_attempts, 1)) is not None:
            problems.append(problem)
        if not isinstance(self.initial_interval, timedelta) or self.initial_interval < timedelta():
            problems.append(f"initial_interval must be a timedelta >= 0: {self.initial_interval!r}")
        if not isinstance(self.maximum_interval, timedelta) or (
            isinstance(self.initial_interval, timedelta)
            and self.maximum_interval < self.initial_interval
        ):
            problems.append(
                f"maximum_interval must be a timedelta >= initial_interval: "
                f"{self.maximum_interval!r}"
            )
        for name in ("initial_interval", "maximum_interval"):
            value = getattr(self, name)
            if isinstance(value, timedelta) and (
                    problem := duration_problem(name, value)) is not None:
                problems.append(problem)
        if (not isinstance(self.backoff_coefficient, int | float)
                or isinstance(self.backoff_coefficient, bool) or self.backoff_coefficient < 1):
            problems.append(
                f"backoff_coefficient must be a number >= 1: {self.backoff_coefficient!r}")
        if isinstance(self.non_retryable, type | list):
            # One exception class, or a list of them: what the user meant is clear.
            kinds = (self.non_retryable,) if isinstance(self.non_retryable, type) else (
                tuple(self.non_retryable))
            object.__setattr__(self, "non_retryable", kinds)
        if not isinstance(self.non_retryable, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException) for t in self.non_retryable):
            problems.append(f"non_retryable must be a tuple of exception types: "
                            f"{self.non_retryable!r}")
        if problems:
            raise WorkflowDefinitionError(
                f"invalid RetryPolicy ({len(problems)} problem(s)): " + "; ".join(problems)
            )

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        longest = self.maximum_interval.total_seconds()
        try:
            base = self.initial_interval.total_seconds() * self.backoff_coefficient ** (attempt - 1)
        except OverflowError:  # a large coefficient to a large power: past any maximum
            return longest
        return min(base, longest)

    def retryable(self, exc: BaseException) -> bool:
        return not isinstance(exc, self.non_retryable)


def _hints(fn: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(fn)
    except Exception:  # unresolvable forward references: treat as unannotated
        return {}


def _code_hash(fn: Callable[..., Any]) -> str:
    try:
        source = inspect.getsource(fn).encode()
    except (OSError, TypeError):
        code = getattr(fn, "__code__", None)
        source = code.co_code if code is not None else repr(fn).encode()
    return hashlib.sha256(source).hexdigest()[:16]


class _Annotated:
    """``hints`` and ``return_type`` of a definition's ``fn``, resolved once."""

    fn: Callable[..., Any]
    signature: inspect.Signature
    _hints: dict[str, Any] | None
    _arity: int | None  # parameters of a plain positional signature, -1 for others

    @property
    def hints(self) -> dict[str, Any]:
        """Resolved annotations of the decorated function (cached)."""
        if self._hints is None:
            self._hints = _hints(self.fn)
        return self._hints

    @property
    def return_type(self) -> Any:
        return self.hints.get("return", Any)

    def check_call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        """Raise ``TypeError`` if ``fn`` cannot be called with these arguments.

        ``Signature.bind`` does the check; a call with exactly one positional
        argument for each parameter of a plain signature (the common case,
        checked before every run) is valid without it.
        """
        arity = self._arity
        if arity is None:
            params = self.signature.parameters.values()
            self._arity = arity = len(params) if all(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) else -1
        if kwargs or len(args) != arity:
            self.signature.bind(*args, **kwargs)


@dataclass
class StepDefinition(_Annotated):
    """A ``@step`` function and its options."""

    #: The decorated function: a coroutine function, or a plain ``def`` if ``threaded``.
    fn: Callable[..., Any]
    name: str
    retry: RetryPolicy
    signature: inspect.Signature
    pool: str | None = None
    #: An attempt running longer is cancelled and counts as failed (``@step(timeout=)``).
    timeout: timedelta | None = None
    #: A plain ``def`` step: each attempt runs in a worker thread (see :func:`in_thread`).
    threaded: bool = False
    _hints: dict[str, Any] | None = field(default=None, repr=False)
    _arity: int | None = field(default=None, repr=False)


@dataclass
class WorkflowDefinition(_Annotated):
    """A ``@workflow`` function and its options."""

    #: The decorated function: a coroutine function, or a plain ``def`` if ``threaded``.
    fn: Callable[..., Any]
    name: str
    version: int
    max_claim_attempts: int | None
    pool: str | None
    code_hash: str
    signature: inspect.Signature
    #: A run's deadline from its start (``@workflow(timeout=)``).
    timeout: timedelta | None = None
    #: The signal names its runs take (``@workflow(signals=)``); None: not declared.
    signals: tuple[str, ...] | None = None
    #: A plain ``def`` workflow: its body runs in a worker thread (see
    #: :mod:`starflow.workflow.threads`).
    threaded: bool = False
    _hints: dict[str, Any] | None = field(default=None, repr=False)
    _arity: int | None = field(default=None, repr=False)


class _Registry:
    """Workflow definitions known to this process, by name and version."""

    def __init__(self) -> None:
        self._by_key: dict[tuple[str, int], WorkflowDefinition] = {}
        self._steps: dict[str, StepDefinition] = {}

    def add(self, definition: WorkflowDefinition) -> None:
        self._by_key[(definition.name, definition.version)] = definition

    def get(self, name: str, version: int | None = None) -> WorkflowDefinition | None:
        if version is not None:
            return self._by_key.get((name, version))
        versions = [v for (n, v) in self._by_key if n == name]
        return self._by_key[(name, max(versions))] if versions else None

    def versions(self, name: str) -> list[int]:
        return sorted(v for (n, v) in self._by_key if n == name)

    def names(self) -> list[str]:
        return sorted({n for (n, _) in self._by_key})

    def add_step(self, definition: StepDefinition) -> None:
        """Register a step that runs on a worker pool, so job workers find it by name."""
        self._steps[definition.name] = definition

    def get_step(self, name: str) -> StepDefinition | None:
        """The pool step registered under ``name`` (``None`` if this process lacks it)."""
        return self._steps.get(name)


registry = _Registry()


class _WorkflowFunction(wrapt.FunctionWrapper[..., Any]):
    """A ``@workflow`` function: the wrapper holds its definition, not the function.

    An attribute set on a wrapt wrapper lands on the wrapped function, so one
    function decorated twice (``a = workflow(name="a")(f); b = workflow(name="b")(f)``)
    would leave both wrappers reading the second definition. A property keeps
    each wrapper's own (a bound wrapper finds it through its parent).
    """

    _self_starflow_definition: WorkflowDefinition

    @property
    def __starflow_workflow__(self) -> WorkflowDefinition:
        definition: WorkflowDefinition = self._self_starflow_definition
        return definition


class _StepFunction(wrapt.FunctionWrapper[..., Any]):
    """A ``@step`` function: the wrapper holds its definition (see ``_WorkflowFunction``)."""

    _self_starflow_definition: StepDefinition

    @property
    def __starflow_step__(self) -> StepDefinition:
        definition: StepDefinition = self._self_starflow_definition
        return definition


def _problems_for(fn: object, kind: str) -> list[str]:
    problems = []
    label = getattr(fn, "__qualname__", fn)
    if not callable(fn):
        problems.append(f"@{kind} decorates a function, got {fn!r}")
    elif inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        problems.append(f"@{kind} cannot decorate a generator function ({label}): its "
                        "outcome is what it returns; return a list instead of yielding")
    return problems


async def in_thread(fn: Callable[..., Any], *args: Any,
                    limiter: anyio.CapacityLimiter | None = None, **kwargs: Any) -> Any:
    """Call plain ``fn`` in a worker thread and wait for it without blocking the loop.

    The thread runs in a copy of the caller's context (``starflow.context()``,
    the step's node id and log fields are there). Cancelled (a step timeout, a
    run cancel) the wait ends at once: the thread cannot be interrupted, so it
    finishes in the background and its result is discarded. ``limiter`` bounds
    the threads (``StarflowConfig.sync_step_threads``; anyio's default outside
    a runtime).
    """
    result = await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs),
                                            limiter=limiter, abandon_on_cancel=True)
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # never awaited: no "coroutine was never awaited" warning
        label = getattr(fn, "__qualname__", fn)
        raise WorkflowDefinitionError(
            f"step {label} is a plain def (run in a worker thread) but returned an "
            f"awaitable ({type(result).__name__}): declare it `async def` so it is awaited "
            "on the event loop")
    return result


def _method_parameter(fn: Callable[..., Any]) -> str | None:
    """``self`` or ``cls`` if ``fn`` is defined in a class body with that first parameter.

    A function in a class body has a qualified name ``Class.name`` (a nested
    function's ends in ``<locals>.name``). A ``@staticmethod`` applied over the
    decorator is in a class body too, but takes no ``self``: it is a plain function.
    """
    parts = getattr(fn, "__qualname__", "").split(".")
    if len(parts) < 2 or parts[-2] == "<locals>":
        return None
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    first = params[0] if params else None
    if first is not None and first.name in ("self", "cls") and first.kind in (
            first.POSITIONAL_ONLY, first.POSITIONAL_OR_KEYWORD):
        return first.name
    return None


def _wrong_order_problems(fn: object, kind: str) -> list[str]:
    if isinstance(fn, staticmethod | classmethod):
        which = type(fn).__name__
        return [f"@{kind} must be applied first, under @{which} (write @{which} above it)"]
    return []


def _pool_problems(pool: object) -> list[str]:
    if pool is not None and (not isinstance(pool, str) or not pool.strip()):
        return [f"pool must be a non-empty string: {pool!r}"]
    problem = name_problem("pool", pool, optional=True)
    return [problem] if problem is not None else []


def timeout_problem(what: str, timeout: object) -> str | None:
    """The problem with a ``timeout=`` (``None`` or a positive timedelta of at most
    :data:`~starflow.limits.MAX_DURATION`), if any."""
    if timeout is None:
        return None
    if not isinstance(timeout, timedelta) or timeout <= timedelta(0):
        return f"{what} must be a positive timedelta: {timeout!r}"
    return duration_problem(what, timeout)


def _fail(kind: str, fn: object, problems: list[str]) -> None:
    label = getattr(fn, "__qualname__", repr(fn))
    raise WorkflowDefinitionError(
        f"Invalid {kind} {label} for {len(problems)} reason(s): " + "; ".join(problems)
    )


class WorkflowDecorator(Protocol):
    """What ``@workflow(...)`` with options returns: the decorator, for ``async def`` and
    plain ``def`` functions alike (both become ``Callable[P, Awaitable[R]]``)."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Callable[P, Awaitable[R]]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, Awaitable[R]]: ...


@overload
def workflow(fn: Callable[P, Awaitable[R]], /) -> Callable[P, Awaitable[R]]: ...
@overload
def workflow(fn: Callable[P, R], /) -> Callable[P, Awaitable[R]]: ...
@overload
def workflow(
    *, name: str | None = None, version: int = 1, max_claim_attempts: int | None = None,
    pool: str | None = None, timeout: timedelta | None = None,
    signals: tuple[str, ...] | list[str] | None = None,
) -> WorkflowDecorator: ...


def workflow(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    version: int = 1,
    max_claim_attempts: int | None = None,
    pool: str | None = None,
    timeout: timedelta | None = None,
    signals: tuple[str, ...] | list[str] | None = None,
) -> Any:
    """Declare a function (``async def`` or plain ``def``) as a durable workflow.

    A plain ``def`` workflow runs in a worker thread (at most
    ``StarflowConfig.sync_workflow_threads`` at once per application), recorded
    and replayed exactly as the ``async def`` form: there, calling a step, a
    child workflow or a wait (``starflow.sleep(...)``, ``starflow.wait_for(...)``)
    returns its value instead of an awaitable (:func:`starflow.call` does the
    same and tells type checkers the value's type). A durable wait unwinds the
    thread, so a paused run holds none.

    A workflow is a module-level function (or a ``@staticmethod``, with
    ``@staticmethod`` written above ``@workflow``), not a method: a run is stored
    as the workflow's name and arguments and replayed from them in any process,
    where no ``self`` exists. A method with ``self`` or ``cls`` is rejected here,
    and a workflow bound to an instance by ``Starflow.run`` / ``start``; pass
    what the workflow needs as arguments, or build the object inside it.

    Args:
        name: Registered name (``workflow_runs.template_id``); the function's
            name by default.
        version: Definition version. A run started with this function takes
            it; a run started by name takes the newest registered version;
            running and paused runs keep theirs.
        max_claim_attempts: Claims before an expired lease abandons the run
            (default: ``StarflowConfig.max_claim_attempts``).
        pool: Runner pool that serves runs started with ``Starflow.start``
            (default: any pool).
        timeout: The run's deadline, from its start, on the runtime's clock
            (restarts and waits count): past it the run ends in ``error``
            (``WorkflowFailed.error_type == "WorkflowTimeout"``) and its attached
            children are cancelled. ``sf.options(timeout=)`` overrides it per run.
        signals: The signal names its runs take. Declared, ``Starflow.signal``
            (the CLI, the web page) refuses any other name with
            :class:`~starflow.UnexpectedSignal` before writing; a declared one
            sent before the run reaches its wait is kept. Not declared (None),
            every signal is kept for the wait the run may reach.

    Inside another workflow, ``await this_workflow(...)`` starts a child run and
    waits for it durably (see :func:`starflow.start_child`).
    """

    def decorate(func: Callable[..., Any]) -> Any:
        problems = _wrong_order_problems(func, "workflow") or _problems_for(func, "workflow")
        this = _method_parameter(func) if not problems else None
        if this is not None:
            problems.append(
                f"@workflow cannot decorate a method (it takes {this!r}): a run is stored as "
                "its workflow's name and arguments and replayed from them in any process (a "
                f"worker, after a restart), where there is no {this} to bind; define it as a "
                "module-level async def (or a @staticmethod) and pass what it needs as "
                "arguments or build the object inside it; methods can be @step")
        wf_name = name if name is not None else getattr(func, "__name__", "")
        if not isinstance(wf_name, str) or not wf_name.strip():
            problems.append(f"name must be a non-empty string: {wf_name!r}")
        elif (problem := name_problem("name", wf_name)) is not None:
            problems.append(problem)
        if (problem := int_problem("version", version, 1)) is not None:
            problems.append(problem)
        if max_claim_attempts is not None and (
                problem := int_problem("max_claim_attempts", max_claim_attempts, 1)) is not None:
            problems.append(problem)
        problems.extend(_pool_problems(pool))
        if (problem := timeout_problem("timeout", timeout)) is not None:
            problems.append(problem)
        declared: tuple[str, ...] | None = None
        if signals is not None:
            if isinstance(signals, str) or not isinstance(signals, tuple | list) or not all(
                    isinstance(e, str) and e and "#" not in e and "|" not in e
                    for e in signals):
                problems.append(f"signals must be a tuple of signal names (non-empty, "
                                f"without '#' or '|'): {signals!r}")
            else:
                declared = tuple(signals)
        if problems:
            _fail("workflow", func, problems)
        definition = WorkflowDefinition(
            fn=func,
            name=wf_name,
            version=version,
            max_claim_attempts=max_claim_attempts,
            pool=pool,
            code_hash=_code_hash(func),
            signature=inspect.signature(func),
            timeout=timeout,
            signals=declared,
            threaded=not inspect.iscoroutinefunction(func),
        )
        registry.add(definition)

        async def call(wrapped: Any, args: Any, kwargs: Any) -> Any:
            engine = current_engine.get()
            if engine is None or current_node.get() is not None:
                if definition.threaded:
                    return await run_body_in_thread(wrapped, tuple(args), dict(kwargs),
                                                    limiter=None)
                return await wrapped(*args, **kwargs)
            # Awaited inside a workflow: a child run, waited for durably (#17).
            child_id = await engine.start_child(definition, tuple(args), dict(kwargs),
                                                run_id=None, pool=None, detached=False)
            return await engine.child_result(child_id, definition.return_type)

        def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            if in_workflow_thread():  # called from a plain def workflow: its value
                return call_on_loop(call, wrapped, args, kwargs)
            return call(wrapped, args, kwargs)

        wrapped = _WorkflowFunction(func, wrapper)
        wrapped._self_starflow_definition = definition
        return wrapped

    if fn is not None:
        return decorate(fn)
    return decorate


class StepDecorator(Protocol):
    """What ``@step(...)`` with options returns: the decorator, for ``async def`` and
    plain ``def`` functions alike (both become ``Callable[P, Awaitable[R]]``)."""

    @overload
    def __call__(self, fn: Callable[P, Awaitable[R]], /) -> Callable[P, Awaitable[R]]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Callable[P, Awaitable[R]]: ...


@overload
def step(fn: Callable[P, Awaitable[R]], /) -> Callable[P, Awaitable[R]]: ...
@overload
def step(fn: Callable[P, R], /) -> Callable[P, Awaitable[R]]: ...
@overload
def step(
    *, name: str | None = None, retry: RetryPolicy | None = None, pool: str | None = None,
    timeout: timedelta | None = None,
) -> StepDecorator: ...


def step(
    fn: Any = None,
    /,
    *,
    name: str | None = None,
    retry: RetryPolicy | None = None,
    pool: str | None = None,
    timeout: timedelta | None = None,
) -> Any:
    """Declare a function (``async def`` or plain ``def``) as a recorded step.

    Inside a workflow run its outcome is written before the workflow moves on
    and, on replay, returned without calling it again. Outside a run it is a
    plain async function.

    A plain ``def`` step runs in a worker thread (at most
    ``StarflowConfig.sync_step_threads`` at once per application), so blocking
    code (a sync HTTP client, a driver without asyncio) does not stall the
    event loop; it is awaited like any step (``await charge(x)``) and recorded,
    retried and replayed the same way. A thread cannot be interrupted: past its
    ``timeout`` (or at a run cancel) the attempt fails at once and the thread
    finishes in the background, its result discarded.

    A step may be a method: ``await client.charge(x)`` runs on the instance the
    workflow calls it on, and ``self`` is not part of the recorded arguments (so
    the workflow must reach an equivalent instance on replay, e.g. a module-level
    client or one it builds from its arguments). Its default name is the
    qualified name (``Client.charge``). A ``pool=`` step cannot be a method: a
    job worker runs it without the instance.

    Args:
        name: Name used in the node id (``step:<name>#<n>``); the function's
            qualified name by default.
        retry: Retry policy; default one attempt.
        pool: Dispatch the step to workers of this pool (worker jobs).
        timeout: An attempt running longer (on the runtime's clock) is cancelled
            and raises :class:`~starflow.StepTimeout`, a failed attempt for
            ``retry`` (retried like any other unless listed in ``non_retryable``).
    """

    def decorate(func: Callable[..., Any]) -> Any:
        problems = _wrong_order_problems(func, "step") or _problems_for(func, "step")
        this = _method_parameter(func) if not problems and pool is not None else None
        if this is not None:
            problems.append(
                f"@step(pool=...) cannot decorate a method (it takes {this!r}): a job worker "
                "runs the step from its name and recorded arguments, without the instance; "
                "make it a module-level async def (or a @staticmethod), or drop pool= so it "
                "runs in the workflow on the instance it is called on")
        step_name = name if name is not None else getattr(func, "__qualname__", "")
        if not isinstance(step_name, str) or not step_name.strip():
            problems.append(f"name must be a non-empty string: {step_name!r}")
        elif "#" in step_name:
            problems.append(f"name must not contain '#': {step_name!r}")
        elif (problem := name_problem("name", step_name)) is not None:
            problems.append(problem)
        if retry is not None and not isinstance(retry, RetryPolicy):
            problems.append(f"retry must be a RetryPolicy, got {retry!r}")
        problems.extend(_pool_problems(pool))
        if (problem := timeout_problem("timeout", timeout)) is not None:
            problems.append(problem)
        if problems:
            _fail("step", func, problems)
        threaded = not inspect.iscoroutinefunction(func)
        definition = StepDefinition(fn=func, name=step_name, retry=retry or RetryPolicy(),
                                    signature=inspect.signature(func), pool=pool,
                                    timeout=timeout, threaded=threaded)
        if pool is not None:
            registry.add_step(definition)

        async def call(wrapped: Any, args: Any, kwargs: Any) -> Any:
            engine = current_engine.get()
            if engine is None or current_node.get() is not None:
                if threaded:
                    return await in_thread(wrapped, *args, **kwargs)
                return await wrapped(*args, **kwargs)
            return await engine.run_step(definition, wrapped, args, kwargs)

        def wrapper(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            if in_workflow_thread():  # called from a plain def workflow: its value
                return call_on_loop(call, wrapped, args, kwargs)
            return call(wrapped, args, kwargs)

        wrapped = _StepFunction(func, wrapper)
        wrapped._self_starflow_definition = definition
        return wrapped

    if fn is not None:
        return decorate(fn)
    return decorate


def definition_of(wf: object) -> WorkflowDefinition:
    """The :class:`WorkflowDefinition` behind a ``@workflow`` function.

    Raises:
        WorkflowDefinitionError: ``wf`` is not a workflow, or is one bound to an
            instance or class (a run could not be replayed without it).
    """
    definition = getattr(wf, "__starflow_workflow__", None)
    if not isinstance(definition, WorkflowDefinition):
        raise WorkflowDefinitionError(
            f"{getattr(wf, '__qualname__', wf)!r} is not a workflow: decorate it with "
            "@starflow.workflow"
        )
    if isinstance(wf, wrapt.BoundFunctionWrapper) and wf._self_instance is not None:
        raise WorkflowDefinitionError(
            f"workflow {definition.name!r} is bound to an instance of "
            f"{type(wf._self_instance).__name__}: a run is replayed from its workflow's name "
            "and arguments, without that instance; define the workflow as a module-level "
            "async def (or a @staticmethod) and pass what it needs as arguments"
        )
    return definition
