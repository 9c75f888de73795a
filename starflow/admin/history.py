"""Run histories: the export format for one run's row and events.

``starflow runs export`` writes it and :class:`starflow.admin.replayer.Replayer` reads it,
so a production history can be replayed against new workflow code in a test.
Wake tokens are bearer secrets and are redacted from exports.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from .. import serde
from ..adapters.base import WorkflowStateAdapter
from ..errors import RunNotFound, SerializationError
from ..records import RunEvent, RunInfo
from ..tokens import redact_wake_tokens

__all__ = ["HISTORY_FORMAT", "RunHistory", "export_run", "load_history", "read_history"]

#: The ``format`` field of every export; bumped when the layout changes.
HISTORY_FORMAT = "starflow.run-history/1"


class RunHistory(msgspec.Struct, frozen=True, kw_only=True):
    """One run as recorded: its ``workflow_runs`` row and its events in order.

    Attributes:
        format: Always :data:`HISTORY_FORMAT` for this layout.
        run: The run row.
        events: The ``workflow_run_events`` rows, in ``id`` order.
    """

    run: RunInfo
    events: list[RunEvent]
    format: str = HISTORY_FORMAT

    @property
    def run_id(self) -> str:
        """The run's id."""
        return self.run.id


def _redacted(history: RunHistory) -> RunHistory:
    run = history.run
    if run.checkpoint_json is not None:
        run = msgspec.structs.replace(run, checkpoint_json=redact_wake_tokens(run.checkpoint_json))
    events = [msgspec.structs.replace(ev, payload_json=redact_wake_tokens(ev.payload_json))
              for ev in history.events]
    return RunHistory(run=run, events=events, format=history.format)


async def read_history(adapter: WorkflowStateAdapter, run_id: str) -> RunHistory:
    """Read one run's history (cold: the run row, then its events).

    Raises:
        RunNotFound: no such run in the adapter's scope.
    """
    run_id = adapter.normalize_run_id(run_id)  # as stored: a pasted id, or a run key
    run = await adapter.get_run(run_id)
    if run is None:
        raise RunNotFound(run_id)
    events = await adapter.list_events(run_id)
    return RunHistory(run=run, events=events)


async def export_run(adapter: WorkflowStateAdapter, run_id: str) -> dict[str, Any]:
    """One run's history as JSON-ready builtins, wake tokens redacted.

    ``msgspec.json.encode(await export_run(adapter, run_id))`` is the file
    ``starflow runs export`` writes; :func:`load_history` reads it back.
    """
    history = _redacted(await read_history(adapter, run_id))
    data: dict[str, Any] = serde.to_builtins(history, what=f"history of run {run_id}",
                                             run_id=run_id)
    return data


def load_history(data: RunHistory | Mapping[str, Any] | str | bytes) -> RunHistory:
    """Parse an export (a dict, or its JSON text) into a :class:`RunHistory`.

    Raises:
        SerializationError: not a run history of a supported format.
    """
    if isinstance(data, RunHistory):
        return data
    try:
        if isinstance(data, str | bytes):
            history = msgspec.json.decode(data, type=RunHistory)
        else:
            history = msgspec.convert(dict(data), RunHistory)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise SerializationError(f"not a starflow run history: {exc}") from exc
    if history.format != HISTORY_FORMAT:
        raise SerializationError(
            f"unsupported run history format {history.format!r}: this starflow reads "
            f"{HISTORY_FORMAT!r}; export it again with this version")
    return history
