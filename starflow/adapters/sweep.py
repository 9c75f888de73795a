"""The lease sweep's outcome, written once.

A run that is ``running`` or ``paused`` with ``lease_until < now`` lost its
runner. Below its ``max_claim_attempts`` it is **requeued** (another runner
claims it); at its limit it is **abandoned** (status ``error``, the sweep's
reason as its error). Either way a ``runner_lost`` event records it.

Both SQL adapters generate their ``UPDATE … SET col = CASE …`` from
:data:`OUTCOME` (see :func:`starflow.adapters.sql.shared.sweep_set`), and the mirror
projects a swept run with :func:`swept_columns`: one table, three readers.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

__all__ = ["ABANDONED", "NOW", "OUTCOME", "REASON", "REQUEUED", "lost_payload", "swept_columns"]

REQUEUED = "requeued"
ABANDONED = "abandoned"


class _Slot:
    """A value the sweep fills in: its ``reason`` or its ``now``."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: The sweep's reason (``runner_lost`` unless the caller says otherwise).
REASON = _Slot("REASON")
#: The time of the sweep pass.
NOW = _Slot("NOW")

#: Columns the sweep sets on a run, per action. A column one action sets and
#: the other does not keeps its value under the other.
OUTCOME: dict[str, dict[str, Any]] = {
    REQUEUED: {"status": "queued", "claim_state": "queued", "lease_until": None},
    ABANDONED: {"status": "error", "claim_state": "abandoned", "error": REASON,
                "completed_at": NOW},
}


def swept_columns(action: str, *, reason: str, now: datetime) -> dict[str, Any]:
    """The columns the sweep wrote on a run it acted on with ``action``."""
    return {column: reason if value is REASON else now if value is NOW else value
            for column, value in OUTCOME[action].items()}


def lost_payload(leased_by: str | None, action: str, reason: str) -> dict[str, Any]:
    """The payload of the ``runner_lost`` event the sweep records."""
    return {"leased_by": leased_by, "action": action, "reason": reason}
