"""Adapters that wrap another one: spies, fault injection, the warm-tier mirror."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ..clock import Clock
from .base import READS, WorkflowStateAdapter
from .caller import CallerTransaction
from .seam import RunWatch
from .units import (
    Command,
    R,
    Unit,
)

__all__ = ["DelegatingAdapter"]


class DelegatingAdapter(WorkflowStateAdapter):
    """Base for adapters that wrap another one (spies, fault injection, mirror).

    Every boundary method is inherited, so it reaches :meth:`execute` here,
    which forwards to the inner adapter; likewise every read-modify-write
    reaches :meth:`perform`. Every read of the port (:data:`~starflow.adapters.base.READS`)
    is forwarded by a method made below the class, so a new read needs nothing
    here. Override :meth:`execute` and :meth:`perform` to observe or change
    writes, or any read to observe reads (``super()`` forwards it).
    """

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(workspace_id=inner.workspace_id, env=inner.env)
        self.inner = inner
        self.durable = inner.durable
        self.fuses_run_start = inner.fuses_run_start

    async def open(self) -> None:
        await self.inner.open()

    async def close(self) -> None:
        await self.inner.close()

    async def migrate(self) -> list[int]:
        return await self.inner.migrate()

    @property
    def shared(self) -> bool:
        return self.inner.shared

    async def wait_for_work(self, clock: Clock, timeout: float) -> None:
        await self.inner.wait_for_work(clock, timeout)

    @contextlib.asynccontextmanager
    async def watch_run(self, run_id: str) -> AsyncIterator[RunWatch | None]:
        async with self.inner.watch_run(run_id) as watch:
            yield watch

    async def idle(self) -> None:
        await self.inner.idle()

    async def execute(self, unit: Unit) -> bool:
        return await self.inner.execute(unit)

    async def perform(self, command: Command[R]) -> R:
        return await self.inner.perform(command)

    async def caller_transaction(self, connection: object) -> CallerTransaction:
        # The start's ops are collected through this wrapper, then written by the
        # inner adapter's database on the caller's connection.
        return await self.inner.caller_transaction(connection)


def _forward(name: str) -> Callable[..., Awaitable[Any]]:
    """A method that awaits the inner adapter's read ``name`` (its signature and
    docstring those of :class:`WorkflowStateAdapter`'s)."""

    async def forward(self: DelegatingAdapter, *args: Any, **kwargs: Any) -> Any:
        return await getattr(self.inner, name)(*args, **kwargs)

    functools.update_wrapper(forward, getattr(WorkflowStateAdapter, name))
    forward.__qualname__ = f"DelegatingAdapter.{name}"
    return forward


for _name in READS:
    if _name not in vars(DelegatingAdapter):
        setattr(DelegatingAdapter, _name, _forward(_name))
