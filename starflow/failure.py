"""Why a run failed, as data: what the engine records and ``WorkflowFailed`` reads back.

A run that ends in ``error`` keeps two forms of its cause. The seed's
``workflow_runs.error`` column holds readable text (``Type: message``), for
people and for the seed's own readers. ``workflow_runs.failure_json``
(migration 024) holds a :class:`RunFailure`: the exception's type and
message, the node whose recorded failure ended the run, the attempts it
made and a bounded traceback. Nothing parses the text back: the runner and
``WorkflowFailed`` read the structured form.
"""

from __future__ import annotations

import traceback as _traceback
from typing import Any

import msgspec

from .errors import StepFailed, WaitTimeout
from .limits import storable_text

__all__ = ["CANCELLED_TYPE", "MAX_TRACEBACK_CHARS", "MAX_TRACEBACK_FRAMES", "RunFailure",
           "cancelled_error", "error_info", "format_traceback", "run_failure",
           "wait_timeout_error"]

#: Frames kept per exception of a traceback's chain: the innermost ones, where
#: the user's code raised (the outer ones are the runtime's, calling it).
MAX_TRACEBACK_FRAMES = 50
#: Characters kept of a whole traceback (16 KiB).
MAX_TRACEBACK_CHARS = 16 * 1024


class RunFailure(msgspec.Struct, frozen=True, kw_only=True):
    """The cause of a run that ended in ``error`` (``RunInfo.failure``).

    Attributes:
        type: The exception's type: for a failed step, its qualified name as
            recorded in the step's ``node_error`` (``builtins.KeyError``); for
            an exception the workflow raised, its name (``RuntimeError``).
        message: ``str()`` of the exception.
        node_id: The step (or wait) whose recorded failure ended the run, if one did.
        attempts: Attempts the failing step made (``None`` without a failing step,
            and for a wait).
        traceback: The formatted traceback, cut to the innermost
            :data:`MAX_TRACEBACK_FRAMES` frames of each exception and
            :data:`MAX_TRACEBACK_CHARS` characters; ``None`` when none was
            recorded (a failed step replayed from its history has only the
            workflow's frames).
    """

    type: str
    message: str
    node_id: str | None = None
    attempts: int | None = None
    traceback: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``failure_json`` column's value."""
        data: dict[str, Any] = msgspec.to_builtins(self)
        return data

    @classmethod
    def from_json(cls, data: Any) -> RunFailure | None:
        """The failure a ``failure_json`` value holds; ``None`` for none (or an unreadable one)."""
        if data is None:
            return None
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError:
            return None

    @property
    def text(self) -> str:
        """The readable form, ``Type: message``."""
        return f"{self.type}: {self.message}"


def format_traceback(exc: BaseException) -> str:
    """``exc``'s traceback (with its causes), bounded for storage.

    Each exception of the chain keeps its innermost :data:`MAX_TRACEBACK_FRAMES`
    frames (where the user's code raised). If the text is still longer than
    :data:`MAX_TRACEBACK_CHARS`, its middle is cut: the head holds the first
    cause's innermost frames, the tail the exception that ended the run.
    """
    text = "".join(_traceback.format_exception(exc, limit=-MAX_TRACEBACK_FRAMES))
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text
    half = MAX_TRACEBACK_CHARS // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n... ({cut} characters cut) ...\n{text[-half:]}"


def wait_timeout_error(node_id: str) -> dict[str, Any]:
    """How a ``wait_for`` timeout is recorded as its node's failure (``node_error``)."""
    return {"type": "starflow.errors.WaitTimeout", "message": f"{node_id} timed out"}


#: The recorded ``type`` of a node a cancel reached (a wait, a step in flight).
CANCELLED_TYPE = "starflow.errors.RunCancelled"


def cancelled_error(node_id: str) -> dict[str, Any]:
    """How a cancel reaching a node is recorded as its failure (``node_error``): on
    replay the node raises :class:`~starflow.RunCancelled` again, so a run whose
    cleanup was interrupted resumes its cleanup, not its work."""
    return {"type": CANCELLED_TYPE, "message": f"the run was cancelled at {node_id}",
            "attempts": 0}


def error_info(exc: BaseException, attempts: int) -> dict[str, Any]:
    """How a step failure is recorded: qualified type, message, attempts made."""
    return {"type": f"{type(exc).__module__}.{type(exc).__qualname__}", "message": str(exc),
            "attempts": attempts}


def run_failure(exc: BaseException) -> RunFailure:
    """The structured cause of a run the workflow ended by raising ``exc``.

    A :class:`StepFailed` or :class:`WaitTimeout` of a node (what the engine
    raises for a recorded node failure) names that node and carries its
    recorded type, message and attempts; any other exception is the cause
    itself. The traceback is ``exc``'s, with its causes (a live step
    failure's chain holds the step's own frames).
    """
    # Stored whatever the exception said (a NUL in a message must not lose the cause).
    trace = storable_text(format_traceback(exc))
    if isinstance(exc, StepFailed) and exc.node_id is not None:
        return RunFailure(type=exc.error_type, message=storable_text(exc.error_message),
                          node_id=exc.node_id,
                          attempts=exc.attempts, traceback=trace)
    if isinstance(exc, WaitTimeout) and exc.node_id is not None:
        recorded = wait_timeout_error(exc.node_id)
        return RunFailure(type=recorded["type"], message=recorded["message"],
                          node_id=exc.node_id, traceback=trace)
    return RunFailure(type=type(exc).__name__, message=storable_text(str(exc)), traceback=trace)
