"""The journal: node ids, recorded outcomes and determinism checks.

A run's journal is rebuilt from its ``workflow_run_events`` in one query:
``node_start`` payloads give each step's name and argument hash,
``node_complete`` / ``node_error`` its outcome, ``phase`` events the last
recorded phase. Replay matches calls to records by node id.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .records import RunEvent

__all__ = ["Journal", "NodeRecord", "node_id"]


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

    @classmethod
    def from_events(cls, events: Iterable[RunEvent], started_at: datetime | None = None
                    ) -> Journal:
        journal = cls(started_at=started_at)
        nodes = journal.nodes
        for ev in events:
            nid = ev.node_id
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
                if rec.kind is None and payload.get("kind") == "patch":
                    rec.kind = "patch"  # a starflow.patched() marker
                    rec.name = payload.get("name")
            elif ev.event_type == "node_error":
                rec.status = "error"
                rec.error = payload.get("error") or {}
                rec.recorded_at = ev.created_at
                rec.variables = payload.get("variables")
        return journal

    def get(self, nid: str) -> NodeRecord | None:
        return self.nodes.get(nid)

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
                if n not in self.consumed and rec.kind != "patch"]

    def record(self, rec: NodeRecord) -> None:
        """Add a node recorded by this execution (it counts as consumed)."""
        self.nodes[rec.node_id] = rec
        self.consumed.add(rec.node_id)
