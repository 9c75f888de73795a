"""The vocabulary of one execution: what it is given, how its body unwinds, how it ended.

:class:`Runtime` is what an :class:`~starflow.engine.Engine` needs from the
application; :class:`Suspend` and :class:`Abort` unwind a workflow body (they
are ``BaseException``, so workflow code's ``except Exception`` lets them
through); :class:`Outcome` is what the engine hands the driver
(:mod:`starflow.driving`) to settle.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from .adapters.base import WorkflowStateAdapter
from .clock import Clock
from .config import StarflowConfig
from .decorators import WorkflowDefinition
from .heartbeats import Heartbeats
from .records import JobSpec
from .tokens import Keyring

__all__ = ["Abort", "ContinueAsNew", "Outcome", "OutcomeStatus", "PendingWait", "Runtime",
           "Suspend", "find_unwinding"]

#: ``continued``: the run ended with ``continue_as_new``; ``Outcome.result`` is
#: the new run's id.
OutcomeStatus = Literal["success", "error", "paused", "lease_lost", "storage", "cancelled",
                        "released", "stopped", "continued"]


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

    def __init__(self, reason: Literal["lease_lost", "storage", "released"],
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
