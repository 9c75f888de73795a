"""An adapter wrapper that counts in-flight calls, for adapters that do not."""

from __future__ import annotations

import functools
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio

from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Command

__all__ = ["InflightTracker", "forwarded_reads"]

R = TypeVar("R")

#: DelegatingAdapter methods that are not database calls (or block by design).
_NOT_CALLS = frozenset({"open", "close", "migrate", "wait_for_work", "idle", "execute",
                        "perform", "unit"})


def forwarded_reads() -> list[str]:
    """Names of the coroutine methods :class:`DelegatingAdapter` forwards, besides the
    two write seams ``execute`` and ``perform``: the reads."""
    import inspect

    return sorted(
        name for name, fn in vars(DelegatingAdapter).items()
        if inspect.iscoroutinefunction(fn) and not name.startswith("_") and name not in _NOT_CALLS
    )


class InflightTracker(DelegatingAdapter):
    """Counts calls in flight through it, so :meth:`idle` can wait for them.

    Wraps adapters whose driver answers through the event loop or a thread
    without telling (PostgreSQL through asyncpg): the environment needs to know
    when no query is pending before it lets time move.
    """

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self._inflight = 0
        self._idle: anyio.Event | None = None

    @property
    def path(self) -> object:
        """The inner adapter's ``path`` (the app decides on timer polling from it)."""
        return getattr(self.inner, "path", None)

    def _enter(self) -> None:
        if self._inflight == 0:
            self._idle = anyio.Event()
        self._inflight += 1

    def _exit(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._idle is not None:
            self._idle.set()

    async def idle(self) -> None:
        while self._inflight > 0 and self._idle is not None:
            await self._idle.wait()
        await self.inner.idle()

    async def execute(self, unit: Any) -> bool:
        self._enter()
        try:
            return await self.inner.execute(unit)
        finally:
            self._exit()

    async def perform(self, command: Command[R]) -> R:
        self._enter()
        try:
            return await self.inner.perform(command)
        finally:
            self._exit()


def _tracked(name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    forward = getattr(DelegatingAdapter, name)

    @functools.wraps(forward)
    async def method(self: InflightTracker, *args: Any, **kwargs: Any) -> Any:
        self._enter()
        try:
            return await forward(self, *args, **kwargs)
        finally:
            self._exit()

    return method


for _name in forwarded_reads():
    setattr(InflightTracker, _name, _tracked(_name))
