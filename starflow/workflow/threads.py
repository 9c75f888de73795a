"""Plain ``def`` workflows: the body in a worker thread, starflow's calls bridged to the loop.

A ``@workflow`` on a plain ``def`` runs its body in a worker thread
(:func:`run_body_in_thread`), in a copy of the caller's context, so
``starflow.context()`` and the running engine are visible there. Everything
workflow code calls that is a coroutine on the event loop (a step, a child
workflow, ``wait_for``, ``sleep``, ``receive``…) is wrapped with
:func:`threadable`: called from that thread, it runs on the loop through
``anyio.from_thread.run`` and returns its value (or raises) instead of returning
a coroutine. Recording is the engine's, so node ids and history are those of
the same workflow written ``async def``.

A durable wait unwinds the thread like the event-loop body: the engine's
pause is a ``BaseException`` raised out of the call, through the user's code,
out of the thread. A stopped body (a deadline, a lost lease, a forced cancel)
cancels the loop side of the call in flight or the next one; the thread gets
:class:`WorkflowThreadStopped`, also a ``BaseException``, so ``except
Exception`` in workflow code cannot keep it running.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import threading
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, ParamSpec, TypeVar, cast

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from ..errors import InvalidArgument, StarflowError, WorkflowDefinitionError

__all__ = [
    "WorkflowThreadStopped",
    "call",
    "call_on_loop",
    "in_workflow_thread",
    "run_body_in_thread",
    "threadable",
]

P = ParamSpec("P")
R = TypeVar("R")
F = TypeVar("F", bound=Callable[..., Any])

#: The ident of the thread running a plain ``def`` workflow's body, in that body's
#: context. A task the body's calls start on the loop copies the context but runs
#: on another thread, so it is not "in the workflow thread".
_workflow_thread: ContextVar[int | None] = ContextVar("starflow_workflow_thread", default=None)


class WorkflowThreadStopped(BaseException):
    """Unwinds a plain ``def`` workflow's thread whose run was stopped (its
    deadline passed, its lease was lost, it was cancelled with ``force=True``).

    A ``BaseException``, like the engine's pause: ``except Exception`` in workflow
    code lets it through. Never seen outside the thread: the run ends as the
    stop decides (an error for a deadline, nothing written for a lost lease).
    """


def in_workflow_thread() -> bool:
    """Whether this code runs in a plain ``def`` workflow's own thread."""
    ident = _workflow_thread.get()
    return ident is not None and ident == threading.get_ident()


def call_on_loop(fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Run ``fn(*args, **kwargs)`` on the event loop from a workflow's thread; its value.

    The loop side is a task in the cancel scope of the body's
    ``to_thread.run_sync`` call: a stop of the body cancels it, and the thread
    gets :class:`WorkflowThreadStopped`. A stop that came while the thread ran
    its own code is seen here, in the thread, before anything is started: a
    task added to a scope cancelled earlier would not be cancelled (anyio
    delivers a cancellation to the tasks a scope holds when it is cancelled).
    """
    try:
        anyio.from_thread.check_cancelled()
    except asyncio.CancelledError:  # starflow runs on anyio's asyncio backend
        raise WorkflowThreadStopped() from None

    async def on_loop() -> R:
        return await fn(*args, **kwargs)

    try:
        return anyio.from_thread.run(on_loop)
    except concurrent.futures.CancelledError:
        raise WorkflowThreadStopped() from None


def threadable(fn: F) -> F:
    """Make an ``async def`` that workflow code calls usable from a plain ``def`` workflow.

    Called from the workflow's thread it runs on the loop and returns its value;
    anywhere else it is the coroutine function it was. Type checkers keep seeing
    the ``async def`` (in a plain ``def`` workflow, :func:`starflow.call` gives the
    value's type).
    """
    @functools.wraps(fn)
    def either(*args: Any, **kwargs: Any) -> Any:
        if in_workflow_thread():
            return call_on_loop(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    # Still a coroutine function for inspect.iscoroutinefunction (Python 3.12+).
    mark = getattr(inspect, "markcoroutinefunction", None)
    if mark is not None:
        mark(either)
    return cast(F, either)


async def run_body_in_thread(fn: Callable[..., Any], args: tuple[Any, ...],
                             kwargs: dict[str, Any], *,
                             limiter: anyio.CapacityLimiter | None) -> Any:
    """Run a plain ``def`` workflow body in a worker thread and return its value.

    The thread runs in a copy of this task's context, marked as the workflow's
    thread. It is never abandoned: a stop of the body (a cancelled scope) is
    delivered at its next starflow call, which unwinds it, and this waits for it.

    Args:
        limiter: Bounds the threads (``StarflowConfig.sync_workflow_threads``);
            the default limiter of anyio outside a runtime.
    """
    def body() -> Any:
        _workflow_thread.set(threading.get_ident())
        return fn(*args, **kwargs)

    try:
        result = await anyio.to_thread.run_sync(body, limiter=limiter)
    except WorkflowThreadStopped:
        # The body's scope was cancelled: raise that cancellation here (the run ends as
        # the stop decided). Reached only if a call got cancelled, so the scope is.
        await anyio.lowlevel.checkpoint()
        raise StarflowError("a plain def workflow's thread was stopped, but its run was "
                            "not: report this as a starflow bug") from None
    # A stop while the thread ran its own code to the end: the body was cancelled (the
    # shielded wait for the thread restarted its delivery to this task when it ended).
    await anyio.lowlevel.checkpoint_if_cancelled()
    if inspect.isawaitable(result):
        if inspect.iscoroutine(result):
            result.close()  # never awaited: no "coroutine was never awaited" warning
        label = getattr(fn, "__qualname__", fn)
        raise WorkflowDefinitionError(
            f"workflow {label} is a plain def (run in a worker thread) but returned an "
            f"awaitable ({type(result).__name__}): declare it `async def`, or call what it "
            "returned without awaiting (in a plain def workflow, steps and waits return "
            "their values)")
    return result


def call(fn: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Call a step, a child workflow or a durable wait from a plain ``def`` workflow.

    ::

        @workflow
        def order(order_id: str) -> str:
            receipt = starflow.call(charge, order_id, 1999)     # a str for mypy
            starflow.call(starflow.sleep, timedelta(hours=1))
            return receipt

    The same as calling ``charge(order_id, 1999)`` directly, which in a plain
    ``def`` workflow returns the value too; ``call`` also gives type checkers
    the value's type (``charge`` is typed as returning an awaitable, for async
    workflows).

    Raises:
        StarflowError: called anywhere but a plain ``def`` workflow's own
            thread (in ``async def`` code, ``await fn(...)``).
        InvalidArgument: ``fn`` did not return an awaitable (it is not a
            step, workflow or starflow wait: call it directly).
    """
    if not in_workflow_thread():
        raise StarflowError(
            "starflow.call() is for plain def workflows, from the workflow's own thread: in "
            f"async code write `await {getattr(fn, '__name__', 'fn')}(...)`")

    async def awaited() -> R:
        result = fn(*args, **kwargs)
        if not inspect.isawaitable(result):
            raise InvalidArgument(
                f"starflow.call({getattr(fn, '__qualname__', fn)!r}, ...) returned "
                f"{type(result).__name__}, not an awaitable: call() takes a step, a "
                "workflow or a starflow wait; call plain functions directly")
        return await result

    return call_on_loop(awaited)
