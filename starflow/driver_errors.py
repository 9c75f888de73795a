"""Driver errors classified once: transient (try again) or permanent (fail).

A write that failed because the connection dropped, a lock was busy or the
server is restarting may succeed if tried again, by this runner or, after
the lease sweep, by another. A write the database refused for what it was
(a value it cannot hold, a broken constraint, a missing privilege) will be
refused again: retrying it, or handing the run to another runner, repeats
the work before it (a step runs again) and never gets past it. Both adapters
chain the driver's exception as :class:`~starflow.errors.StorageError`'s
``__cause__``; :func:`is_transient` reads it, by SQLSTATE class for
PostgreSQL and by result code for SQLite, so no adapter needs its own rule.
"""

from __future__ import annotations

import sqlite3

__all__ = ["is_transient"]

#: SQLSTATE classes (first two characters) whose errors may pass on retry:
#: 08 connection exception, 40 transaction rollback (serialization failure,
#: deadlock), 53 insufficient resources, 57 operator intervention (admin
#: shutdown, crash shutdown, cannot connect now), 58 system error (I/O); and
#: the states 55P03 lock not available, 55006 object in use, 25006 read-only
#: transaction (a standby answering after a failover, until the pool
#: reconnects). Anything else (22 data exception, 23 integrity constraint, 42
#: syntax or access rule, 54 program limit, 0A feature not supported…) is
#: permanent.
_TRANSIENT_CLASSES = frozenset({"08", "40", "53", "57", "58"})
_TRANSIENT_STATES = frozenset({"55P03", "55006", "25006"})

#: SQLite primary result codes that may pass on retry: busy, locked, I/O error,
#: disk full, cannot open (a mount coming back), protocol (lock race).
_SQLITE_TRANSIENT = frozenset({
    sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL,
    sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL, sqlite3.SQLITE_INTERRUPT,
})


def _classify(exc: BaseException) -> bool | None:
    sqlstate = getattr(exc, "sqlstate", None)
    if isinstance(sqlstate, str) and len(sqlstate) == 5:
        return sqlstate[:2] in _TRANSIENT_CLASSES or sqlstate in _TRANSIENT_STATES
    if isinstance(exc, sqlite3.Error):
        code = getattr(exc, "sqlite_errorcode", None)
        if isinstance(code, int):
            return code & 0xFF in _SQLITE_TRANSIENT
        # No result code: DataError, IntegrityError, ProgrammingError and
        # InterfaceError describe the statement or its values.
        return isinstance(exc, sqlite3.OperationalError)
    if isinstance(exc, OSError | ConnectionError | TimeoutError | EOFError):
        return True
    name = type(exc).__name__
    if name in ("ConnectionDoesNotExistError", "InterfaceError",
                "ConnectionFailureError", "InternalClientError"):
        # asyncpg's client-side errors without a SQLSTATE: a lost or closed
        # connection, or a pool being torn down.
        return True
    if isinstance(exc, UnicodeError | OverflowError | ValueError | TypeError):
        return False  # the value itself cannot be sent
    return None


def is_transient(exc: BaseException | None) -> bool:
    """Whether the database error ``exc`` (or the first classifiable error in
    its ``__cause__`` chain) may pass if the write is tried again.

    An error that cannot be classified counts as transient: the write is
    retried and, past the retries, the run is handed back, as before.
    """
    seen = 0
    while exc is not None and seen < 8:
        verdict = _classify(exc)
        if verdict is not None:
            return verdict
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return True
