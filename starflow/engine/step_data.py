"""What a running step publishes: ``set_event`` / ``write_stream`` /
``close_stream`` called inside a step (LLM token streaming, #30 item 6).

A workflow-level call is a node of the run's history, written with the run's
next boundary. A step's call is not: the step is the node, and its writes
must reach readers while it runs. So each call is queued here and written by
a writer task in a task group the execution owns (:func:`hosting_writers`),
in order, in units guarded by the run's lease (a batch per unit when calls
come faster than commits). The step's outcome (its ``node_complete``,
``node_error`` or ``node_retry``) is written only once every call before it
is durable (:meth:`StepWrites.drain`).

Numbering: a stream item written from a step takes the ``seq`` of the
workflow's last write to that key before the step started (its *slot*, 0 if
none: a deterministic point, like the step's node id) and the next
sub-number of that slot (migration 047). Readers read ``(seq, sub)`` order,
so a step's items sit after the workflow's writes before the step and before
its writes after it. A finished step replays without running: it writes
nothing again. A step that runs again (a retried attempt, or the whole step
after a crash) appends after what its earlier attempts wrote: at least once,
in order, never interleaved with an earlier attempt's items.
"""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import anyio
import anyio.from_thread
from anyio.abc import TaskGroup

from ..errors import StarflowError
from ..workflow.events import DataWrite
from .execution import Abort

__all__ = ["StepWrites", "hosting_writers"]

T = TypeVar("T")


class StepWrites:
    """The publishing calls of one running step, written as they come."""

    def __init__(self, node_id: str, slots: dict[str, int],
                 commit: Callable[[list[DataWrite]], Awaitable[None]],
                 group: TaskGroup | None) -> None:
        self.node_id = node_id
        #: Per stream key: the workflow's last ``seq`` when the step started.
        self.slots = slots
        self._commit = commit
        self._group = group
        self._queue: list[DataWrite] = []
        # Made on the first call: most steps publish nothing.
        self._wake: anyio.Event | None = None
        self._progress: anyio.Event | None = None
        self._submitted = 0
        self._written = 0
        self._running = False
        self._closed = False
        self._error: BaseException | None = None
        self._thread = threading.get_ident()

    def slot(self, key: str) -> int:
        return self.slots.get(key, 0)

    def submit(self, write: DataWrite) -> None:
        """Queue one call (from the step's task, or its worker thread for a plain
        ``def`` step); the writer task writes it soon after."""
        if threading.get_ident() != self._thread:
            anyio.from_thread.run_sync(self._submit, write)
        else:
            self._submit(write)

    def _submit(self, write: DataWrite) -> None:
        if self._closed:
            raise StarflowError(
                f"{write.kind} {write.key!r} was called from step {self.node_id} after it "
                "ended (a task it left running?): call it before the step returns",
                node_id=self.node_id)
        if self._error is not None and isinstance(self._error, Exception):
            raise self._error
        if not self._running:
            if self._group is None:  # an engine driven without its body's task group
                raise StarflowError(f"{write.kind} {write.key!r} cannot be published from "
                                    f"step {self.node_id} here: no writer runs for it",
                                    node_id=self.node_id)
            self._wake, self._progress = anyio.Event(), anyio.Event()
            self._group.start_soon(self._run)
            self._running = True
        self._queue.append(write)
        self._submitted += 1
        assert self._wake is not None
        self._wake.set()

    async def _run(self) -> None:
        assert self._wake is not None and self._progress is not None
        while True:
            if not self._queue:
                if self._closed:  # the step ended (it drained first): nothing more comes
                    return
                await self._wake.wait()
                self._wake = anyio.Event()
                continue
            batch, self._queue = self._queue, []
            try:
                await self._commit(batch)
            except (Exception, Abort) as exc:  # raised in the step by drain()
                self._error = exc
                self._written = self._submitted
                self._progress.set()
                return
            self._written += len(batch)
            self._progress.set()
            self._progress = anyio.Event()

    async def drain(self) -> None:
        """Return once every call so far is durable; raise the writer's failure
        (a storage error, or the lease lost) if it failed."""
        while self._written < self._submitted and self._error is None:
            assert self._progress is not None
            await self._progress.wait()
        error, self._error = self._error, None
        if error is not None:
            raise error

    def close(self) -> None:
        """The step ended: its writer task ends once its queue is empty."""
        self._closed = True
        if self._wake is not None:
            self._wake.set()


async def hosting_writers(body: Callable[[TaskGroup], Awaitable[T]]) -> T:
    """Run an execution's ``body`` with the task group its steps' writer tasks run in.

    One group per execution (not per step: most steps publish nothing, and a
    group costs microseconds). What the body raises is raised as is, outside
    the group (never as an exception group); a cancellation goes through the
    group as usual. Each step drains its writes before it records its outcome
    and its writer ends with the step, so the group has nothing left to wait
    for here (if the body failed, what is left is cancelled).
    """
    failure: BaseException | None = None
    result: Any = None
    async with anyio.create_task_group() as group:
        try:
            result = await body(group)
        except anyio.get_cancelled_exc_class():
            raise
        except BaseException as exc:  # re-raised below, outside the task group
            failure = exc
            group.cancel_scope.cancel()
    if failure is not None:
        raise failure
    return result  # type: ignore[no-any-return]
