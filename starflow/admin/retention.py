"""Retention: delete ended runs older than a cutoff, with everything that belongs
to them, optionally exporting each run's history first.

``sf.prune``, ``starflow runs prune`` and the maintenance loop (when
``StarflowConfig.retention`` is set) all call :func:`prune_runs`. It works in
bounded batches, each one short transaction through
:class:`~starflow.adapters.units.PruneRuns`, so it never holds a long lock on
the tables active runs use, and several processes may prune at once (rows one
pruner holds are skipped by the others on PostgreSQL; SQLite has one writer).

With ``export_dir`` each batch is first read (without a lock), its histories
written to one JSON-lines file in the format of ``starflow runs export``
(``starflow replay`` reads it), the file flushed to disk (``fsync``, then
renamed into place and the directory synced), and only then are those runs
deleted, re-checked under the lock: a run that changed meanwhile (retried) is
exported but kept.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Collection
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec

from ..adapters.base import WorkflowStateAdapter
from ..adapters.units import PruneRuns
from ..errors import InvalidArgument, StorageError
from ..limits import duration_problem
from ..logs import get_logger
from ..records import TERMINAL_STATUSES
from .history import export_run

__all__ = ["DEFAULT_BATCH_SIZE", "PruneReport", "export_file_name", "prune_runs"]

log = get_logger("starflow.retention")

#: Runs per batch (one transaction each).
DEFAULT_BATCH_SIZE = 500
_MAX_BATCH_SIZE = 5000


class PruneReport(msgspec.Struct, kw_only=True):
    """What a prune did (or, with ``dry_run``, would do).

    Attributes:
        runs: Runs deleted (dry run: runs that would be).
        rows: Rows deleted per table, run rows under ``workflow_runs``.
        files: Export files written, in order.
        dry_run: Whether nothing was deleted.
        run_ids: The runs of a dry run (empty for a real prune, which can be millions).
    """

    runs: int = 0
    rows: dict[str, int] = msgspec.field(default_factory=dict)
    files: list[str] = msgspec.field(default_factory=list)
    dry_run: bool = False
    run_ids: list[str] = msgspec.field(default_factory=list)


def _check(older_than: object, statuses: object, workflow: object, batch_size: object
           ) -> tuple[timedelta, tuple[str, ...]]:
    problems = []
    if not isinstance(older_than, timedelta) or older_than < timedelta(0):
        problems.append(f"older_than must be a timedelta >= 0, got {older_than!r}")
    elif (problem := duration_problem("older_than", older_than)) is not None:
        problems.append(problem)
    chosen: tuple[str, ...] = tuple(sorted(TERMINAL_STATUSES))
    if statuses is not None:
        if isinstance(statuses, str) or not isinstance(statuses, Collection) or not statuses:
            problems.append(f"statuses must be a non-empty collection of ended statuses "
                            f"(cancelled, error, success), got {statuses!r}")
        else:
            bad = sorted(str(s) for s in statuses if s not in TERMINAL_STATUSES)
            if bad:
                problems.append(f"statuses may name only ended statuses (cancelled, error, "
                                f"success): {', '.join(bad)} is active or unknown; active "
                                "runs are never pruned")
            chosen = tuple(sorted({str(s) for s in statuses}))
    if workflow is not None and (not isinstance(workflow, str) or not workflow):
        problems.append(f"workflow must be a workflow name, got {workflow!r}")
    if (isinstance(batch_size, bool) or not isinstance(batch_size, int)
            or not 1 <= batch_size <= _MAX_BATCH_SIZE):
        problems.append(f"batch_size must be an int from 1 to {_MAX_BATCH_SIZE}: {batch_size!r}")
    if problems:
        raise InvalidArgument(f"invalid prune ({len(problems)} problem(s)): " + "; ".join(problems))
    assert isinstance(older_than, timedelta)
    return older_than, chosen


def export_file_name(now: datetime, seq: int) -> str:
    """The name of a batch's export file: sortable by time, unique per process."""
    return f"starflow-prune-{now:%Y%m%dT%H%M%S}-{os.getpid()}-{seq:06d}.jsonl"


def _write_durably(path: Path, lines: list[bytes]) -> None:
    """Write ``path`` so that once this returns it survives a crash: a temporary
    file, fsync, rename into place, fsync of the directory."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        for line in lines:
            f.write(line)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


async def prune_runs(adapter: WorkflowStateAdapter, *, now: datetime, older_than: timedelta,
                     statuses: Collection[str] | None = None, workflow: str | None = None,
                     export_dir: str | os.PathLike[str] | None = None, dry_run: bool = False,
                     batch_size: int = DEFAULT_BATCH_SIZE,
                     max_runs: int | None = None) -> PruneReport:
    """Delete ended runs that ended more than ``older_than`` before ``now``.

    Args:
        adapter: The cold tier, scoped to one workspace and env.
        now: The current time (the caller's clock).
        older_than: Age since the run ended (``completed_at``).
        statuses: Ended statuses to prune (default: cancelled, error, success).
        workflow: Only runs of this workflow (``template_id``).
        export_dir: Write each run's history here first (JSON lines, one file
            per batch); created if missing.
        dry_run: Count (and list) the runs, delete and write nothing.
        batch_size: Runs per transaction.
        max_runs: Stop after about this many runs (whole batches); None: all.

    Raises:
        InvalidArgument: a bad argument (nothing is deleted).
        StorageError: the database failed; batches already committed stay done.
    """
    older_than, chosen = _check(older_than, statuses, workflow, batch_size)
    directory: Path | None = None
    if export_dir is not None and not dry_run:
        directory = Path(export_dir)
        try:
            await anyio.to_thread.run_sync(lambda: directory.mkdir(parents=True, exist_ok=True))
        except OSError as exc:
            raise InvalidArgument(f"export_dir {str(export_dir)!r} cannot be created: "
                              f"{exc.strerror or exc}") from exc
        if not os.access(directory, os.W_OK):
            raise InvalidArgument(f"export_dir {str(export_dir)!r} is not writable")
    command = PruneRuns(ended_before=now - older_than, now=now, statuses=chosen,
                        workflow=workflow, limit=batch_size, dry_run=dry_run)
    report = PruneReport(dry_run=dry_run)
    seq = 0
    while max_runs is None or report.runs < max_runs:
        if directory is None:
            batch = await adapter.perform(command)
            if not batch.run_ids:
                break
            command = _with(command, cursor=batch.cursor)
            report.runs += len(batch.run_ids)
            if dry_run:
                report.run_ids.extend(batch.run_ids)
            _add(report.rows, batch.rows)
            continue
        # Export first: read the batch, write and flush its histories, then delete
        # exactly those runs (re-checked under the lock).
        found = await adapter.perform(_with(command, dry_run=True))
        if not found.run_ids:
            break
        command = _with(command, cursor=found.cursor)
        lines: list[bytes] = []
        for run_id in found.run_ids:
            history: dict[str, Any] = await export_run(adapter, run_id)
            lines.append(msgspec.json.encode(history) + b"\n")
        seq += 1
        path = directory / export_file_name(now, seq)
        try:
            await anyio.to_thread.run_sync(_write_durably, path, lines)
        except OSError as exc:
            raise StorageError(f"cannot write the prune export {path}: {exc.strerror or exc}; "
                               "nothing of this batch was deleted") from exc
        report.files.append(str(path))
        deleted = await adapter.perform(_with(command, run_ids=tuple(found.run_ids),
                                              cursor=None))
        report.runs += len(deleted.run_ids)
        _add(report.rows, deleted.rows)
    if report.runs and not dry_run:
        log.info("pruned runs", count=report.runs, older_than_s=older_than.total_seconds())
    return report


def _with(command: PruneRuns, **changes: Any) -> PruneRuns:
    return dataclasses.replace(command, **changes)


def _add(total: dict[str, int], more: dict[str, int]) -> None:
    for table, count in more.items():
        total[table] = total.get(table, 0) + count
