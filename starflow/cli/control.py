"""``starflow signal / resume / cancel`` and ``starflow runs retry``: commands
that change a run's state (and drive an inline run here when they wake it).

Wake tokens are bearer secrets: ``resume`` only reads the token it is given.
"""

from __future__ import annotations

import argparse
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec

from ..errors import InvalidWakeToken, SerializationError, WorkflowDefinitionError
from ..limits import normalize_run_id
from ..records import RunInfo
from ..serde import check_json_depth
from ..tokens import redact_wake_tokens
from ._base import EXIT_OK, EXIT_USAGE, CommandError, app_args, command, db_args, open_app
from ._format import json_flag, run_args, write, write_json

__all__: list[str] = []


def _payload(text: str) -> Any:
    try:
        check_json_depth(text, what="the JSON")
    except SerializationError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; nothing was written") from None
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"not valid JSON ({exc}): quote it for the shell, e.g. --payload "
            "'{\"ok\": true}', or pass a JSON string as '\"text\"'") from None


def _handle_json(handle: Any) -> dict[str, Any]:
    return {"run_id": handle.run_id, "status": handle.status,
            "waiting_for": handle.waiting_for, "error": handle.error,
            "result": redact_wake_tokens(handle.result)}


def _report(handle: Any, verb: str, as_json: bool) -> None:
    if as_json:
        write_json(_handle_json(handle))
        return
    where = handle.status
    if handle.status == "paused":
        where += f" (waiting for {handle.waiting_for})" if handle.waiting_for else " (sleeping)"
    elif handle.status == "error" and handle.error:
        where += f": {handle.error}"
    write(f"{verb} run {handle.run_id}: now {where}\n")


def _needs_app(run: RunInfo) -> CommandError:
    return CommandError(
        f"run {run.id} was started inline, so the command that wakes it drives it, and "
        f"workflow {run.template_id!r} v{run.workflow_version} is not registered here: pass "
        "--app MODULE (the module that defines it); nothing was written")


@asynccontextmanager
async def _missing_code_explained(sf: Any) -> AsyncIterator[None]:
    """Turn a WorkflowDefinitionError naming a run into the one-line error for an
    inline run whose workflow this command cannot import (others pass as they are)."""
    try:
        yield
    except WorkflowDefinitionError as exc:
        run = await sf.get_run(exc.run_id) if exc.run_id else None
        if run is None:
            raise
        raise _needs_app(run) from exc


def _signal_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID")
    parser.add_argument("event", metavar="EVENT", help="the signal name the run waits for")
    parser.add_argument("--payload", type=_payload, default=None, metavar="JSON",
                        help="the value wait_for returns (JSON, default null)")
    json_flag(parser)


@command("signal", help="deliver a signal to a run (kept until the run waits for it)",
         args=[app_args, db_args], configure=_signal_args)
async def _signal(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        run = await sf.get_run(ns.run_id)
        if run.start_mode == "inline" and run.status == "paused":
            try:  # it would be driven here: refuse before writing if its code is missing
                await sf.runner.resolve(run)
            except WorkflowDefinitionError as exc:
                raise _needs_app(run) from exc
        handle = await sf.signal(ns.run_id, ns.event, ns.payload)
    _report(handle, f"signal {ns.event!r} sent to", ns.json)
    return EXIT_OK


def _start_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("workflow", metavar="WORKFLOW",
                        help="the workflow's name (its newest version registered by --app)")
    parser.add_argument("--args", type=_payload, default=None, metavar="JSON",
                        help="the workflow's arguments: a JSON array (positional), or an "
                             "object (keyword arguments)")
    parser.add_argument("--run-id", default=None, metavar="UUID",
                        help="an idempotent start: a second start with this id returns the run")
    parser.add_argument("--pool", default=None, help="only workers of this pool claim it")
    parser.add_argument("--inline", action="store_true",
                        help="drive the run here until it ends or pauses, instead of queueing "
                             "it for workers")
    json_flag(parser)


@command("start", help="start a run of WORKFLOW (queued for workers, or --inline here)",
         args=[app_args, db_args], configure=_start_args)
async def _start(ns: argparse.Namespace) -> int:
    from ..workflow.decorators import registry

    if not ns.app:
        raise CommandError("starflow start needs --app MODULE[:ATTR]: the module that defines "
                           f"workflow {ns.workflow!r}", EXIT_USAGE)
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    if isinstance(ns.args, list):
        args = ns.args
    elif isinstance(ns.args, dict):
        kwargs = ns.args
    elif ns.args is not None:
        raise CommandError("--args must be a JSON array (positional arguments) or object "
                           f"(keyword arguments), got {type(ns.args).__name__}: e.g. "
                           "--args '[\"o-1\", 2]'", EXIT_USAGE)
    if ns.inline and ns.pool:
        raise CommandError("--pool applies to queued runs: drop --inline, or --pool",
                           EXIT_USAGE)
    async with open_app(ns) as sf:
        if ns.workflow not in registry.names():
            known = ", ".join(registry.names()) or "none"
            raise CommandError(f"--app {ns.app} registers no workflow {ns.workflow!r} "
                               f"(it registers: {known}); nothing was started", EXIT_USAGE)
        options = sf.options(run_id=ns.run_id, pool=ns.pool)
        handle = await (options.run if ns.inline else options.start)(
            ns.workflow, *args, **kwargs)
    _report(handle, "started", ns.json)
    return EXIT_OK


def _resume_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token", metavar="TOKEN", help="the wake token of a paused run's wait")
    parser.add_argument("--payload", type=_payload, default=None, metavar="JSON",
                        help="the value the wait returns (JSON, default null)")
    json_flag(parser)


@command("resume", help="wake a paused run through its wake token",
         args=[app_args, db_args], configure=_resume_args)
async def _resume(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf, _missing_code_explained(sf):
        try:
            handle = await sf.resume(ns.token.strip(), ns.payload)
        except InvalidWakeToken as exc:
            raise CommandError(
                f"{exc} (check the whole token was copied, and that --db/--workspace/--env "
                "name the run's database)") from exc
    _report(handle, "resumed", ns.json)
    return EXIT_OK


def _cancel_args(parser: argparse.ArgumentParser) -> None:
    run_args(parser)
    parser.add_argument("--force", action="store_true",
                        help="end the run now without running its cleanup code")


@command("cancel", help="cancel a run: it gets RunCancelled at its current await and runs "
         "its cleanup (--force: stop it now, no cleanup)",
         args=[app_args, db_args], configure=_cancel_args)
async def _cancel(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        handle = await sf.cancel(ns.run_id, force=ns.force)
    _report(handle, "cancelled", ns.json)
    return EXIT_OK


@command("retry", group="runs",
         help="run a run that ended in error again after a fix: the step that failed runs "
         "again, the steps recorded before it are kept",
         args=[app_args, db_args], configure=run_args)
async def _retry(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf, _missing_code_explained(sf):
        handle = await sf.retry(ns.run_id)
    _report(handle, "retried", ns.json)
    return EXIT_OK


async def _operator_report(sf: Any, handle: Any, verb: str, as_json: bool) -> None:
    """Print a run's state after ``runs pause|resume`` (a held run says so)."""
    run = await sf.get_run(handle.run_id)
    held = run.claim_state == "held"
    if as_json:
        write_json({**_handle_json(handle), "held": held})
    elif held:
        write(f"{verb} run {handle.run_id}: now paused by an operator (starflow runs "
              f"resume {handle.run_id} to go on)\n")
    elif verb == "paused" and run.status == "running":
        write(f"pause requested for run {handle.run_id}: it parks before its next step\n")
    else:
        _report(handle, verb, False)


@command("pause", group="runs",
         help="pause a run at its next step (a queued or waiting run at once); it keeps its "
         "state, and signals sent meanwhile, until `runs resume`",
         args=[app_args, db_args], configure=run_args)
async def _runs_pause(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        handle = await sf.pause(ns.run_id)
        await _operator_report(sf, handle, "paused", ns.json)
    return EXIT_OK


@command("resume", group="runs",
         help="resume a run paused by `runs pause`: back to its wait, to the queue, or (an "
         "inline run between steps, with --app) driven on here",
         args=[app_args, db_args], configure=run_args)
async def _runs_resume(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf, _missing_code_explained(sf):
        handle = await sf.resume(normalize_run_id(ns.run_id))
        await _operator_report(sf, handle, "resumed", ns.json)
    return EXIT_OK
