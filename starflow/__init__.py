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
from .codec import AesGcmCodec, CodecChain, PayloadCodec, ZlibCodec
from .config import StarflowConfig
from .errors import (
    CallerTransactionError,
    CodecError,
    ConcurrentWaits,
    ConfigError,
    CopyRefused,
    DuplicateRun,
    ForeignConnection,
    InvalidArgument,
    InvalidWakeToken,
    LeaseLostError,
    NodeNotInHistory,
    NonDeterminismError,
    NotInTransaction,
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
    TransactionalStartUnsupported,
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
    "AesGcmCodec",
    "BulkResult",
    "CallerTransactionError",
    "ChildHandle",
    "Clock",
    "CodecChain",
    "CodecError",
    "ConcurrentWaits",
    "ConfigError",
    "CopyRefused",
    "DuplicateRun",
    "ForeignConnection",
    "InvalidArgument",
    "InvalidWakeToken",
    "JobWorker",
    "LeaseLostError",
    "LiveRun",
    "Message",
    "NodeNotInHistory",
    "NonDeterminismError",
    "NotInTransaction",
    "OutsideWorkflow",
    "PayloadCodec",
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
    "TransactionalStartUnsupported",
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
    "ZlibCodec",
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
