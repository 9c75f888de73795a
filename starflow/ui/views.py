"""What the pages show, computed from records: no HTTP here, so it is tested alone.

Everything a page prints passes through :func:`scrub` first: wake tokens are
bearer secrets, so ``wake_token`` entries are redacted (the runtime's own
:func:`~starflow.tokens.redact_wake_tokens`) and so is any other string that
looks like one (a step may return a token, or take one as an argument).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import msgspec

from ..clock import parse_when
from ..codec import show_encoded
from ..engine.replay import retried
from ..records import RunEvent, RunInfo, WaitRecord
from ..tokens import REDACTED, redact_wake_tokens
from ..workflow.context import WAIT_KEY

__all__ = [
    "FoldedJSON",
    "TimelineRow",
    "bucket_label",
    "fold_json",
    "human_duration",
    "iso",
    "parse_when",
    "period",
    "recorded_nodes",
    "scrub",
    "session_keys",
    "timeline",
    "waiting_on",
]

#: A wake token anywhere in a string: ``sfw1.<key id>.<body>.<mac>``.
_TOKEN = re.compile(r"sfw1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{16,}")
#: JSON longer than this (characters or lines) is folded behind a summary.
FOLD_CHARS, FOLD_LINES = 400, 12
#: JSON longer than this is cut: a page must stay small whatever a step returned.
MAX_JSON_CHARS = 200_000


def scrub(value: Any) -> Any:
    """``value`` with every wake token replaced by ``[redacted]`` and every codec
    envelope (a value this process has no codec for) by ``encrypted (…)``."""
    value = redact_wake_tokens(show_encoded(value))
    if isinstance(value, str):
        return _TOKEN.sub(REDACTED, value)
    if isinstance(value, Mapping):
        return {scrub(k): scrub(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [scrub(v) for v in value]
    return value


def iso(ts: datetime | None) -> str:
    """ISO-8601 UTC with milliseconds (``-`` for None)."""
    if ts is None:
        return "-"
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def human_duration(seconds: float | None) -> str:
    """``250ms``, ``12.0s``, ``4m05s``, ``2h03m``, ``3d04h`` (``-`` for None)."""
    if seconds is None:
        return "-"
    negative, seconds = seconds < 0, abs(seconds)
    if seconds < 1:
        text = f"{seconds * 1000:.0f}ms"
    elif seconds < 60:
        text = f"{seconds:.1f}s"
    elif seconds < 3600:
        text = f"{int(seconds) // 60}m{int(seconds) % 60:02d}s"
    elif seconds < 86400:
        text = f"{int(seconds) // 3600}h{int(seconds) % 3600 // 60:02d}m"
    else:
        text = f"{int(seconds) // 86400}d{int(seconds) % 86400 // 3600:02d}h"
    return f"-{text}" if negative else text


def period(seconds: float | None) -> str:
    """A period in its largest whole unit: ``1m``, ``90s``, ``6h``, ``2d``, ``250ms``
    (``-`` for None); one that is no whole number of seconds keeps its fraction."""
    if seconds is None:
        return "-"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    return f"{seconds:g}s"


def bucket_label(key: str) -> str:
    """An outbox age bucket for people: ``lt_1s`` → ``< 1s``, ``1s_2s`` → ``1s-2s``."""
    if key.startswith("lt_"):
        return "< " + key[3:]
    if key.startswith(("gt_", "ge_")):
        return "> " + key[3:]
    return key.replace("_", "-")


@dataclass(frozen=True)
class FoldedJSON:
    """A value as pretty JSON; ``folded`` when it is long (shown behind a summary)."""

    text: str
    folded: bool
    summary: str
    size: int


def fold_json(value: Any) -> FoldedJSON:
    """Pretty JSON of a scrubbed value, folded when long, cut when huge."""
    try:
        raw = msgspec.json.encode(scrub(value))
    except (TypeError, msgspec.EncodeError):
        raw = msgspec.json.encode(repr(value))
    one_line = raw.decode(errors="replace")  # compact: msgspec adds no whitespace
    if len(one_line) <= 72:  # small values stay on one line: the timeline stays short
        return FoldedJSON(text=one_line, folded=False, summary=one_line, size=len(raw))
    text = msgspec.json.format(raw, indent=2).decode()
    size = len(text)
    if size > MAX_JSON_CHARS:
        text = text[:MAX_JSON_CHARS] + f"\n… cut: {size - MAX_JSON_CHARS} more characters"
    folded = size > FOLD_CHARS or text.count("\n") > FOLD_LINES
    summary = one_line if len(one_line) <= 80 else one_line[:77] + "…"
    return FoldedJSON(text=text, folded=folded, summary=summary, size=len(raw))


@dataclass
class TimelineRow:
    """One event of a run, as the timeline shows it."""

    id: int
    at: datetime
    offset: float | None
    event_type: str
    node_id: str | None
    kind: str
    duration: float | None = None
    attempts: int | None = None
    detail: str = ""
    payload: FoldedJSON | None = None


def _kind(ev: RunEvent) -> str:
    if ev.node_id:
        return ev.node_id.split(":", 1)[0].split("#", 1)[0]  # step, wait, sleep…
    return ev.event_type.removeprefix("run_")


def _detail(ev: RunEvent) -> str:
    p = ev.payload_json if isinstance(ev.payload_json, dict) else {}
    if ev.event_type == "run_paused":
        what = f"waiting for {p['event']!r}" if p.get("event") else "sleeping"
        return what + (f" until {p['deadline']}" if p.get("deadline") else "")
    if ev.event_type == "phase":
        before = p.get("previous")
        return f"phase {'—' if before is None else repr(before)} → {p.get('phase')!r}"
    if ev.event_type == "node_error":
        err = p.get("error")
        if not isinstance(err, dict):
            return "error"
        return f"{err.get('type', 'error')}: {err.get('message', '')}"
    if ev.event_type in ("node_complete", "run_resumed") and p.get("via"):
        return f"woken by {p['via']}" + (" (timed out)" if p.get("timed_out") else "")
    if ev.event_type == "run_retried":
        where = f"from {p['from_node']}, " if p.get("from_node") else ""
        return f"{where}after: {p.get('previous_error')}"
    if ev.event_type == "run_forked":
        return f"from run {p.get('from_run_id')} at {p.get('from_node')}"
    if ev.event_type == "run_cancelled":
        return f"was {p.get('previous_status')}"
    if ev.event_type == "run_paused_by_operator":
        places = {"queue": "while queued", "wait": "at its wait", "step": "before its next step"}
        return f"paused by an operator {places.get(str(p.get('at')), '')}".rstrip()
    if ev.event_type == "run_pause_requested":
        return "pause requested by an operator: it parks before its next step"
    if ev.event_type == "run_resumed_by_operator":
        return ("pending pause withdrawn by an operator" if p.get("withdrawn")
                else "resumed by an operator")
    return ""


def timeline(run: RunInfo, events: Sequence[RunEvent]) -> list[TimelineRow]:
    """Each event with its offset from the run's start and, on a node's end
    (``node_complete`` / ``node_error``), how long the node took and its attempts."""
    start = run.started_at or (events[0].created_at if events else None)
    begun: dict[str, datetime] = {}
    rows = []
    for ev in events:
        p = ev.payload_json if isinstance(ev.payload_json, dict) else {}
        row = TimelineRow(id=ev.id, at=ev.created_at, event_type=ev.event_type,
                          node_id=ev.node_id, kind=_kind(ev), detail=scrub(_detail(ev)),
                          offset=(ev.created_at - start).total_seconds() if start else None)
        if ev.event_type == "node_start" and ev.node_id:
            begun[ev.node_id] = ev.created_at
            row.payload = fold_json(p.get("input"))
        elif ev.event_type == "run_paused":
            waited = p.get("node_id")  # a wait has no node_start: it begins here
            if isinstance(waited, str):
                begun.setdefault(waited, ev.created_at)
            row.payload = fold_json(p) if p else None
        elif ev.event_type in ("node_complete", "node_error"):
            if ev.node_id in begun:
                row.duration = (ev.created_at - begun.pop(ev.node_id or "")).total_seconds()
            err = p.get("error")
            if isinstance(err, dict) and isinstance(err.get("attempts"), int):
                row.attempts = err["attempts"]
            elif isinstance(p.get("attempts"), int):
                row.attempts = p["attempts"]
            row.payload = fold_json(p.get("output") if ev.event_type == "node_complete"
                                    else p.get("error"))
        elif ev.payload_json is not None:
            row.payload = fold_json(ev.payload_json)
        rows.append(row)
    return rows


@dataclass(frozen=True)
class Waiting:
    """What a run waits for now (never its token)."""

    node_id: str
    event: str | None
    deadline: datetime | None
    remaining: float | None


def waiting_on(run: RunInfo, waits: Sequence[WaitRecord], now: datetime) -> list[Waiting]:
    """The run's registered wakes, or, for a paused run between checkpoint and
    wake registration, the wait its checkpoint names."""
    found = [Waiting(node_id=w.node_id, event=w.event, deadline=w.deadline,
                     remaining=(w.deadline - now).total_seconds() if w.deadline else None)
             for w in waits]
    if found or run.status != "paused":
        return found
    variables = (run.checkpoint_json or {}).get("variables")
    wait = variables.get(WAIT_KEY) if isinstance(variables, dict) else None
    if isinstance(wait, dict) and isinstance(wait.get("node_id"), str):
        deadline = None
        if isinstance(wait.get("deadline"), str):
            try:
                deadline = datetime.fromisoformat(wait["deadline"].replace("Z", "+00:00"))
            except ValueError:
                deadline = None
        found.append(Waiting(node_id=wait["node_id"], event=wait.get("event"),
                             deadline=deadline,
                             remaining=(deadline - now).total_seconds() if deadline else None))
    return found


def session_keys(events: Sequence[RunEvent]) -> list[tuple[str, str]]:
    """The session variables a run read or wrote, ``(session_id, key)`` in first-use
    order, from its recorded ``session_get`` / ``session_set`` steps."""
    seen: dict[tuple[str, str], None] = {}
    for ev in events:
        p = ev.payload_json if isinstance(ev.payload_json, dict) else {}
        if ev.event_type != "node_start" or p.get("name") not in ("session_get", "session_set"):
            continue
        args = (p.get("input") or {}).get("args") if isinstance(p.get("input"), dict) else None
        kwargs = (p.get("input") or {}).get("kwargs") if isinstance(p.get("input"), dict) else None
        args = list(args) if isinstance(args, list) else []
        kwargs = kwargs if isinstance(kwargs, dict) else {}
        session_id = args[0] if len(args) > 0 else kwargs.get("session_id")
        key = args[1] if len(args) > 1 else kwargs.get("key")
        if isinstance(session_id, str) and isinstance(key, str):
            seen.setdefault((session_id, key), None)
    return list(seen)


def recorded_nodes(events: Sequence[RunEvent]) -> list[str]:
    """The node ids of a history as its replay sees it (a retry's superseded nodes
    aside), in the order they were first recorded: what a fork may start from."""
    return list(dict.fromkeys(e.node_id for e in retried(events) if e.node_id is not None))


def failure_cause(run: RunInfo, events: Sequence[RunEvent]) -> dict[str, Any] | None:
    """Why the run failed: its recorded failure (``RunInfo.failure``, migration
    024: type, message, failing node, attempts, traceback), else, for a run that
    failed before 024, the last ``node_error``'s cause."""
    failure = run.failure
    if failure is not None:
        cause: dict[str, Any] = scrub({
            "node_id": failure.node_id, "type": failure.type, "message": failure.message,
            "attempts": failure.attempts, "traceback": failure.traceback})
        return cause
    return node_error(events)


def node_error(events: Sequence[RunEvent]) -> dict[str, Any] | None:
    """The last ``node_error``'s cause (type, message, attempts, traceback if kept)."""
    for ev in reversed(events):
        if ev.event_type == "node_error" and isinstance(ev.payload_json, dict):
            err = ev.payload_json.get("error")
            if isinstance(err, dict):
                return {"node_id": ev.node_id, **scrub(err)}
    return None
