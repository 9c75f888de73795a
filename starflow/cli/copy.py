"""``starflow copy``: copy runs between SQLite and PostgreSQL, either way.

Progress goes to stderr: a ``rich`` progress bar with rows per second on a
terminal (``pip install 'starflow-durable[cli]'``), plain lines every few seconds
otherwise. The summary goes to stdout (``--json``: machine-readable).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..adapters.copying import endpoint_for
from ..admin.copy import CopyOptions, CopyProgress, CopyReport, copy_database
from ..clock import monotonic
from ..errors import StarflowError
from ._base import EXIT_FAILURE, EXIT_OK, CommandError, command, positive_int, redact_url, say
from ._format import json_flag, write, write_json

__all__: list[str] = []

#: Seconds between plain progress lines.
_PLAIN_EVERY = 5.0


def _copy_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("src", nargs="?", default=None, metavar="SRC",
                        help="the database to read (or --from URL)")
    parser.add_argument("dst", nargs="?", default=None, metavar="DST",
                        help="the database to write (or --to URL)")
    parser.add_argument("--from", dest="source", default=None, metavar="URL",
                        help="the database to read (sqlite:///app.db, postgresql://…)")
    parser.add_argument("--to", dest="target", default=None, metavar="URL",
                        help="the database to write (migrated first; a SQLite file is created)")
    parser.add_argument("--workspace", default=None, metavar="W",
                        help="copy this workspace's runs (with --env; default: the source's "
                             "only workspace and env, if it holds one)")
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
            self._bar = Progress(TextColumn("comparing runs"), BarColumn(),
                                 MofNCompleteColumn(), TextColumn("{task.fields[written]}"),
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
            written = f"{p.runs_written} written"
            if self._task is None:
                self._task = self._bar.add_task("copy", total=p.runs_total, rate=rate,
                                                written=written)
            self._bar.update(self._task, completed=p.runs_done, rate=rate, written=written)
            return
        now = monotonic()
        if now - self._last >= _PLAIN_EVERY or p.runs_done >= p.runs_total:
            self._last = now
            # Counts of what was written, never of what was only looked at.
            sys.stderr.write(f"starflow: {p.runs_done}/{p.runs_total} runs compared: "
                             f"{p.runs_written} written, {p.runs_present} already there, "
                             f"{p.runs_held_back} not written; {p.rows_read} rows read, "
                             f"{p.rows_written} written, {rate}\n")
            sys.stderr.flush()


def _summary(report: CopyReport, ns: argparse.Namespace) -> None:
    verb = "would write" if report.dry_run else "wrote"
    lines = [
        f"{'dry run: ' if report.dry_run else ''}copy {redact_url(ns.source)} → "
        f"{redact_url(ns.target)}",
        f"runs: {report.runs} in scope, {report.runs_written} written now, "
        f"{report.runs_present} already there, "
        f"{report.runs - report.runs_written - report.runs_present} not written",
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


#: The tables whose rows belong to a (workspace, env): what a tenant holds.
_TENANT_TABLES = ("workflow_runs", "starflow_schedules", "starflow_keys", "starflow_pool_limits",
                  "workflow_session_vars")


def _databases(ns: argparse.Namespace) -> None:
    """``SRC DST`` or ``--from``/``--to``: set ``ns.source`` and ``ns.target``."""
    for option, positional, name in (("--from", "src", "source"), ("--to", "dst", "target")):
        given, placed = getattr(ns, name), getattr(ns, positional)
        if given is not None and placed is not None and given != placed:
            raise CommandError(f"{option} {redact_url(given)} and {positional.upper()} "
                               f"{redact_url(placed)} differ: give the database once", 2)
        if given is None and placed is None:
            raise CommandError(f"name the database to {'read' if name == 'source' else 'write'}"
                               f": starflow copy SRC DST (or {option} URL)", 2)
        setattr(ns, name, given if given is not None else placed)


async def source_tenants(url: str) -> list[tuple[str, str]]:
    """Every (workspace_id, env) the database at ``url`` holds rows of, sorted."""
    end = endpoint_for(url, "--from")
    await end.connect(readonly=True)
    try:
        tables = await end.tables()
        selects = [f"SELECT workspace_id, env FROM {table}"  # names from _TENANT_TABLES
                   for table in _TENANT_TABLES if table in tables]
        if not selects:
            return []
        rows = await end.fetch(" UNION ".join(selects) + " ORDER BY 1, 2", [])
    finally:
        await end.close()
    return [(str(ws), str(env)) for ws, env in rows]


async def _default_scope(ns: argparse.Namespace) -> None:
    """No scope flag: the source's only (workspace, env), or an error listing them."""
    if ns.all_tenants or ns.run_id is not None or ns.workspace is not None or ns.env is not None:
        return
    try:
        tenants = await source_tenants(ns.source)
    except StarflowError as exc:
        raise CommandError(str(exc), 2) from exc
    if len(tenants) == 1:
        ns.workspace, ns.env = tenants[0]
        say(f"copying workspace {ns.workspace!r}, env {ns.env!r} (the only one in the source)")
        return
    if not tenants:
        raise CommandError(f"{redact_url(ns.source)} holds no runs, schedules or keys: nothing "
                           "to copy (check the URL)", 2)
    listed = ", ".join(f"--workspace {ws} --env {env}" for ws, env in tenants)
    raise CommandError(f"{redact_url(ns.source)} holds {len(tenants)} workspace/env pairs; "
                       f"choose one ({listed}), or --all-tenants, or --run RUN_ID", 2)


@command("copy", help="copy runs between databases (SQLite ↔ PostgreSQL), resumable as they are",
         configure=_copy_args)
async def _copy(ns: argparse.Namespace) -> int:
    _databases(ns)
    await _default_scope(ns)
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
