"""``FaultInjectingAdapter``: fail or hang chosen adapter calls, at the write seam.

Every lifecycle boundary of the state model reaches the adapter as a
:class:`~starflow.adapters.base.Unit` through ``execute``; the boundary
methods that built a unit are ``unit.methods``. Every read-modify-write (a
claim, a sweep pass, an outbox drain…) reaches it as a
:class:`~starflow.adapters.base.Command` through ``perform``, named by
``command.method`` (``claim_runs``). This wrapper counts calls per method name
(boundaries seen inside units, commands, and reads such as ``get_run``) and,
on the N-th call of a method you name, raises
:class:`~starflow.StorageError` before anything reaches the database, or
hangs until the test releases it.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Collection, Coroutine, Mapping
from typing import Any, TypeVar

import anyio

from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Command, Unit
from starflow.errors import StorageError

from ._tracking import forwarded_reads

__all__ = ["FaultInjectingAdapter", "FaultSpec"]

R = TypeVar("R")

#: Which calls of a method to fault: the N-th (1-based), or several of them.
FaultSpec = int | Collection[int]


def _normalize(spec: Mapping[str, FaultSpec] | None, what: str) -> dict[str, frozenset[int]]:
    out: dict[str, frozenset[int]] = {}
    for method, which in (spec or {}).items():
        numbers = frozenset([which]) if isinstance(which, int) else frozenset(which)
        bad = [n for n in numbers if not isinstance(n, int) or n < 1]
        if bad or not numbers:
            raise ValueError(
                f"{what}[{method!r}] must be a call number >= 1 or a collection of them: "
                f"{which!r}")
        out[method] = numbers
    return out


class FaultInjectingAdapter(DelegatingAdapter):
    """Wrap an adapter; fail or hang the N-th call of chosen methods.

    Args:
        inner: The adapter that does the real work.
        fail: ``{method: n}`` or ``{method: {n1, n2}}`` (``range(1, 100)`` for
            "persistently"): those calls raise :class:`~starflow.StorageError`
            before anything is written. A unit fails as a whole, as a failed
            transaction would.
        hang: Same shape: those calls wait until :meth:`release` (then proceed
            normally).

    Attributes:
        calls: Every call seen, in order (boundary methods of each unit, then
            reads), failed and hung ones included.
        failures: The calls that were made to fail, in order.

    Example::

        faults = FaultInjectingAdapter(adapter, fail={"save_checkpoint": 1})
        async with WorkflowEnvironment(adapter=faults) as env: ...
        assert faults.failures == ["save_checkpoint"]
    """

    def __init__(self, inner: WorkflowStateAdapter, *,
                 fail: Mapping[str, FaultSpec] | None = None,
                 hang: Mapping[str, FaultSpec] | None = None) -> None:
        super().__init__(inner)
        self.fail = _normalize(fail, "fail")
        self.hang = _normalize(hang, "hang")
        self.calls: list[str] = []
        self.failures: list[str] = []
        self.counts: Counter[str] = Counter()
        self._release: dict[str, anyio.Event] = {}
        self._hanging: dict[str, anyio.Event] = {}

    @property
    def path(self) -> object:
        """The inner adapter's ``path`` (the app decides on timer polling from it)."""
        return getattr(self.inner, "path", None)

    # -- controlling hangs -----------------------------------------------------

    def _gate(self, table: dict[str, anyio.Event], method: str) -> anyio.Event:
        event = table.get(method)
        if event is None:
            event = table[method] = anyio.Event()
        return event

    async def wait_hanging(self, method: str) -> None:
        """Return once a call of ``method`` is hanging."""
        await self._gate(self._hanging, method).wait()

    def release(self, method: str | None = None) -> None:
        """Let hanging calls of ``method`` (every method if None) proceed."""
        names = [method] if method is not None else sorted(set(self.hang) | set(self._release))
        for name in names:
            self._gate(self._release, name).set()

    def calls_of(self, method: str) -> int:
        """How many calls of ``method`` were seen."""
        return self.counts[method]

    # -- the seam ----------------------------------------------------------------

    async def _enter(self, methods: list[str]) -> None:
        fail: str | None = None
        hang: list[str] = []
        for method in methods:
            self.counts[method] += 1
            self.calls.append(method)
            n = self.counts[method]
            if fail is None and n in self.fail.get(method, ()):
                fail = method
            if n in self.hang.get(method, ()):
                hang.append(method)
        for method in hang:
            self._gate(self._hanging, method).set()
            await self._gate(self._release, method).wait()
        if fail is not None:
            self.failures.append(fail)
            raise StorageError(
                f"injected fault: call #{self.counts[fail]} of {fail} failed "
                "(FaultInjectingAdapter); nothing was written")

    async def execute(self, unit: Unit) -> bool:
        # One entry per boundary call, exactly (Unit.methods): two calls of a method
        # back to back in one unit are two calls, the ops of one call are one.
        await self._enter(unit.methods)
        return await self.inner.execute(unit)

    async def perform(self, command: Command[R]) -> R:
        # Claims, sweeps, job claims, outbox drains, definitions, secrets and
        # session GC: one call each, named by the method that built the command.
        await self._enter([command.method])
        return await self.inner.perform(command)


def _faulty(name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
    forward = getattr(DelegatingAdapter, name)

    @functools.wraps(forward)
    async def method(self: FaultInjectingAdapter, *args: Any, **kwargs: Any) -> Any:
        await self._enter([name])
        return await forward(self, *args, **kwargs)

    return method


for _name in forwarded_reads():
    setattr(FaultInjectingAdapter, _name, _faulty(_name))
