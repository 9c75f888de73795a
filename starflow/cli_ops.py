"""Operator subcommands of ``starflow``: inspect runs, wake or cancel them, check
the outbox, export histories and replay them against new code.

Registered with :func:`starflow.cli.command` when the parser is built. Human
output is aligned tables on stdout; ``--json`` gives stable keys instead.
Timestamps are ISO-8601 UTC. Wake tokens are bearer secrets: nothing here
prints one (``resume`` only reads the token it is given).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

import anyio
import msgspec

from .adapters.base import RunEvent, RunInfo
from .cli import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    CommandError,
    _positive_int,
    app_args,
    command,
    db_args,
    load_app_object,
    open_app,
)
from .context import WAIT_KEY
from .errors import InvalidWakeToken, WorkflowDefinitionError
from .waits import redact_wake_tokens

__all__ = ["parse_since", "render_table", "timeline"]

STATUSES = ("queued", "running", "paused", "success", "error", "cancelled")
#: ``--all`` exports have no row limit (LIMIT needs a number).
_NO_LIMIT = 2**31 - 1
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*(s|m|h|d|w)$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


# ---------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------


def iso(ts: datetime | None) -> str | None:
    """ISO-8601 UTC with milliseconds and a ``Z`` (None stays None)."""
    if ts is None:
        return None
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def human_duration(seconds: float) -> str:
    """``0.250s``, ``12.0s``, ``4m05s``, ``2h03m``, ``3d04h``."""
    if seconds < 10:
        return f"{seconds:.3f}s"
    if seconds < 60:
        return f"{seconds:.1f}s"
    whole = int(seconds)
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    if whole < 86400:
        return f"{whole // 3600}h{whole % 3600 // 60:02d}m"
    return f"{whole // 86400}d{whole % 86400 // 3600:02d}h"


def _cell(value: Any, width: int | None = None) -> str:
    if value is None:
        text = "-"
    elif isinstance(value, datetime):
        text = iso(value) or "-"
    elif isinstance(value, str):
        text = value
    elif isinstance(value, int | float | bool):
        text = str(value)
    else:
        text = msgspec.json.encode(value).decode()
    text = " ".join(text.split())  # one line per row, whatever the value holds
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def render_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *,
                 max_width: int = 60) -> str:
    """Rows as left-aligned columns under upper-case headers, one line each."""
    cells = [[_cell(v, max_width) for v in row] for row in rows]
    widths = [max([len(h), *(len(r[i]) for r in cells)]) for i, h in enumerate(headers)]
    lines = ["  ".join(h.upper().ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def _write(text: str) -> None:
    sys.stdout.write(text)


def _write_json(value: Any) -> None:
    sys.stdout.write(msgspec.json.format(msgspec.json.encode(value), indent=2).decode() + "\n")


# ---------------------------------------------------------------------------
# Argument types
# ---------------------------------------------------------------------------


def parse_since(text: str, now: datetime) -> datetime:
    """``--since``: an ISO date/time (naive means UTC) or an age like ``90s``,
    ``30m``, ``2h``, ``3d``, ``1w`` before ``now``."""
    match = _RELATIVE.match(text.strip().lower())
    if match:
        return now - timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO date or an age like 30m, 2h, 3d: {text!r}") from None
    return when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)


def _since_arg(text: str) -> str:
    parse_since(text, datetime(2000, 1, 1, tzinfo=UTC))  # validate now; resolve on the clock
    return text


def _payload(text: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as exc:
        raise argparse.ArgumentTypeError(
            f"not valid JSON ({exc}): quote it for the shell, e.g. --payload "
            "'{\"ok\": true}', or pass a JSON string as '\"text\"'") from None


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true",
                        help="machine-readable JSON on stdout (stable keys)")


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
    variables = (run.checkpoint_json or {}).get("variables")
    wait = variables.get(WAIT_KEY) if isinstance(variables, dict) else None
    if not isinstance(wait, dict):
        return None
    return {"node_id": wait.get("node_id"), "event": wait.get("event"),
            "deadline": wait.get("deadline")}


def run_summary(run: RunInfo) -> dict[str, Any]:
    """The row's key fields, JSON-ready (``runs list --json``)."""
    return {
        "id": run.id,
        "workflow": run.template_id,
        "version": run.workflow_version,
        "status": run.status,
        "claim_state": run.claim_state,
        "start_mode": run.start_mode,
        "runner_pool": run.runner_pool,
        "started_at": iso(run.started_at),
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
        "waiting": _waiting(run),
        "input": redact_wake_tokens(run.input_json),
        "result": redact_wake_tokens(run.result_json),
    }


def event_json(ev: RunEvent) -> dict[str, Any]:
    """One event, JSON-ready, wake tokens redacted."""
    return {"id": ev.id, "run_id": ev.run_id, "event_type": ev.event_type,
            "node_id": ev.node_id, "created_at": iso(ev.created_at),
            "payload": redact_wake_tokens(ev.payload_json)}


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


def _ms(value: float | None, sign: str = "") -> str | None:
    return None if value is None else sign + human_duration(value / 1000)


# ---------------------------------------------------------------------------
# runs list / show / events / export
# ---------------------------------------------------------------------------


def _list_args(parser: argparse.ArgumentParser) -> None:
    _filters(parser)
    parser.add_argument("--limit", type=_positive_int, default=50, metavar="N",
                        help="at most N runs, newest first (default 50)")
    _json_flag(parser)


@command("list", group="runs", help="list runs, newest first",
         args=[app_args, db_args], configure=_list_args)
async def _runs_list(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        since = parse_since(ns.since, sf.clock.now()) if ns.since else None
        runs = await sf.list_runs(status=ns.status, template_id=ns.template, limit=ns.limit,
                                  since=since)
    if ns.json:
        _write_json([run_summary(r) for r in runs])
        return EXIT_OK
    if not runs:
        sys.stderr.write("no runs match\n")
        return EXIT_OK
    _write(render_table(
        ["id", "workflow", "status", "started", "duration", "error"],
        [(r.id, f"{r.template_id}" + (f" v{r.workflow_version}" if r.workflow_version else ""),
          r.status, iso(r.started_at),
          _ms(float(r.duration_ms)) if r.duration_ms is not None else None, r.error)
         for r in runs], max_width=48))
    return EXIT_OK


def _run_id_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_id", metavar="RUN_ID")


def _show_args(parser: argparse.ArgumentParser) -> None:
    _run_id_arg(parser)
    _json_flag(parser)


@command("show", group="runs", help="a run's row and a timeline of its events",
         args=[app_args, db_args], configure=_show_args)
async def _runs_show(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        run = await sf.get_run(ns.run_id)
        events = await sf.events(ns.run_id)
    detail = run_detail(run)
    rows = timeline(run, events)
    if ns.json:
        _write_json({"run": detail, "timeline": rows})
        return EXIT_OK
    waiting = detail["waiting"]
    fields: list[tuple[str, Any]] = [
        ("run", run.id),
        ("workflow", f"{run.template_id} v{run.workflow_version}"
                     if run.workflow_version else run.template_id),
        ("status", run.status),
        ("claim state", f"{run.claim_state} ({run.claim_attempts} of "
                        f"{run.max_claim_attempts} claim attempts used)"),
        ("started", f"{iso(run.started_at) or '-'} ({run.start_mode})"),
        ("completed", iso(run.completed_at)),
        ("duration", _ms(float(run.duration_ms)) if run.duration_ms is not None else None),
        ("pool", run.runner_pool),
        ("leased by", f"{run.leased_by} until {iso(run.lease_until)}" if run.leased_by
         else None),
        ("waiting on", (f"{waiting['event'] or 'timer'} at {waiting['node_id']}"
                        + (f" (deadline {waiting['deadline']})" if waiting["deadline"] else ""))
         if waiting else None),
        ("error", run.error),
    ]
    width = max(len(k) for k, _ in fields)
    _write("".join(f"{k.ljust(width)}  {_cell(v)}\n" for k, v in fields if v is not None))
    _write(f"\ntimeline ({len(rows)} event{'s' if len(rows) != 1 else ''}):\n")
    _write(render_table(["offset", "event", "node", "took"],
                        [(_ms(r["offset_ms"], "+"), r["event_type"], r["node_id"],
                          _ms(r["duration_ms"])) for r in rows]))
    return EXIT_OK


@command("events", group="runs", help="a run's events in order (wake tokens redacted)",
         args=[app_args, db_args], configure=_show_args)
async def _runs_events(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        events = await sf.events(ns.run_id)
    data = [event_json(ev) for ev in events]
    if ns.json:
        _write_json(data)
        return EXIT_OK
    _write(render_table(["id", "at", "event", "node", "payload"],
                        [(e["id"], e["created_at"], e["event_type"],
                          e["node_id"], e["payload"]) for e in data]))
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
         help="run histories as JSON for starflow_testing.Replayer (wake tokens redacted)",
         args=[app_args, db_args], configure=_export_args)
async def _runs_export(ns: argparse.Namespace) -> int:
    from .history import export_run

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
                histories.append(await export_run(sf.adapter, run_id))
                progress.step()
        finally:
            progress.close()
    # One run: the history object itself; several (or --all): an array of them.
    document: Any = histories[0] if len(ids) == 1 and not ns.all else histories
    data = msgspec.json.encode(document) + b"\n"
    if ns.output == "-":
        _write(data.decode())
        sys.stdout.flush()
    else:
        try:
            await anyio.Path(ns.output).write_bytes(data)
        except OSError as exc:
            raise CommandError(f"cannot write {ns.output}: {exc.strerror or exc} (check the "
                               "directory exists and is writable)") from exc
        sys.stderr.write(f"exported {len(histories)} run(s) to {ns.output}\n")
    return EXIT_OK


# ---------------------------------------------------------------------------
# signal / resume / cancel
# ---------------------------------------------------------------------------


def _handle_json(handle: Any) -> dict[str, Any]:
    return {"run_id": handle.run_id, "status": handle.status,
            "waiting_for": handle.waiting_for, "error": handle.error,
            "result": redact_wake_tokens(handle.result)}


def _report(handle: Any, verb: str, as_json: bool) -> None:
    if as_json:
        _write_json(_handle_json(handle))
        return
    where = handle.status
    if handle.status == "paused":
        where += f" (waiting for {handle.waiting_for})" if handle.waiting_for else " (sleeping)"
    elif handle.status == "error" and handle.error:
        where += f": {handle.error}"
    _write(f"{verb} run {handle.run_id}: now {where}\n")


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
    _json_flag(parser)


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


def _resume_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("token", metavar="TOKEN", help="the wake token of a paused run's wait")
    parser.add_argument("--payload", type=_payload, default=None, metavar="JSON",
                        help="the value the wait returns (JSON, default null)")
    _json_flag(parser)


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


@command("cancel", help="cancel a run (a running one stops at its next step boundary)",
         args=[app_args, db_args], configure=_show_args)
async def _cancel(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        handle = await sf.cancel(ns.run_id)
    _report(handle, "cancelled", ns.json)
    return EXIT_OK


@command("retry", group="runs",
         help="run a run that ended in error again from its recorded history (after a fix)",
         args=[app_args, db_args], configure=_show_args)
async def _retry(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf, _missing_code_explained(sf):
        handle = await sf.retry(ns.run_id)
    _report(handle, "retried", ns.json)
    return EXIT_OK


# ---------------------------------------------------------------------------
# outbox status
# ---------------------------------------------------------------------------


@command("status", group="outbox",
         help="the mirror outbox's lag: pending rows by age, and the level (ok/warn/page)",
         args=[app_args, db_args], configure=_json_flag)
async def _outbox_status(ns: argparse.Namespace) -> int:
    async with open_app(ns, must_exist=True) as sf:
        status = await sf.outbox_status()
    if ns.json:
        _write_json({"pending": status.pending,
                     "oldest_age_seconds": round(status.oldest_age_seconds, 3),
                     "level": status.level, "buckets": status.buckets, "warm": status.warm})
        return EXIT_OK
    _write(f"outbox: {status.pending} pending, oldest "
           f"{human_duration(status.oldest_age_seconds)}, level {status.level}"
           f"{f', warm tier {status.warm}' if status.warm else ''}\n")
    _write(render_table(["age", "rows"],
                        [(_bucket_label(k), v) for k, v in status.buckets.items()]))
    return EXIT_OK


def _bucket_label(key: str) -> str:
    """``lt_1s`` → ``< 1s``, ``1s_5s`` → ``1s-5s``, ``gt_5m`` → ``> 5m``."""
    if key.startswith("lt_"):
        return "< " + key[3:]
    if key.startswith(("gt_", "ge_")):
        return "> " + key[3:]
    return key.replace("_", "-")


# ---------------------------------------------------------------------------
# replay
# ---------------------------------------------------------------------------


def _replay_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE",
                        help="an export from `starflow runs export` (- for stdin)")
    _json_flag(parser)


def _histories(document: Any, source: str) -> list[Mapping[str, Any]]:
    items = document if isinstance(document, list) else [document]
    if not items or not all(isinstance(i, dict) for i in items):
        raise CommandError(f"{source}: not a run history export (expected a JSON object or an "
                           "array of them, as `starflow runs export` writes)")
    return items


@command("replay",
         help="replay exported histories against this code; exit 1 if any would fail "
              "(a pre-deploy determinism check)",
         args=[app_args], configure=_replay_args)
async def _replay(ns: argparse.Namespace) -> int:
    if not ns.app:
        raise CommandError("starflow replay needs --app MODULE[:ATTR]: the module that "
                           "defines the workflows to check", EXIT_USAGE)
    try:
        from starflow_testing.replayer import Replayer
    except ImportError as exc:
        raise CommandError(f"starflow replay needs starflow_testing, which failed to import "
                           f"({exc}): reinstall starflow with pip install 'starflow-durable[dev]'"
                           ) from exc
    from .errors import SerializationError

    if ns.file == "-":
        raw = sys.stdin.buffer.read() if hasattr(sys.stdin, "buffer") else sys.stdin.read()
    else:
        try:
            raw = await anyio.Path(ns.file).read_bytes()
        except OSError as exc:
            raise CommandError(f"cannot read {ns.file}: {exc.strerror or exc} (give a file "
                               "written by starflow runs export)",
                               EXIT_USAGE) from exc
    try:
        document = msgspec.json.decode(raw)
    except msgspec.DecodeError as exc:
        raise CommandError(f"{ns.file}: not valid JSON ({exc}); export it with "
                           "starflow runs export") from exc
    load_app_object(ns.app)  # registers the workflows the replayer looks up
    replayer = Replayer()
    results = []
    for history in _histories(document, ns.file):
        try:
            results.append(await replayer.replay_history(history))
        except SerializationError as exc:
            raise CommandError(f"{ns.file}: {exc}") from exc
    failed = [r for r in results if not r.ok]
    if ns.json:
        _write_json([{"run_id": r.run_id, "workflow": r.workflow, "ok": r.ok,
                      "outcome": r.outcome, "error": str(r.error) if r.error else None}
                     for r in results])
    else:
        _write(render_table(["run", "workflow", "outcome", "ok"],
                            [(r.run_id, r.workflow, r.outcome, "yes" if r.ok else "NO")
                             for r in results]))
        for r in failed:
            _write(f"{r.run_id}: {type(r.error).__name__}: {r.error}\n")
    if failed:
        nondeterministic = sum(r.outcome == "nondeterminism" for r in failed)
        raise CommandError(
            f"{len(failed)} of {len(results)} run(s) would fail on this code "
            f"({nondeterministic} non-deterministic): keep the old workflow version "
            "registered for them, or fix the change before deploying", EXIT_FAILURE)
    sys.stderr.write(f"{len(results)} run(s) replay cleanly\n")
    return EXIT_OK
