"""What both databases can hold: the limits every entry point checks before a write.

SQLite and PostgreSQL refuse different things (PostgreSQL's ``text`` and
``jsonb`` cannot hold NUL, a btree index entry holds about 2,700 bytes, the
JSON readers stop near 1,000 levels of nesting, SQLite's timestamp text and
Python's ``datetime`` end with the year 9999). starflow checks the
strictest of both at the door, so a value is refused with the same
:class:`~starflow.errors.StarflowError` on either database before anything
is written, never by the driver in the middle of a boundary (which would
re-run a step). ``docs/errors.md`` lists these limits.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

from .errors import ConfigError, InvalidArgument

__all__ = [
    "MAX_DURATION",
    "MAX_NAME_LENGTH",
    "MAX_NESTING_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_TENANT_LENGTH",
    "MAX_VALUE_DEPTH",
    "check_name",
    "check_tenant",
    "duration_problem",
    "name_problem",
    "normalize_run_id",
    "storable_text",
    "text_problem",
]

#: Characters in an indexed name: workflow, step, event, session id and key, pool,
#: schedule id, concurrency/dedup/debounce key.
MAX_NAME_LENGTH = 200
#: Characters in ``workspace_id`` and ``env`` (part of every index).
#: With the longest names every index entry stays under PostgreSQL's btree
#: limit (2,704 bytes) even at 4 UTF-8 bytes per character.
MAX_TENANT_LENGTH = 64
#: Levels of nesting (lists and objects) in one stored JSON document. Both JSON
#: readers (msgspec, SQLite's json functions) stop near 1,000: ample room.
MAX_NESTING_DEPTH = 256
#: Levels of nesting in a value you pass (an argument, payload, result,
#: variable): a stored document wraps a value in at most six levels of its own
#: (``{"output": …}``, ``{"variables": {"set": {key: …}}}``), so a value accepted
#: at the door always fits every document it is later written in.
MAX_VALUE_DEPTH = MAX_NESTING_DEPTH - 6
#: Bytes of one stored JSON document (PostgreSQL's jsonb stops at 256 MiB).
MAX_PAYLOAD_BYTES = 64 * 1024 * 1024
#: The longest duration you can pass (a timeout, debounce, retention age, rate-limit
#: period, catch-up window, retry interval, config interval): 100 years. starflow
#: adds durations to the clock and stores the result, and the last instant both
#: databases hold in its format is the end of the year 9999 (SQLite's text and
#: Python's ``datetime`` have four-digit years); a longer duration would fail
#: there, in the middle of a write, as a raw ``OverflowError``.
MAX_DURATION = timedelta(days=36_500)


def text_problem(value: str) -> str | None:
    """Why ``value`` cannot be stored as text on both databases, or ``None``.

    PostgreSQL refuses NUL in ``text`` and ``jsonb``; neither database (nor
    UTF-8) can hold a lone surrogate.
    """
    index = value.find("\x00")
    if index >= 0:
        return f"contains a NUL character (\\x00) at index {index}, which PostgreSQL cannot store"
    if value.isascii():
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        return (f"contains a lone surrogate ({value[exc.start]!r}) at index {exc.start}, "
                "which is not valid UTF-8")
    return None


def storable_text(value: str) -> str:
    """``value`` with what no database can hold escaped (NUL as ``\\x00``, lone
    surrogates as ``\\udxxx``): for messages starflow writes itself, such as a
    run's error, which must be recorded whatever the exception said."""
    if text_problem(value) is None:
        return value
    return value.replace("\x00", "\\x00").encode("utf-8", "backslashreplace").decode("utf-8")


def name_problem(param: str, value: object, *, max_length: int = MAX_NAME_LENGTH,
                 optional: bool = False) -> str | None:
    """Why ``value`` is not a valid indexed name for ``param``, or ``None``."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        return f"{param} must be a non-empty string: {value!r}"
    if len(value) > max_length:
        return (f"{param} is {len(value)} characters long; the most is {max_length}: "
                f"{value[:40]!r}…")
    problem = text_problem(value)
    if problem is not None:
        return f"{param} {problem}: {value[:60]!r}"
    return None


def duration_problem(param: str, value: timedelta) -> str | None:
    """Why the duration ``value`` of ``param`` is too long (or too far below zero)
    for starflow to add to the clock, or ``None``: the one bound of every
    duration a user passes (:data:`MAX_DURATION`). Callers check its type and
    sign themselves, and gather this problem with their other ones."""
    if -MAX_DURATION <= value <= MAX_DURATION:
        return None
    return (f"{param} must be at most {MAX_DURATION.days} days (100 years), the longest "
            f"duration starflow can add to a time it stores: {value!r}; use a shorter one")


def check_name(param: str, value: Any, *, max_length: int = MAX_NAME_LENGTH,
               optional: bool = False, run_id: str | None = None) -> None:
    """Raise :class:`InvalidArgument` unless ``value`` is a storable name of at most
    ``max_length`` characters (``None`` passes when ``optional``)."""
    problem = name_problem(param, value, max_length=max_length, optional=optional)
    if problem is not None:
        raise InvalidArgument(problem + ". Nothing was written", run_id=run_id)


def check_tenant(workspace_id: object, env: object) -> None:
    """Raise :class:`ConfigError` unless ``workspace_id`` and ``env`` are storable
    names of at most :data:`MAX_TENANT_LENGTH` characters (every adapter checks
    them when it is made, so every entry point does)."""
    problems = [p for p in (name_problem("workspace_id", workspace_id,
                                         max_length=MAX_TENANT_LENGTH),
                            name_problem("env", env, max_length=MAX_TENANT_LENGTH))
                if p is not None]
    if problems:
        raise ConfigError("; ".join(problems))


def normalize_run_id(run_id: Any) -> str:
    """A run id as stored: the canonical lowercase UUID text, on every database.

    An id that is not a UUID cannot name a run; it is returned unchanged (as
    text) so the lookup answers ``RunNotFound`` for it.
    """
    if isinstance(run_id, uuid.UUID):
        return str(run_id)
    if not isinstance(run_id, str):
        raise InvalidArgument(f"run_id must be a string: {run_id!r}")
    try:
        return str(uuid.UUID(run_id))
    except ValueError:
        if text_problem(run_id) is not None or len(run_id) > MAX_NAME_LENGTH:
            raise InvalidArgument(
                f"run_id must be a UUID: {run_id[:60]!r}") from None
        return run_id
