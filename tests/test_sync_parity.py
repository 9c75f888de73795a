"""starflow.Starflow and starflow.sync.Starflow offer the same methods.

Every public ``async def`` of the async class has a blocking counterpart with
the same parameters (names, kinds, defaults, annotations) and return annotation (an async
iterator becomes an iterator), and every public method of the facade has its
counterpart in the async class: a method added to one only fails here.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any

import starflow
import starflow.sync

#: Methods of the facade that are about the facade itself (the async class has
#: ``async with`` instead).
FACADE_ONLY = {"close"}


def _public_methods(cls: type) -> dict[str, Callable[..., Any]]:
    out = {}
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if isinstance(attr, classmethod | staticmethod):
            attr = attr.__func__
        if inspect.isfunction(attr):
            out[name] = attr
    return out


def _is_async(fn: Callable[..., Any]) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn)


def _params(fn: Callable[..., Any]) -> list[tuple[str, Any, Any, Any]]:
    """Parameters after the first (``self`` or ``cls``): name, kind, default, annotation."""
    params = list(inspect.signature(fn).parameters.values())[1:]
    return [(p.name, p.kind, p.default, p.annotation) for p in params]


def _blocking_annotation(annotation: str) -> str:
    """What a blocking counterpart returns: ``AsyncIterator[X]`` → ``Iterator[X]``."""
    return re.sub(r"\bAsync(Iterator|Iterable|Generator)\[", r"\1[", annotation)


def _return(fn: Callable[..., Any]) -> str:
    annotation = fn.__annotations__.get("return", "")
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def parity_problems(async_cls: type, sync_cls: type) -> list[str]:
    """What the two classes do not share, one line per method."""
    aio, blocking = _public_methods(async_cls), _public_methods(sync_cls)
    problems = []
    for name, fn in sorted(aio.items()):
        if not _is_async(fn):
            continue
        twin = blocking.get(name)
        if twin is None:
            problems.append(f"{name}: async only; add a blocking counterpart to "
                            f"{sync_cls.__module__}.{sync_cls.__qualname__}")
            continue
        if _is_async(twin):
            problems.append(f"{name}: the facade's counterpart is async")
        if _params(fn) != _params(twin):
            problems.append(f"{name}: parameters differ: {inspect.signature(fn)} vs "
                            f"{inspect.signature(twin)}")
        if _blocking_annotation(_return(fn)) != _return(twin):
            problems.append(f"{name}: returns {_return(fn)!r} vs {_return(twin)!r}")
    for name, twin in sorted(blocking.items()):
        if name in FACADE_ONLY:
            continue
        fn = aio.get(name)
        if fn is None:
            problems.append(f"{name}: in the facade only; add it to "
                            f"{async_cls.__module__}.{async_cls.__qualname__} or drop it")
        elif not _is_async(fn) and _params(fn) != _params(twin):
            problems.append(f"{name}: parameters differ: {inspect.signature(fn)} vs "
                            f"{inspect.signature(twin)}")
    return problems


def test_the_sync_facade_has_every_method_of_starflow_and_no_other() -> None:
    problems = parity_problems(starflow.Starflow, starflow.sync.Starflow)
    assert not problems, "\n".join(problems)


def test_the_parity_check_sees_a_method_added_to_one_side_only() -> None:
    """The check is not vacuous: a method on one side only, a parameter renamed,
    a default changed or a return annotation changed each show up."""

    class Async(starflow.Starflow):
        async def extra(self, run_id: str) -> int:
            return 0

        async def get_run(self, run: str) -> starflow.RunInfo:  # type: ignore[override]
            raise NotImplementedError

    class Sync(starflow.sync.Starflow):
        def facade_extra(self) -> None:
            pass

        def list_runs(self, status: str | None = None,  # type: ignore[override]
                      template_id: str | None = None, limit: int = 10,
                      **kwargs: Any) -> list[starflow.RunInfo]:
            raise NotImplementedError

        def events(self, run_id: str, *, after_id: int = 0) -> list[Any]:  # type: ignore[override]
            raise NotImplementedError

    problems = parity_problems(Async, Sync)
    assert any(p.startswith("extra: async only") for p in problems), problems
    assert any(p.startswith("facade_extra: in the facade only") for p in problems), problems
    assert any(p.startswith("get_run: parameters differ") for p in problems), problems
    assert any(p.startswith("list_runs: parameters differ") for p in problems), problems
    assert any(p.startswith("events: returns") for p in problems), problems
