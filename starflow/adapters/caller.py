"""Writing a run's start in the caller's own database transaction, written once.

``sf.start(wf, …, connection=conn)`` (#30): the caller holds a driver
connection (asyncpg for PostgreSQL, aiosqlite for SQLite) with an open
transaction in which it wrote its own rows; the run's start is written there
too, so both commit, or roll back, together.

A :class:`CallerConnection` is one driver's side: run a statement, read a row,
turn its errors into :class:`~starflow.errors.StorageError`, and add what the
database sends with a write (PostgreSQL's ``NOTIFY``, delivered at the caller's
commit). :class:`CallerTransaction` is what both SQL adapters mean by the
start, against the shared SQL of :mod:`starflow.adapters._sql` and
:mod:`starflow.adapters.queries`: the unit's ops in a savepoint (a refused
write, a duplicate run id or dedup key, leaves the caller's transaction as it
was and usable), and the reads a start makes (an idempotent run id, the
definition id, the active run holding a dedup key) on the caller's connection,
so that they see the caller's uncommitted rows too.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import anyio

from ..records import RunInfo
from ._sql import RUN_COLUMNS, merge_run_writes, op_sql, run_info
from .dialect import Dialect
from .queries import Queries
from .units import Op, Unit

__all__ = ["SAVEPOINT", "CallerConnection", "CallerTransaction"]

#: The savepoint the start's writes are made under.
SAVEPOINT = "starflow_start"


class CallerConnection(abc.ABC):
    """The caller's driver connection, checked to be in a transaction on the app's
    database; its errors come out as :class:`~starflow.errors.StorageError`."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    @abc.abstractmethod
    async def execute(self, sql: str, args: Sequence[Any] = ()) -> None:
        """Run one statement."""

    @abc.abstractmethod
    async def fetchrow(self, sql: str, args: Sequence[Any] = ()) -> Sequence[Any] | None:
        """The first row of a query (None if it returns none)."""

    def announcing(self, op: Op, sql: str, args: tuple[Any, ...]) -> tuple[str, tuple[Any, ...]]:
        """``op``'s statement with what the database announces of it at commit
        (PostgreSQL: work for the workers' ``LISTEN``); unchanged by default."""
        return sql, args

    def savepoint(self) -> str:
        """The statement (or statements, without arguments) that opens the savepoint."""
        return f"SAVEPOINT {SAVEPOINT}"

    def needs_savepoint(self, refusable: bool) -> bool:
        """Whether a unit needs its savepoint: always, unless the database aborts the
        whole transaction on a failed statement and the unit is not ``refusable``
        (a refusal the caller's transaction must survive: an existing run id, a
        dedup key)."""
        return True

    async def write(self, statements: Sequence[tuple[str, tuple[Any, ...]]], *,
                    savepoint: bool = True) -> None:
        """Run ``statements``: all of them, or (raising) none, under a savepoint
        unless ``savepoint`` is False.

        One call per statement here; a driver may send them at once.
        """
        if not savepoint:
            for sql, args in statements:
                await self.execute(sql, args)
            return
        await self.execute(self.savepoint())
        try:
            for sql, args in statements:
                await self.execute(sql, args)
        except Exception:
            # Cancellation is not caught: the caller's transaction is being torn down.
            with anyio.CancelScope(shield=True):
                await self.execute(f"ROLLBACK TO SAVEPOINT {SAVEPOINT}")
                await self.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")
            raise
        await self.execute(f"RELEASE SAVEPOINT {SAVEPOINT}")


class CallerTransaction:
    """A run's start (its reads and its unit) on a :class:`CallerConnection`.

    Args:
        conn: The caller's connection.
        workspace_id: The adapter's tenant scope.
        env: The adapter's environment scope.
        seal: What a wrapper above the SQL adapter does to each op on its way to
            the database (the payload codec seals user values), identity by
            default; see :meth:`through`.
        open_run: What it does to a run read back (the codec opens them).
    """

    _queries: dict[Dialect, Queries] = {}

    def __init__(self, conn: CallerConnection, *, workspace_id: str, env: str,
                 seal: Callable[[Op], Op] | None = None,
                 open_run: Callable[[RunInfo], RunInfo] | None = None) -> None:
        self.conn = conn
        self.workspace_id = workspace_id
        self.env = env
        self._seal = seal
        self._open_run = open_run
        d = conn.dialect
        self._d = d
        q = self._queries.get(d)
        if q is None:
            q = self._queries[d] = Queries(d)
        self._q = q
        columns = ", ".join(d.out(c) for c in RUN_COLUMNS.split(", "))
        self._get_run = (f"SELECT {columns} FROM workflow_runs WHERE id = {d.p(1)} "
                         f"AND {d.key_tenant(2)}")

    def through(self, *, seal: Callable[[Op], Op],
                open_run: Callable[[RunInfo], RunInfo]) -> CallerTransaction:
        """This start as seen through a wrapper adapter: its ops pass ``seal``
        before this one's own sealing (the wrapper is above), the runs it reads
        pass ``open_run`` after this one's own opening."""
        inner_seal, inner_open = self._seal, self._open_run
        return CallerTransaction(
            self.conn, workspace_id=self.workspace_id, env=self.env,
            seal=seal if inner_seal is None else lambda op: inner_seal(seal(op)),
            open_run=open_run if inner_open is None else lambda r: open_run(inner_open(r)))

    async def get_run(self, run_id: str) -> RunInfo | None:
        """The run with this id, committed or written earlier in this transaction."""
        row = await self.conn.fetchrow(self._get_run, (run_id, self.workspace_id, self.env))
        if row is None:
            return None
        run = run_info(row, self._d)
        return run if self._open_run is None else self._open_run(run)

    async def definition_id(self, name: str, version: int, code_hash: str, *, now: datetime,
                            new_id: str) -> str:
        """The id of the (name, version) definition, inserting it (as ``new_id``) if new.

        Written in the caller's transaction: if it rolls back, so does the row.
        """
        q, scope = self._q, (self.workspace_id, self.env)
        await self.conn.execute(q.insert_definition, (new_id, *scope, name, version, code_hash,
                                                      self._d.ts(now)))
        row = await self.conn.fetchrow(q.definition_id, (*scope, name, version))
        assert row is not None  # inserted, or there before (the conflict)
        return str(row[0])

    async def find_active_dedup(self, pool: str | None, dedup_key: str) -> str | None:
        """The active run of ``pool`` holding ``dedup_key``, if any."""
        row = await self.conn.fetchrow(self._q.find_active_dedup,
                                       (self.workspace_id, self.env, pool or "", dedup_key))
        return None if row is None else str(row[0])

    async def write(self, unit: Unit, *, refusable: bool = True) -> None:
        """Write ``unit``'s ops in the caller's transaction, under a savepoint.

        ``refusable``: the database may refuse the unit in a way the caller acts
        on (a run id or dedup key taken); the caller's transaction must go on
        then. Otherwise a driver whose database aborts the transaction on any
        failed statement writes it without the savepoint.

        Raises:
            StorageError: the database refused a write; the savepoint is rolled
                back, so the caller's transaction holds none of the unit's rows
                and goes on (without a savepoint, PostgreSQL has aborted it).
        """
        assert unit.guard is None  # a start: nothing to check but the insert itself
        d, ws, env = self._d, self.workspace_id, self.env
        ops = unit.ops if self._seal is None else [self._seal(op) for op in unit.ops]
        statements = []
        for op in merge_run_writes(ops):  # built first: a bad value writes nothing
            statement = op_sql(d, op, ws, env)
            assert statement is not None  # Mark ops are merged away
            statements.append(self.conn.announcing(op, *statement))
        await self.conn.write(statements,
                              savepoint=self.conn.needs_savepoint(refusable))
