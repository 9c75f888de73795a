"""starflow: durable execution for Python.

Write workflows as ``async def`` functions decorated with :func:`workflow`;
mark the calls worth recording with :func:`step`; pause durably with
:func:`wait_for` and :func:`sleep`. Open a database with :class:`Starflow`.
"""

from __future__ import annotations

from .adapters._flow import PoolLimits, PoolUsage, ScheduleRecord
from .adapters.base import RunEvent, RunInfo, WorkflowStateAdapter
from .app import Starflow
from .clock import Clock, SystemClock
from .config import StarflowConfig
from .context import WorkflowContext, context
from .decorators import RetryPolicy, step, workflow
from .errors import (
    ConfigError,
    DuplicateRun,
    InvalidWakeToken,
    LeaseLostError,
    NonDeterminismError,
    ReservedKeyError,
    ResultTimeout,
    RunCancelled,
    RunFinished,
    RunIdConflict,
    RunNotFound,
    ScheduleNotFound,
    SerializationError,
    StarflowError,
    StepFailed,
    StorageError,
    WaitTimeout,
    WarmTierError,
    WorkflowDefinitionError,
    WorkflowFailed,
)
from .jobs import JobWorker
from .runner import RunHandle
from .session import session_get, session_set
from .waits import now, patched, sleep, wait_for, wake_token
from .warm.base import LiveRun
from .warm.progress import progress

__version__ = "0.1.0"

__all__ = [
    "Clock",
    "ConfigError",
    "DuplicateRun",
    "InvalidWakeToken",
    "JobWorker",
    "LeaseLostError",
    "LiveRun",
    "NonDeterminismError",
    "PoolLimits",
    "PoolUsage",
    "ReservedKeyError",
    "ResultTimeout",
    "RetryPolicy",
    "RunCancelled",
    "RunEvent",
    "RunFinished",
    "RunHandle",
    "RunIdConflict",
    "RunInfo",
    "RunNotFound",
    "ScheduleNotFound",
    "ScheduleRecord",
    "SerializationError",
    "Starflow",
    "StarflowConfig",
    "StarflowError",
    "StepFailed",
    "StorageError",
    "SystemClock",
    "WaitTimeout",
    "WarmTierError",
    "WorkflowContext",
    "WorkflowDefinitionError",
    "WorkflowFailed",
    "WorkflowStateAdapter",
    "__version__",
    "context",
    "now",
    "patched",
    "progress",
    "session_get",
    "session_set",
    "sleep",
    "step",
    "wait_for",
    "wake_token",
    "workflow",
]
