"""The write seam every state adapter is built on.

:class:`AdapterSeam` binds an adapter to one (``workspace_id``, ``env``), gives
it its lifecycle hooks and the two seams every write goes through:
:meth:`AdapterSeam.execute` applies a :class:`Unit` atomically (boundary calls
made inside ``async with adapter.unit(...)`` join one unit) and
:meth:`AdapterSeam.perform` runs one read-modify-write :class:`Command`.
:class:`~starflow.adapters.base.WorkflowStateAdapter` builds the state
model's boundaries on it.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import AsyncIterator
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Protocol, Self, cast

import anyio

from ..clock import Clock
from ..limits import RunRef, check_tenant, run_ref
from .units import (
    Command,
    Guard,
    Op,
    R,
    Unit,
)

__all__ = ["AdapterSeam", "BusyTracking", "RunContext", "RunWatch", "UnitScope", "WatchWhenWaiting"]


class RunContext(Protocol):
    """What the boundaries read from a run's context (the runtime's
    :class:`~starflow.WorkflowContext` is one): the adapters know no runtime type."""

    @property
    def workflow(self) -> str: ...

    @property
    def version(self) -> int: ...

    @property
    def phase(self) -> Any: ...

    def snapshot(self) -> dict[str, Any]:
        """The JSON-ready snapshot stored as ``checkpoint_json``."""
        ...


class RunWatch:
    """Announcements that one run changed in another process (see
    :meth:`AdapterSeam.watch_run`).

    :attr:`changed` is set when the run ended, an update's answer to it was
    recorded or it wrote an event or stream item (#17), and when the
    announcements may have been missed (the listening connection was lost), so
    the watcher reads again. Take :meth:`arm` *before*
    reading the state being waited on: an announcement after the read sets it.
    """

    __slots__ = ("changed", "run_id")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.changed = anyio.Event()

    def arm(self) -> anyio.Event:
        """The event to wait on after the next read (a fresh one once it fired)."""
        if self.changed.is_set():
            self.changed = anyio.Event()
        return self.changed


class WatchWhenWaiting:
    """``async with WatchWhenWaiting(adapter, run_id) as watch``: the run's
    :meth:`~AdapterSeam.watch_run`, entered only once the caller has to wait.

    A call whose first read finds what it waits for (the result of a run that
    has ended, an update already answered) then opens no listening connection.
    No announcement is lost: the caller reads, and only if it must wait calls
    :meth:`start`; when that returns True it reads again (announcements from
    then on set :meth:`arm`'s event) before it waits::

        async with WatchWhenWaiting(adapter, run_id) as watch:
            while True:
                changed = watch.arm()          # () until started
                state = await read()
                if done(state):
                    return state
                if await watch.start():
                    continue                   # watching now: read again first
                await wait(poll, *changed)
    """

    __slots__ = ("_adapter", "_run_id", "_stack", "_started", "_watch")

    def __init__(self, adapter: AdapterSeam, run_id: str) -> None:
        self._adapter = adapter
        self._run_id = run_id
        self._stack = contextlib.AsyncExitStack()
        self._started = False
        self._watch: RunWatch | None = None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self._stack.__aexit__(exc_type, exc, tb)

    def arm(self) -> tuple[anyio.Event, ...]:
        """The announcement event to wait on after the next read (none before
        :meth:`start`, or where the database cannot announce)."""
        return () if self._watch is None else (self._watch.arm(),)

    async def start(self) -> bool:
        """Enter the watch (once). True if this call started an announcing watch:
        the caller must read again before waiting. False if it was started
        before, or the database cannot announce (the caller polls, and its
        runner's ``settled`` event, taken before the read, covers this process).
        """
        if self._started:
            return False
        self._started = True
        self._watch = await self._stack.enter_async_context(
            self._adapter.watch_run(self._run_id))
        return self._watch is not None


#: The unit being collected in this context and the adapter it belongs to: only
#: that adapter's boundary calls join it (another adapter's are its own writes).
_pending: ContextVar[tuple[AdapterSeam, Unit] | None] = ContextVar(
    "starflow_pending_unit", default=None)


class UnitScope:
    """``async with adapter.unit(...) as unit``: collects the block's writes, then executes.

    A plain class rather than an ``asynccontextmanager``: every boundary of
    every run enters one, and a generator-based manager costs several
    microseconds more each time.
    """

    __slots__ = ("_adapter", "_collect", "_token", "_unit")

    def __init__(self, adapter: AdapterSeam, unit: Unit, *,
                 collect: bool = False) -> None:
        self._adapter = adapter
        self._unit = unit
        self._collect = collect
        self._token: Token[tuple[AdapterSeam, Unit] | None] | None = None

    async def __aenter__(self) -> Unit:
        if _pending.get() is not None:
            raise RuntimeError("adapter units do not nest")
        self._token = _pending.set((self._adapter, self._unit))
        return self._unit

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        assert self._token is not None
        _pending.reset(self._token)
        self._token = None
        if exc_type is None and not self._collect:
            unit = self._unit
            unit.held = (await self._adapter.execute(unit)
                         if unit.ops or unit.guard is not None else True)


class AdapterSeam(abc.ABC):
    """Tenant scope, lifecycle hooks and the write seam of a state adapter."""

    #: URL scheme(s) this adapter serves, for ``Starflow.open``.
    durable: bool = True
    #: Whether a run's start (``on_run_start`` and its lease) may share an unguarded
    #: unit with the run's first boundary (``StarflowConfig.fused_boundaries``):
    #: True where such a unit costs no more than the start alone. PostgreSQL says
    #: False: the run row and an event in one statement cannot see each other.
    fuses_run_start: bool = True

    def __init__(self, *, workspace_id: str = "celestial", env: str = "prod") -> None:
        if not workspace_id or not env:
            from ..errors import ConfigError

            raise ConfigError(
                f"workspace_id and env must be non-empty: workspace_id={workspace_id!r}, "
                f"env={env!r}"
            )
        check_tenant(workspace_id, env)
        self.workspace_id = workspace_id
        self.env = env

    def run_ref(self, run_id: Any) -> RunRef:
        """``run_id`` (a UUID or a run key) read in this adapter's scope: see
        :func:`starflow.limits.run_ref`.

        Raises:
            InvalidArgument: neither a UUID nor a valid run key.
        """
        return run_ref(run_id, workspace_id=self.workspace_id, env=self.env)

    def normalize_run_id(self, run_id: Any) -> str:
        """The id (canonical UUID text) ``run_id`` names here, a UUID or a run key."""
        return self.run_ref(run_id).id

    # -- lifecycle -----------------------------------------------------------

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect and apply migrations. Called once by ``Starflow.open``."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections."""

    async def migrate(self) -> list[int]:
        """Apply pending migrations; return the versions applied (none by default)."""
        return []

    #: The migration versions :meth:`open` applied (``starflow migrate`` reports them).
    applied_migrations: tuple[int, ...] = ()

    @property
    def shared(self) -> bool:
        """Whether other processes may write this database (so background loops poll it)."""
        return self.durable

    async def wait_for_work(self, clock: Clock, timeout: float) -> None:
        """Return when queued runs may be claimable, or after ``timeout`` clock seconds.

        The default polls; PostgreSQL overrides it with ``LISTEN/NOTIFY``.
        """
        await clock.sleep(timeout)

    @contextlib.asynccontextmanager
    async def watch_run(self, run_id: str) -> AsyncIterator[RunWatch | None]:
        """Be told when ``run_id`` changes in another process, while in the block.

        Yields a :class:`RunWatch`, or None where this database cannot announce
        changes (the default; SQLite, or PostgreSQL behind a transaction pooler
        without ``listen_url``): the caller then polls. Changes made through
        this adapter's own process are the runtime's to announce.
        """
        yield None

    async def idle(self) -> None:  # noqa: B027 - optional hook
        """Return once no call of this adapter is waiting on the database.

        Test harnesses use it to tell "every task is blocked" from "a query is in
        flight on a driver thread or socket". Implementations must return
        without yielding when nothing is in flight. The default (no tracking)
        returns at once.
        """

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the write seam ------------------------------------------------------

    @abc.abstractmethod
    async def execute(self, unit: Unit) -> bool:
        """Apply ``unit`` atomically.

        Returns:
            True if the guard held (or there was none) and every op was
            written; False if the guard failed, in which case nothing was.

        Raises:
            StorageError: the database failed; nothing was written.
        """

    def unit(self, *, guard: Guard | None = None, durable: bool = True) -> UnitScope:
        """Group the boundary calls made inside the block into one atomic unit.

        The unit is executed when the block exits normally; if the block raises,
        nothing is written. Only this adapter's boundary calls join it: a call on
        another adapter inside the block is that adapter's own write, at once.
        ``unit.held`` tells whether its guard held::

            async with adapter.unit(guard=Guard(run_id=r, leased_by=me)) as u:
                await adapter.on_node_complete(r, node, output, now=t)
            if not u.held: ...
        """
        return UnitScope(self, Unit(guard=guard, durable=durable))

    def collect(self) -> UnitScope:
        """Collect the boundary calls made inside the block into a unit, without executing it.

        The ops are exactly those :meth:`unit` would write; the caller adds
        them to a later unit (``unit.ops.extend(collected.ops)``), which then
        writes them atomically with its own. The engine defers a step's
        ``node_complete`` so into the run's next boundary.
        """
        return UnitScope(self, Unit(), collect=True)

    async def perform(self, command: Command[R]) -> R:
        """Run one read-modify-write ``command`` atomically; what it returns.

        The sibling of :meth:`execute`: claims, sweeps, job claims and
        heartbeats, outbox drains, definitions, secrets and session GC all
        arrive here, whichever public method built them. A concrete adapter
        handles command ``C`` in a method named after ``C.method`` with a
        leading underscore (``_claim_runs(command)``); wrappers override this
        method to see every command.

        Raises:
            StorageError: the database failed; nothing was written.
        """
        handler = getattr(self, "_" + command.method, None)
        if handler is None:
            raise NotImplementedError(
                f"{type(self).__name__} cannot perform {type(command).__name__}: "
                f"it has no _{command.method} method")
        return cast(R, await handler(command))

    async def _submit(self, op: Op) -> None:
        if not self._collected(op):
            await self.execute(Unit(ops=[op]))

    def _collected(self, op: Op) -> bool:
        """Add ``op`` to the unit this adapter is collecting, if any (else False)."""
        pending = _pending.get()
        if pending is not None and pending[0] is self:
            pending[1].ops.append(op)
            return True
        return False


class BusyTracking:
    """:meth:`AdapterSeam.idle` for an adapter whose queries leave the event loop
    (a driver thread, a socket): a task awaiting one looks blocked to the loop,
    so the adapter counts its calls in flight (``_busy_enter``/``_busy_exit``
    around each) and ``idle`` waits for the count to reach zero."""

    _inflight = 0
    _idle_event: anyio.Event | None = None

    def _busy_enter(self) -> None:
        self._inflight += 1

    def _busy_exit(self) -> None:
        self._inflight -= 1
        if self._inflight == 0 and self._idle_event is not None:
            self._idle_event.set()
            self._idle_event = None

    async def idle(self) -> None:
        """Return once no query or queued write is in flight (at once if none is)."""
        while self._inflight > 0:
            # Made on demand: most calls have nobody waiting for idleness.
            if self._idle_event is None:
                self._idle_event = anyio.Event()
            await self._idle_event.wait()
