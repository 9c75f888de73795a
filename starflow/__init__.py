"""starflow: durable execution for Python.

Write workflows as ``async def`` functions decorated with :func:`workflow`;
mark the calls worth recording with :func:`step`; pause durably with
:func:`wait_for` and :func:`sleep`. Open a database with :class:`Starflow`.
"""

from __future__ import annotations

from ._version import __version__
from .adapters.base import WorkflowStateAdapter
from .app import Starflow
from .attributes import set_attributes
from .children import ChildHandle, start_child
from .clock import Clock, SystemClock
from .config import StarflowConfig
from .context import WorkflowContext, context
from .continuation import continue_as_new
from .decorators import RetryPolicy, step, workflow
from .errors import (
    ConcurrentWaits,
    ConfigError,
    CopyRefused,
    DuplicateRun,
    InvalidArgument,
    InvalidWakeToken,
    LeaseLostError,
    NodeNotInHistory,
    NonDeterminismError,
    OutsideWorkflow,
    ReservedKeyError,
    ResultTimeout,
    RunCancelled,
    RunFinished,
    RunIdConflict,
    RunNotEnded,
    RunNotFound,
    ScheduleNotFound,
    SerializationError,
    StarflowError,
    StepFailed,
    StepTimeout,
    StorageError,
    StreamClosed,
    TooManyRuns,
    UnexpectedSignal,
    UpdateRejected,
    WaitTimeout,
    WarmTierError,
    WorkflowDefinitionError,
    WorkflowFailed,
    WorkflowTimeout,
)
from .events import close_stream, set_event, write_stream
from .failure import RunFailure
from .jobs import JobWorker
from .progress import progress
from .records import (
    BulkResult,
    PoolLimits,
    PoolUsage,
    RunEvent,
    RunFilter,
    RunInfo,
    ScheduleRecord,
)
from .retention import PruneReport
from .runner import RunHandle
from .session import session_get, session_set
from .updates import UpdateRequest, receive
from .waits import now, patched, sleep, wait_for, wait_for_any, wake_token
from .warm.base import LiveRun
from .workflow_logger import logger

__all__ = [
    "BulkResult",
    "ChildHandle",
    "Clock",
    "ConcurrentWaits",
    "ConfigError",
    "CopyRefused",
    "DuplicateRun",
    "InvalidArgument",
    "InvalidWakeToken",
    "JobWorker",
    "LeaseLostError",
    "LiveRun",
    "NodeNotInHistory",
    "NonDeterminismError",
    "OutsideWorkflow",
    "PoolLimits",
    "PoolUsage",
    "PruneReport",
    "ReservedKeyError",
    "ResultTimeout",
    "RetryPolicy",
    "RunCancelled",
    "RunEvent",
    "RunFailure",
    "RunFilter",
    "RunFinished",
    "RunHandle",
    "RunIdConflict",
    "RunInfo",
    "RunNotEnded",
    "RunNotFound",
    "ScheduleNotFound",
    "ScheduleRecord",
    "SerializationError",
    "Starflow",
    "StarflowConfig",
    "StarflowError",
    "StepFailed",
    "StepTimeout",
    "StorageError",
    "StreamClosed",
    "SystemClock",
    "TooManyRuns",
    "UnexpectedSignal",
    "UpdateRejected",
    "UpdateRequest",
    "WaitTimeout",
    "WarmTierError",
    "WorkflowContext",
    "WorkflowDefinitionError",
    "WorkflowFailed",
    "WorkflowStateAdapter",
    "WorkflowTimeout",
    "__version__",
    "close_stream",
    "context",
    "continue_as_new",
    "logger",
    "now",
    "patched",
    "progress",
    "receive",
    "session_get",
    "session_set",
    "set_attributes",
    "set_event",
    "sleep",
    "start_child",
    "step",
    "wait_for",
    "wait_for_any",
    "wake_token",
    "workflow",
    "write_stream",
]
