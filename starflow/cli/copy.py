"""``starflow copy``: copy runs between SQLite and PostgreSQL, either way.

Progress goes to stderr: a ``rich`` progress bar with rows per second on a
terminal (``pip install 'starflow[cli]'``), plain lines every few seconds
otherwise. The summary goes to stdout (``--json``: machine-readable).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..clock import monotonic
from ..copy import CopyOptions, CopyProgress, CopyReport, copy_database
from ._base import EXIT_FAILURE, EXIT_OK, CommandError, command, positive_int, redact_url, say
from ._format import json_flag, write, write_json

__all__: list[str] = []

#: Seconds between plain progress lines.
_PLAIN_EVERY = 5.0


def _copy_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--from", dest="source", required=True, metavar="URL",
                        help="the database to read (sqlite:///app.db, postgresql://…)")
    parser.add_argument("--to", dest="target", required=True, metavar="URL",
                        help="the database to write (migrated first; a SQLite file is created)")
    parser.add_argument("--workspace", default=None, metavar="W",
                        help="copy this workspace's runs (with --env)")
    parser.add_argument("--env", default=None, metavar="E", help="… in this environment")
    parser.add_argument("--all-tenants", action="store_true",
                        help="copy every workspace and environment")
    parser.add_argument("--run", dest="run_id", default=None, metavar="RUN_ID",
                        help="copy this run (and its children) with what it needs")
    parser.add_argument("--dry-run", action="store_true",
                        help="compare only: print what would be copied and the conflicts")
    parser.add_argument("--wait", action="store_true",
                        help="wait for runs holding a live lease to pause or end "
                             "(default: refuse, naming them)")
    parser.add_argument("--batch", type=positive_int, default=200, metavar="N",
                        help="runs per target transaction (default 200)")
    json_flag(parser)


class _Reporter:
    """Progress on stderr: a rich bar on a terminal, else a plain line now and then."""

    def __init__(self) -> None:
        self._bar: Any = None
        self._task: Any = None
        self._last = 0.0
        if sys.stderr.isatty():
            try:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    Progress,
                    TextColumn,
                    TimeRemainingColumn,
                )
            except ImportError:  # the cli extra is not installed: plain lines
                return
            self._bar = Progress(TextColumn("copying runs"), BarColumn(), MofNCompleteColumn(),
                                 TextColumn("{task.fields[rate]}"), TimeRemainingColumn(),
                                 console=Console(stderr=True), transient=True)

    def __enter__(self) -> _Reporter:
        if self._bar is not None:
            self._bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()

    def status(self, message: str) -> None:
        if self._bar is not None:
            self._bar.console.print(message)
        else:
            say(message)

    def progress(self, p: CopyProgress) -> None:
        rate = f"{p.rows_per_second:,.0f} rows/s"
        if self._bar is not None:
            if self._task is None:
                self._task = self._bar.add_task("copy", total=p.runs_total, rate=rate)
            self._bar.update(self._task, completed=p.runs_done, rate=rate)
            return
        now = monotonic()
        if now - self._last >= _PLAIN_EVERY or p.runs_done >= p.runs_total:
            self._last = now
            sys.stderr.write(f"starflow: copied {p.runs_done}/{p.runs_total} runs, "
                             f"{p.rows_read} rows read, {p.rows_written} written, {rate}\n")
            sys.stderr.flush()


def _summary(report: CopyReport, ns: argparse.Namespace) -> None:
    verb = "would write" if report.dry_run else "wrote"
    lines = [
        f"{'dry run: ' if report.dry_run else ''}copy {redact_url(ns.source)} → "
        f"{redact_url(ns.target)}",
        f"runs: {report.runs} in scope, {report.runs_written} written now, "
        f"{report.runs_present} already there",
        f"rows: {report.rows_read} read, {verb} {report.rows_written} "
        f"({report.rows_per_second:,.0f} rows/s over {report.seconds:.1f}s)",
    ]
    lines += [f"  {table}: {n}" for table, n in sorted(report.rows_per_table.items())]
    if not report.dry_run:
        lines.append(f"verified: {report.verified} run(s) identical on both sides, "
                     f"{len(report.mismatches)} different")
    for m in report.mismatches:
        lines.append(f"  DIFFERENT run {m.run_id}: {m.source_events} event(s) in the source, "
                     f"{m.target_events} in the target (hash {m.source_hash[:12]} vs "
                     f"{m.target_hash[:12]})")
    lines.append(f"conflicts: {len(report.conflicts)}")
    lines += [f"  CONFLICT {c.describe()}" for c in report.conflicts]
    write("\n".join(lines) + "\n")


@command("copy", help="copy runs between databases (SQLite ↔ PostgreSQL), resumable as they are",
         configure=_copy_args)
async def _copy(ns: argparse.Namespace) -> int:
    options = CopyOptions(
        source=ns.source, target=ns.target, workspace_id=ns.workspace, env=ns.env,
        all_tenants=ns.all_tenants, run_id=ns.run_id, dry_run=ns.dry_run, wait=ns.wait,
        batch_runs=ns.batch)
    try:
        options.validate()
    except Exception as exc:
        raise CommandError(str(exc), 2) from exc
    with _Reporter() as reporter:
        report = await copy_database(options, on_progress=reporter.progress,
                                     on_status=reporter.status)
    if ns.json:
        write_json(report.to_dict())
    else:
        _summary(report, ns)
    return EXIT_OK if report.ok else EXIT_FAILURE
