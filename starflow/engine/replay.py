"""The journal: node ids, recorded outcomes and determinism checks.

A run's journal is rebuilt from its ``workflow_run_events`` in one query:
``node_start`` payloads give each step's name and argument hash,
``node_complete`` / ``node_error`` its outcome, ``phase`` events the last
recorded phase. Replay matches calls to records by node id.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import anyio.lowlevel

from .. import serde
from ..errors import NonDeterminismError, SerializationError
from ..limits import MAX_VALUE_DEPTH
from ..records import RunEvent

__all__ = ["DIVERGENCE_FIX", "RESULT_KIND", "RETRIED_EVENT", "Journal", "NodeRecord",
           "check_recorded", "node_id", "replay_variables", "retried", "rewind",
           "variables_diff", "variables_snapshot"]

#: The event ``sf.retry`` records: ``{"previous_error", "from_node"}``. With a
#: ``from_node``, the history before it is :func:`rewind`-ed from that node.
RETRIED_EVENT = "run_retried"

#: The events that end a node (its outcome).
_OUTCOMES = ("node_complete", "node_error")

#: Recorded nodes that never count as divergence: ``patched()`` markers,
#: ``set_attributes()`` calls and event and stream writes (adding or removing
#: one is safe under runs in flight). Their history is a ``node_complete`` only.
MARKER_KINDS = ("patch", "attributes", "event", "stream")

#: The node kind of a child run's start (``child:<workflow>#n``, starflow.engine.child_nodes):
#: its ``node_complete`` carries the workflow name and argument hash.
CHILD_START_KIND = "child"

#: The node kind of the await of a child run's result (``result:<child run id>#n``).
RESULT_KIND = "result"

#: What to do about a replay that diverged from its history (every such message ends so).
DIVERGENCE_FIX = ("Revert the change, bump the workflow version, or guard it with "
                  "starflow.patched()")


def node_id(kind: str, name: str | None, occurrence: int) -> str:
    """``step:charge#1``, ``wait:approval#1``, ``sleep#1``."""
    return f"{kind}:{name}#{occurrence}" if name else f"{kind}#{occurrence}"


@dataclass
class NodeRecord:
    """What the history holds for one node."""

    node_id: str
    kind: str | None = None
    name: str | None = None
    args_hash: str | None = None
    #: The recorded arguments (``{"args": [...], "kwargs": {...}}``) of a step.
    input: Any = None
    status: str = "started"  # started | complete | error
    output: Any = None
    error: dict[str, Any] | None = None
    recorded_at: datetime | None = None
    #: A step's writes to the context's variables: ``{"set": {...}, "unset": [...]}``.
    variables: dict[str, Any] | None = None

    @property
    def finished(self) -> bool:
        return self.status in ("complete", "error")


@dataclass
class Journal:
    """Recorded nodes of one run, and what this execution has consumed."""

    nodes: dict[str, NodeRecord] = field(default_factory=dict)
    last_phase: Any = None
    started_at: datetime | None = None
    consumed: set[str] = field(default_factory=set)
    #: True while this execution replays recorded nodes (until it reaches new ones).
    replaying: bool = False
    #: When the run was last retried (its ``run_retried`` event), if it was.
    retried_at: datetime | None = None
    #: The nodes recorded before that retry (markers aside): once this execution has
    #: replayed them all, its time is at least ``retried_at`` (:meth:`time_floor`).
    before_retry: frozenset[str] = frozenset()
    _past_retry: bool = False
    #: The first divergence from the history this execution met, even if the
    #: workflow code caught it (the replayer reports it).
    divergence: NonDeterminismError | None = None

    @classmethod
    def from_events(cls, events: Iterable[RunEvent], started_at: datetime | None = None
                    ) -> Journal:
        """The journal of a history; a retry marker rewinds what precedes it (:func:`retried`)."""
        journal = cls(started_at=started_at)
        nodes = journal.nodes
        for ev in retried(events):
            nid = ev.node_id
            if ev.event_type == RETRIED_EVENT and nid is None:
                journal.retried_at = ev.created_at
                journal.before_retry = frozenset(
                    n for n, rec in nodes.items() if rec.kind not in MARKER_KINDS)
                continue
            if ev.event_type == "phase":
                payload = ev.payload_json or {}
                journal.last_phase = payload.get("phase")
                continue
            if nid is None:
                continue
            rec = nodes.get(nid)
            if rec is None:
                rec = nodes[nid] = NodeRecord(node_id=nid)
            payload = ev.payload_json if isinstance(ev.payload_json, dict) else {}
            if ev.event_type == "node_start":
                rec.kind = payload.get("kind")
                rec.name = payload.get("name")
                rec.args_hash = payload.get("args_hash")
                rec.input = payload.get("input")
                if not rec.finished:
                    rec.status = "started"
            elif ev.event_type == "node_complete":
                rec.status = "complete"
                rec.output = payload.get("output")
                rec.recorded_at = ev.created_at
                rec.variables = payload.get("variables")
                if rec.kind is None and payload.get("kind") in MARKER_KINDS:
                    # a starflow.patched() marker, a set_attributes() call, an event
                    # or stream write
                    rec.kind = payload.get("kind")
                    rec.name = payload.get("name")
                elif rec.kind is None and payload.get("kind") == CHILD_START_KIND:
                    # a child run's start (starflow.start_child): checked like a step
                    rec.kind = CHILD_START_KIND
                    rec.name = payload.get("name")
                    rec.args_hash = payload.get("args_hash")
            elif ev.event_type == "node_error":
                rec.status = "error"
                rec.error = payload.get("error") or {}
                rec.recorded_at = ev.created_at
                rec.variables = payload.get("variables")
        return journal

    def get(self, nid: str) -> NodeRecord | None:
        return self.nodes.get(nid)

    def time_floor(self) -> datetime | None:
        """The retry's time, once this execution has replayed what came before it.

        A retried run's code after its retry point runs at the retry, not at the
        last boundary before it (a wait's timeout counts from the retry). Tied
        to the nodes replayed, so every later replay sees the same time there.
        """
        if self.retried_at is None:
            return None
        if not self._past_retry:
            if not self.before_retry <= self.consumed:
                return None
            self._past_retry = True  # consumed only grows: checked once true
        return self.retried_at

    def consume(self, nid: str) -> None:
        self.consumed.add(nid)

    def unconsumed(self) -> list[str]:
        """Recorded nodes this execution has not reached yet, in record order.

        ``patched()`` markers are left out: once every run that predates a
        patch has ended, its ``if patched(...)`` may be removed from the code,
        and the markers that remain in newer histories must not count as
        divergence.
        """
        return [n for n, rec in self.nodes.items()
                if n not in self.consumed and rec.kind not in MARKER_KINDS]

    def record(self, rec: NodeRecord) -> None:
        """Add a node recorded by this execution (it counts as consumed)."""
        self.nodes[rec.node_id] = rec
        self.consumed.add(rec.node_id)

    def decide_patch(self, change_id: str) -> tuple[bool, str | None]:
        """Whether this run takes the new path of ``change_id`` (``starflow.patched``).

        Returns the answer and, when it is a new decision at the frontier, the
        marker node id to record with the next boundary (it is recorded in the
        journal here).
        """
        nid = node_id("patch", change_id, 1)
        if self.get(nid) is not None:
            self.consume(nid)
            return True, None
        if self.replaying and self.unconsumed():
            return False, None  # the history goes past this point: old code ran here
        # Nothing recorded lies ahead: this is the run's frontier.
        self.replaying = False
        self.record(NodeRecord(node_id=nid, kind="patch", name=change_id, status="complete",
                               output=True))
        return True, nid

    def diverged(self, exc: NonDeterminismError) -> NonDeterminismError:
        """Note ``exc`` (the first one is :attr:`divergence`) and return it, to raise."""
        if self.divergence is None:
            self.divergence = exc
        return exc

    def check_recorded(self, run_id: str, rec: NodeRecord, kind: str, name: str,
                       h: str | None, encoded: Any = None) -> None:
        """:func:`check_recorded`, its divergence noted (:meth:`diverged`)."""
        try:
            check_recorded(run_id, rec, kind, name, h, encoded)
        except NonDeterminismError as exc:
            self.diverged(exc)
            raise

    async def reach_frontier(self, run_id: str, nid: str, what: str) -> None:
        """A new node may run only once every recorded node has been replayed.

        Concurrent branches replay at different speeds, so before declaring
        divergence this lets other tasks run while they make progress.

        Raises:
            NonDeterminismError: recorded nodes remain that the code does not reach.
        """
        if not self.replaying:
            return
        stalls = 0
        seen = len(self.consumed)
        while True:
            pending = self.unconsumed()
            if not pending:
                self.replaying = False
                return
            if stalls >= 3:
                raise self.diverged(NonDeterminismError(
                    f"run {run_id}: the code reached new node {nid} ({what}) while the "
                    f"history still holds {', '.join(pending[:5])} not reached by this replay; "
                    f"the workflow code changed under a running or paused run. {DIVERGENCE_FIX}",
                    run_id=run_id, node_id=nid, recorded=pending[0], current=nid,
                ))
            await anyio.lowlevel.cancel_shielded_checkpoint()
            now_seen = len(self.consumed)
            stalls = 0 if now_seen != seen else stalls + 1
            seen = now_seen


def rewind(events: list[RunEvent], from_node: str) -> list[RunEvent]:
    """The events of a history that stay recorded when it is redone from ``from_node``.

    ``from_node`` and what follows it in the workflow's order run again: the
    node itself and every node whose first event comes after ``from_node``
    ended (its outcome, or the end of the history if it has none), since
    those may have seen its outcome. The nodes that ran beside it, started
    before it ended (concurrent steps of a task group or ``gather``), keep
    their events, their outcomes included, and so do the nodes before it.
    Phase events after the node's first event are dropped; run-level events
    are kept. A ``from_node`` without events leaves the history as it is.
    """
    first = next((i for i, e in enumerate(events) if e.node_id == from_node), None)
    if first is None:
        return list(events)
    end = next((i for i in range(len(events) - 1, first - 1, -1)
                if events[i].node_id == from_node and events[i].event_type in _OUTCOMES),
               len(events))
    dropped = {from_node}
    seen: set[str] = set()
    for i, e in enumerate(events):
        nid = e.node_id
        if nid is None or nid in seen:
            continue
        seen.add(nid)
        if i > end:
            dropped.add(nid)
    return [e for i, e in enumerate(events)
            if (e.node_id is not None and e.node_id not in dropped)
            or (e.node_id is None and not (e.event_type == "phase" and i > first))]


def retried(events: Iterable[RunEvent]) -> list[RunEvent]:
    """A history as replay sees it: each retry marker (:data:`RETRIED_EVENT`) that
    names a ``from_node`` rewinds the events before it from that node (:func:`rewind`),
    so the node's recorded failure, and what followed it, run again."""
    seen: list[RunEvent] = []
    for ev in events:
        if ev.event_type == RETRIED_EVENT and ev.node_id is None:
            payload = ev.payload_json if isinstance(ev.payload_json, dict) else {}
            from_node = payload.get("from_node")
            if isinstance(from_node, str) and from_node:
                seen = rewind(seen, from_node)
        seen.append(ev)
    return seen


def _shown(value: Any, limit: int = 200) -> str:
    """Recorded or current step arguments as compact JSON, cut for a message."""
    if value is None:
        return "(not recorded)"
    text = serde.encode(value).decode()
    return text if len(text) <= limit else text[:limit] + "…"


def check_recorded(run_id: str, rec: NodeRecord, kind: str, name: str, h: str | None,
                   encoded: Any = None) -> None:
    """A replayed call must be the recorded one: same kind, name and argument hash.

    Raises:
        NonDeterminismError: the code calls something else at this node.
    """
    if rec.kind is not None and (rec.kind != kind or rec.name != name):
        raise NonDeterminismError(
            f"run {run_id}: node {rec.node_id} was recorded as {rec.kind} {rec.name!r} "
            f"but the code now calls {kind} {name!r}",
            run_id=run_id, node_id=rec.node_id,
            recorded=f"{rec.kind}:{rec.name}", current=f"{kind}:{name}",
        )
    if h is not None and rec.args_hash is not None and rec.args_hash != h:
        raise NonDeterminismError(
            f"run {run_id}: step {rec.node_id} was recorded with arguments "
            f"{_shown(rec.input)} (hash {rec.args_hash}) but is now called with "
            f"{_shown(encoded)} (hash {h}): its arguments changed. {DIVERGENCE_FIX}",
            run_id=run_id, node_id=rec.node_id, recorded=rec.args_hash, current=h,
        )


# A recorded step is not run again on replay, so what it wrote to the context's
# variables (the phase included) would be missing after every wake or takeover.
# Its writes are recorded with its outcome and applied again when it is replayed.

def variables_snapshot(variables: Mapping[str, Any], reserved_prefix: str
                       ) -> dict[str, bytes] | None:
    """The user variables as JSON, per key (None if one cannot be encoded)."""
    if not variables:
        return {}
    try:
        return {k: serde.encode(v, max_depth=MAX_VALUE_DEPTH) for k, v in variables.items()
                if not k.startswith(reserved_prefix)}
    except SerializationError:
        return None


def variables_diff(before: dict[str, bytes], after: dict[str, bytes]) -> dict[str, Any] | None:
    """What changed between two snapshots (``{"set": …, "unset": …}``), if anything."""
    changed = [k for k, v in after.items() if before.get(k) != v]
    unset = [k for k in before if k not in after]
    if not changed and not unset:
        return None
    return {"set": {k: serde.decode(after[k]) for k in changed}, "unset": unset}


def replay_variables(variables: Any, changes: dict[str, Any]) -> None:
    """Apply a replayed step's recorded variable writes (``Variables`` of the context)."""
    for key, value in (changes.get("set") or {}).items():
        variables._engine_set(key, value)
    for key in changes.get("unset") or ():
        variables._engine_pop(key)
