"""The engine's one write path: the writes an execution has pending, and the unit
each boundary goes out in.

Every write of an execution goes through one :class:`WritePath`: a boundary
(a step's start or outcome, a wait, the run's end) calls :meth:`WritePath.commit`
with what it writes; what the workflow code asked for since the last boundary
waits in one buffer (:attr:`WritePath.pending`) and goes out with it, in one
unit guarded by this runner's lease:

- :class:`DeferredOps`: a finished step's outcome held for the next unit
  (``StarflowConfig.fused_boundaries``), or the run's start, collected by the
  runner (:meth:`WritePath.defer_start`);
- :class:`PatchMarker`: a ``starflow.patched`` decision;
- :class:`AttributesWrite`: a ``starflow.set_attributes`` call;
- :class:`~starflow.workflow.events.DataWrite`: a ``set_event`` /
  ``write_stream`` call (it makes the unit durable, and wakes this process's
  readers once written).

Within a unit they go out in that order (a finished step's writes happened
first; a patch marker precedes the new path in the history), each kind in
the order it was asked for. A read-only write path (the replayer's:
``Engine(..., read_only=True)``) refuses every unit with :class:`ReadOnlyWrite`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ..adapters.base import WorkflowStateAdapter
from ..adapters.units import Op
from ..errors import StorageError
from ..workflow.attributes import ATTRIBUTES_KIND
from ..workflow.context import WorkflowContext
from ..workflow.events import DataWrite
from .execution import Abort, Runtime, lease_guard
from .replay import Journal

__all__ = ["AttributesWrite", "DeferredOps", "PatchMarker", "PendingWrite", "ReadOnlyWrite",
           "WritePath"]

Build = Callable[[datetime], Awaitable[None]]


class ReadOnlyWrite(BaseException):
    """A read-only execution (a replay) reached a write: its code went past the
    recorded history. A ``BaseException``, so workflow code's ``except Exception``
    lets it through."""


class DeferredOps:
    """Ops built already (collected with ``adapter.collect()``), to open the next unit."""

    __slots__ = ("ops",)

    def __init__(self, ops: list[Op]) -> None:
        self.ops = ops


@dataclass(frozen=True)
class PatchMarker:
    """The ``patch:<change_id>#1`` marker of a ``starflow.patched`` decision."""

    node_id: str
    change_id: str

    async def submit(self, adapter: WorkflowStateAdapter, run_id: str, now: datetime) -> None:
        await adapter.on_node_complete(
            run_id, self.node_id, {"output": True, "kind": "patch", "name": self.change_id},
            now=now)


@dataclass(frozen=True)
class AttributesWrite:
    """A ``starflow.set_attributes`` call: its ``attributes#n`` node and the values."""

    node_id: str
    values: dict[str, str]

    async def submit(self, adapter: WorkflowStateAdapter, run_id: str, now: datetime) -> None:
        await adapter.on_node_complete(
            run_id, self.node_id, {"output": self.values, "kind": ATTRIBUTES_KIND}, now=now)
        await adapter.set_attributes(run_id, self.values, now=now)


PendingWrite = DeferredOps | PatchMarker | AttributesWrite | DataWrite

#: The order of the kinds within a unit (see the module docstring).
_RANK: dict[type[Any], int] = {DeferredOps: 0, PatchMarker: 1, AttributesWrite: 2,
                               DataWrite: 3}


@dataclass(eq=False)
class WritePath:
    """The writes of one execution of one run (see the module docstring)."""

    runtime: Runtime
    ctx: WorkflowContext
    #: Each unit written (or deferred) records the phase if it changed: the journal
    #: notes the phase it recorded.
    journal: Journal
    log: Any
    #: A worker's claim left the run ``claimed``: the first unit also writes the
    #: lease that moves it to ``running`` (one commit instead of two).
    claimed: bool = False
    #: Refuse every unit (:class:`ReadOnlyWrite`): a replay writes nothing.
    read_only: bool = False
    #: The run's start is among the pending writes (:meth:`defer_start`): the run
    #: row does not exist yet, so the first unit is unguarded (it creates the row,
    #: leased by this runner) and is not retried: if it fails, the execution ends
    #: ``start_failed`` and the caller decides (a run id or dedup key taken
    #: meanwhile is the existing run).
    unstarted: bool = False
    #: This runner may write nothing more (killed, cancelled or taken over).
    lease_lost: bool = False
    #: What goes out with the next unit, in the order it was asked for.
    pending: list[PendingWrite] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run_id = self.ctx.run_id
        self.adapter: WorkflowStateAdapter = self.runtime.adapter
        # Every unit of this execution carries the same guard: build it once.
        self.guard = lease_guard(self.run_id, self.runtime.runner_id)

    # -- the buffer ----------------------------------------------------------------

    def add(self, write: PendingWrite) -> None:
        """Send ``write`` with the next unit."""
        self.pending.append(write)

    def defer_start(self, ops: list[Op]) -> None:
        """The run's start, collected by the runner: it opens the first unit."""
        self.unstarted = True
        self.pending.append(DeferredOps(ops))

    @property
    def has_deferred(self) -> bool:
        """Whether ops built already wait for the next unit."""
        return DeferredOps in map(type, self.pending)

    def _take_all(self, durable: bool) -> tuple[list[PendingWrite], bool]:
        """Remove every pending write; return them in unit order, and whether the
        unit they go in must be durable (``durable``, or made so by them)."""
        writes, self.pending = self.pending, []
        if len(writes) > 1:
            writes.sort(key=lambda w: _RANK[type(w)])
        if writes and not durable:
            # A finished step's deferred writes make the unit durable: its outcome is
            # acknowledged by this unit's flush. A reader waits for data writes:
            # commit them now, not at the next flush.
            kinds = set(map(type, writes))
            durable = DeferredOps in kinds or DataWrite in kinds
        return writes, durable

    def _take(self, kinds: tuple[type[Any], ...]) -> list[PendingWrite]:
        """Remove the pending writes of ``kinds`` and return them in unit order."""
        taken = [w for w in self.pending if isinstance(w, kinds)]
        self.pending = [w for w in self.pending if not isinstance(w, kinds)]
        return sorted(taken, key=lambda w: _RANK[type(w)])

    # -- units -----------------------------------------------------------------------

    async def commit(self, build: Build, *, durable: bool = True) -> datetime:
        """Write one unit: the pending writes, then ``build``'s; guarded by this runner's
        lease; storage failures retried. Returns the timestamp the unit was written with.

        Raises:
            Abort: the lease is lost (``lease_lost``), the storage kept failing
                (``storage``), or the run's start was refused (``start_failed``).
            StorageError: the database refused the unit for what it is.
            ReadOnlyWrite: the write path is read-only.
        """
        if self.read_only:
            raise ReadOnlyWrite(self.run_id)
        writes, durable = self._take_all(durable)
        starting = self.unstarted
        retries = self.runtime.config.storage_retries
        for attempt in range(retries + 1):
            if self.lease_lost:
                raise Abort("lease_lost")
            ts = self.runtime.clock.now()
            try:
                await self._unit(writes, build, ts, durable=durable, guarded=not starting)
            except StorageError as exc:
                await self._storage_failed(exc, attempt, retries, starting=starting)
                continue
            except Exception:
                # Refused before anything was written (an unstorable phase, a bad
                # argument): the deferred ops go with whatever the run writes next,
                # which records the failure (a run not started yet is started by it).
                self._put_back(writes)
                raise
            return ts
        raise AssertionError("unreachable")  # pragma: no cover

    def _put_back(self, writes: list[PendingWrite]) -> None:
        """A unit failed before anything was written: its deferred ops open the next
        one (the patch markers, attributes and data writes taken with it are not
        sent again, as before the write path was one object)."""
        self.pending[:0] = [w for w in writes if isinstance(w, DeferredOps)]

    async def _unit(self, writes: list[PendingWrite], build: Build, ts: datetime, *,
                    durable: bool, guarded: bool) -> None:
        """One attempt at the unit: the lease of a claimed run, ``writes``, then
        ``build``'s.

        Raises:
            Abort: ``lease_lost``, the guard did not hold (nothing was written).
        """
        async with self.adapter.unit(guard=self.guard if guarded else None,
                                     durable=durable) as unit:
            if self.claimed:
                await self.adapter.write_lease(self.run_id, self.runtime.runner_id,
                                               ts + self.runtime.config.lease_ttl, now=ts)
            for write in writes:
                if isinstance(write, DeferredOps):
                    unit.ops.extend(write.ops)
                else:
                    await write.submit(self.adapter, self.run_id, ts)
            await build(ts)
        if not unit.held:
            self.lease_lost = True
            raise Abort("lease_lost")
        self.journal.last_phase = self.ctx.phase  # the phase this unit recorded
        self.claimed = False
        self.unstarted = False
        if writes and self.runtime.notify is not None and DataWrite in map(type, writes):
            self.runtime.notify()  # get_event / read_stream callers in this process

    async def _storage_failed(self, exc: StorageError, attempt: int, retries: int, *,
                              starting: bool) -> None:
        """Attempt ``attempt`` failed with ``exc``: return (after a backoff) to retry,
        or raise what the execution ends with."""
        if starting and (not exc.transient or attempt == retries):
            # The run row was not written: its start failed, and the caller
            # decides (a run id or dedup key taken meanwhile is that run).
            raise Abort("start_failed", exc) from exc
        if not exc.transient:
            # Refused for what it is: it would be refused again, here or by the
            # runner the sweep hands the run to. Raised into the workflow body,
            # which ends the run with this error (once).
            self.log.error("boundary write refused by the database; failing the run",
                           error=str(exc))
            raise exc
        if attempt == retries:
            self.log.error("boundary write failed; giving the run up to the sweep",
                           error=str(exc), attempts=attempt + 1)
            raise Abort("storage", exc) from exc
        self.log.warning("boundary write failed; retrying", error=str(exc),
                         attempt=attempt + 1)
        await self.runtime.clock.sleep(min(0.05 * 2**attempt, 2.0))

    async def commit_or_defer(self, build: Build, *, may_defer: bool) -> datetime:
        """A unit committed now, or (``may_defer`` and ``fused_boundaries``) built now
        and held to open the next unit.

        A step's outcome may be held only while no other step of the run is in
        flight (``may_defer``): a step running concurrently may act on the outside
        world for a long time, and the outcome must not wait for it. Built now (its
        timestamp, the phase as it is now, the patch markers and attributes
        pending), so the history is what separate commits would have written.
        Committed now when data writes are pending (a reader waits for them) or
        the lease is lost.
        """
        if (self.read_only or not may_defer or not self.runtime.config.fused_boundaries
                or self.lease_lost or DataWrite in map(type, self.pending)):
            return await self.commit(build)
        ts = self.runtime.clock.now()
        kinds = set(map(type, self.pending))
        extras = (self._take((PatchMarker, AttributesWrite))
                  if PatchMarker in kinds or AttributesWrite in kinds else [])
        async with self.adapter.collect() as unit:
            for write in extras:
                assert not isinstance(write, DeferredOps | DataWrite)
                await write.submit(self.adapter, self.run_id, ts)
            await build(ts)
        self.pending.append(DeferredOps(unit.ops))
        self.journal.last_phase = self.ctx.phase
        return ts

    async def flush(self) -> None:
        """Commit the deferred ops on their own (before a release, or a read of the
        run row a fused start has not written yet)."""
        if self.has_deferred:
            async def nothing(ts: datetime) -> None:
                return None

            await self.commit(nothing)
