"""``starflow runs list / show / events / export / fork``: inspect runs, export
their histories and fork them (``runs retry`` is in :mod:`starflow.cli.control`).

Wake tokens are bearer secrets: nothing here prints one.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

import anyio
import msgspec

from ..clock import parse_when
from ..codec import show_encoded
from ..limits import normalize_run_id
from ..records import RunEvent, RunInfo
from ..tokens import redact_wake_tokens
from ..workflow.context import checkpoint_wait
from ._base import (
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    app_args,
    command,
    db_args,
    open_app,
    positive_int,
)
from ._format import cell, human_duration, iso, json_flag, render_table, run_args, write, write_json
from .control import bulk_args, no_filters, run_bulk

__all__ = ["Progress", "event_json", "parse_since", "run_detail", "run_summary", "timeline"]

STATUSES = ("queued", "running", "paused", "success", "error", "cancelled")
#: ``--all`` exports have no row limit (LIMIT needs a number).
_NO_LIMIT = 2**31 - 1


# ---------------------------------------------------------------------------
# Argument types
# ---------------------------------------------------------------------------


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: an ISO date/time (naive means UTC) or an age like ``90s``,
    ``30m``, ``2h``, ``3d``, ``1w`` before ``now``."""
    try:
        return parse_when(text, now)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _since_arg(text: str) -> str:
    parse_since(text, datetime(2000, 1, 1, tzinfo=UTC))  # validate now; resolve on the clock
    return text


def _filters(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--status", choices=STATUSES, default=None, help="only runs in this status")
    parser.add_argument("--template", metavar="WORKFLOW", default=None,
                        help="only runs of this workflow (template_id)")
    parser.add_argument("--since", type=_since_arg, default=None, metavar="WHEN",
                        help="only runs started at or after WHEN: an ISO date/time (UTC "
                             "unless it has an offset) or an age like 30m, 2h, 3d")


# ---------------------------------------------------------------------------
# Views of runs and events
# ---------------------------------------------------------------------------


def _waiting(run: RunInfo) -> dict[str, Any] | None:
    """What a paused run waits on, from its checkpoint (never the token)."""
    wait = checkpoint_wait(run.checkpoint_json)
    if wait is None:
        return None
    return {"node_id": wait.node_id, "event": wait.event, "deadline": wait.deadline}


def run_summary(run: RunInfo) -> dict[str, Any]:
    """The row's key fields, JSON-ready (``runs list --json``)."""
    return {
        "id": run.id,
        "run_key": run.run_key,  # the key it was started with (#30), else null
        "workflow": run.template_id,
        "version": run.workflow_version,
        "status": run.status,
        "claim_state": run.claim_state,
        "start_mode": run.start_mode,
        "runner_pool": run.runner_pool,
        "started_at": iso(run.started_at),
        "starts_at": iso(run.starts_at),  # a start for later (#30), while queued
        "completed_at": iso(run.completed_at),
        "duration_ms": run.duration_ms,
        "error": run.error,
    }


def run_detail(run: RunInfo) -> dict[str, Any]:
    """Everything ``runs show`` knows about the row (wake tokens redacted)."""
    return {
        **run_summary(run),
        "workspace_id": run.workspace_id,
        "env": run.env,
        "claim_attempts": run.claim_attempts,
        "max_claim_attempts": run.max_claim_attempts,
        "leased_by": run.leased_by,
        "lease_until": iso(run.lease_until),
        "last_heartbeat": iso(run.last_heartbeat),
        "definition_id": run.definition_id,
        "failure": run.failure_json,
        "waiting": _waiting(run),
        "input": redact_wake_tokens(show_encoded(run.input_json)),
        "result": redact_wake_tokens(show_encoded(run.result_json)),
        "continued_as": run.continued_as,
        "phase": redact_wake_tokens(run.phase),
    }


def event_json(ev: RunEvent) -> dict[str, Any]:
    """One event, JSON-ready, wake tokens redacted."""
    return {"id": ev.id, "run_id": ev.run_id, "event_type": ev.event_type,
            "node_id": ev.node_id, "created_at": iso(ev.created_at),
            "payload": redact_wake_tokens(show_encoded(ev.payload_json))}


def timeline(run: RunInfo, events: Sequence[RunEvent]) -> list[dict[str, Any]]:
    """Each event's offset from the run's start and, on a ``node_complete`` or
    ``node_error``, how long the node took since its latest ``node_start``."""
    start = run.started_at or (events[0].created_at if events else None)
    started: dict[str, datetime] = {}
    rows = []
    for ev in events:
        duration_ms = None
        if ev.event_type == "node_start" and ev.node_id:
            started[ev.node_id] = ev.created_at
        elif ev.event_type == "run_paused" and isinstance(ev.payload_json, dict):
            waited = ev.payload_json.get("node_id")  # a wait has no node_start: it began here
            if isinstance(waited, str):
                started.setdefault(waited, ev.created_at)
        elif ev.event_type in ("node_complete", "node_error") and ev.node_id in started:
            begun = started.pop(ev.node_id or "")
            duration_ms = round((ev.created_at - begun).total_seconds() * 1000, 3)
        offset_ms = (round((ev.created_at - start).total_seconds() * 1000, 3)
                     if start is not None else None)
        rows.append({"id": ev.id, "at": iso(ev.created_at), "offset_ms": offset_ms,
                     "event_type": ev.event_type, "node_id": ev.node_id,
                     "duration_ms": duration_ms})
    return rows


def attempts(events: Sequence[RunEvent]) -> list[dict[str, Any]]:
    """Every failed attempt of a step: its ``node_retry`` events (retried after
    ``delay_ms``) and its ``node_error`` (the last attempt, not retried)."""
    rows = []
    for ev in events:
        payload = ev.payload_json if isinstance(ev.payload_json, dict) else {}
        error = payload.get("error") if isinstance(payload.get("error"), dict) else None
        if ev.event_type == "node_retry" and error is not None:
            rows.append({"node_id": ev.node_id, "attempt": payload.get("attempt"),
                         "at": iso(ev.created_at), "error_type": error.get("type"),
                         "message": error.get("message"), "retry_in_ms": payload.get("delay_ms")})
        elif (ev.event_type == "node_error" and error is not None
              and str(ev.node_id or "").startswith("step:")):
            rows.append({"node_id": ev.node_id, "attempt": error.get("attempts"),
                         "at": iso(ev.created_at), "error_type": error.get("type"),
                         "message": error.get("message"), "retry_in_ms": None})
    return rows


def phases(events: Sequence[RunEvent]) -> list[dict[str, Any]]:
    """The run's phase changes, in order."""
    return [{"at": iso(ev.created_at), "phase": ev.payload_json.get("phase")}
            for ev in events
            if ev.event_type == "phase" and isinstance(ev.payload_json, dict)]


def _ms(value: float | None, sign: str = "") -> str | None:
    return None if value is None else sign + human_duration(value / 1000)


# ---------------------------------------------------------------------------
# runs list / show / events / export
# ---------------------------------------------------------------------------


def _attr_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--attr wants KEY=VALUE, got {text!r}")
    return key, value


def _list_args(parser: argparse.ArgumentParser) -> None:
    _filters(parser)
    parser.add_argument("--attr", type=_attr_arg, action="append", default=None,
                        metavar="KEY=VALUE",
                        help="only runs with this attribute (starflow.set_attributes; the "
                             "value is matched as a string); repeat for several")
    parser.add_argument("--parent", metavar="RUN_ID", default=None,
                        help="only the child runs this run started (starflow.start_child)")
    parser.add_argument("--limit", type=positive_int, default=50, metavar="N",
                        help="at most N runs, newest first (default 50)")
    parser.add_argument("--stuck", action="store_true",
                        help="only queued runs no worker has claimed for the app's "
                             "stuck_after (default 5 min), oldest first")
    json_flag(parser)


@command("list", group="runs", help="list runs, newest first",
         args=[app_args, db_args], configure=_list_args)
async def _runs_list(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        since = parse_since(ns.since, sf.clock.now()) if ns.since else None
        if ns.stuck:  # queued, and not claimed for config.stuck_after: no worker takes them
            runs = [r for r in await sf.stuck_runs()
                    if (ns.template is None or r.template_id == ns.template)
                    and (since is None or (r.started_at is not None and r.started_at >= since))
                    and (ns.parent is None
                         or r.parent_run_id == normalize_run_id(
                             ns.parent, workspace_id=sf.workspace_id, env=sf.env))
                    ][:ns.limit]
        else:
            runs = await sf.list_runs(status=ns.status, template_id=ns.template,
                                      limit=ns.limit, since=since,
                                      attributes=dict(ns.attr) if ns.attr else None,
                                      parent_run_id=ns.parent)
    if ns.json:
        write_json([run_summary(r) for r in runs])
        return EXIT_OK
    if not runs:
        sys.stderr.write(f"no runs match in workspace {sf.workspace_id!r}, env "
                         f"{sf.env!r} (another scope: --workspace/--env, or "
                         "$STARFLOW_WORKSPACE/$STARFLOW_ENV)\n")
        return EXIT_OK
    keyed = any(r.run_key is not None for r in runs)  # a key column only if one has a key
    write(render_table(
        ["id", *(["key"] if keyed else []), "workflow", "status", "started", "duration",
         "error"],
        [(r.id, *([r.run_key] if keyed else []),
          f"{r.template_id}" + (f" v{r.workflow_version}" if r.workflow_version else ""),
          r.status + (f" (starts at {iso(r.starts_at)})" if r.starts_at else ""),
          iso(r.started_at),
          _ms(float(r.duration_ms)) if r.duration_ms is not None else None, r.error)
         for r in runs], max_width=48))
    return EXIT_OK


#: Child runs ``starflow runs show`` lists (``runs list --parent RUN_ID`` lists them all).
MAX_CHILDREN_SHOWN = 1000


@command("show", group="runs", help="a run's row and a timeline of its events",
         args=[app_args, db_args], configure=run_args)
async def _runs_show(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        run = await sf.get_run(ns.run_id)
        events = await sf.events(ns.run_id)
        kids = await sf.list_runs(parent_run_id=run.id, limit=MAX_CHILDREN_SHOWN)
    detail = run_detail(run)
    rows = timeline(run, events)
    failed_attempts = attempts(events)
    changes = phases(events)
    children = [{"run_id": k.id, "workflow": k.template_id, "status": k.status,
                 "started_at": iso(k.started_at), "detached": k.detached}
                for k in sorted(kids, key=lambda k: (k.started_at is None, k.started_at, k.id))]
    if ns.json:
        write_json({"run": detail, "timeline": rows, "attempts": failed_attempts,
                    "phases": changes, "children": children})
        return EXIT_OK
    waiting = detail["waiting"]
    fields: list[tuple[str, Any]] = [
        ("run", run.id),
        ("key", run.run_key),  # the run key it was started with (#30)
        ("workflow", f"{run.template_id} v{run.workflow_version}"
                     if run.workflow_version else run.template_id),
        ("status", run.status),
        ("claim state", f"{run.claim_state} ({run.claim_attempts} of "
                        f"{run.max_claim_attempts} claim attempts used)"),
        ("started", f"{iso(run.started_at) or '-'} ({run.start_mode})"),
        ("starts at", iso(run.starts_at)),  # a start for later (#30)
        ("completed", iso(run.completed_at)),
        ("duration", _ms(float(run.duration_ms)) if run.duration_ms is not None else None),
        ("pool", run.runner_pool),
        ("parent", run.parent_run_id),
        ("deadline", iso(run.deadline_at)),
        ("leased by", f"{run.leased_by} until {iso(run.lease_until)}" if run.leased_by
         else None),
        ("waiting on", (f"{waiting['event'] or 'timer'} at {waiting['node_id']}"
                        + (f" (deadline {waiting['deadline']})" if waiting["deadline"] else ""))
         if waiting else None),
        # The row's phase (migration 041); a run that set it before then: its events.
        ("phase", redact_wake_tokens(run.phase) if run.phase is not None
         else changes[-1]["phase"] if changes else None),
        # As JSON, so a string result reads apart from a number or a null one.
        ("input", msgspec.json.encode(detail["input"]).decode()
         if run.input_json is not None else None),
        ("result", msgspec.json.encode(detail["result"]).decode()
         if run.status == "success" else None),
        ("error", run.error),
        ("continued as", run.continued_as),  # starflow.continue_as_new: the next run
    ]
    failure = run.failure
    if failure is not None:
        tries = f" after {failure.attempts} attempt(s)" if failure.attempts else ""
        fields.append(("failed at", f"{failure.node_id}{tries}" if failure.node_id else None))
        fields.append(("cause", failure.text))
    width = max(len(k) for k, v in fields if v is not None)
    write("".join(f"{k.ljust(width)}  {cell(v)}\n" for k, v in fields if v is not None))
    if failure is not None and failure.traceback:
        write(f"\ntraceback:\n{failure.traceback.rstrip()}\n")
    if changes:
        write(f"\nphases ({len(changes)}):\n")
        write(render_table(["at", "phase"], [(c["at"], c["phase"]) for c in changes]))
    if children:
        more = " (the first shown)" if len(children) == MAX_CHILDREN_SHOWN else ""
        write(f"\nchildren ({len(children)}{more}):\n")
        write(render_table(["run", "workflow", "status", "started", "detached"],
                           [(c["run_id"], c["workflow"], c["status"], c["started_at"],
                             "yes" if c["detached"] else "") for c in children]))
    if failed_attempts:
        write(f"\nfailed attempts ({len(failed_attempts)}):\n")
        write(render_table(["node", "attempt", "at", "error", "retried after"],
                           [(t["node_id"], t["attempt"], t["at"],
                             f"{t['error_type']}: {t['message']}",
                             _ms(t["retry_in_ms"]) if t["retry_in_ms"] is not None
                             else "not retried")
                            for t in failed_attempts]))
    write(f"\ntimeline ({len(rows)} event{'s' if len(rows) != 1 else ''}):\n")
    write(render_table(["offset", "event", "node", "took"],
                        [(_ms(r["offset_ms"], "+"), r["event_type"], r["node_id"],
                          _ms(r["duration_ms"])) for r in rows]))
    return EXIT_OK


@command("events", group="runs", help="a run's events in order (wake tokens redacted)",
         args=[app_args, db_args], configure=run_args)
async def _runs_events(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        events = await sf.events(ns.run_id)
    data = [event_json(ev) for ev in events]
    if ns.json:
        write_json(data)
        return EXIT_OK
    write(render_table(["id", "at", "event", "node", "payload"],
                        [(e["id"], e["created_at"], e["event_type"],
                          e["node_id"], e["payload"]) for e in data]))
    return EXIT_OK


def _fork_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID", nargs="?", default=None,
                        help="the run to fork (or filters: every matching ended run)")
    json_flag(parser)
    parser.add_argument("--from-node", required=True, metavar="NODE",
                        help="the node the new run executes from (step:charge#1); the "
                             "history before it is replayed, not re-run")
    bulk_args(parser)


@command("fork", group="runs",
         help="a new run of an ended run, replaying its history up to a node and running "
              "from there (after a fix); with filters, of every matching ended run that "
              "has the node",
         args=[app_args, db_args], configure=_fork_args)
async def _runs_fork(ns: argparse.Namespace) -> int:
    if ns.run_id is None:
        return await run_bulk(ns, "fork")
    no_filters(ns, "fork")
    async with open_app(ns, must_exist=True) as sf:
        handle = await sf.fork(ns.run_id, from_node=ns.from_node)
    if ns.json:
        write_json({"run_id": handle.run_id, "status": handle.status,
                    "forked_from": ns.run_id, "from_node": ns.from_node,
                    "error": handle.error})
        return EXIT_OK
    where = handle.status
    if handle.status == "error" and handle.error:
        where += f": {handle.error}"
    write(f"forked run {ns.run_id} from {ns.from_node} as run {handle.run_id}: now {where}\n")
    return EXIT_OK


class Progress:
    """``done/total`` on stderr: a redrawn bar on a terminal, nothing otherwise."""

    def __init__(self, label: str, total: int, stream: TextIO | None = None) -> None:
        self.label, self.total, self.done = label, total, 0
        self.stream = stream or sys.stderr
        self.live = self.total > 1 and self.stream.isatty()

    def step(self) -> None:
        self.done += 1
        if self.live:
            filled = 30 * self.done // self.total
            self.stream.write(f"\r{self.label} [{'#' * filled}{'.' * (30 - filled)}] "
                              f"{self.done}/{self.total}")
            self.stream.flush()

    def close(self) -> None:
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


def _export_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_ids", nargs="*", metavar="RUN_ID", help="runs to export")
    parser.add_argument("--all", action="store_true",
                        help="export every run in scope (narrow with --status, --template, "
                             "--since)")
    _filters(parser)
    parser.add_argument("-o", "--output", metavar="FILE", default="-",
                        help="write here instead of stdout")


@command("export", group="runs",
         help="run histories as JSON for starflow replay (wake tokens redacted)",
         args=[app_args, db_args], configure=_export_args)
async def _runs_export(ns: argparse.Namespace) -> int:
    if bool(ns.run_ids) == bool(ns.all):
        raise CommandError("runs export: give RUN_ID... or --all, not both or neither",
                           EXIT_USAGE)
    if ns.run_ids and (ns.status or ns.template or ns.since):
        raise CommandError("runs export: --status/--template/--since go with --all",
                           EXIT_USAGE)
    async with open_app(ns, must_exist=True) as sf:
        ids: list[str] = list(dict.fromkeys(ns.run_ids))
        if ns.all:
            since = parse_since(ns.since, sf.clock.now()) if ns.since else None
            runs = await sf.list_runs(status=ns.status, template_id=ns.template, since=since,
                                      limit=_NO_LIMIT)
            ids = [r.id for r in runs]
        progress = Progress("exporting", len(ids))
        histories = []
        try:
            for run_id in ids:
                histories.append(await sf.export_run(run_id))
                progress.step()
        finally:
            progress.close()
    # One run: the history object itself; several (or --all): an array of them.
    document: Any = histories[0] if len(ids) == 1 and not ns.all else histories
    data = msgspec.json.encode(document) + b"\n"
    if ns.output == "-":
        write(data.decode())
        sys.stdout.flush()
    else:
        try:
            await anyio.Path(ns.output).write_bytes(data)
        except OSError as exc:
            raise CommandError(f"cannot write {ns.output}: {exc.strerror or exc} (check the "
                               "directory exists and is writable)") from exc
        sys.stderr.write(f"exported {len(histories)} run(s) to {ns.output}\n")
    return EXIT_OK
