"""``starflow signal / resume / cancel`` and ``starflow runs retry / cancel``:
commands that change a run's state (and drive an inline run here when they wake
it). ``starflow runs cancel|retry|fork`` with filters instead of a RUN_ID act on
every matching run (:meth:`starflow.Starflow.cancel_runs` and its kin).

Wake tokens are bearer secrets: ``resume`` only reads the token it is given.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Any

import msgspec

from ..app_bulk import DEFAULT_BULK_LIMIT
from ..clock import parse_when
from ..errors import (
    ConfigError,
    InvalidArgument,
    InvalidWakeToken,
    RunNotFound,
    SerializationError,
    TooManyRuns,
    WorkflowDefinitionError,
)
from ..limits import run_ref
from ..records import BulkResult, RunFilter, RunInfo
from ..serde import check_json_depth
from ..tokens import redact_wake_tokens
from ._base import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    app_args,
    command,
    db_args,
    open_app,
    positive_int,
)
from ._format import age_arg, iso, json_flag, run_args, write, write_json

__all__ = ["bulk_args", "no_filters", "run_bulk"]


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
    parser.add_argument("--run-id", default=None, metavar="ID_OR_KEY",
                        help="an idempotent start: a second start with this id (a UUID) or "
                             "run key (any other text, e.g. order-123) returns the run")
    parser.add_argument("--pool", default=None, help="only workers of this pool claim it")
    parser.add_argument("--inline", action="store_true",
                        help="drive the run here until it ends or pauses, instead of queueing "
                             "it for workers")
    later = parser.add_mutually_exclusive_group()
    later.add_argument("--at", type=_start_time, default=None, metavar="WHEN",
                       help="start it no earlier than WHEN: an ISO date/time (UTC unless it "
                            "has an offset); the run is written now, a worker claims it then")
    later.add_argument("--after", type=age_arg, default=None, metavar="AGE",
                       help="start it no earlier than AGE from now: 90s, 30m, 2h, 3d, 1w")
    json_flag(parser)


def _start_time(text: str) -> datetime:
    """``--at``: an ISO date/time, naive meaning UTC."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO date/time such as 2030-01-31T09:00:00+01:00: {text!r}") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when


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
    if ns.inline and (ns.at is not None or ns.after is not None):
        raise CommandError("--at/--after start the run later, on a worker: drop --inline, "
                           "or --at/--after; nothing was started", EXIT_USAGE)
    async with open_app(ns) as sf:
        if ns.workflow not in registry.names():
            known = ", ".join(registry.names()) or "none"
            raise CommandError(f"--app {ns.app} registers no workflow {ns.workflow!r} "
                               f"(it registers: {known}); nothing was started", EXIT_USAGE)
        try:
            options = sf.options(run_id=ns.run_id, pool=ns.pool, start_at=ns.at,
                                 start_after=ns.after)
        except ConfigError as exc:
            raise CommandError(f"{exc}; nothing was started", EXIT_USAGE) from exc
        handle = await (options.run if ns.inline else options.start)(
            ns.workflow, *args, **kwargs)
        starts_at = None
        if ns.at is not None or ns.after is not None:
            starts_at = (await sf.get_run(handle.run_id)).starts_at
    if starts_at is None:
        _report(handle, "started", ns.json)
    elif ns.json:
        write_json({**_handle_json(handle), "starts_at": iso(starts_at)})
    else:
        write(f"started run {handle.run_id}: now {handle.status}, starts at "
              f"{iso(starts_at)}\n")
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


def _retry_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID", nargs="?", default=None,
                        help="the run to retry (or filters: every matching run in error)")
    json_flag(parser)
    bulk_args(parser)


@command("retry", group="runs",
         help="run a run that ended in error again after a fix: the step that failed runs "
         "again, the steps recorded before it are kept (RUN_ID, or every run in error "
         "matching the filters)",
         args=[app_args, db_args], configure=_retry_args)
async def _retry(ns: argparse.Namespace) -> int:
    if ns.run_id is None:
        return await run_bulk(ns, "retry")
    no_filters(ns, "retry")
    async with open_app(ns, must_exist=True) as sf, _missing_code_explained(sf):
        handle = await sf.retry(ns.run_id)
    _report(handle, "retried", ns.json)
    return EXIT_OK


def _runs_cancel_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID", nargs="?", default=None,
                        help="the run to cancel (or filters: every matching active run)")
    parser.add_argument("--force", action="store_true",
                        help="end the runs now without running their cleanup code")
    json_flag(parser)
    bulk_args(parser)


@command("cancel", group="runs",
         help="cancel RUN_ID, or every queued, running or paused run matching the filters "
         "(each gets RunCancelled and runs its cleanup; its children are cancelled too)",
         args=[app_args, db_args], configure=_runs_cancel_args)
async def _runs_cancel(ns: argparse.Namespace) -> int:
    if ns.run_id is None:
        return await run_bulk(ns, "cancel")
    no_filters(ns, "cancel")
    return await _cancel(ns)


# ---------------------------------------------------------------------------
# Bulk: starflow runs cancel|retry|fork with filters
# ---------------------------------------------------------------------------

_BULK_FILTERS = ("status", "workflow", "since", "until", "attr", "pool", "all")


def _attr(text: str) -> tuple[str, str | int | bool]:
    key, sep, raw = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--attr must be KEY=VALUE: {text!r}")
    try:  # 42, true: the typed values set_attributes stores; '"42"' is the text
        value = msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return key, raw
    if isinstance(value, str | bool) or (isinstance(value, int) and not isinstance(value, bool)):
        return key, value
    return key, raw


def _when_arg(text: str) -> str:
    try:
        parse_when(text, datetime(2000, 1, 1, tzinfo=UTC))  # checked now, resolved on the clock
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def bulk_args(parser: argparse.ArgumentParser) -> None:
    """The filters and switches of a bulk ``runs cancel|retry|fork``."""
    group = parser.add_argument_group(
        "acting on every matching run (instead of RUN_ID)",
        "exit codes: 0 done (or --dry-run), 1 some runs failed, the match is over --limit, "
        "or the confirmation was declined (nothing written), 2 bad filters")
    group.add_argument("--status", default=None, help="only runs in this status")
    group.add_argument("--workflow", default=None, metavar="NAME",
                       help="only runs of this workflow")
    group.add_argument("--since", type=_when_arg, default=None, metavar="WHEN",
                       help="only runs started at or after WHEN: an ISO date/time (UTC unless "
                            "it has an offset) or an age like 30m, 2h, 3d")
    group.add_argument("--until", type=_when_arg, default=None, metavar="WHEN",
                       help="only runs started before WHEN (same forms as --since)")
    group.add_argument("--attr", type=_attr, action="append", default=None,
                       metavar="KEY=VALUE",
                       help="only runs with this attribute (repeatable); VALUE is read as "
                            "JSON when it is a number or true/false ('\"42\"' for the text)")
    group.add_argument("--pool", default=None, help="only runs queued for this runner pool")
    group.add_argument("--all", action="store_true",
                       help="every run the action applies to (required without a filter)")
    group.add_argument("--dry-run", action="store_true",
                       help="only print how many runs match; write nothing")
    group.add_argument("--yes", action="store_true",
                       help="do not ask for confirmation (required off a terminal)")
    group.add_argument("--limit", type=positive_int, default=DEFAULT_BULK_LIMIT, metavar="N",
                       help=f"refuse when more than N runs match (default "
                            f"{DEFAULT_BULK_LIMIT})")
    group.add_argument("--no-limit", action="store_true", help="no cap on the matches")


def no_filters(ns: argparse.Namespace, verb: str) -> None:
    given = [f"--{k.replace('_', '-')}" for k in (*_BULK_FILTERS, "dry_run", "yes", "no_limit")
             if getattr(ns, k, None) not in (None, False)]
    if given:
        raise CommandError(f"runs {verb}: give RUN_ID or filters ({', '.join(given)}), not "
                           "both; nothing was written", EXIT_USAGE)


def _run_filter(ns: argparse.Namespace, now: datetime) -> RunFilter:
    return RunFilter(
        status=ns.status, template_id=ns.workflow, pool=ns.pool, all=ns.all,
        since=parse_when(ns.since, now) if ns.since else None,
        until=parse_when(ns.until, now) if ns.until else None,
        attributes=dict(ns.attr) if ns.attr else None)


def _bulk_json(result: BulkResult) -> dict[str, Any]:
    return msgspec.to_builtins(result)  # type: ignore[no-any-return]


async def run_bulk(ns: argparse.Namespace, action: str) -> int:
    """``starflow runs cancel|retry|fork`` with filters: count, confirm, act, report."""
    limit = None if ns.no_limit else ns.limit
    extra: dict[str, Any] = {"from_node": ns.from_node} if action == "fork" else {}
    if action == "cancel":
        extra["force"] = ns.force
    async with open_app(ns, must_exist=True) as sf:
        try:
            run_filter = _run_filter(ns, sf.clock.now())
        except ValueError as exc:
            raise CommandError(f"runs {action}: {exc}; nothing was written", EXIT_USAGE) from exc
        method = {"cancel": sf.cancel_runs, "retry": sf.retry_runs,
                  "fork": sf.fork_runs}[action]
        try:
            counted = await method(run_filter, dry_run=True, limit=limit, **extra)
        except InvalidArgument as exc:
            hint = (" (here: --status, --workflow, --since, --until, --attr, --pool, or --all)"
                    if "no criterion" in str(exc) else "")
            raise CommandError(f"{exc}{hint}", EXIT_USAGE) from exc
        over = limit is not None and counted.matched > limit
        if ns.dry_run:
            if ns.json:
                write_json({**_bulk_json(counted), "limit": limit, "over_limit": over})
            else:
                write(f"{counted.matched} runs match: {action} would be tried on each"
                      + (f" (over --limit {limit}: pass --limit N or --no-limit)" if over
                         else "") + "; nothing was written\n")
            return EXIT_OK
        if over:
            raise CommandError(str(TooManyRuns(action, limit or 0)))
        if counted.matched == 0:
            if ns.json:
                write_json(_bulk_json(BulkResult(action=action, dry_run=False, matched=0)))
            else:
                write(f"no runs match: nothing to {action}\n")
            return EXIT_OK
        if not ns.yes:
            if not sys.stdin.isatty():
                raise CommandError(f"runs {action}: {counted.matched} runs match; pass --yes "
                                   "to act without a terminal to confirm on (or --dry-run); "
                                   "nothing was written", EXIT_USAGE)
            sys.stderr.write(f"{action} {counted.matched} matching runs? [y/N] ")
            sys.stderr.flush()
            if sys.stdin.readline().strip().lower() not in ("y", "yes"):
                raise CommandError(f"runs {action}: not confirmed; nothing was written")
        result = await method(run_filter, limit=limit, **extra)
    if ns.json:
        write_json(_bulk_json(result))
    else:
        done = {"cancel": "cancelled", "retry": "retried", "fork": "forked"}[action]
        write(f"{result.matched} runs matched: {result.acted} {done}, "
              f"{result.skipped_count} skipped, {result.failed_count} failed\n")
        for run_id, fork in result.forks.items():
            write(f"  forked {run_id} as {fork}\n")
        for run_id, reason in result.skipped.items():
            write(f"  skipped {run_id}: {reason}\n")
        for run_id, reason in result.failed.items():
            write(f"  failed {run_id}: {reason}\n")
    return EXIT_FAILURE if result.failed_count else EXIT_OK


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
        # a run id or key, never read as a token
        ref = run_ref(ns.run_id, workspace_id=sf.workspace_id, env=sf.env)
        try:
            handle = await sf.resume(ref.id)
        except RunNotFound as exc:
            if ref.key is None:
                raise
            raise RunNotFound(ref.id, run_key=ref.key) from exc
        await _operator_report(sf, handle, "resumed", ns.json)
    return EXIT_OK
