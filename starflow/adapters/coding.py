"""The codec over stored payloads: an adapter that seals them on the way in and
opens them on the way out (``Starflow.open(..., codec=...)``).

Every user value starflow stores passes through the port as a field of an
:class:`~starflow.adapters.units.Op` (or a command) on its way to the
database, and comes back as a field of a record. This wrapper is the one
place that knows which fields those are:

==========================  ==========================================================
Stored (column)             Encoded
==========================  ==========================================================
``workflow_runs``           ``input_json`` (the run's arguments), ``result_json``
``workflow_run_events``     ``node_start``'s ``input`` (step arguments) and
                            ``node_complete``'s ``output`` (step results, wait and
                            signal payloads, update answers, child results, event and
                            stream values as recorded) inside ``payload_json``
``workflow_signals``        ``payload_json`` (signals, update requests, resume payloads)
``workflow_event_values``   ``value_json``
``workflow_stream_items``   ``value_json``
``starflow_session_vars``   ``value_json``
``worker_jobs``             ``input_json`` (pool step arguments), ``result_json``
``starflow_schedules``      ``input_json`` (the arguments each tick starts a run with)
==========================  ==========================================================

Not encoded, because the runtime or SQL reads them or they are not user
values: names, ids, statuses, timestamps, the phase, searchable attributes,
workflow variables and the checkpoint, error messages and tracebacks
(``error``, ``failure_json``, ``node_error`` payloads), ``args_hash``, and
the warm-tier outbox (it carries the already encoded values). A ``None``
value is stored as it is.

It sits above the warm-tier mirror, so the outbox rows and the warm tier
hold envelopes too; below the runtime, so the engine, the replayer and every
read through :class:`~starflow.Starflow` see plain values.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, cast

import msgspec

from ..codec import Payloads
from ..errors import CodecError
from ..logs import get_logger
from ..records import (
    EventValue,
    JobRecord,
    QueuedRun,
    RunEvent,
    RunInfo,
    ScheduleRecord,
    SignalRecord,
    StreamItem,
)
from .base import WorkflowStateAdapter
from .caller import CallerTransaction
from .delegating import DelegatingAdapter
from .pages import RunPage, RunPageQuery
from .units import (
    ClaimJobs,
    ClaimRuns,
    Command,
    FinishJob,
    InsertEvent,
    InsertJob,
    InsertRun,
    InsertSignal,
    InsertStreamItem,
    Op,
    R,
    RearmDebounced,
    Unit,
    UpdateRun,
    UpdateSchedule,
    UpsertEventValue,
    UpsertSchedule,
    UpsertSessionVar,
)

__all__ = ["EVENT_FIELDS", "RUN_COLUMNS", "CodecAdapter", "open_event", "open_run"]

log = get_logger("starflow.codec")

#: The columns of ``workflow_runs`` that hold user values.
RUN_COLUMNS = ("input_json", "result_json")
#: Event type -> the key of its payload that holds a user value.
EVENT_FIELDS = {"node_start": "input", "node_complete": "output"}

_WHAT = {"input_json": "arguments", "result_json": "result",
         "input": "step arguments", "output": "recorded output"}


class CodecAdapter(DelegatingAdapter):
    """Wrap ``inner`` so every stored user value is sealed by ``payloads``.

    Args:
        inner: The adapter (or chain of wrappers) below.
        payloads: The codec, as :class:`~starflow.codec.Payloads`.
    """

    def __init__(self, inner: WorkflowStateAdapter, payloads: Payloads) -> None:
        super().__init__(inner)
        self.payloads = payloads

    # -- sealing ---------------------------------------------------------------

    def _seal(self, value: Any, what: str, run_id: str | None = None,
              node_id: str | None = None) -> Any:
        return None if value is None else self.payloads.seal(
            value, what=what, run_id=run_id, node_id=node_id)

    def _seal_columns(self, values: dict[str, Any], run_id: str | None) -> dict[str, Any]:
        if not any(values.get(c) is not None for c in RUN_COLUMNS):
            return values
        out = dict(values)
        for column in RUN_COLUMNS:
            if out.get(column) is not None:
                out[column] = self._seal(out[column], f"the run's {_WHAT[column]}", run_id)
        return out

    def seal_op(self, op: Op) -> Op:
        """``op`` with its user values sealed (the same op if it holds none)."""
        replace = msgspec.structs.replace
        if isinstance(op, InsertRun | UpdateRun):
            values = self._seal_columns(op.values, op.run_id)
            return op if values is op.values else replace(op, values=values)
        if isinstance(op, InsertEvent):
            key = EVENT_FIELDS.get(op.event_type)
            payload = op.payload
            if key is None or not isinstance(payload, dict) or payload.get(key) is None:
                return op
            return replace(op, payload={**payload, key: self._seal(
                payload[key], _WHAT[key], op.run_id, op.node_id)})
        if isinstance(op, InsertSignal):
            return replace(op, payload=self._seal(op.payload, f"signal {op.event!r}",
                                                  op.run_id))
        if isinstance(op, UpsertEventValue | InsertStreamItem):
            return replace(op, value=self._seal(op.value, f"value of {op.key!r}", op.run_id,
                                                op.node_id))
        if isinstance(op, UpsertSessionVar):
            return replace(op, value=self._seal(op.value, f"session var {op.key!r}",
                                                op.run_id))
        if isinstance(op, InsertJob):
            job = op.job
            return replace(op, job=replace(job, input=self._seal(
                job.input, "step arguments", job.run_id, job.node_id)))
        if isinstance(op, FinishJob):
            return replace(op, result=self._seal(op.result, "step result"))
        return op

    async def caller_transaction(self, connection: object) -> CallerTransaction:
        # A start in the caller's transaction (#30) is sealed and read as any other.
        transaction = await self.inner.caller_transaction(connection)
        return transaction.through(seal=self.seal_op, open_run=self._open_opened)

    def _open_opened(self, run: RunInfo) -> RunInfo:
        return open_run(self.payloads, run)

    async def execute(self, unit: Unit) -> bool:
        ops = [self.seal_op(op) for op in unit.ops]
        if all(a is b for a, b in zip(ops, unit.ops, strict=True)):
            return await self.inner.execute(unit)
        # A new unit: the caller may execute its own again (a retried write).
        sealed = Unit(ops=ops, guard=unit.guard, durable=unit.durable)
        held = await self.inner.execute(sealed)
        unit.held = sealed.held
        return held

    async def perform(self, command: Command[R]) -> R:
        replace = msgspec.structs.replace
        if isinstance(command, ClaimRuns):
            return cast(R, [self._open_claimed(r) for r in await self.inner.perform(command)])
        if isinstance(command, ClaimJobs):
            jobs = await self.inner.perform(command)
            return cast(R, [self._open_job(j) for j in jobs])
        if isinstance(command, UpsertSchedule):
            schedule = command.schedule
            stored = await self.inner.perform(_replace_dc(command, schedule=replace(
                schedule, input=self._seal(schedule.input, f"schedule {schedule.id!r}"))))
            return cast(R, self._open_schedule(stored))
        if isinstance(command, UpdateSchedule) and "input_json" in command.values:
            values = dict(command.values)
            values["input_json"] = self._seal(values["input_json"],
                                              f"schedule {command.schedule_id!r}")
            return await self.inner.perform(_replace_dc(command, values=values))
        if isinstance(command, RearmDebounced):
            return await self.inner.perform(_replace_dc(
                command, input=self._seal(command.input, "the run's arguments")))
        return await self.inner.perform(command)

    # -- opening ---------------------------------------------------------------

    def _open_run(self, run: RunInfo | None) -> RunInfo | None:
        return None if run is None else open_run(self.payloads, run)

    def _open_claimed(self, run: RunInfo) -> RunInfo:
        """A run just claimed, opened; one this codec cannot open (a key it lacks) is
        returned as stored, and the error logged: the runner then finds its input
        encoded and hands the run back for a worker that has the key, instead of
        failing the claim of every run claimed with it."""
        try:
            return open_run(self.payloads, run)
        except CodecError as exc:
            log.error("claimed a run this codec cannot decode", run_id=run.id,
                      error=exc.message)
            return run

    def _runs(self, runs: list[RunInfo]) -> list[RunInfo]:
        return [open_run(self.payloads, r) for r in runs]

    def _open_event(self, event: RunEvent) -> RunEvent:
        return open_event(self.payloads, event)

    def _open_job(self, job: JobRecord | None) -> JobRecord | None:
        if job is None:
            return None
        return msgspec.structs.replace(
            job,
            input=self.payloads.open(job.input, what="step arguments", run_id=job.run_id,
                                     node_id=job.node_id),
            result=self.payloads.open(job.result, what="step result", run_id=job.run_id,
                                      node_id=job.node_id))

    def _open_schedule(self, schedule: ScheduleRecord | None) -> ScheduleRecord | None:
        if schedule is None:
            return None
        return msgspec.structs.replace(schedule, input=self.payloads.open(
            schedule.input, what=f"arguments of schedule {schedule.id!r}"))

    def _open_value(self, item: EventValue | StreamItem) -> Any:
        return msgspec.structs.replace(item, value=self.payloads.open(
            item.value, what=f"value of {item.key!r}", run_id=item.run_id,
            node_id=item.node_id))

    async def get_run(self, run_id: str) -> RunInfo | None:
        return self._open_run(await self.inner.get_run(run_id))

    async def list_runs(self, *, status: str | None = None, template_id: str | None = None,
                        since: datetime | None = None, limit: int = 50,
                        attributes: Mapping[str, str] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        return self._runs(await self.inner.list_runs(
            status=status, template_id=template_id, since=since, limit=limit,
            attributes=attributes, parent_run_id=parent_run_id))

    async def list_queued_runs(self, limit: int) -> list[QueuedRun]:
        return [msgspec.structs.replace(q, run=cast(RunInfo, self._open_run(q.run)))
                for q in await self.inner.list_queued_runs(limit)]

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        page = await self.inner.list_runs_page(query)
        return msgspec.structs.replace(page, runs=self._runs(page.runs))

    async def due_run_deadlines(self, now: datetime, *, limit: int = 100) -> list[RunInfo]:
        return self._runs(await self.inner.due_run_deadlines(now, limit=limit))

    async def list_events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        return [self._open_event(e)
                for e in await self.inner.list_events(run_id, after_id=after_id)]

    async def find_signal(self, run_id: str, event: str) -> SignalRecord | None:
        signal = await self.inner.find_signal(run_id, event)
        if signal is None or signal.payload is None:
            return signal
        return msgspec.structs.replace(signal, payload=self.payloads.open(
            signal.payload, what=f"payload of signal {event!r}", run_id=run_id))

    async def get_event_value(self, run_id: str, key: str) -> EventValue | None:
        value = await self.inner.get_event_value(run_id, key)
        return None if value is None else cast(EventValue, self._open_value(value))

    async def list_event_values(self, run_id: str) -> list[EventValue]:
        return [self._open_value(v) for v in await self.inner.list_event_values(run_id)]

    async def read_stream(self, run_id: str, key: str, *, after_seq: int = 0,
                          after_sub: int = 0, limit: int = 500) -> list[StreamItem]:
        return [self._open_value(i) for i in await self.inner.read_stream(
            run_id, key, after_seq=after_seq, after_sub=after_sub, limit=limit)]

    async def list_stream_items(self, run_id: str) -> list[StreamItem]:
        return [self._open_value(i) for i in await self.inner.list_stream_items(run_id)]

    async def session_get(self, session_id: str, key: str, *, now: datetime | None = None
                          ) -> Any:
        return self.payloads.open(await self.inner.session_get(session_id, key, now=now),
                                  what=f"session var {session_id}/{key}")

    async def get_job(self, job_id: str) -> JobRecord | None:
        return self._open_job(await self.inner.get_job(job_id))

    async def list_jobs(self, *, run_id: str | None = None, status: str | None = None,
                        limit: int = 100) -> list[JobRecord]:
        return [cast(JobRecord, self._open_job(j)) for j in await self.inner.list_jobs(
            run_id=run_id, status=status, limit=limit)]

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord | None:
        return self._open_schedule(await self.inner.get_schedule(schedule_id))

    async def list_schedules(self) -> list[ScheduleRecord]:
        return [cast(ScheduleRecord, self._open_schedule(s))
                for s in await self.inner.list_schedules()]

    async def due_schedules(self, now: datetime, *, limit: int = 100) -> list[ScheduleRecord]:
        return [cast(ScheduleRecord, self._open_schedule(s))
                for s in await self.inner.due_schedules(now, limit=limit)]


def open_run(payloads: Payloads, run: RunInfo) -> RunInfo:
    """``run`` with its arguments and result opened (see :meth:`Payloads.open`)."""
    if run.input_json is None and run.result_json is None:
        return run
    return msgspec.structs.replace(
        run,
        input_json=payloads.open(run.input_json, what="arguments", run_id=run.id),
        result_json=payloads.open(run.result_json, what="result", run_id=run.id))


def open_event(payloads: Payloads, event: RunEvent) -> RunEvent:
    """``event`` with the user value of its payload opened (see :data:`EVENT_FIELDS`)."""
    key = EVENT_FIELDS.get(event.event_type)
    payload = event.payload_json
    if key is None or not isinstance(payload, dict) or payload.get(key) is None:
        return event
    value = payloads.open(payload[key], what=_WHAT[key], run_id=event.run_id,
                          node_id=event.node_id)
    return msgspec.structs.replace(event, payload_json={**payload, key: value})


def _replace_dc(command: Any, **changes: Any) -> Any:
    """A copy of a (frozen, slotted) command dataclass with ``changes``."""
    return dataclasses.replace(command, **changes)
