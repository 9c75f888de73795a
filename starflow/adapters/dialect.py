"""How each SQL database spells what the shared SQL needs.

A :class:`Dialect` says how to write what differs between SQLite and
PostgreSQL: placeholders (``?`` in occurrence order, or ``$n`` with a type
cast where PostgreSQL cannot infer one), the tenant check of a lookup by key,
"one of these values", and the codecs (SQLite stores timestamps and JSON as
text and takes any id; asyncpg encodes natively and ids must be UUIDs).
:mod:`starflow.adapters._sql` writes each statement once against it.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from .. import serde
from ..clock import format_ts, parse_ts
from ..errors import ConfigError
from .units import JSON_RUN_COLUMNS

__all__ = ["POSTGRES", "POSTGRES_CALLER", "SQLITE", "Dialect", "require_uuid", "uuid_or_none"]

#: ``workflow_runs`` columns of type uuid on PostgreSQL.
UUID_RUN_COLUMNS = frozenset({"id", "definition_id", "parent_run_id", "continued_as"})


class Dialect:
    """How one database spells what the shared SQL needs (see the module docstring)."""

    name = ""
    #: The locking clause of a claim's candidate rows ("" where writers are serialized).
    skip_locked = ""
    #: Run ids are a ``uuid`` column (only uuid text can name a run), not any text.
    uuid_ids = False

    def p(self, n: int, cast: str = "") -> str:
        """The ``n``-th placeholder (1-based, in occurrence order)."""
        raise NotImplementedError

    def key_tenant(self, n: int, table: str = "") -> str:
        """The tenant check of a lookup by key, on placeholders ``n`` and ``n + 1``."""
        return f"{table}workspace_id = {self.p(n)} AND {table}env = {self.p(n + 1)}"

    def tenant(self, n: int, table: str = "") -> str:
        """The tenant check of a listing (indexable ``=``), on ``n`` and ``n + 1``."""
        return f"{table}workspace_id = {self.p(n)} AND {table}env = {self.p(n + 1)}"

    def one_of(self, column: str, n: int, count: int, cast: str = "text") -> str:
        """``column`` is one of ``count`` values, from placeholder ``n`` on."""
        raise NotImplementedError

    def width(self, count: int) -> int:
        """How many placeholders :meth:`one_of` of ``count`` values takes."""
        raise NotImplementedError

    def many(self, values: Sequence[Any]) -> tuple[Any, ...]:
        """The arguments of :meth:`one_of` for ``values``."""
        raise NotImplementedError

    def run_p(self, n: int, column: str) -> str:
        """The ``n``-th placeholder, for a value of ``workflow_runs.column``."""
        return self.p(n)

    def out(self, column: str) -> str:
        """How a read selects ``workflow_runs.column`` (its name, or a cast of it)."""
        return column

    # -- codecs (Python → database) ---------------------------------------------

    def ts(self, value: datetime | None) -> Any:
        return value

    def json(self, value: Any, *, null: bool = False, what: str = "value") -> Any:
        """A JSON value; ``null``: None is SQL NULL (else it is JSON ``null``)."""
        return value

    def key(self, value: str | None, what: str) -> Any:
        """An id column's value (validated where the column is typed)."""
        return value

    def run_value(self, column: str, value: Any) -> Any:
        return value

    def flag(self, value: bool) -> Any:
        """A boolean column's value."""
        return bool(value)

    def unset(self, column: str) -> str:
        """``column`` (a boolean) is false, spelled as the partial indexes spell it."""
        return f"NOT {column}"

    # -- codecs (database → Python) ---------------------------------------------

    def ts_out(self, value: Any) -> datetime | None:
        return value  # type: ignore[no-any-return]

    def at(self, value: Any) -> datetime:
        """A NOT NULL timestamp column's value."""
        return value  # type: ignore[no-any-return]

    def json_out(self, value: Any) -> Any:
        return value


class _SQLite(Dialect):
    name = "sqlite"

    def p(self, n: int, cast: str = "") -> str:
        return "?"

    def one_of(self, column: str, n: int, count: int, cast: str = "text") -> str:
        return f"{column} IN ({', '.join(['?'] * count)})"

    def width(self, count: int) -> int:
        return count

    def many(self, values: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(values)

    def ts(self, value: datetime | None) -> Any:
        return format_ts(value) if value is not None else None

    def json(self, value: Any, *, null: bool = False, what: str = "value") -> Any:
        if null and value is None:
            return None
        return serde.encode(value, what=what).decode()

    def run_value(self, column: str, value: Any) -> Any:
        if value is None:
            return None
        if column in JSON_RUN_COLUMNS:
            return serde.encode(value, what=column).decode()
        if isinstance(value, datetime):
            return format_ts(value)
        return value

    def flag(self, value: bool) -> Any:
        return int(bool(value))

    def unset(self, column: str) -> str:
        # SQLite uses a partial index only if the query repeats its WHERE term.
        return f"{column} = 0"

    def ts_out(self, value: Any) -> datetime | None:
        return parse_ts(value) if value else None

    def at(self, value: Any) -> datetime:
        return parse_ts(value)

    def json_out(self, value: Any) -> Any:
        return serde.decode(value) if value is not None else None


class _Postgres(Dialect):
    name = "postgres"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    uuid_ids = True

    def p(self, n: int, cast: str = "") -> str:
        return f"${n}::{cast}" if cast else f"${n}"

    def key_tenant(self, n: int, table: str = "") -> str:
        # Written with IS NOT DISTINCT FROM (the same as = on these NOT NULL
        # columns) because the planner cannot serve it from an index: with
        # stale or missing statistics it otherwise picks an index led by
        # (workspace_id, env) over the primary key and filters a whole
        # workspace's rows on every boundary (tests/adapters/test_postgres.py,
        # TestHotPathPlans). Listing queries keep the indexable =.
        return f"({table}workspace_id, {table}env) IS NOT DISTINCT FROM (${n}, ${n + 1})"

    def one_of(self, column: str, n: int, count: int, cast: str = "text") -> str:
        return f"{column} = ANY(${n}::{cast}[])"

    def width(self, count: int) -> int:
        return 1

    def many(self, values: Sequence[Any]) -> tuple[Any, ...]:
        return (list(values),)

    def key(self, value: str | None, what: str) -> Any:
        return require_uuid(value, what)

    def run_value(self, column: str, value: Any) -> Any:
        if column in ("definition_id", "parent_run_id", "continued_as"):
            return require_uuid(value, column)
        if column in JSON_RUN_COLUMNS and value is not None:
            # Validate here so a bad value raises SerializationError itself.
            serde.encode(value, what=column)
        return value


class _PostgresCaller(_Postgres):
    """PostgreSQL through a connection starflow did not open: the caller's own,
    in the caller's transaction (``sf.start(..., connection=conn)``).

    Its codecs are the driver's defaults or the caller's own (a caller may map
    jsonb to its own JSON library), not starflow's: JSON goes in and comes out
    as text, cast in the statement, and uuids come out as text.
    """

    name = "postgres-caller"

    def p(self, n: int, cast: str = "") -> str:
        return f"${n}::text::jsonb" if cast == "jsonb" else super().p(n, cast)

    def run_p(self, n: int, column: str) -> str:
        return self.p(n, "jsonb" if column in JSON_RUN_COLUMNS else "")

    def out(self, column: str) -> str:
        return f"{column}::text" if column in JSON_RUN_COLUMNS | UUID_RUN_COLUMNS else column

    def json(self, value: Any, *, null: bool = False, what: str = "value") -> Any:
        if null and value is None:
            return None
        return serde.encode(value, what=what).decode()

    def run_value(self, column: str, value: Any) -> Any:
        if column in JSON_RUN_COLUMNS:
            return None if value is None else serde.encode(value, what=column).decode()
        return super().run_value(column, value)

    def json_out(self, value: Any) -> Any:
        return serde.decode(value, sort_keys=True) if isinstance(value, str) else value


SQLITE: Dialect = _SQLite()
POSTGRES: Dialect = _Postgres()
POSTGRES_CALLER: Dialect = _PostgresCaller()


def uuid_or_none(value: str) -> str | None:
    """The canonical form of a uuid string, or None if it is not one."""
    if not isinstance(value, str):
        return None
    return _canonical_uuid(value)


@functools.lru_cache(maxsize=4096)
def _canonical_uuid(value: str) -> str | None:
    import uuid

    # Cached: every unit of a run checks the same run id (a few µs each time).
    try:
        return str(uuid.UUID(value))
    except ValueError:
        return None


def require_uuid(value: str | None, what: str) -> str | None:
    """``value`` as a canonical UUID (None stays None); ConfigError if it is not one."""
    if value is None:
        return None
    canonical = uuid_or_none(value)
    if canonical is None:
        raise ConfigError(
            f"{what} must be a UUID on PostgreSQL (the column is uuid): got {value!r}; "
            "pass str(uuid.uuid4()) or let starflow generate the id",
            run_id=value if what == "run id" else None,
        )
    return canonical
