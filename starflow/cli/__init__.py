"""The ``starflow`` command (``[project.scripts]``, ``python -m starflow``).

One module per command group registers its commands on import:
:mod:`~starflow.cli.worker` (``worker``, ``server``),
:mod:`~starflow.cli.admin` (``migrate``, ``sweep``),
:mod:`~starflow.cli.runs` (``runs list/show/events/export``),
:mod:`~starflow.cli.prune` (``runs prune``),
:mod:`~starflow.cli.control` (``signal``, ``resume``, ``cancel``, ``runs retry``),
:mod:`~starflow.cli.outbox` (``outbox status``),
:mod:`~starflow.cli.replay` (``replay``),
:mod:`~starflow.cli.schedules` (``schedules list/show/pause/resume/delete/trigger``,
``pools``), :mod:`~starflow.cli.ui` (``ui``) and :mod:`~starflow.cli.copy`
(``copy``). The registry, the shared options and
the app they open are in :mod:`starflow.cli._base` (see its docstring to add
a command); table and JSON output in :mod:`starflow.cli._format`.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Sequence

import anyio

from ..errors import ConfigError, StarflowError
from ._base import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    Command,
    CommandError,
    Handler,
    app_args,
    build_parser,
    command,
    db_args,
    open_app,
    say,
)

__all__ = ["Command", "CommandError", "app_args", "command", "db_args", "main", "open_app"]

#: The command-group modules. Each registers its commands when imported, and
#: this order is the order ``starflow --help`` lists them in.
GROUPS = ("worker", "admin", "runs", "prune", "control", "outbox", "replay", "schedules",
          "ui", "copy")
for _group in GROUPS:
    importlib.import_module(f"{__name__}.{_group}")


def _configure_logging(level: str | None, fmt: str, long_running: bool) -> None:
    """Logs go to stderr (stdout is for command output), coloured only on a terminal."""
    from ..logs import configure_logging

    chosen = level or os.environ.get("STARFLOW_LOG_LEVEL") or ("info" if long_running
                                                               else "warning")
    try:
        configure_logging(chosen, json=fmt == "json", stream=sys.stderr, root=long_running)
    except ValueError as exc:
        raise CommandError(f"--log-level: {exc}", EXIT_USAGE) from exc


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``starflow`` with ``argv`` (default ``sys.argv[1:]``); return the exit code."""
    try:
        ns = build_parser().parse_args(argv)
        _configure_logging(ns.log_level, ns.log_format, ns._command in ("worker", "server"))
        handler: Handler = ns._handler
        return anyio.run(handler, ns)
    except CommandError as exc:
        say(str(exc))
        return exc.code
    except (ConfigError, StarflowError) as exc:
        if os.environ.get("STARFLOW_TRACEBACK"):
            raise
        say(f"{type(exc).__name__}: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`starflow runs show … | head`): stop quietly, and
        # keep the interpreter from complaining when it flushes stdout at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("STARFLOW_TRACEBACK"):
            raise
        say(f"unexpected {type(exc).__name__}: {exc} (set STARFLOW_TRACEBACK=1 for details)")
        return EXIT_FAILURE
