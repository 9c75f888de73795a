"""Logging: structlog events from starflow, quiet by default.

starflow logs through structlog with ``run_id``, ``node_id``, ``runner_id``
and ``workspace`` bound. Its own level (default WARNING, or
``$STARFLOW_LOG_LEVEL``) is applied before structlog sees an event, so the
library stays quiet in an application that has not asked for more, without
touching the application's structlog configuration. Call
:func:`configure_logging` to choose a level and a console or JSON renderer.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import Any

import structlog

__all__ = ["Logger", "bound", "configure_logging", "get_logger", "set_level"]

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL}


def _parse(level: str | int) -> int:
    if isinstance(level, int):
        return level
    try:
        return _LEVELS[level.lower()]
    except KeyError:
        raise ValueError(f"unknown log level {level!r}: use one of {sorted(_LEVELS)}") from None


_state = {"level": _parse(os.environ.get("STARFLOW_LOG_LEVEL", "warning"))}

#: Values bound by :func:`bound` for the current task (merged into starflow's events).
_scope: ContextVar[Mapping[str, Any]] = ContextVar(
    "starflow_log_scope", default=MappingProxyType({}))


class bound:
    """Bind ``values`` to every log event emitted inside the block.

    starflow's own events get them directly; the application's structlog
    events get them through ``structlog.contextvars`` (merged by
    ``merge_contextvars``, which structlog's default configuration and
    :func:`configure_logging` include). The engine binds ``run_id`` and
    ``node_id`` around each step, so a log line in a step says which one.
    (A class, not a generator-based manager: it is entered for every step.)
    """

    __slots__ = ("_token", "_tokens", "_values")

    def __init__(self, **values: Any) -> None:
        self._values = values

    def __enter__(self) -> None:
        self._token = _scope.set({**_scope.get(), **self._values})
        self._tokens = structlog.contextvars.bind_contextvars(**self._values)

    def __exit__(self, *exc: object) -> None:
        structlog.contextvars.reset_contextvars(**self._tokens)
        _scope.reset(self._token)


def set_level(level: str | int) -> None:
    """Set the level below which starflow drops its events."""
    _state["level"] = _parse(level)


def get_level() -> int:
    return _state["level"]


class Logger:
    """A bound starflow logger that filters by starflow's level, then hands to structlog."""

    __slots__ = ("_ctx", "_name")

    def __init__(self, name: str, ctx: dict[str, Any] | None = None) -> None:
        self._name = name
        self._ctx = ctx or {}

    def bind(self, **values: Any) -> Logger:
        return Logger(self._name, {**self._ctx, **values})

    def _emit(self, level: int, method: str, event: str, values: dict[str, Any]) -> None:
        if level < _state["level"]:
            return
        scope = _scope.get()
        ctx = {**scope, **self._ctx} if scope else self._ctx
        logger = structlog.get_logger(self._name).bind(logger=self._name, **ctx)
        getattr(logger, method)(event, **values)

    def debug(self, event: str, **values: Any) -> None:
        self._emit(logging.DEBUG, "debug", event, values)

    def info(self, event: str, **values: Any) -> None:
        self._emit(logging.INFO, "info", event, values)

    def warning(self, event: str, **values: Any) -> None:
        self._emit(logging.WARNING, "warning", event, values)

    def error(self, event: str, **values: Any) -> None:
        self._emit(logging.ERROR, "error", event, values)


def get_logger(name: str) -> Logger:
    """A starflow logger named ``name``."""
    return Logger(name)


def configure_logging(level: str | int = "info", *, json: bool = False) -> None:
    """Configure structlog once for an application that runs starflow.

    Args:
        level: starflow's level (``debug`` … ``critical``).
        json: Render JSON lines (for log shippers) instead of the console format.
    """
    set_level(level)
    renderer: Any = (structlog.processors.JSONRenderer() if json
                     else structlog.dev.ConsoleRenderer())
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_parse(level)),
        cache_logger_on_first_use=False,
    )
