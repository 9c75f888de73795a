"""The engine's two nodes of a child run (#17): ``child:<workflow>#n`` (the
start: the child's row and the parent's node in one unit, under the parent's
lease) and ``result:<child run id>#n`` (its outcome, or a durable wait on the
child's end), with the ids, wait events and outcomes the runtime reads too
(``Waker.wake_parent``). See :mod:`starflow.workflow.children` for what workflow code calls.

The engine calls these (``Engine.start_child`` / ``Engine.child_result``)
with itself; they use the primitives of
:class:`~starflow.engine.core.EngineCore` (its write path, node ids, the
suspension at a durable wait and the delivery of a cancel).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from .. import serde
from ..adapters.base import WorkflowStateAdapter
from ..errors import (
    RunCancelled,
    RunIdConflict,
    StarflowError,
    WorkflowDefinitionError,
    WorkflowFailed,
)
from ..failure import RunFailure
from ..records import RunInfo, StartOptions
from ..workflow.context import WorkflowContext
from ..workflow.decorators import WorkflowDefinition
from .core import EngineCore
from .replay import CHILD_START_KIND, RESULT_KIND, NodeRecord

__all__ = [
    "CHILD_EVENT_PREFIX",
    "CHILD_KIND",
    "RESULT_KIND",
    "chain_end",
    "child_event",
    "child_id_for",
    "child_of_event",
    "child_outcome",
    "child_result_node",
    "start_child_node",
]

#: Node kind of a child's start (``child:<workflow>#n``) and of awaiting its
#: result (``result:<child run id>#n``).
CHILD_KIND = CHILD_START_KIND
#: The wait event of a parent paused on a child (reserved: users cannot signal it).
CHILD_EVENT_PREFIX = "__starflow.child:"


def child_event(child_run_id: str) -> str:
    """The wait event a parent pauses on until ``child_run_id`` ends."""
    return CHILD_EVENT_PREFIX + child_run_id


def child_of_event(event: str | None) -> str | None:
    """The child run id a wait event names, or ``None`` for any other wait."""
    if event is None or not event.startswith(CHILD_EVENT_PREFIX):
        return None
    return event[len(CHILD_EVENT_PREFIX):]


def child_id_for(parent_run_id: str, node_id: str) -> str:
    """The deterministic id of the child a parent starts at ``node_id``."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"starflow-child:{parent_run_id}:{node_id}"))


def child_outcome(run: RunInfo) -> dict[str, Any] | None:
    """What a parent records for an ended child (``None`` while it is active, or
    when it continued as a new run: the chain's last run ends it)."""
    if not run.is_terminal or run.continued_as is not None:
        return None
    return {"run_id": run.id, "status": run.status, "result": run.result_json,
            "error": run.error, "failure": run.failure_json}


async def chain_end(adapter: WorkflowStateAdapter, run_id: str) -> RunInfo | None:
    """The run ``run_id``'s chain has reached: ``run_id`` itself, or the last run it
    continued as (``starflow.continue_as_new``), followed link by link.

    ``None`` if ``run_id`` does not exist. A link not found (pruned) ends the walk
    at the run before it, which then reads as still going on.
    """
    run = await adapter.get_run(run_id)
    while run is not None and run.continued_as is not None:
        nxt = await adapter.get_run(run.continued_as)
        if nxt is None:
            break
        run = nxt
    return run


def _not_in_step(engine: EngineCore, what: str) -> None:
    engine._refuse_in_step(what, "a child run is recorded in the workflow's history, so "
                           "start and await it from the @workflow function, between steps")


async def start_child_node(engine: EngineCore, definition: WorkflowDefinition,
                           args: tuple[Any, ...], kwargs: dict[str, Any], *,
                           run_id: str | None, pool: str | None, detached: bool,
                           timeout: timedelta | None = None) -> str:
    """Start (or, on replay, find) the child run of node ``child:<workflow>#n``.

    ``timeout`` (else the child workflow's) sets the child's deadline from
    its start, as ``sf.options(timeout=)`` does for a run.

    Arguments are checked and encoded before anything is written. The child's
    row (queued for the workers of its pool) and the parent's node are one unit.
    """
    _not_in_step(engine, "start_child()")
    engine._guard_suspending()
    try:
        definition.check_call(args, kwargs)
    except TypeError as exc:
        raise WorkflowDefinitionError(
            f"bad arguments for child workflow {definition.name!r}: {exc}",
            run_id=engine.run_id) from exc
    encoded: dict[str, Any] = serde.to_builtins(
        {"args": list(args), "kwargs": kwargs},
        what=f"arguments of child workflow {definition.name!r}", run_id=engine.run_id)
    # Converted to the annotations before anything is written, as sf.start does.
    serde.convert_call(definition.signature, definition.hints, encoded,
                       what=f"child workflow {definition.name!r}")
    h = serde.args_hash(encoded)
    nid = engine._next_id(CHILD_KIND, definition.name)
    engine.has_children = True
    rec = engine.journal.get(nid)
    if rec is not None and rec.finished:
        engine.journal.check_recorded(engine.run_id, rec, CHILD_KIND, definition.name, h,
                                      encoded)
        engine.journal.consume(nid)
        engine._advance(rec.recorded_at)
        if rec.status == "error":
            engine._replayed_cancel(rec)
        output = rec.output if isinstance(rec.output, dict) else {}
        return str(output.get("run_id"))
    if rec is not None:
        engine.journal.consume(nid)
    else:
        await engine.journal.reach_frontier(engine.run_id, nid,
                                            f"child workflow {definition.name!r}")
    engine._guard_suspending()
    await engine._reach_cancel(nid, CHILD_KIND, definition.name)
    ref = engine.adapter.run_ref(run_id) if run_id is not None else None
    child_id = ref.id if ref is not None else child_id_for(engine.run_id, nid)
    existing = await engine.adapter.get_run(child_id)
    if existing is not None and existing.template_id not in (None, definition.name):
        raise RunIdConflict(child_id, existing.template_id, definition.name, existing.status,
                            run_key=existing.run_key)
    runtime = engine.runtime
    timeout = timeout if timeout is not None else definition.timeout
    def_id = (await runtime.definition_id(definition) if runtime.definition_id is not None
              else None)
    ctx = WorkflowContext(run_id=child_id, workflow=definition.name, version=definition.version,
                          workspace_id=engine.ctx.workspace_id, env=engine.ctx.env)
    output = {"run_id": child_id}
    record_payload = {"output": output, "kind": CHILD_KIND, "name": definition.name,
                      "args_hash": h, "detached": detached}

    async def record(ts: datetime) -> None:
        if existing is None:
            options = StartOptions(
                input=encoded, status="queued", claim_state="queued",
                runner_pool=pool if pool is not None else definition.pool,
                definition_id=def_id, start_mode="queued",
                max_claim_attempts=(definition.max_claim_attempts
                                    or runtime.config.max_claim_attempts),
                parent_run_id=engine.run_id, detached=detached,
                deadline_at=ts + timeout if timeout is not None else None,
                run_key=ref.key if ref is not None else None)
            await engine.adapter.on_run_start(child_id, ctx, options, now=ts)
        await engine.adapter.on_node_complete(engine.run_id, nid, record_payload, now=ts)
        await engine._phase(ts)

    ts = await engine.writes.commit(record)
    engine._advance(ts)
    engine.journal.record(NodeRecord(node_id=nid, kind=CHILD_KIND, name=definition.name,
                                     args_hash=h, status="complete", output=output,
                                     recorded_at=ts))
    if runtime.notify is not None:
        runtime.notify()  # workers of this process look for the queued child now
    if timeout is not None and runtime.notify_timers is not None:
        runtime.notify_timers()  # the timer loop ends it at its deadline if still queued
    return child_id


def _outcome_value(engine: EngineCore, nid: str, outcome: Any, return_type: Any) -> Any:
    """The child's result, or the error its end raises at the parent's await."""
    data = outcome if isinstance(outcome, dict) else {}
    child_id = str(data.get("run_id"))
    status = data.get("status")
    if status == "success":
        return serde.convert(data.get("result"), return_type,
                             what=f"result of child run {child_id} at {nid}",
                             run_id=engine.run_id, node_id=nid)
    if status == "cancelled":
        raise RunCancelled(child_id, data.get("error") or "cancelled", node_id=nid, message=(
            f"child run {child_id} (awaited by run {engine.run_id} at {nid}) was cancelled: "
            "catch RunCancelled (or WorkflowFailed) to go on without its result"))
    cause = RunFailure.from_json(data.get("failure"))
    if cause is None:
        raise WorkflowFailed(child_id, str(status), data.get("error"))
    raise WorkflowFailed(child_id, str(status), data.get("error"), node_id=cause.node_id,
                         error_type=cause.type, error_message=cause.message,
                         attempts=cause.attempts, traceback=cause.traceback)


async def child_result_node(engine: EngineCore, child_id: str, return_type: Any) -> Any:
    """``await handle.result()``: the child's recorded outcome, or a durable pause until
    the child ends (node ``result:<child run id>#n``)."""
    _not_in_step(engine, "ChildHandle.result()")
    engine._guard_suspending()
    nid = engine._next_id(RESULT_KIND, child_id)
    engine.has_children = True
    rec = engine.journal.get(nid)
    if rec is not None and rec.finished:
        engine.journal.consume(nid)
        engine._advance(rec.recorded_at)
        if rec.status == "error":
            engine._replayed_cancel(rec)
            raise StarflowError(f"run {engine.run_id}: {nid} was recorded as failed "
                                f"({rec.error})", run_id=engine.run_id, node_id=nid)
        cancelled = isinstance(rec.output, dict) and rec.output.get("status") == "cancelled"
        if cancelled and engine.cancel_requested and not engine.replaying:
            # The cascade of this run's own cancel ended the child and woke the run
            # first: the cancel is this run's, delivered here (its cleanup runs).
            await engine._deliver_cancel(nid, RESULT_KIND, child_id)
        return _outcome_value(engine, nid, rec.output, return_type)
    if rec is not None:
        engine.journal.consume(nid)
    else:
        await engine.journal.reach_frontier(engine.run_id, nid, f"result of child {child_id}")
    if engine.writes.read_only:
        # A replay reads nothing beyond its history: the run was paused here.
        engine._suspend(nid, child_event(child_id), None, engine.runtime.clock.now())
    engine._guard_suspending()
    await engine._reach_cancel(nid, RESULT_KIND, child_id)
    # A child that continued as new is awaited through its chain: the run the
    # chain has reached is the one waited on, and the last one's end is the outcome.
    child = await chain_end(engine.adapter, child_id)
    if child is None:
        raise StarflowError(
            f"run {engine.run_id}: child run {child_id} awaited at {nid} does not exist (was "
            "it pruned? retention keeps a child while its parent is active)",
            run_id=engine.run_id, node_id=nid)
    outcome = child_outcome(child)
    engine._guard_suspending()
    if outcome is None:
        expiry = engine.runtime.clock.now() + engine.runtime.config.wake_token_ttl
        engine._suspend(nid, child_event(child.id), None, expiry)
    if outcome is not None and outcome["status"] == "cancelled" and engine.cancel_requested:
        # The cascade of this run's own cancel ended the child: deliver it here.
        await engine._deliver_cancel(nid, RESULT_KIND, child_id)

    async def record(ts: datetime) -> None:
        await engine.adapter.on_node_complete(engine.run_id, nid,
                                              {"output": outcome, "via": "child"}, now=ts)
        await engine._phase(ts)

    # The outcome of a child that has ended is durable in the child's row, so (with
    # fused_boundaries) it rides with the parent's next unit, like a step's: a crash
    # before that unit reads the same outcome again on replay. A fan-in over N
    # ended children is then one commit, not N.
    ts = await engine.writes.commit_or_defer(record, may_defer=engine._steps_in_flight == 0)
    engine._advance(ts)
    engine.journal.record(NodeRecord(node_id=nid, kind=RESULT_KIND, name=child_id,
                                     status="complete", output=outcome, recorded_at=ts))
    return _outcome_value(engine, nid, outcome, return_type)
