"""Knowing when the event loop has nothing left to do.

``anyio.wait_all_tasks_blocked`` is not enough for a database-backed runtime:
a task awaiting an aiosqlite query (answered from a thread) or an asyncpg
reply (from a socket) looks blocked while its query is in flight. The
environment therefore waits for "every other task blocked *and* the adapter
idle" at one instant, looping until both hold together.

A task also looks blocked while its wake-up is still queued on the event loop:
a future resolved by a callback of a callback (an anyio task group unwinding
after its cancel scope was cancelled: cancellation delivery, then task-done
callbacks, then the host task). So on asyncio's own loop, "blocked" also needs
the loop's ready queue to hold nothing but other quiescers' wake-ups.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import anyio
import anyio.lowlevel

__all__ = ["quiesce", "wait_all_tasks_blocked"]


#: Tasks inside :func:`quiesce` right now. They poll with checkpoints, so they
#: never look blocked; two of them (a test advancing the clock while the
#: environment's time skipper waits) must not wait on each other forever.
_quiescing: set[asyncio.Task[object]] = set()


def _asyncio_all_blocked() -> bool:
    """True if every asyncio task but the current one (and other quiescers) waits on an
    unfinished future."""
    me = asyncio.current_task()
    for task in asyncio.all_tasks():
        if task is me or task.done() or task in _quiescing:
            continue
        waiter = getattr(task, "_fut_waiter", None)
        if waiter is None or waiter.done():
            return False
    return True


def _is_cancel_delivery(handle: asyncio.Handle) -> bool:
    """anyio re-delivers a cancel scope's cancellation every cycle until its tasks end."""
    callback = getattr(handle, "_callback", None)
    return getattr(callback, "__qualname__", "") == "CancelScope._deliver_cancellation"


def _pending_callbacks() -> tuple[bool, bool]:
    """(other callbacks are queued, anyio cancellation deliveries are queued).

    Quiescers' own wake-ups do not count. Loops without a ready queue to inspect
    (not asyncio's own) report nothing pending.
    """
    ready = getattr(asyncio.get_running_loop(), "_ready", None)
    if ready is None:  # pragma: no cover - e.g. uvloop
        return False, False
    others = deliveries = False
    for handle in ready:
        if handle.cancelled():
            continue
        if getattr(getattr(handle, "_callback", None), "__self__", None) in _quiescing:
            continue
        if _is_cancel_delivery(handle):
            deliveries = True
        else:
            others = True
    return others, deliveries


def _on_asyncio() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


async def wait_all_tasks_blocked() -> None:
    """Return once every other task is blocked (without the real-time polls of anyio's)."""
    await quiesce(None)


async def quiesce(idle: Callable[[], Awaitable[None]] | None) -> None:
    """Return once every other task is blocked and ``idle()`` returned without waiting.

    Args:
        idle: The adapter's :meth:`~starflow.WorkflowStateAdapter.idle`; it must
            return without yielding when no database call is in flight.
    """
    if not _on_asyncio():
        while True:
            await anyio.wait_all_tasks_blocked()
            if idle is None:
                return
            await idle()
            await anyio.wait_all_tasks_blocked()
            return
    me = asyncio.current_task()
    assert me is not None
    _quiescing.add(me)
    try:
        delivered = False
        while True:
            await anyio.lowlevel.checkpoint()
            if idle is not None:
                await idle()
            # No await between idle() returning and this check: both hold at once.
            if not _asyncio_all_blocked():
                delivered = False
                continue
            others, deliveries = _pending_callbacks()
            if others:
                delivered = False
                continue
            # anyio repeats a delivery every cycle while a cancelled scope still has
            # tasks (one blocked in a shielded scope, say): let one run, then, if it
            # woke nobody, it is not work.
            if deliveries and not delivered:
                delivered = True
                continue
            return
    finally:
        _quiescing.discard(me)
