"""Durable events and streams: what a run publishes while it runs.

Workflow code publishes with :func:`set_event` (a key/value on the run, last
write wins) and :func:`write_stream` / :func:`close_stream` (an ordered,
append-only sequence per key); callers read with ``Starflow.get_event`` and
``Starflow.read_stream`` (:class:`DataReader` here).

Each call is recorded as a node of the run's history (``event:<key>#n``,
``stream:<key>#n``) and written, together with its row in
``workflow_event_values`` / ``workflow_stream_items`` (migration 034), in the
unit of the run's next boundary (its next step, wait or end), which it makes
durable. A replay finds the node recorded and writes nothing; a stream item
is keyed by ``(run, key, seq)`` with ``seq`` the node's occurrence, so a value
is appended exactly once however often the run replays. Called inside a step,
they are written at once instead, with no node of their own
(:mod:`starflow.engine.step_data`: a stream item is numbered in the step's
slot with a sub-number, migration 047). Like ``set_attributes``,
these nodes never count as divergence.

Readers wake when a unit carrying such a write commits: in this process
through the runner (the engine announces the commit, as it does an update's
answer), from another process through the run's announcement on PostgreSQL
(``NOTIFY`` on the scope's runs channel, read by
:meth:`~starflow.adapters.base.WorkflowStateAdapter.watch_run`); the run's end
wakes them the same ways. Elsewhere (SQLite written by another process) they
re-read every ``poll_interval``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import anyio

from .. import serde
from ..adapters.base import WatchWhenWaiting, WorkflowStateAdapter
from ..clock import Clock, wait_event
from ..errors import InvalidArgument, ResultTimeout, RunFinished, RunNotFound
from ..limits import check_name
from .context import running_engine

__all__ = [
    "EVENT_KIND",
    "STREAM_KIND",
    "DataReader",
    "DataWrite",
    "check_key",
    "close_stream",
    "set_event",
    "write_stream",
]

#: The node kind of a ``set_event`` call (``event:<key>#1``).
EVENT_KIND = "event"
#: The node kind of a ``write_stream`` / ``close_stream`` call (``stream:<key>#1``).
STREAM_KIND = "stream"


def check_key(key: object, what: str, *, run_id: str | None = None) -> str:
    """An event or stream key: a non-empty string without ``#`` (node ids are
    ``event:<key>#<n>``), of a length both databases index."""
    if not isinstance(key, str) or not key or "#" in key:
        raise InvalidArgument(f"{what} key must be a non-empty string without '#': {key!r}",
                              run_id=run_id)
    check_name(f"{what} key", key, run_id=run_id)
    return key


def set_event(key: str, value: Any) -> None:
    """Publish ``value`` under ``key`` on this run (last write wins).

    ``Starflow.get_event(run_id, key)`` returns it as soon as it is durable:
    it is written with the run's next boundary (its next step, wait or end).
    Recorded, so a replay writes nothing. Inside a step it is written at once,
    before the step ends (again if the step runs again).

    Raises:
        OutsideWorkflow: called outside a workflow run.
        InvalidArgument: a key that is empty, has ``#`` or is too long.
        SerializationError: ``value`` cannot be stored as JSON.
    """
    engine = running_engine("set_event")
    check_key(key, "set_event", run_id=engine.run_id)
    stored = serde.to_builtins(value, what=f"event {key!r}", run_id=engine.run_id)
    engine.set_event(key, stored)


def write_stream(key: str, value: Any) -> None:
    """Append ``value`` to this run's stream ``key``.

    ``async for v in Starflow.read_stream(run_id, key)`` yields every value in
    write order, from the first. Written with the run's next boundary;
    recorded, so a replay appends nothing (exactly once per value). Inside a
    step it is written at once, so readers see it while the step runs; a step
    that runs again (a retry, a crash) appends its values again, after the
    ones it wrote before (at least once, in order).

    Raises:
        OutsideWorkflow: called outside a workflow run.
        StreamClosed: the run closed this stream already.
        InvalidArgument: a bad key.
        SerializationError: ``value`` cannot be stored as JSON.
    """
    engine = running_engine("write_stream")
    check_key(key, "write_stream", run_id=engine.run_id)
    stored = serde.to_builtins(value, what=f"stream {key!r} value", run_id=engine.run_id)
    engine.write_stream(key, stored)


def close_stream(key: str) -> None:
    """Close this run's stream ``key``: readers stop after its last value.

    Readers also stop when the run ends, closed or not.

    Raises:
        OutsideWorkflow: called outside a workflow run.
        StreamClosed: the stream is closed already.
        InvalidArgument: a bad key.
    """
    engine = running_engine("close_stream")
    check_key(key, "close_stream", run_id=engine.run_id)
    engine.write_stream(key, None, closed=True)


@dataclass(frozen=True, slots=True)
class DataWrite:
    """One ``set_event`` / ``write_stream`` call waiting for the run's next unit."""

    node_id: str
    kind: str
    key: str
    value: Any
    seq: int = 0
    closed: bool = False
    #: Written from inside a step (``node_id`` is the step's): no history node of
    #: its own, and a stream item takes the next sub-number of its ``seq``.
    in_step: bool = False

    async def submit(self, adapter: WorkflowStateAdapter, run_id: str, now: Any) -> None:
        """Add the history node (a workflow-level call's) and the row to the unit being built."""
        if self.kind == EVENT_KIND:
            if not self.in_step:
                await adapter.on_node_complete(
                    run_id, self.node_id, {"output": self.value, "kind": EVENT_KIND,
                                           "name": self.key}, now=now)
            await adapter.set_event(run_id, self.key, self.value, node_id=self.node_id,
                                    now=now)
            return
        if not self.in_step:
            await adapter.on_node_complete(
                run_id, self.node_id, {"output": {"seq": self.seq, "closed": self.closed},
                                       "kind": STREAM_KIND, "name": self.key}, now=now)
        await adapter.append_stream(run_id, self.key, self.seq, self.value, closed=self.closed,
                                    node_id=self.node_id, now=now,
                                    sub=None if self.in_step else 0)


@dataclass(frozen=True, slots=True)
class DataReader:
    """Reads a run's events and streams for ``Starflow.get_event`` / ``read_stream``.

    Attributes:
        settled: The runner's current "a run changed in this process" event
            (taken before each read, so a change after it wakes the reader).
        poll: Seconds between re-reads when nothing wakes the reader (a run
            ending in another process, a database without NOTIFY).
    """

    adapter: WorkflowStateAdapter
    clock: Clock
    settled: Callable[[], anyio.Event]
    poll: float

    async def get_event(self, run_id: str, key: str, timeout: float | None) -> Any:
        """The value of event ``key`` of ``run_id`` once it is set.

        Raises:
            ResultTimeout: not set within ``timeout`` seconds (the run goes on).
            RunFinished: the run ended without setting it.
            RunNotFound: no such run.
        """
        check_key(key, "get_event", run_id=run_id)
        adapter, clock = self.adapter, self.clock
        deadline = None if timeout is None else clock.now() + timedelta(seconds=timeout)
        async with WatchWhenWaiting(adapter, run_id) as watch:
            while True:
                # Taken before the read: a commit after it wakes us (from another
                # process once watching, which starts only if we must wait).
                settled = self.settled()
                changed = watch.arm()
                found = await adapter.get_event_value(run_id, key)
                if found is not None:
                    return found.value
                run = await adapter.get_run(run_id)
                if run is None:
                    raise RunNotFound(run_id)
                if run.is_terminal:
                    found = await adapter.get_event_value(run_id, key)  # set, then ended
                    if found is not None:
                        return found.value
                    raise RunFinished(run_id, run.status, f"get event {key!r} of",
                                      "it ended without setting that event")
                now = clock.now()
                if deadline is not None and now >= deadline:
                    raise ResultTimeout(
                        f"run {run_id} did not set event {key!r} within {timeout:g} s; it "
                        "goes on: call get_event again to keep waiting", run_id=run_id)
                if await watch.start():
                    continue  # announcements reach us from now on: read again first
                wait = self.poll if deadline is None else min(
                    self.poll, (deadline - now).total_seconds())
                await wait_event(clock, settled, wait, *changed)

    async def read_stream(self, run_id: str, key: str) -> AsyncIterator[Any]:
        """Every value of stream ``key`` of ``run_id`` in order, from the first,
        until the stream is closed or the run has ended.

        Raises:
            RunNotFound: no such run.
        """
        check_key(key, "read_stream", run_id=run_id)
        adapter, clock = self.adapter, self.clock
        after = (0, 0)  # (seq, sub) of the last item yielded
        async with WatchWhenWaiting(adapter, run_id) as watch:
            ended = False
            while True:
                settled = self.settled()
                changed = watch.arm()
                items = await adapter.read_stream(run_id, key, after_seq=after[0],
                                                  after_sub=after[1])
                for item in items:
                    if item.closed:
                        return
                    after = (item.seq, item.sub)
                    yield item.value
                if items:
                    continue
                if ended:  # read once more after the end: nothing can come now
                    return
                run = await adapter.get_run(run_id)
                if run is None:
                    raise RunNotFound(run_id)
                if run.is_terminal:
                    ended = True
                    continue
                if await watch.start():
                    continue  # announcements reach us from now on: read again first
                await wait_event(clock, settled, self.poll, *changed)
