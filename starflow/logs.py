"""Logging: starflow logs through the standard :mod:`logging` module.

starflow is a library inside someone else's application, so it behaves like
one: every module logs to a named logger under ``starflow`` (``starflow.engine``,
``starflow.worker``, …), the ``starflow`` logger carries only a
:class:`logging.NullHandler`, and nothing is printed unless the application
configures logging. With ``logging.basicConfig(level=logging.INFO)`` the
application sees starflow's info lines through its own handlers and format.

Each record's message is the event followed by its fields
(``step failed; retrying run_id=… node_id=step:charge#1 attempt=1``), and the
fields are also attributes of the record (``record.run_id``,
``record.node_id``, …, all of them in ``record.starflow``), so a formatter
or a JSON handler can use them without parsing text.

``$STARFLOW_LOG_LEVEL`` (``debug`` … ``critical``), when set, is the level of
the ``starflow`` logger; unset, the logger inherits the application's level.

:func:`configure_logging` renders records with structlog (console or JSON);
the ``starflow`` CLI and ``starflow worker`` call it. An application that
wants the same rendering may call it too: it adds one handler and never
changes the application's structlog configuration.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from contextvars import ContextVar
from types import MappingProxyType
from typing import IO, Any

import structlog

__all__ = [
    "Logger",
    "RunContextFilter",
    "bound",
    "configure_logging",
    "get_level",
    "get_logger",
    "set_level",
]

ROOT = "starflow"

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING,
           "error": logging.ERROR, "critical": logging.CRITICAL}

#: LogRecord attributes a field must not overwrite (``logging`` raises on them).
_RESERVED = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {
    "message", "asctime", "starflow"}


def _parse(level: str | int) -> int:
    if isinstance(level, int) and not isinstance(level, bool):
        return level
    if isinstance(level, str):
        try:
            return _LEVELS[level.lower()]
        except KeyError:
            pass
    raise ValueError(f"unknown log level {level!r}: use one of {sorted(_LEVELS)}")


_root = logging.getLogger(ROOT)
_root.addHandler(logging.NullHandler())
if os.environ.get("STARFLOW_LOG_LEVEL"):
    _root.setLevel(_parse(os.environ["STARFLOW_LOG_LEVEL"]))

#: Values bound by :func:`bound` for the current task (merged into starflow's records).
_scope: ContextVar[Mapping[str, Any]] = ContextVar(
    "starflow_log_scope", default=MappingProxyType({}))


class bound:
    """Bind ``values`` to every log record emitted inside the block.

    starflow's own records get them as fields; the application's structlog
    events get them through ``structlog.contextvars`` (merged by
    ``merge_contextvars``, part of structlog's default configuration), and its
    stdlib records through :class:`RunContextFilter`. The engine binds
    ``run_id`` and ``node_id`` around each step, so a log line in a step says
    which one. (A class, not a generator-based manager: it is entered for
    every step.)
    """

    __slots__ = ("_token", "_tokens", "_values")

    def __init__(self, **values: Any) -> None:
        self._values = values

    def __enter__(self) -> None:
        values = self._values
        self._token = _scope.set({**_scope.get(), **values})
        tokens = []
        for key, value in values.items():
            var = _structlog_vars.get(key)
            if var is None:
                # structlog's own bind the first time: the token names the variable
                # it keeps for the key, set directly from then on.
                token = structlog.contextvars.bind_contextvars(**{key: value})[key]
                _structlog_vars[key] = token.var
            else:
                token = var.set(value)
            tokens.append(token)
        self._tokens = tokens

    def __exit__(self, *exc: object) -> None:
        for token in reversed(self._tokens):
            token.var.reset(token)
        _scope.reset(self._token)


#: The ``structlog.contextvars`` variable of each key :class:`bound` has bound
#: (what ``bind_contextvars`` sets for it; a step binds two keys, every time).
_structlog_vars: dict[str, ContextVar[Any]] = {}


class RunContextFilter(logging.Filter):
    """Adds the ``run_id`` / ``node_id`` of the step being run to any record.

    Attach it to a handler of your own (``handler.addFilter(RunContextFilter())``)
    and the records your step code logs with :mod:`logging` carry the run and
    node they came from, as starflow's own records do. Records outside a step
    pass unchanged.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _scope.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        return True


def set_level(level: str | int) -> None:
    """Set the level of the ``starflow`` logger (``debug`` … ``critical`` or an int)."""
    _root.setLevel(_parse(level))


def get_level() -> int:
    """The effective level of the ``starflow`` logger."""
    return _root.getEffectiveLevel()


def _text(value: Any) -> str:
    text = str(value)
    return repr(text) if (not text or " " in text or "=" in text) else text


class Logger:
    """A starflow logger: ``log.info("event", key=value)`` over a stdlib logger.

    The fields (and any bound with :meth:`bind` or :class:`bound`) go into the
    record's ``extra``; ``exc_info=`` is passed to :mod:`logging` as usual.
    """

    __slots__ = ("_ctx", "_logger")

    def __init__(self, name: str, ctx: dict[str, Any] | None = None) -> None:
        self._logger = logging.getLogger(name)
        self._ctx = ctx or {}

    @property
    def name(self) -> str:
        return self._logger.name

    def bind(self, **values: Any) -> Logger:
        return Logger(self._logger.name, {**self._ctx, **values})

    def _emit(self, level: int, event: str, values: dict[str, Any]) -> None:
        if not self._logger.isEnabledFor(level):
            return
        exc_info = values.pop("exc_info", None)
        scope = _scope.get()
        fields = {**scope, **self._ctx, **values} if scope else {**self._ctx, **values}
        extra: dict[str, Any] = {"starflow": fields, "event": event}
        for key, value in fields.items():
            extra[key if key not in _RESERVED else f"{key}_"] = value
        message = " ".join([event, *(f"{k}={_text(v)}" for k, v in fields.items())])
        self._logger.log(level, "%s", message, exc_info=exc_info, extra=extra, stacklevel=3)

    def debug(self, event: str, **values: Any) -> None:
        self._emit(logging.DEBUG, event, values)

    def info(self, event: str, **values: Any) -> None:
        self._emit(logging.INFO, event, values)

    def warning(self, event: str, **values: Any) -> None:
        self._emit(logging.WARNING, event, values)

    def error(self, event: str, **values: Any) -> None:
        self._emit(logging.ERROR, event, values)

    def exception(self, event: str, **values: Any) -> None:
        """An error record with the exception being handled."""
        values.setdefault("exc_info", True)
        self._emit(logging.ERROR, event, values)


def get_logger(name: str) -> Logger:
    """A starflow logger named ``name`` (a child of ``starflow``)."""
    return Logger(name)


def _event_dict(_: Any, __: str, event_dict: structlog.typing.EventDict
                ) -> structlog.typing.EventDict:
    record: logging.LogRecord | None = event_dict.get("_record")
    if record is not None:
        fields = getattr(record, "starflow", None)
        if isinstance(fields, dict):
            event_dict["event"] = getattr(record, "event", event_dict.get("event"))
            for key, value in fields.items():
                event_dict.setdefault(key, value)
        event_dict.setdefault("logger", record.name)
    return event_dict


#: The handler the last :func:`configure_logging` call installed, and where.
_installed: dict[str, tuple[logging.Logger, logging.Handler]] = {}


def configure_logging(level: str | int = "info", *, json: bool = False,
                      stream: IO[str] | None = None, colors: bool | None = None,
                      root: bool = False) -> logging.Handler:
    """Render starflow's log records with structlog, on ``stream``.

    For processes starflow owns (the ``starflow`` CLI, ``starflow worker``)
    or an application that wants starflow's rendering. It installs one
    :class:`logging.StreamHandler` with a ``structlog.stdlib.ProcessorFormatter``
    (replacing the one a previous call installed) and sets the level; it never
    calls ``structlog.configure``, so an application's structlog setup stays
    as it was.

    Args:
        level: Level of the ``starflow`` logger (``debug`` … ``critical``).
        json: Render JSON lines (for log shippers) instead of the console format.
        stream: Where to write (default ``sys.stderr``; stdout is for output).
        colors: ANSI colours in the console format. Default: only when
            ``stream`` is a terminal and ``$NO_COLOR`` is unset, so a pipe or
            a file never receives escape codes.
        root: Install the handler on the root logger (so the application's own
            records are rendered too, as ``starflow worker`` does) instead of
            on the ``starflow`` logger, whose records then stop propagating to
            the root's handlers (no line is written twice).

    Returns:
        The handler installed.

    Raises:
        ValueError: ``level`` is not a level name or number.
    """
    chosen = _parse(level)
    out = stream if stream is not None else sys.stderr
    if colors is None:
        isatty = getattr(out, "isatty", None)
        colors = bool(isatty and isatty()) and not os.environ.get("NO_COLOR")
    renderer: Any = (structlog.processors.JSONRenderer() if json
                     else structlog.dev.ConsoleRenderer(colors=colors))
    formatter = structlog.stdlib.ProcessorFormatter(
        foreign_pre_chain=[
            _event_dict,
            structlog.stdlib.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
        ],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info if json else _identity,
            renderer,
        ],
    )
    handler = logging.StreamHandler(out)
    handler.setFormatter(formatter)
    handler.addFilter(RunContextFilter())
    previous = _installed.pop("handler", None)
    if previous is not None:
        previous[0].removeHandler(previous[1])
    target = logging.getLogger() if root else _root
    target.addHandler(handler)
    _installed["handler"] = (target, handler)
    _root.setLevel(chosen)
    _root.propagate = root
    if root and target.level > chosen:
        target.setLevel(chosen)
    return handler


def _identity(_: Any, __: str, event_dict: structlog.typing.EventDict
              ) -> structlog.typing.EventDict:
    return event_dict
