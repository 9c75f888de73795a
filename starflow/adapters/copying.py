"""The two ends of ``starflow copy``: raw table access to SQLite and PostgreSQL.

:mod:`starflow.admin.copy` moves rows between databases; this module is how it
reads and writes them. Each :class:`Endpoint` lists the tables and columns
the schema defines, reads rows inside one snapshot (a read transaction held
for the whole copy) and writes rows in one transaction per batch. Rows cross
in a neutral form, so the dialects meet only here: timestamps are aware UTC
``datetime``, JSON columns are :class:`Json` (SQL NULL stays ``None``), ids are
strings. The codecs are :mod:`starflow.adapters.sql.shared`'s dialects.
"""

from __future__ import annotations

import sqlite3
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

import anyio
import anyio.to_thread

from .. import serde
from ..clock import format_ts, parse_ts
from ..errors import ConfigError, StorageError
from ..urls import normalize_scheme
from .sql.shared import POSTGRES, SQLITE, Dialect, uuid_or_none

__all__ = [
    "CHUNK",
    "Endpoint",
    "Insert",
    "Json",
    "PostgresEndpoint",
    "Query",
    "SQLiteEndpoint",
    "Side",
    "TableSpec",
    "chunks",
    "column_cast",
    "endpoint_for",
]

T = TypeVar("T")

#: Rows per statement of an id list (PostgreSQL takes 20 times as many, as one array).
CHUNK = 500
Row = dict[str, Any]
#: Rows to insert into a table: ``(table, columns, rows of values in column order)``.
Insert = tuple[str, Sequence[str], list[tuple[Any, ...]]]


class Json:
    """A JSON column's value: the decoded document and its canonical text.

    Two values are equal when their canonical texts are (keys sorted, as
    :func:`starflow.serde.encode` writes them), whatever whitespace or key
    order the database returned (PostgreSQL's jsonb reorders keys).
    """

    __slots__ = ("text",)

    def __init__(self, raw: str | bytes) -> None:
        value = serde.decode(raw, what="JSON column", sort_keys=True)
        import msgspec

        self.text = msgspec.json.encode(value).decode()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Json) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Json({self.text[:60]!r})"


@dataclass(frozen=True)
class TableSpec:
    """How one table is copied.

    Attributes:
        name: The table.
        key: The columns that identify a row (the primary key).
        lookup: The key column the target is searched by (then matched on ``key``).
        run_column: The column naming the run a row belongs to ("" if none):
            such rows are copied with their run, all or nothing.
        tenant: The table has ``workspace_id`` and ``env`` columns.
        times: Timestamp columns.
        json: JSON columns.
        uuids: Id columns that are ``uuid`` on PostgreSQL.
        bools: Flags (``boolean`` on PostgreSQL, 0/1 on SQLite).
        serial: The column a PostgreSQL sequence feeds ("" if none).
    """

    name: str
    key: tuple[str, ...]
    lookup: str
    run_column: str = ""
    tenant: bool = True
    times: frozenset[str] = frozenset()
    json: frozenset[str] = frozenset()
    uuids: frozenset[str] = frozenset()
    bools: frozenset[str] = frozenset()
    serial: str = ""

    def kind(self, column: str) -> str:
        """How the column crosses: ``time``, ``json``, ``uuid``, ``bool`` or ``plain``."""
        for kind, columns in (("time", self.times), ("json", self.json),
                              ("uuid", self.uuids), ("bool", self.bools)):
            if column in columns:
                return kind
        return "plain"


#: The kind a PostgreSQL column type asks for (others are plain values).
_PG_KINDS = {"timestamptz": "time", "timestamp": "time", "jsonb": "json", "json": "json",
             "uuid": "uuid", "bool": "bool"}


def _canonical_ts(value: datetime) -> datetime:
    return value.astimezone(UTC) if value.tzinfo is not None else value.replace(tzinfo=UTC)


class Endpoint(ABC):
    """One database as ``starflow copy`` sees it."""

    dialect: Dialect
    #: A redacted description of the database, for messages.
    where: str

    @abstractmethod
    async def connect(self, *, readonly: bool, tenant: tuple[str, str] | None = None) -> None:
        """Open the connection (read-only for a source where the driver allows it).

        ``tenant``: the one workspace and env copied, if only one (Row Level
        Security then lets a role that is not the tables' owner see its rows).
        """

    @abstractmethod
    async def close(self) -> None:
        """Close the connection, ending any transaction (a snapshot is rolled back)."""

    @abstractmethod
    async def tables(self) -> dict[str, list[str]]:
        """Every table of the schema with its columns, in the database's order."""

    @abstractmethod
    async def begin_snapshot(self) -> None:
        """Start the read transaction every later read sees."""

    @abstractmethod
    async def end_snapshot(self) -> None:
        """End the read transaction."""

    @abstractmethod
    async def fetch(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Rows of one query (inside the snapshot if one is open)."""

    @abstractmethod
    async def write(self, inserts: Sequence[Insert]) -> None:
        """Insert each ``(table, columns, rows)``, in order, all in one transaction."""

    @abstractmethod
    async def advance_sequences(self, specs: Sequence[TableSpec],
                                floors: Mapping[str, int] | None = None) -> None:
        """Move each serial table's id counter past its largest id and past
        ``floors[table]`` (never back), so ids it hands out later are new."""

    # -- neutral rows ------------------------------------------------------------

    def to_row(self, spec: TableSpec, columns: Sequence[str], values: Sequence[Any]) -> Row:
        """A database row in the neutral form."""
        row: Row = {}
        for column, value in zip(columns, values, strict=True):
            if value is None:
                row[column] = None
            elif column in spec.times:
                row[column] = (_canonical_ts(value) if isinstance(value, datetime)
                               else parse_ts(str(value)))
            elif column in spec.json:
                row[column] = Json(value)
            elif column in spec.bools:
                row[column] = bool(value)
            else:
                row[column] = value
        return row

    def from_row(self, spec: TableSpec, columns: Sequence[str], row: Mapping[str, Any]
                 ) -> tuple[Any, ...]:
        """The database's values of a neutral row, in ``columns`` order.

        Raises:
            ConfigError: an id is not a UUID where the target's column is one.
        """
        out: list[Any] = []
        for column in columns:
            value = row.get(column)
            if value is None:
                out.append(None)
            elif column in spec.times:
                out.append(self._ts_in(value))
            elif column in spec.json:
                out.append(value.text)
            elif column in spec.bools:
                out.append(bool(value) if self.dialect is POSTGRES else int(bool(value)))
            elif column in spec.uuids and self.dialect is POSTGRES:
                canonical = uuid_or_none(value)
                if canonical is None:
                    raise ConfigError(
                        f"{spec.name}.{column} {value!r} is not a UUID: PostgreSQL's column "
                        "is uuid (runs created on SQLite with custom ids cannot move there)")
                out.append(canonical)
            else:
                out.append(value)
        return tuple(out)

    @abstractmethod
    def _ts_in(self, value: datetime) -> Any: ...


class SQLiteEndpoint(Endpoint):
    """A SQLite file, through one stdlib connection on a worker thread."""

    dialect = SQLITE

    def __init__(self, path: str) -> None:
        self.path = path
        self.where = f"sqlite:///{path}"
        self._conn: sqlite3.Connection | None = None
        self._limiter = anyio.CapacityLimiter(1)

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn = self._conn
        if conn is None:
            raise StorageError(f"{self.where}: not connected")

        def job() -> T:
            return fn(conn)

        try:
            return await anyio.to_thread.run_sync(job, limiter=self._limiter)
        except sqlite3.Error as exc:
            raise StorageError(f"{self.where}: SQLite error: {exc}") from exc

    async def connect(self, *, readonly: bool, tenant: tuple[str, str] | None = None) -> None:
        import os

        if readonly and not await anyio.to_thread.run_sync(os.path.exists, self.path):
            raise ConfigError(f"--from {self.where}: no such file")

        def open_() -> sqlite3.Connection:
            if readonly:
                return sqlite3.connect(f"file:{self.path}?mode=ro", uri=True,
                                       isolation_level=None, check_same_thread=False)
            conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA busy_timeout = 10000")
            return conn

        try:
            self._conn = await anyio.to_thread.run_sync(open_, limiter=self._limiter)
        except sqlite3.Error as exc:
            raise StorageError(f"cannot open {self.where}: {exc}") from exc

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await anyio.to_thread.run_sync(conn.close, limiter=self._limiter)

    async def tables(self) -> dict[str, list[str]]:
        def read(conn: sqlite3.Connection) -> dict[str, list[str]]:
            names = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
            return {name: [c[1] for c in conn.execute(f'PRAGMA table_info("{name}")')]
                    for name in names}

        return await self._run(read)

    async def begin_snapshot(self) -> None:
        def begin(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN")
            # A WAL reader's snapshot starts at its first read, so read now.
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()

        await self._run(begin)

    async def end_snapshot(self) -> None:
        def end(conn: sqlite3.Connection) -> None:
            if conn.in_transaction:
                conn.execute("ROLLBACK")

        await self._run(end)

    async def fetch(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        return await self._run(lambda conn: conn.execute(sql, tuple(args)).fetchall())

    async def write(self, inserts: Sequence[Insert]) -> None:
        def write(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for table, columns, rows in inserts:
                    if rows:
                        conn.executemany(f"INSERT INTO {table} ({', '.join(columns)}) "
                                         f"VALUES ({', '.join('?' * len(columns))})", rows)
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        await self._run(write)

    async def advance_sequences(self, specs: Sequence[TableSpec],
                                floors: Mapping[str, int] | None = None) -> None:
        # AUTOINCREMENT keeps its counter in sqlite_sequence and moves it past any
        # id inserted explicitly; only a floor above what the table holds is set here.
        def advance(conn: sqlite3.Connection) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for spec in specs:
                    floor = (floors or {}).get(spec.name, 0)
                    if not spec.serial or floor <= 0:
                        continue
                    done = conn.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) "
                                        "WHERE name = ?", (floor, spec.name)).rowcount
                    if not done:
                        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)",
                                     (spec.name, floor))
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")

        await self._run(advance)

    def _ts_in(self, value: datetime) -> Any:
        return format_ts(value)


class PostgresEndpoint(Endpoint):
    """A PostgreSQL database, through one asyncpg connection."""

    dialect = POSTGRES

    def __init__(self, url: str) -> None:
        from .postgres import _redact

        self.url = url
        self.where = _redact(url)
        self._conn: Any = None
        self._tx: Any = None
        self._types: dict[tuple[str, str], str] = {}

    async def connect(self, *, readonly: bool, tenant: tuple[str, str] | None = None) -> None:
        import asyncpg

        settings = {"application_name": "starflow copy"}
        if tenant is not None:
            settings |= {"starflow.workspace_id": tenant[0], "starflow.env": tenant[1]}
        try:
            conn = await asyncpg.connect(self.url, server_settings=settings)
            # Text codecs: JSON crosses as its text, ids as canonical strings.
            await conn.set_type_codec("jsonb", schema="pg_catalog", encoder=str,
                                      decoder=str, format="text")
            await conn.set_type_codec("uuid", schema="pg_catalog", encoder=str,
                                      decoder=str, format="text")
            sees_all = await conn.fetchval(
                "SELECT r.rolsuper OR r.rolbypassrls OR NOT EXISTS (SELECT 1 FROM pg_class c "
                "WHERE c.relname = 'workflow_runs' AND c.relnamespace = current_schema()"
                "::regnamespace AND c.relrowsecurity AND (c.relforcerowsecurity OR "
                "pg_get_userbyid(c.relowner) <> current_user)) "
                "FROM pg_roles r WHERE r.rolname = current_user")
        except (OSError, asyncpg.PostgresError) as exc:
            raise StorageError(f"cannot connect to {self.where}: {exc}") from exc
        if not sees_all and tenant is None:
            await conn.close()
            # Row Level Security would hide every row silently: a copy of nothing.
            raise ConfigError(
                f"{self.where}: Row Level Security hides other tenants' rows from this role; "
                "copy one tenant with --workspace W --env E, or connect as the "
                "tables' owner or a role with BYPASSRLS")
        self._conn = conn

    async def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            await conn.close()

    async def tables(self) -> dict[str, list[str]]:
        rows = await self._conn.fetch(
            "SELECT table_name, column_name, udt_name FROM information_schema.columns "
            "WHERE table_schema = current_schema() ORDER BY table_name, ordinal_position")
        out: dict[str, list[str]] = {}
        for row in rows:
            out.setdefault(row[0], []).append(row[1])
            self._types[(row[0], row[1])] = row[2]
        return out

    async def begin_snapshot(self) -> None:
        self._tx = self._conn.transaction(isolation="repeatable_read", readonly=True)
        await self._tx.start()

    async def end_snapshot(self) -> None:
        tx, self._tx = self._tx, None
        if tx is not None:
            await tx.rollback()

    async def fetch(self, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
        import asyncpg

        try:
            return [tuple(r) for r in await self._conn.fetch(sql, *args)]
        except asyncpg.PostgresError as exc:
            raise StorageError(f"{self.where}: {exc}") from exc

    def _insert_sql(self, table: str, columns: Sequence[str]) -> str:
        # One statement per table and batch: the rows go in as one array per
        # column (unnest), ten times faster than a row-by-row executemany.
        # JSON travels as text and is cast per element. In array order: ids a
        # sequence gives (a run's renumbered events) follow the source's order.
        types = [self._types.get((table, c), "text") for c in columns]
        names = [f"c{i}" for i in range(len(columns))]
        arrays = ", ".join(f"${i + 1}::{'text' if t in ('jsonb', 'json') else t}[]"
                           for i, t in enumerate(types))
        select = ", ".join(f"u.{n}::{t}" if t in ("jsonb", "json") else f"u.{n}"
                           for n, t in zip(names, types, strict=True))
        return (f"INSERT INTO {table} ({', '.join(columns)}) SELECT {select} "
                f"FROM unnest({arrays}) WITH ORDINALITY AS u({', '.join(names)}, n_) "
                f"ORDER BY u.n_")

    async def write(self, inserts: Sequence[Insert]) -> None:
        import asyncpg

        try:
            async with self._conn.transaction():
                for table, columns, rows in inserts:
                    if rows:
                        await self._conn.execute(self._insert_sql(table, columns),
                                                 *(list(col) for col in zip(*rows, strict=True)))
        except asyncpg.PostgresError as exc:
            raise StorageError(f"{self.where}: {exc}") from exc

    def unknown_kinds(self, specs: Sequence[TableSpec]) -> list[str]:
        """Columns whose PostgreSQL type the specs do not describe (``table.column: type``):
        a timestamp, JSON, uuid or boolean column copied as a plain value would be
        written wrong, so the copy stops before writing instead."""
        out = []
        for spec in specs:
            for (table, column), udt in sorted(self._types.items()):
                if table == spec.name and _PG_KINDS.get(udt, "plain") != spec.kind(column):
                    out.append(f"{table}.{column}: {udt}")
        return out

    async def advance_sequences(self, specs: Sequence[TableSpec],
                                floors: Mapping[str, int] | None = None) -> None:
        for spec in specs:
            if not spec.serial:
                continue
            seq = await self._conn.fetchval("SELECT pg_get_serial_sequence($1, $2)",
                                            spec.name, spec.serial)
            if seq is None:
                continue
            floor = (floors or {}).get(spec.name, 0)
            # setval only ever moves forward: ids a writer already took stay taken.
            await self._conn.execute(
                f"SELECT setval($1::regclass, m) FROM (SELECT GREATEST(max({spec.serial}), "
                f"$2::bigint) AS m FROM {spec.name}) s WHERE m IS NOT NULL AND m > "
                f"(SELECT CASE WHEN is_called THEN last_value ELSE last_value - 1 END "
                f"FROM {seq})", seq, floor)

    def _ts_in(self, value: datetime) -> Any:
        return value


def endpoint_for(url: str, what: str) -> Endpoint:
    """The endpoint of a ``sqlite:///`` or ``postgresql://`` URL (``what``: the option)."""
    url = normalize_scheme(url)
    if url.startswith(("postgresql://", "postgres://")):
        return PostgresEndpoint(url)
    if url.startswith("sqlite://"):
        path = url[len("sqlite://"):]
        if path.startswith("/"):
            path = path[1:]
        if not path or path == ":memory:":
            raise ConfigError(f"{what}: a SQLite URL needs a file path: {url!r} "
                              "(use sqlite:///path.db)")
        return SQLiteEndpoint(path)
    raise ConfigError(f"{what}: not a database URL: {url!r} "
                      "(use sqlite:///path.db or postgresql://user@host/db)")


# ---------------------------------------------------------------------------
# Queries over an endpoint (used by starflow.admin.copy)
# ---------------------------------------------------------------------------


class Query:
    """A WHERE clause built in placeholder order."""

    def __init__(self, end: Endpoint) -> None:
        self.end = end
        self.parts: list[str] = []
        self.args: list[Any] = []

    def eq(self, column: str, value: Any, cast: str = "") -> Query:
        self.args.append(value)
        self.parts.append(f"{column} = {self.end.dialect.p(len(self.args), cast)}")
        return self

    def gt(self, column: str, value: Any, cast: str = "") -> Query:
        self.args.append(value)
        self.parts.append(f"{column} > {self.end.dialect.p(len(self.args), cast)}")
        return self

    def one_of(self, column: str, values: Sequence[Any], cast: str = "text") -> Query:
        d = self.end.dialect
        self.parts.append(d.one_of(column, len(self.args) + 1, len(values), cast))
        self.args.extend(d.many(values))
        return self

    def raw(self, sql: str) -> Query:
        self.parts.append(sql)
        return self

    @property
    def where(self) -> str:
        return f" WHERE {' AND '.join(self.parts)}" if self.parts else ""


def column_cast(spec: TableSpec, column: str) -> str:
    if column in spec.uuids:
        return "uuid"
    if column == spec.serial:
        return "bigint"
    return "text"


def chunks(values: Sequence[Any], size: int = CHUNK) -> Iterable[Sequence[Any]]:
    for i in range(0, len(values), size):
        yield values[i:i + size]




class Side:
    """An endpoint with the columns its schema gives each copied table."""

    def __init__(self, end: Endpoint, columns: dict[str, list[str]]) -> None:
        self.end = end
        self.columns = columns

    def has(self, table: str) -> bool:
        return table in self.columns

    async def select(self, spec: TableSpec, q: Query, *, columns: Sequence[str] | None = None,
                     order: str = "", limit: int | None = None) -> list[dict[str, Any]]:
        if not self.has(spec.name):
            return []
        cols = list(columns or self.columns[spec.name])
        sql = f"SELECT {', '.join(cols)} FROM {spec.name}{q.where}"
        if order:
            sql += f" ORDER BY {order}"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        rows = await self.end.fetch(sql, q.args)
        return [self.end.to_row(spec, cols, r) for r in rows]

    async def select_in(self, spec: TableSpec, column: str, values: Sequence[Any],
                        extra: Callable[[Query], Query] | None = None,
                        order: str = "") -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if self.end.dialect.name == "postgres" and column in spec.uuids:
            values = [v for v in values if uuid_or_none(v) is not None]
        # PostgreSQL takes one array; SQLite one placeholder per value.
        size = 20 * CHUNK if self.end.dialect.name == "postgres" else CHUNK
        for chunk in chunks(list(dict.fromkeys(values)), size):
            q = Query(self.end).one_of(column, chunk, column_cast(spec, column))
            if extra is not None:
                extra(q)
            out.extend(await self.select(spec, q, order=order))
        return out
