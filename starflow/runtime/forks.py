"""Fork: a new run made from an ended run's history.

``Starflow.fork(run_id, from_node=...)`` (:func:`fork_run`) starts a new run
of an ended run's workflow, version and arguments whose history is the
source's without ``from_node`` and what followed it (:func:`forked_history`:
the steps that ran beside it keep their outcomes); replaying it returns the
recorded outcomes and the new run executes from that node on. For redoing a
run after a bug fix from the step that went wrong.

Its sibling for workflow code, ``starflow.continue_as_new``, is in
:mod:`starflow.workflow.continuation`.
"""

from __future__ import annotations

import uuid
from typing import Any

from ..adapters.units import Guard
from ..engine.replay import retried, rewind
from ..errors import InvalidArgument, NodeNotInHistory, RunNotEnded, RunNotFound
from ..records import TERMINAL_STATUSES, RunEvent, StartOptions
from ..workflow.context import WorkflowContext
from ..workflow.events import EVENT_KIND
from .runner import RunHandle, Runner

__all__ = ["FORKED_EVENT", "fork_run", "forked_history"]

#: The first event of a forked run: ``{"from_run_id", "from_node"}``.
FORKED_EVENT = "run_forked"


def forked_history(run_id: str, events: list[RunEvent], from_node: str) -> list[RunEvent]:
    """The events of ``run_id``'s history a fork from ``from_node`` keeps.

    ``from_node`` and what follows it in the workflow's order run again in the
    fork: the node, and every node that started after the node ended (it may
    have seen the node's outcome). The nodes before it and the ones that ran
    beside it (started before it ended: the other steps of a ``gather`` or a
    task group) keep their recorded events, outcomes included
    (:func:`starflow.engine.replay.rewind`). Of the source's history, the fork keeps
    node events and the phases before the node (the source's run-level events,
    pauses and resumes, are its own). A source that was retried is seen as its
    replay sees it (each retry rewinds the history before it).

    Raises:
        NodeNotInHistory: no event of the history has that node id.
    """
    history = retried(events)
    if not any(e.node_id == from_node for e in history):
        known = tuple(dict.fromkeys(e.node_id for e in history if e.node_id is not None))
        raise NodeNotInHistory(run_id, from_node, known)
    kept = rewind(history, from_node)
    return [e for e in kept if e.node_id is not None or e.event_type == "phase"]


async def fork_run(runner: Runner, run_id: str, from_node: str) -> RunHandle[Any]:
    """Start a new run from ``run_id``'s history before ``from_node`` (see the module).

    The new run has the source's workflow, version, arguments, pool and start
    mode: an inline source's fork is driven here until it pauses or ends, a
    queued one's goes to the queue. Its events and stream items are those the
    kept history wrote. Nothing is written if any check fails.

    Raises:
        RunNotFound: no such run.
        RunNotEnded: the run has not ended.
        NodeNotInHistory: ``from_node`` is not in its history.
        InvalidArgument: ``from_node`` is not a node id.
        WorkflowDefinitionError: an inline run's workflow is not registered here.
    """
    if not isinstance(from_node, str) or not from_node:
        raise InvalidArgument(f"from_node must be a node id such as 'step:charge#1': "
                              f"{from_node!r}", run_id=run_id)
    adapter = runner.adapter
    source = await adapter.get_run(run_id)
    if source is None:
        raise RunNotFound(run_id)
    if not source.is_terminal:
        raise RunNotEnded(run_id, source.status)
    kept = forked_history(run_id, await adapter.list_events(run_id), from_node)
    inline = source.start_mode == "inline"
    if inline:
        await runner.resolve(source)  # fail before writing if this process lacks the code
    nodes = {e.node_id for e in kept}
    # The events as the kept history set them (last write wins), and its stream items.
    values: dict[str, tuple[str, Any]] = {}
    for e in kept:
        payload = e.payload_json if isinstance(e.payload_json, dict) else {}
        if (e.event_type == "node_complete" and payload.get("kind") == EVENT_KIND
                and e.node_id is not None):
            values[str(payload.get("name"))] = (e.node_id, payload.get("output"))
    # A kept step's own writes (set_event in a step): its row names it, and the step
    # will not run again in the fork.
    steps = {n for n in nodes if n is not None and n.startswith("step:")}
    for ev in await adapter.list_event_values(run_id):
        if ev.node_id in steps:
            values[ev.key] = (ev.node_id, ev.value)
    items = [i for i in await adapter.list_stream_items(run_id) if i.node_id in nodes]
    new_id = str(uuid.uuid4())
    now = runner.clock.now()
    ctx = WorkflowContext(run_id=new_id, workflow=source.template_id or "",
                          version=source.workflow_version or 1,
                          workspace_id=adapter.workspace_id, env=adapter.env)
    options = StartOptions(
        input=source.input_json, status="running" if inline else "queued",
        claim_state="running" if inline else "queued", runner_pool=source.runner_pool,
        definition_id=source.definition_id, start_mode=source.start_mode,
        max_claim_attempts=source.max_claim_attempts)
    guard = Guard(run_id=run_id, status_in=tuple(sorted(TERMINAL_STATUSES)))
    async with adapter.unit(guard=guard) as unit:
        await adapter.on_run_start(new_id, ctx, options, now=now)
        if inline:
            await adapter.write_lease(new_id, runner.runner_id, now + runner.config.lease_ttl,
                                      now=now)
        await adapter.record_event(new_id, FORKED_EVENT, None,
                                   {"from_run_id": run_id, "from_node": from_node}, now=now,
                                   method="fork")
        for e in kept:
            await adapter.record_event(new_id, e.event_type, e.node_id, e.payload_json,
                                       now=e.created_at, method="fork")
        for key, (nid, value) in values.items():
            await adapter.set_event(new_id, key, value, node_id=nid, now=now)
        for item in items:
            await adapter.append_stream(new_id, item.key, item.seq, item.value,
                                        closed=item.closed, node_id=item.node_id,
                                        now=item.created_at, sub=item.sub)
    if not unit.held:  # the source changed under us (it cannot become active again)
        raise RunNotFound(run_id)
    if not inline:
        runner.notify_settled()
        return RunHandle(run_id=new_id, status="queued")
    fresh = await adapter.get_run(new_id)
    assert fresh is not None
    return await runner.drive(fresh)


