"""The warm-tier port: a live overlay of run state, fed from the cold tier.

The warm tier is a *hint* (the state model's authority rules): live run status,
live-run discovery and step progress read from it; resume, history, audit and
reconciliation never do. It is fed by the outbox drainer with
:class:`Projection` values, each self-contained, and it never sees a secret
(wake tokens are redacted before a projection is written to the outbox).

The port is deliberately narrow (apply, read one run, list live runs,
subscribe, hash for drift comparison, step progress) so that another store,
SpacetimeDB for one, can implement it. Every tier instance is bound to one
(``workspace_id``, ``env``) and never reads or writes outside it.

Projection kinds and their payloads:

``run``
    ``{"run_id", "op": "insert" | "update", "columns": {column: value}}``.
    ``insert`` sets the columns; ``update`` merges them into a run the tier
    already holds (and is ignored otherwise).
``event``
    ``{"run_id", "event": {"event_type", "node_id", "payload", "created_at"}}``
    appended to the run's timeline (ignored for a run the tier does not hold).
``session_var``
    ``{"op": "set", "session_id", "key", "value", "run_id", "keep_until"}`` or
    ``{"op": "delete_run", "run_id"}`` (the run-scoped vars of a finished run).
``reset``
    ``{"run_id", "columns": {…} | None, "events": [...]}``: replace everything
    the tier holds for the run (``columns`` None: forget the run, its
    high-water mark included). Written by the drift sweep and end-of-run
    reconciliation, from cold, and by the mirror for each run a prune deletes.

``run`` and ``event`` projections carry ``seq`` (the outbox row id); a tier
applies each at most once per run (a per-run high-water mark), so a batch
re-sent after a crash is harmless. ``reset`` has ``seq`` 0 and always applies.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

import msgspec

from ..clock import format_ts
from ..records import TERMINAL_STATUSES, RunEvent, RunInfo
from ..tokens import REDACTED, redact_wake_tokens

__all__ = [
    "REDACTED",
    "LiveRun",
    "Projection",
    "WarmTier",
    "event_row",
    "live_run",
    "redact",
    "run_columns",
    "state_hash",
]

#: What a wake token (a bearer secret) becomes in anything sent to the warm tier.

#: ``workflow_runs`` columns mirrored to the warm tier, in RunInfo order.
RUN_FIELDS: tuple[str, ...] = RunInfo.__struct_fields__


class Projection(msgspec.Struct, frozen=True, kw_only=True):
    """One self-contained change for the warm tier (an outbox row, or a correction).

    Attributes:
        seq: The ``mirror_outbox`` id (0 for a correction, which always applies).
        kind: ``run``, ``event``, ``session_var`` or ``reset``.
        run_id: The run it concerns (``None`` for a session var set outside a run).
        payload: The kind's payload (see the module docstring).
    """

    seq: int
    kind: str
    run_id: str | None
    payload: dict[str, Any]


class LiveRun(RunInfo, frozen=True, kw_only=True):
    """A run as the warm tier shows it: the ``workflow_runs`` columns (redacted),
    plus what only the warm tier has.

    It may be up to a couple of seconds stale; never base a decision with
    consequences (resume, billing, audit) on it: read ``Starflow.get_run``.

    Attributes:
        progress: The latest ``starflow.progress(data)`` of each step, by node id.
        last_event: The newest event of the run's timeline (type, node, payload).
        event_count: How many events the warm tier holds for the run.
    """

    progress: dict[str, Any] = msgspec.field(default_factory=dict)
    last_event: dict[str, Any] | None = None
    event_count: int = 0


# ---------------------------------------------------------------------------
# Projections: one canonical JSON form for cold rows and warm state
# ---------------------------------------------------------------------------


#: Wake tokens are bearer secrets: every warm projection goes through this.
redact = redact_wake_tokens


def _canonical(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_ts(value)
    return redact(msgspec.to_builtins(value)) if isinstance(value, Mapping | list | tuple) \
        else value


def run_columns(values: RunInfo | Mapping[str, Any]) -> dict[str, Any]:
    """The warm form of run columns: JSON-ready, timestamps as text, secrets redacted.

    Given a :class:`RunInfo`, every column; given a mapping (an ``UpdateRun``'s
    values), just those.
    """
    if isinstance(values, RunInfo):
        values = {f: getattr(values, f) for f in RUN_FIELDS}
    return {k: _canonical(v) for k, v in values.items()}


def event_row(event: RunEvent | Mapping[str, Any]) -> dict[str, Any]:
    """The warm form of one ``workflow_run_events`` row (its id is cold-only)."""
    if isinstance(event, RunEvent):
        event = {"event_type": event.event_type, "node_id": event.node_id,
                 "payload": event.payload_json, "created_at": event.created_at}
    return {
        "event_type": event["event_type"],
        "node_id": event["node_id"],
        "payload": _canonical(event["payload"]),
        "created_at": _canonical(event["created_at"]),
    }


def state_hash(columns: Mapping[str, Any] | None, events: Iterable[Mapping[str, Any]]
               ) -> str | None:
    """The drift-comparison hash of one run's warm projection (``None``: no run).

    Computed the same way from cold rows (through :func:`run_columns` and
    :func:`event_row`) and from what a tier holds, so equal state hashes equal.
    """
    if columns is None:
        return None
    doc = {"run": {f: columns.get(f) for f in RUN_FIELDS}, "events": list(events)}
    return hashlib.sha256(msgspec.json.encode(doc, order="sorted")).hexdigest()


_LIVE_FALLBACKS: dict[str, Any] = {"template_id": None, "workspace_id": "", "env": "",
                                   "status": "unknown", "started_at": None}


def live_run(state: Mapping[str, Any]) -> LiveRun | None:
    """Decode a tier's state dict (columns + ``progress``/``last_event``/``event_count``).

    The warm tier is a hint and may hold a partial or damaged projection (the
    drift sweep repairs it): missing columns get neutral values, and a state
    that cannot be decoded gives ``None`` instead of failing the live view.
    """
    try:
        return msgspec.convert({**_LIVE_FALLBACKS, **state}, LiveRun)
    except msgspec.ValidationError:
        return None


def is_terminal(status: Any) -> bool:
    return status in TERMINAL_STATUSES


# ---------------------------------------------------------------------------
# The port
# ---------------------------------------------------------------------------


class WarmTier(abc.ABC):
    """Live-state store bound to one (``workspace_id``, ``env``).

    Implementations raise :class:`starflow.errors.WarmTierError` when the store
    cannot be reached; callers (the drainer, ``watch``) retry or degrade, and
    the cold path never depends on it.
    """

    #: The URL the tier was opened from, for messages (no credentials).
    url: str = ""

    def __init__(self, *, workspace_id: str = "celestial", env: str = "prod") -> None:
        self.workspace_id = workspace_id
        self.env = env

    async def open(self) -> None:  # noqa: B027 - optional hook
        """Connect. Called once by ``Starflow.open``; may be called again (no-op)."""

    @abc.abstractmethod
    async def close(self) -> None:
        """Release connections and end subscriptions."""

    @abc.abstractmethod
    async def apply(self, batch: Sequence[Projection]) -> None:
        """Apply projections in order (at most once per run for ``seq`` > 0).

        Raises:
            WarmTierError: the store failed; the caller retries the whole batch.
        """

    @abc.abstractmethod
    async def get_run(self, run_id: str) -> dict[str, Any] | None:
        """The run's live state (columns plus ``progress``, ``last_event``,
        ``event_count``), or ``None`` if the tier does not hold it."""

    @abc.abstractmethod
    async def live_runs(self) -> list[dict[str, Any]]:
        """The live state of every run the tier holds with a non-terminal status."""

    @abc.abstractmethod
    def subscribe(self, run_id: str) -> AsyncIterator[dict[str, Any]]:
        """Yield the run's live state now (if held) and after every change to it.

        Changes may be coalesced: a subscriber always gets the latest state,
        not necessarily every intermediate one.
        """

    @abc.abstractmethod
    async def hashes(self, run_ids: Sequence[str]) -> dict[str, str | None]:
        """:func:`state_hash` of each run's projection (``None`` if not held)."""

    @abc.abstractmethod
    async def put_progress(self, run_id: str, node_id: str, data: Any) -> None:
        """Record a step's latest progress (warm only: never reaches cold)."""

    @abc.abstractmethod
    async def session_var(self, session_id: str, key: str) -> Any:
        """A session variable's warm value (``None`` if absent)."""

    async def __aenter__(self) -> WarmTier:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
