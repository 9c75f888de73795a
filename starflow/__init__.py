"""starflow: durable execution for Python.

Write workflows as ``async def`` (or plain ``def``) functions decorated with :func:`workflow`;
mark the calls worth recording with :func:`step`; pause durably with
:func:`wait_for` and :func:`sleep`. Open a database with :class:`Starflow`.
"""

from __future__ import annotations

from ._version import __version__
from .adapters.base import WorkflowStateAdapter
from .admin.retention import PruneReport
from .app import Starflow
from .clock import Clock, SystemClock
from .config import StarflowConfig
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
from .failure import RunFailure
from .records import (
    BulkResult,
    PoolLimits,
    PoolUsage,
    RunEvent,
    RunFilter,
    RunInfo,
    ScheduleRecord,
)
from .runtime.jobs import JobWorker
from .runtime.runner import RunHandle
from .warm.base import LiveRun
from .workflow.attributes import set_attributes
from .workflow.children import ChildHandle, start_child
from .workflow.context import WorkflowContext, context
from .workflow.continuation import continue_as_new
from .workflow.decorators import RetryPolicy, step, workflow
from .workflow.events import close_stream, set_event, write_stream
from .workflow.logger import logger
from .workflow.progress import progress
from .workflow.session import session_get, session_set
from .workflow.threads import call
from .workflow.updates import Message, UpdateRequest, receive, wait_for_message
from .workflow.waits import now, patched, sleep, wait_for, wait_for_any, wake_token

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
    "Message",
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
    "call",
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
    "wait_for_message",
    "wake_token",
    "workflow",
    "write_stream",
]
