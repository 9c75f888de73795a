"""The vocabulary of one execution: what it is given, how its body unwinds, how it ended.

:class:`Runtime` is what an :class:`~starflow.engine.engine.Engine` needs from the
application; :class:`Suspend` and :class:`Abort` unwind a workflow body (they
are ``BaseException``, so workflow code's ``except Exception`` lets them
through); :class:`Outcome` is what the engine hands the driver
(:mod:`starflow.runtime.driving`) to settle.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import anyio

from .. import serde
from ..adapters.base import WorkflowStateAdapter
from ..adapters.units import Guard
from ..clock import Clock
from ..config import StarflowConfig
from ..errors import StepTimeout
from ..records import JobSpec
from ..tokens import Keyring
from ..workflow.decorators import StepDefinition, WorkflowDefinition, in_thread
from .heartbeats import Heartbeats

__all__ = ["CONTINUED_FROM_EVENT", "Abort", "ContinueAsNew", "Outcome", "OutcomeStatus",
           "PendingWait", "Runtime", "Suspend", "decode_input", "find_unwinding", "lease_guard",
           "timed_attempt"]

#: ``continued``: the run ended with ``continue_as_new``; ``Outcome.result`` is
#: the new run's id.
OutcomeStatus = Literal["success", "error", "paused", "lease_lost", "storage", "cancelled",
                        "released", "stopped", "continued", "start_failed"]


@dataclass
class Runtime:
    """What an engine needs from the application."""

    adapter: WorkflowStateAdapter
    clock: Clock
    config: StarflowConfig
    runner_id: str
    keyring: Keyring
    #: The runner's shared heartbeat loop; engines fall back to their own task
    #: when it is absent or not running.
    heartbeats: Heartbeats | None = None
    #: Told when an execution records something a caller may be waiting for
    #: mid-run (an update's answer): the runner's ``notify_settled``.
    notify: Callable[[], None] | None = None
    #: Tells this process's timer loop a deadline was registered (a child
    #: queued with a deadline): the runner's ``notify_timers``.
    notify_timers: Callable[[], None] | None = None
    #: The ``workflow_definitions`` id of a definition (cached by the runner):
    #: what a child run's row records.
    definition_id: Callable[[WorkflowDefinition], Awaitable[str]] | None = None
    _step_threads: anyio.CapacityLimiter | None = field(default=None, init=False, repr=False)
    _workflow_threads: anyio.CapacityLimiter | None = field(default=None, init=False,
                                                            repr=False)

    def step_threads(self) -> anyio.CapacityLimiter:
        """The limiter of plain ``def`` steps' worker threads: at most
        ``config.sync_step_threads`` at once for this application (made on first use,
        on the application's event loop)."""
        if self._step_threads is None:
            self._step_threads = anyio.CapacityLimiter(self.config.sync_step_threads)
        return self._step_threads

    def workflow_threads(self) -> anyio.CapacityLimiter:
        """The limiter of plain ``def`` workflows' threads: at most
        ``config.sync_workflow_threads`` bodies at once for this application. Apart
        from the steps' limiter, so a workflow thread waiting on a plain step
        never holds the thread that step needs."""
        if self._workflow_threads is None:
            self._workflow_threads = anyio.CapacityLimiter(self.config.sync_workflow_threads)
        return self._workflow_threads


def decode_input(definition: WorkflowDefinition, data: Any
                 ) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """A run's stored input as call arguments, each converted to its annotated type."""
    return serde.convert_call(definition.signature, definition.hints, data,
                              what=f"workflow {definition.name!r}")


def lease_guard(run_id: str, runner_id: str) -> Guard:
    """The guard every write of an execution carries: the runner holding
    ``run_id``'s lease (status running) wrote it, or nothing is written."""
    return Guard(run_id=run_id, leased_by=runner_id, status_in=("running",))


#: The first event of a run started by ``continue_as_new``: ``{"run_id": previous}``.
CONTINUED_FROM_EVENT = "run_continued_from"


@dataclass(frozen=True)
class PendingWait:
    """The wait a run paused on."""

    node_id: str
    event: str | None
    deadline: datetime | None
    wake_token: str
    #: Set when the wait is on a worker job (a ``@step(pool=...)`` call).
    job: JobSpec | None = None


@dataclass
class Outcome:
    """How one execution of a run ended."""

    status: OutcomeStatus
    result: Any = None
    error: str | None = None
    exception: BaseException | None = None
    wait: PendingWait | None = None
    definition: WorkflowDefinition | None = None
    #: The run's parent (a child run's end wakes it) and whether the run started
    #: children (its end cancels those still active): set by the engine.
    parent_run_id: str | None = None
    has_children: bool = False
    #: The run's deadline: a paused run's timer (its wait row) may be this.
    deadline: datetime | None = None
    #: The run continued an earlier run of a chain (``continue_as_new``): its
    #: parent may be waiting on an earlier link, so the wake follows the chain.
    continuation: bool = False


class Suspend(BaseException):
    """Unwinds the workflow body at a durable wait (not catchable by ``except Exception``)."""

    def __init__(self, wait: PendingWait) -> None:
        super().__init__(wait.node_id)
        self.wait = wait


class ContinueAsNew(BaseException):
    """Unwinds the workflow body at ``starflow.continue_as_new`` (not catchable by
    ``except Exception``); ``input`` is the new run's encoded arguments."""

    def __init__(self, input: dict[str, Any]) -> None:
        super().__init__("continue_as_new")
        self.input = input


class Abort(BaseException):
    """Unwinds the workflow body when this runner must stop writing."""

    def __init__(self, reason: Literal["lease_lost", "storage", "released", "start_failed"],
                 cause: BaseException | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.cause = cause


def find_unwinding(group: BaseException, kind: type[BaseException]) -> BaseException | None:
    """The first ``kind`` in ``group`` or its nested exception groups (task groups wrap)."""
    if isinstance(group, kind):
        return group
    if isinstance(group, BaseExceptionGroup):
        for exc in group.exceptions:
            found = find_unwinding(exc, kind)
            if found is not None:
                return found
    return None


async def timed_attempt(clock: Clock, sdef: StepDefinition, fn: Callable[..., Any],
                        args: tuple[Any, ...], kwargs: dict[str, Any], *,
                        run_id: str | None, node_id: str | None,
                        threads: anyio.CapacityLimiter | None = None) -> Any:
    """One attempt of a step, cancelled past its ``@step(timeout=)`` on ``clock``.

    A plain ``def`` step (``sdef.threaded``) runs in a worker thread bounded by
    ``threads``. Its thread cannot be interrupted: past the timeout the attempt
    fails at once and the thread runs on in the background, its result discarded.

    Raises:
        StepTimeout: the attempt ran longer (a failed attempt for the retry policy);
            its ``__cause__`` is what the cancelled attempt raised, if anything.
    """
    if sdef.threaded:
        fn = functools.partial(in_thread, fn, limiter=threads)
    timeout = sdef.timeout
    if timeout is None:
        return await fn(*args, **kwargs)
    timed_out = False
    failure: Exception | None = None
    result: Any = None
    async with anyio.create_task_group() as tg:
        async def watchdog() -> None:
            nonlocal timed_out
            await clock.sleep(timeout.total_seconds())
            timed_out = True
            tg.cancel_scope.cancel()

        tg.start_soon(watchdog)
        try:
            result = await fn(*args, **kwargs)
        except Exception as exc:  # re-raised below, outside the task group
            failure = exc
        finally:
            tg.cancel_scope.cancel()
    if timed_out:
        raise StepTimeout(
            f"step {node_id or sdef.name} of run {run_id} ran past its timeout of {timeout}: "
            "the attempt was cancelled (a failed attempt for its retry policy)",
            run_id=run_id, node_id=node_id) from failure
    if failure is not None:
        raise failure
    return result
