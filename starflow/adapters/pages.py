"""One page of runs, newest first, by keyset (``list_runs_page``).

What both SQL dialects mean the same way is written here once: the query
record, its validation, the cursor, and the statements; what differs (the
placeholders, how a timestamp is stored, whether ids are uuids) is the
adapter's :class:`~starflow.adapters.sql.shared.Dialect`. Each adapter only runs
the statements.

Keyset, not ``OFFSET``: a page after the first continues strictly below the
last row shown, ``(started_at, id) < (cursor.started_at, cursor.id)``, so the
database walks an index from that point (``idx_workflow_runs_page``, or
``idx_workflow_runs_status_page`` with a status filter, migration 026)
instead of counting past every earlier row. Runs without ``started_at`` (only
rows written by other engines can lack one) are not listed.
"""

from __future__ import annotations

import base64
import re
from datetime import datetime
from typing import Any

import msgspec

from ..errors import InvalidArgument
from ..records import RUN_STATUSES, RunInfo
from .sql.shared import RUN_COLUMNS, Dialect, uuid_or_none

__all__ = [
    "COUNT_CAP",
    "MAX_PAGE",
    "PageStatements",
    "RunCursor",
    "RunPage",
    "RunPageQuery",
    "make_page",
    "page_sql",
    "uuid_bounds",
]

#: The most rows one page may hold.
MAX_PAGE = 500
#: Counts per status are exact up to this; past it a count reads COUNT_CAP + 1.
COUNT_CAP = 10_000
_HEX = re.compile(r"^[0-9a-f-]{1,36}$")
_UUID_DASHES = (8, 13, 18, 23)


class RunCursor(msgspec.Struct, frozen=True, kw_only=True):
    """Where a page ends: the last row's ``started_at`` and ``id``."""

    started_at: datetime
    id: str

    def encode(self) -> str:
        """An opaque URL-safe text (``RunCursor.decode`` reads it back)."""
        raw = msgspec.json.encode([self.started_at.isoformat(), self.id])
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()

    @classmethod
    def decode(cls, text: str) -> RunCursor:
        """Read :meth:`encode`'s text.

        Raises:
            InvalidArgument: the text is not a cursor this module wrote.
        """
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            started, run_id = msgspec.json.decode(raw, type=tuple[str, str])
            when = datetime.fromisoformat(started)
        except (ValueError, TypeError, msgspec.DecodeError):
            raise InvalidArgument(f"not a page cursor: {text[:60]!r} (follow the page's own "
                                "'next' link)") from None
        if when.tzinfo is None:
            raise InvalidArgument(f"not a page cursor: {text[:60]!r} (naive time)")
        return cls(started_at=when, id=run_id)


class RunPageQuery(msgspec.Struct, frozen=True, kw_only=True):
    """Filters and position of one page of runs (every filter optional).

    Attributes:
        status: Only runs in this status.
        template_id: Only runs of this workflow.
        pool: Only runs queued for this ``runner_pool``.
        started_from: Only runs started at or after this (timezone-aware).
        started_before: Only runs started before this (timezone-aware).
        id_prefix: Only runs whose id starts with this text (case-insensitive).
        lease_expired_at: Only running or paused runs whose lease ended before this.
        statuses: Only runs in one of these statuses (with ``status``, both apply).
        attributes: Only runs with every one of these attributes (key -> the JSON
            text of the value, as ``encode_attributes`` writes it), each an
            index lookup.
        after: Continue below this cursor (the previous page's ``next``).
        limit: Rows per page, 1 to :data:`MAX_PAGE`.
        counts: Also count the runs per status (every filter but ``status`` and
            ``after`` applied), exactly up to :data:`COUNT_CAP`; a larger count
            reads ``COUNT_CAP + 1`` ("more than 10,000").
    """

    status: str | None = None
    template_id: str | None = None
    pool: str | None = None
    started_from: datetime | None = None
    started_before: datetime | None = None
    id_prefix: str | None = None
    lease_expired_at: datetime | None = None
    statuses: tuple[str, ...] | None = None
    attributes: dict[str, str] | None = None
    after: RunCursor | None = None
    limit: int = 50
    counts: bool = False

    def problems(self) -> list[str]:
        """What is wrong with the query, each naming the field and its value."""
        found = []
        if self.status is not None and self.status not in RUN_STATUSES:
            found.append(f"status must be one of {', '.join(RUN_STATUSES)}: {self.status!r}")
        if (isinstance(self.limit, bool) or not isinstance(self.limit, int)
                or not 1 <= self.limit <= MAX_PAGE):
            found.append(f"limit must be an int from 1 to {MAX_PAGE}: {self.limit!r}")
        for name in ("started_from", "started_before", "lease_expired_at"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                found.append(f"{name} must be timezone-aware: {value!r}")
        if self.after is not None and self.after.started_at.tzinfo is None:
            found.append(f"after.started_at must be timezone-aware: {self.after.started_at!r}")
        if self.statuses is not None and (not self.statuses or any(
                st not in RUN_STATUSES for st in self.statuses)):
            found.append(f"statuses must be some of {', '.join(RUN_STATUSES)}: "
                         f"{self.statuses!r}")
        if self.id_prefix is not None and not self.id_prefix.strip():
            found.append("id_prefix must not be blank")
        return found

    def check(self) -> None:
        """Raise :class:`~starflow.errors.InvalidArgument` naming every problem at once."""
        found = self.problems()
        if found:
            raise InvalidArgument("list_runs_page: " + "; ".join(found))


class RunPage(msgspec.Struct, frozen=True, kw_only=True):
    """One page: the runs newest first, the cursor of the next page (None on the
    last), and the counts per status when asked for."""

    runs: list[RunInfo]
    next: RunCursor | None = None
    counts: dict[str, int] | None = None


def uuid_bounds(prefix: str) -> tuple[str, str] | None:
    """The smallest and largest canonical uuid text starting with ``prefix``
    (lowercased), or None when no uuid can start with it."""
    prefix = prefix.strip().lower()
    if not _HEX.match(prefix):
        return None
    for i, ch in enumerate(prefix):
        if (ch == "-") != (i in _UUID_DASHES):
            return None
    template_lo = "00000000-0000-0000-0000-000000000000"
    template_hi = "ffffffff-ffff-ffff-ffff-ffffffffffff"
    return prefix + template_lo[len(prefix):], prefix + template_hi[len(prefix):]


class PageStatements(msgspec.Struct, frozen=True, kw_only=True):
    """The statements of one page, each with its arguments in placeholder order."""

    select: str
    select_args: tuple[Any, ...]
    count: str | None = None
    count_args: tuple[Any, ...] = ()


def page_sql(d: Dialect, query: RunPageQuery, *, workspace_id: str, env: str,
             columns: str = RUN_COLUMNS) -> PageStatements | None:
    """The page's SELECT and, when ``query.counts``, the per-status count, in
    dialect ``d`` (its placeholders, how it stores a timestamp, whether run ids
    are a uuid column).

    Returns None when no run can match (an id prefix no uuid has, where ids
    are uuids).

    Raises:
        InvalidArgument: ``query.after.id`` cannot be a run id of this database.
    """
    if query.after is not None and d.uuid_ids and uuid_or_none(query.after.id) is None:
        raise InvalidArgument(f"list_runs_page: after.id must be a run id (a UUID on "
                              f"{d.name}): {query.after.id[:60]!r}")
    # Each filter as (SQL with "{}" for its placeholders, its arguments).
    shared: list[tuple[str, tuple[Any, ...]]] = [
        ("workspace_id = {} AND env = {}", (workspace_id, env)),
        ("started_at IS NOT NULL", ()),
    ]
    if query.template_id is not None:
        shared.append(("template_id = {}", (query.template_id,)))
    if query.pool is not None:
        shared.append(("runner_pool = {}", (query.pool,)))
    if query.started_from is not None:
        shared.append(("started_at >= {}", (d.ts(query.started_from),)))
    if query.started_before is not None:
        shared.append(("started_at < {}", (d.ts(query.started_before),)))
    if query.lease_expired_at is not None:
        shared.append(("lease_until < {} AND status IN ('running', 'paused')",
                       (d.ts(query.lease_expired_at),)))
    if query.statuses is not None:
        # Constants checked by RunPageQuery.problems, passed as arguments all the same.
        shared.append((f"status IN ({', '.join('{}' for _ in query.statuses)})",
                       tuple(query.statuses)))
    for key, value in sorted((query.attributes or {}).items()):
        # One lookup per attribute on idx_workflow_run_attributes_lookup.
        shared.append(("id IN (SELECT run_id FROM workflow_run_attributes WHERE "
                       "workspace_id = {} AND env = {} AND key = {} AND value = {})",
                       (workspace_id, env, key, value)))
    if query.id_prefix is not None:
        bounds = uuid_bounds(query.id_prefix)
        if bounds is not None:
            shared.append(("id BETWEEN {} AND {}", bounds))
        elif d.uuid_ids:
            return None
        else:  # SQLite keeps any text id: a text range is still an index range
            prefix = query.id_prefix.strip()
            shared.append(("id >= {} AND id < {}", (prefix, prefix + chr(0x10FFFF))))
    count = None
    count_args: tuple[Any, ...] = ()
    if query.counts:
        # One capped count per status, each a range of idx_workflow_runs_status_page
        # (the ORDER BY is that index's order, so no plan is cheaper than walking
        # it): the cost is bounded by COUNT_CAP, however many runs there are. The
        # statuses are this module's constants; each branch takes the filters'
        # arguments again.
        count = " UNION ALL ".join(
            f"SELECT '{status}', (SELECT count(*) FROM (SELECT 1 FROM workflow_runs "
            f"WHERE {_where(shared)} AND status = '{status}' "
            f"ORDER BY started_at DESC LIMIT {COUNT_CAP + 1}) capped)"
            for status in RUN_STATUSES)
        count_args = _args(shared) * len(RUN_STATUSES)
        count = _numbered(d, count, count_args)
    page = list(shared)
    if query.status is not None:
        page.append(("status = {}", (query.status,)))
    if query.after is not None:
        page.append(("(started_at, id) < ({}, {})",
                     (d.ts(query.after.started_at), query.after.id)))
    select_args = (*_args(page), query.limit + 1)
    select = _numbered(d, f"SELECT {columns} FROM workflow_runs WHERE {_where(page)} "
                          "ORDER BY started_at DESC, id DESC LIMIT {}", select_args)
    return PageStatements(select=select, select_args=select_args, count=count,
                          count_args=count_args)


def _where(filters: list[tuple[str, tuple[Any, ...]]]) -> str:
    return " AND ".join(sql for sql, _ in filters)


def _args(filters: list[tuple[str, tuple[Any, ...]]]) -> tuple[Any, ...]:
    return tuple(a for _, args in filters for a in args)


def _numbered(d: Dialect, sql: str, args: tuple[Any, ...]) -> str:
    """``sql`` with each ``{}`` replaced by the dialect's next placeholder (numbered
    in occurrence order, so ``args`` in that order fit both dialects)."""
    parts = sql.split("{}")
    if len(parts) - 1 != len(args):  # a bug here, never a user's input
        raise AssertionError(f"{len(parts) - 1} placeholders for {len(args)} arguments")
    return parts[0] + "".join(d.p(n) + part for n, part in enumerate(parts[1:], start=1))


def make_page(runs: list[RunInfo], query: RunPageQuery,
              counts: dict[str, int] | None) -> RunPage:
    """The page from ``limit + 1`` fetched rows: the extra one only says there is more."""
    more = len(runs) > query.limit
    runs = runs[:query.limit]
    cursor = None
    if more and runs and runs[-1].started_at is not None:
        cursor = RunCursor(started_at=runs[-1].started_at, id=runs[-1].id)
    if counts is not None:
        counts = {status: counts.get(status, 0) for status in RUN_STATUSES}
    return RunPage(runs=runs, next=cursor, counts=counts)
