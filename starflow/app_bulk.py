"""Bulk actions of :class:`~starflow.Starflow` (#30): ``cancel_runs``,
``retry_runs`` and ``fork_runs`` check their filter here, count the matches,
then act on each run, page by page."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime

import msgspec

from .adapters.base import WorkflowStateAdapter
from .adapters.pages import MAX_PAGE, RunCursor, RunPageQuery
from .config import int_problem
from .errors import (
    InvalidArgument,
    NodeNotInHistory,
    RunFinished,
    RunNotEnded,
    RunNotFound,
    StarflowError,
    StorageError,
    TooManyRuns,
)
from .limits import name_problem
from .logs import get_logger
from .records import BULK_STATUSES, MAX_REPORTED, RUN_STATUSES, BulkResult, RunFilter, RunInfo
from .workflow.attributes import encode_attributes

__all__ = ["BULK_PAGE", "DEFAULT_BULK_LIMIT", "bulk_query", "matches", "run_bulk"]

_log = get_logger("starflow.bulk")
#: ``cancel_runs``' (``retry_runs``', ``fork_runs``') default cap on the matches.
DEFAULT_BULK_LIMIT = 1000
#: Runs read per page by a bulk action (its memory bound).
BULK_PAGE = MAX_PAGE


async def run_bulk(adapter: WorkflowStateAdapter, action: str, run_filter: RunFilter,
                   dry_run: bool, limit: int | None,
                   act: Callable[[RunInfo], Awaitable[str | None]],
                   skip_ids: set[str] | None = None) -> BulkResult:
    """Count the matches (up to ``limit + 1``), then act on each, page by page."""
    query = bulk_query(action, run_filter, limit)
    if dry_run or limit is not None:
        # Counted before anything is written: past the cap, nothing is.
        counted = 0
        async for _ in matches(adapter, query, None if dry_run or limit is None
                               else limit + 1):
            counted += 1
        if dry_run:
            return BulkResult(action=action, dry_run=True, matched=counted)
        if limit is not None and counted > limit:
            raise TooManyRuns(action, limit)
    tally = _Tally()
    async for run in matches(adapter, query, None):
        if skip_ids is not None and run.id in skip_ids:
            continue  # made by this call: not a match
        tally.matched += 1
        await _act_on(adapter, action, run, act, tally)
    _log.info("bulk action done", action=action, matched=tally.matched, acted=tally.acted,
              skipped=tally.skipped_count, failed=tally.failed_count)
    return BulkResult(action=action, dry_run=False, matched=tally.matched, acted=tally.acted,
                      skipped=tally.skipped, skipped_count=tally.skipped_count,
                      failed=tally.failed, failed_count=tally.failed_count, forks=tally.forks)


@dataclass
class _Tally:
    """What a bulk action did so far (the lists hold up to ``MAX_REPORTED`` runs)."""

    matched: int = 0
    acted: int = 0
    skipped_count: int = 0
    failed_count: int = 0
    skipped: dict[str, str] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)
    forks: dict[str, str] = field(default_factory=dict)


async def _act_on(adapter: WorkflowStateAdapter, action: str, run: RunInfo,
                  act: Callable[[RunInfo], Awaitable[str | None]], tally: _Tally) -> None:
    """Act on one matched run: acted, skipped (it moved on since the match, or
    lacks the node) or failed, counted in ``tally``."""
    try:
        made = await act(run)
    except (RunFinished, RunNotEnded, RunNotFound, NodeNotInHistory) as exc:
        reason = str(exc)  # it moved on since the match, or lacks the node
    except StorageError:
        raise
    except StarflowError as exc:
        now = await adapter.get_run(run.id)
        if now is not None and now.status not in BULK_STATUSES[action]:
            reason = f"{now.status}: {exc}"  # it moved on since the match
        else:
            _log.warning("bulk action failed for a run", action=action,
                         run_id=run.id, error=str(exc))
            tally.failed_count += 1
            if len(tally.failed) < MAX_REPORTED:
                tally.failed[run.id] = f"{type(exc).__name__}: {exc}"
            return
    else:
        tally.acted += 1
        if made is not None and len(tally.forks) < MAX_REPORTED:
            tally.forks[run.id] = made
        return
    tally.skipped_count += 1
    if len(tally.skipped) < MAX_REPORTED:
        tally.skipped[run.id] = reason


async def matches(adapter: WorkflowStateAdapter, query: RunPageQuery, most: int | None
                  ) -> AsyncIterator[RunInfo]:
    """The runs ``query`` matches, newest first, one page at a time (at most
    ``most`` of them)."""
    after: RunCursor | None = None
    seen = 0
    while True:
        page = await adapter.list_runs_page(
            msgspec.structs.replace(query, after=after))
        for run in page.runs:
            yield run
            seen += 1
            if most is not None and seen >= most:
                return
        if page.next is None:
            return
        after = page.next


def bulk_query(action: str, run_filter: RunFilter, limit: int | None) -> RunPageQuery:
    """The page query of a bulk action's filter.

    Raises:
        InvalidArgument: every problem of the filter and limit, named with its value.
    """
    what = f"{action}_runs"
    if not isinstance(run_filter, RunFilter):
        raise InvalidArgument(f"{what}: the filter must be a starflow.RunFilter, got "
                              f"{type(run_filter).__name__}")
    problems: list[str] = []
    applies = BULK_STATUSES[action]
    f = run_filter
    if f.empty and not f.all:
        problems.append("the filter has no criterion: give status, template_id, since, "
                        "until, attributes or pool, or RunFilter(all=True) to act on every "
                        f"{' / '.join(applies)} run")
    if f.status is not None and f.status not in applies:
        if f.status in RUN_STATUSES:
            problems.append(f"status {f.status!r}: {action} applies only to "
                            f"{', '.join(applies)} runs")
        else:
            problems.append(f"status must be one of {', '.join(applies)}: {f.status!r}")
    if limit is not None and (problem := int_problem("limit", limit, 1)) is not None:
        problems.append(problem + " (or None for no cap)")
    for key in ("template_id", "pool"):
        if (problem := name_problem(key, getattr(f, key), optional=True)) is not None:
            problems.append(problem)
    for key in ("since", "until"):
        value = getattr(f, key)
        if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
            problems.append(f"{key} must be a timezone-aware datetime: {value!r}")
    encoded: dict[str, str] | None = None
    if f.attributes:
        try:
            encoded = encode_attributes(f.attributes, what="attributes")
        except InvalidArgument as exc:
            problems.append(str(exc))
    if problems:
        raise InvalidArgument(f"{what}: " + "; ".join(problems) + "; nothing was written")
    return RunPageQuery(status=f.status, statuses=applies, template_id=f.template_id,
                        pool=f.pool, started_from=f.since, started_before=f.until,
                        attributes=encoded, limit=BULK_PAGE)
