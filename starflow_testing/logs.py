"""``capture_logs``: assert on starflow's log records."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, MutableMapping
from typing import Any

from starflow import logs as starflow_logs

__all__ = ["capture_logs"]


class _Collector(logging.Handler):
    def __init__(self, into: list[MutableMapping[str, Any]]) -> None:
        super().__init__(logging.DEBUG)
        self._into = into

    def emit(self, record: logging.LogRecord) -> None:
        fields = getattr(record, "starflow", None)
        entry: dict[str, Any] = {
            "event": getattr(record, "event", None) or record.getMessage(),
            "log_level": record.levelname.lower(),
            "logger": record.name,
        }
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["exc_info"] = record.exc_info
        self._into.append(entry)


@contextlib.contextmanager
def capture_logs(level: str | int = "debug") -> Iterator[list[MutableMapping[str, Any]]]:
    """Collect the records starflow logs inside the block, as dicts.

    Each dict has ``event`` (the message without its fields), ``log_level``
    (``"info"``, …), ``logger`` (``"starflow.engine"``, …) and the record's
    fields (``run_id``, ``node_id``, …). The ``starflow`` logger's level is
    lowered to ``level`` for the block, so the runtime's debug and info
    records are captured too, and restored afterwards; the application's own
    handlers see nothing new.

    Example::

        with capture_logs() as logs:
            await env.run(order, "o-1")
        assert any(e["event"] == "run started" for e in logs)
    """
    logger = logging.getLogger(starflow_logs.ROOT)
    previous = logger.level
    captured: list[MutableMapping[str, Any]] = []
    handler = _Collector(captured)
    logger.setLevel(level if isinstance(level, int) else level.upper())
    logger.addHandler(handler)
    try:
        yield captured
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
