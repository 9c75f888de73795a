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
from typing import Any, NamedTuple

from .errors import ConfigError, InvalidArgument

__all__ = [
    "MAX_DURATION",
    "MAX_NAME_LENGTH",
    "MAX_NESTING_DEPTH",
    "MAX_PAYLOAD_BYTES",
    "MAX_RUN_KEY_LENGTH",
    "MAX_TENANT_LENGTH",
    "MAX_VALUE_DEPTH",
    "RUN_KEY_NAMESPACE",
    "WAKE_TOKEN_PREFIX",
    "RunRef",
    "check_name",
    "check_tenant",
    "duration_problem",
    "name_problem",
    "normalize_run_id",
    "run_key_problem",
    "run_ref",
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


#: Characters in a run key (``sf.options(run_id="order-123")``): an indexed name.
MAX_RUN_KEY_LENGTH = MAX_NAME_LENGTH
#: What every wake token starts with (``sfw1.<kid>.<claims>.<mac>``, see
#: :mod:`starflow.tokens`): no run key may, so ``sf.resume(x)`` tells them apart.
WAKE_TOKEN_PREFIX = "sfw1."
#: The namespace of the run ids derived from run keys (uuid5, with the scope):
#: fixed forever, or a key would name another run after an upgrade.
RUN_KEY_NAMESPACE = uuid.UUID("8ac84a28-62af-461f-870a-8b21cfee64e1")


class RunRef(NamedTuple):
    """A run as a caller named it: its id as stored, and the key it was named by.

    Attributes:
        id: The run id (canonical lowercase UUID text), ``workflow_runs.id``.
        key: The run key the caller gave (``"order-123"``), or ``None`` when
            the caller gave the id itself.
    """

    id: str
    key: str | None


def run_key_problem(key: str) -> str | None:
    """Why ``key`` (a string that is not a UUID) cannot be a run key, or ``None``."""
    if not key or key.isspace():
        return f"a run key must not be empty or only whitespace: {key!r}"
    if len(key) > MAX_RUN_KEY_LENGTH:
        return (f"a run key is at most {MAX_RUN_KEY_LENGTH} characters; this one has "
                f"{len(key)}: {key[:40]!r}…")
    if key != key.strip():
        return (f"a run key must not start or end with whitespace (it would name "
                f"another run than {key.strip()!r}): {key!r}")
    bad = next((i for i, ch in enumerate(key) if not ch.isprintable()), None)
    if bad is not None:
        return (f"a run key must be printable text; it has {key[bad]!r} at index {bad}: "
                f"{key[:60]!r}")
    if key.startswith(WAKE_TOKEN_PREFIX):
        return (f"a run key must not start with {WAKE_TOKEN_PREFIX!r}, which starts "
                f"every wake token: {key[:60]!r}")
    return None


def run_ref(run_id: Any, *, workspace_id: str, env: str) -> RunRef:
    """The one reading of a run id a caller passes: a UUID, or a run key.

    A UUID (a :class:`uuid.UUID`, or a string that parses as one, any case) is
    the run's id, returned canonical (lowercase). Any other string is a *run
    key*, a name the caller chose (``"order-123"``): it names the run whose id
    is ``uuid5(RUN_KEY_NAMESPACE, "<workspace_id>\\x1f<env>\\x1f<key>")``,
    so a key needs no lookup, and the same key in two workspaces or
    environments names two runs. Every call that takes a run id reads it here.

    Raises:
        InvalidArgument: not a string, or not a valid key (empty, only
            whitespace, longer than :data:`MAX_RUN_KEY_LENGTH`, unprintable,
            padded with whitespace, or starting like a wake token).
    """
    if isinstance(run_id, uuid.UUID):
        return RunRef(str(run_id), None)
    if not isinstance(run_id, str):
        raise InvalidArgument(f"run_id must be a string (a UUID or a run key): {run_id!r}")
    try:
        return RunRef(str(uuid.UUID(run_id)), None)
    except ValueError:
        pass
    problem = run_key_problem(run_id)
    if problem is not None:
        raise InvalidArgument(f"run_id {run_id[:60]!r} is not a UUID nor a valid run key: "
                              f"{problem}. Nothing was written")
    derived = uuid.uuid5(RUN_KEY_NAMESPACE, f"{workspace_id}\x1f{env}\x1f{run_id}")
    return RunRef(str(derived), run_id)


def normalize_run_id(run_id: Any, *, workspace_id: str, env: str) -> str:
    """A run id as stored: the canonical lowercase UUID text, on every database;
    a run key is read as the id it names (see :func:`run_ref`).

    Raises:
        InvalidArgument: ``run_id`` is neither a UUID nor a valid run key.
    """
    return run_ref(run_id, workspace_id=workspace_id, env=env).id
