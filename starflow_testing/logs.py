"""``capture_logs``: assert on starflow's structlog events."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, MutableMapping
from typing import Any

import structlog.testing

from starflow import logs as starflow_logs

__all__ = ["capture_logs"]


@contextlib.contextmanager
def capture_logs(level: str | int = "debug") -> Iterator[list[MutableMapping[str, Any]]]:
    """Collect structlog events emitted inside the block, as dicts.

    Wraps :func:`structlog.testing.capture_logs` and lowers starflow's own
    level (WARNING by default) to ``level`` for the block, so the runtime's
    debug and info events are captured too; both are restored afterwards.

    Example::

        with capture_logs() as logs:
            await env.run(order, "o-1")
        assert any(e["event"] == "run started" for e in logs)
    """
    previous = starflow_logs.get_level()
    starflow_logs.set_level(level)
    try:
        with structlog.testing.capture_logs() as captured:
            yield captured
    finally:
        starflow_logs.set_level(previous)
