"""One page of runs, newest first, by keyset (``list_runs_page``).

What both SQL dialects mean the same way is written here once: the query
record, its validation, the cursor, and the WHERE clause. Each adapter only
supplies its placeholders and how it stores a timestamp and an id.

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
from collections.abc import Callable
from datetime import datetime
from typing import Any

import msgspec

from ..errors import StarflowError
from .base import RUN_STATUSES, RunInfo

__all__ = ["COUNT_CAP", "MAX_PAGE", "RunCursor", "RunPage", "RunPageQuery", "page_sql"]

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
            StarflowError: the text is not a cursor this module wrote.
        """
        try:
            raw = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
            started, run_id = msgspec.json.decode(raw, type=tuple[str, str])
            when = datetime.fromisoformat(started)
        except (ValueError, TypeError, msgspec.DecodeError):
            raise StarflowError(f"not a page cursor: {text[:60]!r} (follow the page's own "
                                "'next' link)") from None
        if when.tzinfo is None:
            raise StarflowError(f"not a page cursor: {text[:60]!r} (naive time)")
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
        if self.id_prefix is not None and not self.id_prefix.strip():
            found.append("id_prefix must not be blank")
        return found

    def check(self) -> None:
        """Raise :class:`StarflowError` naming every problem at once."""
        found = self.problems()
        if found:
            raise StarflowError("list_runs_page: " + "; ".join(found))


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


def page_sql(query: RunPageQuery, *, workspace_id: str, env: str, columns: str,
             param: Callable[[Any], str], ts: Callable[[datetime], Any],
             uuid_ids: bool) -> tuple[str, str | None, int] | None:
    """The page's SELECT and, when ``query.counts``, the per-status count.

    Args:
        param: Appends a value to the statement's arguments and returns its
            numbered placeholder (``?n`` or ``$n``): the count statement uses
            each filter's placeholder once per status.
        ts: A timestamp as the dialect stores it.
        uuid_ids: Ids are a uuid column (PostgreSQL), not text (SQLite).

    Returns ``(select, count_or_None, n)``: the count statement takes only the
    first ``n`` arguments (the filters both share). None when no run can match
    (an id prefix no uuid has).
    """
    n = 0

    def add(value: Any) -> str:
        nonlocal n
        n += 1
        return param(value)

    shared = [f"workspace_id = {add(workspace_id)}", f"env = {add(env)}",
              "started_at IS NOT NULL"]
    if query.template_id is not None:
        shared.append(f"template_id = {add(query.template_id)}")
    if query.pool is not None:
        shared.append(f"runner_pool = {add(query.pool)}")
    if query.started_from is not None:
        shared.append(f"started_at >= {add(ts(query.started_from))}")
    if query.started_before is not None:
        shared.append(f"started_at < {add(ts(query.started_before))}")
    if query.lease_expired_at is not None:
        shared.append(f"lease_until < {add(ts(query.lease_expired_at))} "
                      "AND status IN ('running', 'paused')")
    if query.id_prefix is not None:
        bounds = uuid_bounds(query.id_prefix)
        if bounds is not None:
            shared.append(f"id BETWEEN {add(bounds[0])} AND {add(bounds[1])}")
        elif uuid_ids:
            return None
        else:  # SQLite keeps any text id: a text range is still an index range
            prefix = query.id_prefix.strip()
            shared.append(f"id >= {add(prefix)} AND id < {add(prefix + chr(0x10FFFF))}")
    shared_args = n
    counts = None
    if query.counts:
        # One capped count per status, each a range of idx_workflow_runs_status_page
        # (the ORDER BY is that index's order, so no plan is cheaper than walking
        # it): the cost is bounded by COUNT_CAP, however many runs there are. The
        # statuses are this module's constants; the filters' placeholders are
        # numbered, so every branch reuses the same arguments.
        where = " AND ".join(shared)
        counts = " UNION ALL ".join(
            f"SELECT '{status}', (SELECT count(*) FROM (SELECT 1 FROM workflow_runs "
            f"WHERE {where} AND status = '{status}' ORDER BY started_at DESC "
            f"LIMIT {COUNT_CAP + 1}) capped)"
            for status in RUN_STATUSES)
    page = list(shared)
    if query.status is not None:
        page.append(f"status = {add(query.status)}")
    if query.after is not None:
        page.append(f"(started_at, id) < ({add(ts(query.after.started_at))}, "
                    f"{add(query.after.id)})")
    select = (f"SELECT {columns} FROM workflow_runs WHERE {' AND '.join(page)} "
              f"ORDER BY started_at DESC, id DESC LIMIT {add(query.limit + 1)}")
    return select, counts, shared_args


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
