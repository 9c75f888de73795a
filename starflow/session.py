"""Session variables: a K/V store shared across runs (``workflow_session_vars``).

Inside a workflow, ``session_get`` and ``session_set`` are recorded steps, so
replay returns what the first execution read. A var a run writes is dropped
when that run completes, unless it was written with ``keep_until``; expired
vars are removed by maintenance.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from .context import current_engine
from .decorators import step
from .errors import StarflowError

__all__ = ["session_get", "session_set"]


def _engine() -> Any:
    engine = current_engine.get()
    if engine is None:
        raise StarflowError(
            "session_get/session_set are for workflow code; outside a run use "
            "Starflow.session_get / Starflow.session_set"
        )
    return engine


@step(name="session_get")
async def session_get(session_id: str, key: str) -> Any:
    """Read a session variable (``None`` if absent or expired)."""
    engine = _engine()
    return await engine.adapter.session_get(session_id, key, now=engine.runtime.clock.now())


@step(name="session_set")
async def session_set(session_id: str, key: str, value: Any,
                      keep_until: datetime | None = None) -> None:
    """Write a session variable.

    Args:
        keep_until: Keep it past the end of this run, until then. Without it the
            var is dropped when the run that wrote it completes.
    """
    engine = _engine()
    if keep_until is not None and keep_until.tzinfo is None:
        raise StarflowError("keep_until must be timezone-aware", run_id=engine.run_id)
    await engine.adapter.session_set(session_id, key, value, now=engine.runtime.clock.now(),
                                     run_id=engine.run_id, keep_until=keep_until)
