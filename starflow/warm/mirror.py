"""``MirroringWorkflowStateAdapter``: the cold tier plus a same-transaction outbox.

The mirror wraps the cold adapter; it does not replace it. To every unit it
executes it appends one ``InsertOutbox`` op per state change (``run``,
``event`` or ``session_var``), so the ``mirror_outbox`` row commits in the same
transaction as the cold write: a unit whose guard fails, or whose write
raises, leaves neither. It never talks to the warm tier on the write path: the
drainer (:mod:`starflow.warm.drainer`) pushes outbox rows to it in the
background, so a warm tier that is down costs lag, never a run.

Every outbox payload is a self-contained projection (see
:mod:`starflow.warm.base`) with wake tokens redacted: they are bearer secrets
and the warm tier is a dashboard-facing store.

Four cold writes that change run rows are not units: a claim, a lease-sweep
pass, a debounce re-arm and a prune batch are read-modify-write commands,
seen at :meth:`perform`. They carry an ``after`` hook, and the mirror's outbox
rows for them are written through it, in the same transaction. A pruned run's
rows are a ``reset`` without columns (the tier forgets the run: columns,
events, progress) and a ``session_var`` ``delete_run`` (its run-scoped session
variables), written after the prune deleted the run's older outbox rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import msgspec

from ..adapters.base import WorkflowStateAdapter
from ..adapters.caller import CallerTransaction
from ..adapters.delegating import DelegatingAdapter
from ..adapters.sweep import lost_payload, swept_columns
from ..adapters.units import (
    AfterClaim,
    AfterSweep,
    ClaimRuns,
    Command,
    DeleteSessionVars,
    InsertEvent,
    InsertOutbox,
    InsertRun,
    Op,
    PruneRuns,
    QueueDueStarts,
    RearmDebounced,
    SweepLeases,
    Unit,
    UpdateRun,
    UpsertSessionVar,
)
from ..clock import Clock, SystemClock, format_ts
from ..errors import TransactionalStartUnsupported, WarmTierError
from ..logs import get_logger
from ..records import DueStarts, PrunedBatch, RunInfo, SweepResult
from . import warm_from_url
from .base import WarmTier, event_row, redact, run_columns

__all__ = ["MirroringWorkflowStateAdapter", "find_mirror", "mirror", "outbox_ops"]

log = get_logger("starflow.mirror")

R = TypeVar("R")

_RUN_DEFAULTS: dict[str, Any] = {
    f.name: (None if f.default is msgspec.NODEFAULT else f.default)
    for f in msgspec.structs.fields(RunInfo)
}

OUTBOX_METHOD = "mirror_outbox"


def _outbox(run_id: str | None, kind: str, payload: dict[str, Any], now: datetime
            ) -> InsertOutbox:
    return InsertOutbox(method=OUTBOX_METHOD, run_id=run_id, kind=kind, payload=payload,
                        created_at=now)


def _add(rows: list[InsertOutbox], run_id: str | None, kind: str, payload: dict[str, Any],
         now: datetime) -> None:
    rows.append(InsertOutbox(method=OUTBOX_METHOD, same_call=bool(rows), run_id=run_id,
                             kind=kind, payload=payload, created_at=now))


def outbox_ops(ops: list[Op], *, now: datetime, workspace_id: str, env: str
               ) -> list[InsertOutbox]:
    """The outbox rows mirroring ``ops``: one per state change, secrets redacted.

    Together they are one call (``mirror_outbox``) in the unit's ``methods``.
    """
    rows: list[InsertOutbox] = []
    for op in ops:
        if isinstance(op, InsertRun):
            columns = {**_RUN_DEFAULTS, **op.values, "id": op.run_id,
                       "workspace_id": workspace_id, "env": env}
            _add(rows, op.run_id, "run", {
                "run_id": op.run_id, "op": "insert", "columns": run_columns(columns)}, now)
        elif isinstance(op, UpdateRun):
            _add(rows, op.run_id, "run", {
                "run_id": op.run_id, "op": "update", "columns": run_columns(op.values)}, now)
        elif isinstance(op, InsertEvent):
            _add(rows, op.run_id, "event", {
                "run_id": op.run_id,
                "event": event_row({"event_type": op.event_type, "node_id": op.node_id,
                                    "payload": op.payload, "created_at": op.created_at}),
            }, now)
        elif isinstance(op, UpsertSessionVar):
            _add(rows, op.run_id, "session_var", {
                "op": "set", "session_id": op.session_id, "key": op.key,
                "value": redact(msgspec.to_builtins(op.value)), "run_id": op.run_id,
                "keep_until": format_ts(op.keep_until) if op.keep_until else None,
            }, now)
        elif isinstance(op, DeleteSessionVars):
            _add(rows, op.run_id, "session_var",
                                {"op": "delete_run", "run_id": op.run_id}, now)
    return rows


class MirroringWorkflowStateAdapter(DelegatingAdapter):
    """Cold adapter + ``mirror_outbox`` enqueue; the warm tier is fed by the drainer.

    Args:
        inner: The cold adapter (the authority).
        warm: The warm tier the drainer feeds.
        clock: Time source for outbox ``created_at`` (the runtime's clock).
    """

    def __init__(self, inner: WorkflowStateAdapter, warm: WarmTier, *,
                 clock: Clock | None = None) -> None:
        super().__init__(inner)
        self.warm = warm
        self.clock: Clock = clock or SystemClock()
        self._listeners: list[Callable[[], None]] = []

    async def caller_transaction(self, connection: object) -> CallerTransaction:
        raise TransactionalStartUnsupported(
            "this app mirrors to a warm tier (Starflow.open(warm=...)), whose outbox rows "
            "the mirror writes with each unit of its own: a start in your transaction "
            "(connection=) would skip them. Start it from an app opened without warm=, "
            "on the same database. Nothing was written")

    # -- lifecycle -------------------------------------------------------------

    async def open(self) -> None:
        await self.inner.open()
        try:
            await self.warm.open()
        except WarmTierError as exc:
            # Cold is the authority: the app opens; the outbox holds changes until
            # the warm tier answers.
            log.warning("warm tier unreachable at open; changes wait in the outbox",
                        warm=self.warm.url, error=str(exc))

    async def close(self) -> None:
        try:
            await self.warm.close()
        finally:
            await self.inner.close()

    def on_commit(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` after each unit that wrote outbox rows commits.

        Returns:
            A function that removes the callback.
        """
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback)

    def _committed(self) -> None:
        for callback in list(self._listeners):
            callback()

    # -- the write seam --------------------------------------------------------

    async def execute(self, unit: Unit) -> bool:
        rows = outbox_ops(unit.ops, now=self.clock.now(), workspace_id=self.workspace_id,
                          env=self.env)
        if not rows:
            return await self.inner.execute(unit)
        # A copy: the caller's unit keeps describing the boundaries it built.
        mirrored = Unit(ops=[*unit.ops, *rows], guard=unit.guard, durable=unit.durable)
        held = await self.inner.execute(mirrored)
        if held:
            self._committed()
        return held


    # -- the sibling seam: claims and sweeps ------------------------------------

    async def perform(self, command: Command[R]) -> R:
        # A claim and a sweep pass change run rows the unit ops do not describe:
        # their outbox rows are written through the command's ``after`` hook, in
        # the same transaction. Other commands touch no mirrored table.
        if isinstance(command, ClaimRuns):
            runs = await self.inner.perform(replace(command, after=self._claim_outbox(command)))
            if runs:
                self._committed()
            return cast(R, runs)
        if isinstance(command, SweepLeases):
            results = await self.inner.perform(
                replace(command, after=self._sweep_outbox(command)))
            if results:
                self._committed()
            return cast(R, results)
        if isinstance(command, RearmDebounced):
            # A debounce re-arm replaces a queued run's arguments (#18).
            run_id = await self.inner.perform(
                replace(command, after=self._rearm_outbox(command)))
            if run_id is not None:
                self._committed()
            return cast(R, run_id)
        if isinstance(command, QueueDueStarts):
            # Delayed starts whose time came move to claim_state queued (#30).
            due: DueStarts = await self.inner.perform(
                replace(command, after=self._queue_due_outbox(command)))
            if due.queued:
                self._committed()
            return cast(R, due)
        if isinstance(command, PruneRuns) and not command.dry_run:
            batch: PrunedBatch = await self.inner.perform(
                replace(command, after=self._prune_outbox(command)))
            if batch.run_ids:
                self._committed()
            return cast(R, batch)
        return await self.inner.perform(command)

    def _prune_outbox(self, command: PruneRuns) -> Callable[[list[str]], list[Op]]:
        ts, after = self.clock.now(), command.after

        def outbox(run_ids: list[str]) -> list[Op]:
            ops: list[Op] = list(after(run_ids)) if after is not None else []
            for run_id in run_ids:
                ops.append(_outbox(run_id, "session_var", {"op": "delete_run",
                                                           "run_id": run_id}, ts))
                ops.append(_outbox(run_id, "reset", {"run_id": run_id, "columns": None,
                                                     "events": []}, ts))
            return ops

        return outbox

    def _queue_due_outbox(self, command: QueueDueStarts) -> Callable[[list[str]], list[Op]]:
        after = command.after

        def outbox(run_ids: list[str]) -> list[Op]:
            ops: list[Op] = list(after(run_ids)) if after is not None else []
            changes: list[Op] = [UpdateRun(method=command.method, run_id=run_id,
                                           values={"claim_state": "queued"})
                                 for run_id in run_ids]
            return [*ops, *outbox_ops(changes, now=self.clock.now(),
                                      workspace_id=self.workspace_id, env=self.env)]

        return outbox

    def _rearm_outbox(self, command: RearmDebounced) -> Callable[[str], list[Op]]:
        def after(run_id: str) -> list[Op]:
            change = UpdateRun(method=command.method, run_id=run_id,
                               values={"input_json": command.input})
            return list(outbox_ops([change], now=self.clock.now(),
                                   workspace_id=self.workspace_id, env=self.env))

        return after

    def _claim_outbox(self, command: ClaimRuns) -> AfterClaim:
        ts, after = self.clock.now(), command.after

        def outbox(runs: list[RunInfo]) -> list[Op]:
            ops: list[Op] = list(after(runs)) if after is not None else []
            return [*ops, *(
                _outbox(r.id, "run", {"run_id": r.id, "op": "insert",
                                      "columns": run_columns(r)}, ts)
                for r in runs)]

        return outbox

    def _sweep_outbox(self, command: SweepLeases) -> AfterSweep:
        ts, after, now, reason = self.clock.now(), command.after, command.now, command.reason

        def outbox(results: list[SweepResult]) -> list[Op]:
            ops: list[Op] = list(after(results)) if after is not None else []
            for r in results:
                # Self-contained: the sweep's outcome is fully known from its action.
                columns = swept_columns(r.action, reason=reason, now=now)
                ops.append(_outbox(r.run_id, "run", {
                    "run_id": r.run_id, "op": "update", "columns": run_columns(columns)}, ts))
                ops.append(_outbox(r.run_id, "event", {
                    "run_id": r.run_id,
                    "event": event_row({"event_type": "runner_lost", "node_id": None,
                                        "payload": lost_payload(r.leased_by, r.action, reason),
                                        "created_at": now}),
                }, ts))
            return ops

        return outbox


def mirror(adapter: WorkflowStateAdapter, url: str | WarmTier, *,
           clock: Clock | None = None,
           finished_ttl: timedelta | None = None) -> MirroringWorkflowStateAdapter:
    """Wrap ``adapter`` so every cold write also enqueues its warm projection.

    Args:
        adapter: The cold adapter.
        url: ``memory://``, ``memory://name`` or ``redis://…`` (or a ready
            :class:`~starflow.warm.WarmTier`), scoped like ``adapter``.
        clock: The runtime's clock.
        finished_ttl: How long a Redis tier built from ``url`` keeps an ended run
            (``StarflowConfig.warm_finished_ttl``; None: its default, 24 h).
    """
    warm = url if isinstance(url, WarmTier) else warm_from_url(
        url, workspace_id=adapter.workspace_id, env=adapter.env, finished_ttl=finished_ttl)
    return MirroringWorkflowStateAdapter(adapter, warm, clock=clock)


def find_mirror(adapter: WorkflowStateAdapter) -> MirroringWorkflowStateAdapter | None:
    """The mirror in a chain of wrapping adapters (spies, fault injection…), if any."""
    seen: WorkflowStateAdapter | None = adapter
    while seen is not None:
        if isinstance(seen, MirroringWorkflowStateAdapter):
            return seen
        seen = seen.inner if isinstance(seen, DelegatingAdapter) else None
    return None
