"""Session variables: a K/V store shared across runs (``workflow_session_vars``).

Inside a workflow, ``session_get`` and ``session_set`` are recorded steps, so
replay returns what the first execution read. A var a run writes is dropped
when that run completes, unless it was written with ``keep_until``; expired
vars are removed by maintenance.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar, cast

import wrapt

from ..errors import StarflowError
from ..limits import check_name
from .context import running_engine
from .decorators import step
from .threads import threadable

__all__ = ["session_get", "session_set"]

F = TypeVar("F", bound=Callable[..., Any])


async def _check_names(wrapped: Any, instance: Any, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> Any:
    engine = running_engine("session_get")
    check_name("session_id", kwargs.get("session_id", args[0] if args else None),
               run_id=engine.run_id)
    check_name("key", kwargs.get("key", args[1] if len(args) > 1 else None),
               run_id=engine.run_id)
    return await wrapped(*args, **kwargs)


def _checks_names(fn: F) -> F:
    return threadable(cast(F, wrapt.FunctionWrapper(fn, _check_names)))


@_checks_names
@step(name="session_get")
async def session_get(session_id: str, key: str) -> Any:
    """Read a session variable (``None`` if absent or expired)."""
    engine = running_engine("session_get")
    return await engine.adapter.session_get(session_id, key, now=engine.clock.now())


async def _check_keep_until(wrapped: Any, instance: Any, args: tuple[Any, ...],
                            kwargs: dict[str, Any]) -> None:
    # Checked in front of the step, which then gets the call exactly as made: its
    # argument hash, and so every recorded history, stays the same.
    engine = running_engine("session_set")
    check_name("session_id", kwargs.get("session_id", args[0] if args else None),
               run_id=engine.run_id)
    check_name("key", kwargs.get("key", args[1] if len(args) > 1 else None),
               run_id=engine.run_id)
    keep_until = kwargs["keep_until"] if "keep_until" in kwargs else (
        args[3] if len(args) > 3 else None)
    if keep_until is not None and (not isinstance(keep_until, datetime)
                                   or keep_until.tzinfo is None):
        raise StarflowError(f"keep_until must be timezone-aware: {keep_until!r}",
                            run_id=engine.run_id)
    await wrapped(*args, **kwargs)


def _checks_keep_until(fn: F) -> F:
    return threadable(cast(F, wrapt.FunctionWrapper(fn, _check_keep_until)))


@_checks_keep_until
@step(name="session_set")
async def session_set(session_id: str, key: str, value: Any,
                      keep_until: datetime | None = None) -> None:
    """Write a session variable.

    Args:
        keep_until: Keep it past the end of this run, until then. Without it the
            var is dropped when the run that wrote it completes.

    Raises:
        StarflowError: ``keep_until`` is naive: raised at the call, before the
            step is recorded (bad input, not a step failure).
    """
    engine = running_engine("session_set")
    await engine.adapter.session_set(session_id, key, value, now=engine.clock.now(),
                                     run_id=engine.run_id, keep_until=keep_until)
