"""``starflow runs prune``: delete ended runs older than an age, with everything
that belongs to them, optionally exporting their histories first (issue #24)."""

from __future__ import annotations

import argparse

from ._base import EXIT_OK, EXIT_USAGE, CommandError, app_args, command, db_args, open_app
from ._format import age_arg, json_flag, write, write_json

__all__ = ["parse_age"]

#: ``--older-than``'s type (the CLI's one age parser).
parse_age = age_arg

_ENDED = ("cancelled", "error", "success")


def _statuses(text: str) -> tuple[str, ...]:
    names = tuple(dict.fromkeys(s.strip() for s in text.split(",") if s.strip()))
    bad = [s for s in names if s not in _ENDED]
    if not names or bad:
        raise argparse.ArgumentTypeError(
            f"--status takes ended statuses separated by commas ({', '.join(_ENDED)}): "
            f"{text!r}; active runs are never pruned")
    return names


def _prune_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--older-than", type=parse_age, metavar="AGE", default=None,
                        help="prune runs that ended more than AGE ago (30m, 12h, 30d, 2w; "
                             "default: the app's StarflowConfig.retention)")
    parser.add_argument("--status", type=_statuses, default=None, metavar="STATUS[,...]",
                        help="only these ended statuses (default: success,error,cancelled)")
    parser.add_argument("--workflow", metavar="NAME", default=None,
                        help="only runs of this workflow")
    parser.add_argument("--export", metavar="DIR", default=None,
                        help="first write each run's history to DIR as JSON lines (the "
                             "format of `starflow runs export`; `starflow replay` reads it)")
    parser.add_argument("--dry-run", action="store_true",
                        help="count the runs that would be pruned; delete nothing")
    json_flag(parser)


@command("prune", group="runs",
         help="delete ended runs older than an age with their events, waits, signals, "
              "jobs and outbox rows (--export DIR keeps their histories)",
         args=[app_args, db_args], configure=_prune_args)
async def _runs_prune(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        if ns.older_than is None and sf.config.retention is None:
            raise CommandError("runs prune: give --older-than AGE (e.g. 30d), or run it "
                               "with an app whose StarflowConfig sets retention", EXIT_USAGE)
        report = await sf.prune(ns.older_than, statuses=ns.status, workflow=ns.workflow,
                                export_dir=ns.export, dry_run=ns.dry_run)
    if ns.json:
        write_json({"runs": report.runs, "dry_run": report.dry_run, "rows": report.rows,
                    "files": report.files, "run_ids": report.run_ids})
        return EXIT_OK
    if report.dry_run:
        write(f"would prune {report.runs} run(s)\n")
        return EXIT_OK
    rows = ", ".join(f"{table} {count}" for table, count in sorted(report.rows.items()))
    write(f"pruned {report.runs} run(s)" + (f" ({rows})" if rows else "") + "\n")
    for path in report.files:
        write(f"exported {path}\n")
    return EXIT_OK
