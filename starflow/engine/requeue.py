"""Handing a run back to the queue: the one place it is written.

A runner gives a run it holds back when it cannot or should not go on with it:
a draining worker, a worker without the run's workflow version, an execution
cancelled from outside (:func:`release`), a claimed run whose first reads failed
(:func:`hand_back`). Each is one unit guarded by this runner's lease
(:func:`starflow.engine.execution.lease_guard`, the same guard every engine boundary
carries): if the lease is gone, nothing is written.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from ..adapters.base import WorkflowStateAdapter
from ..errors import StarflowError
from ..records import HELD, RunInfo
from ..workflow.context import PAUSE_EVENT
from .execution import lease_guard

__all__ = ["PAUSED_EVENT", "PAUSE_REQUESTED_EVENT", "RESUMED_EVENT", "hand_back", "hold",
           "release"]

#: The run event of a run an operator paused (``Starflow.pause``), written when it
#: parks: at once (queued, or at a wait) or at the next step (executing).
PAUSED_EVENT = "run_paused_by_operator"
#: The run event of a pause asked of an executing run (it parks at its next step).
PAUSE_REQUESTED_EVENT = "run_pause_requested"
#: The run event of ``Starflow.resume(run_id)`` (or of a pending pause withdrawn).
RESUMED_EVENT = "run_resumed_by_operator"


async def _requeue(adapter: WorkflowStateAdapter, run_id: str, method: str) -> None:
    await adapter.update_run(run_id, method, status="queued", claim_state="queued",
                             leased_by=None, lease_until=None)


async def release(adapter: WorkflowStateAdapter, run_id: str, runner_id: str) -> bool:
    """Hand a run this runner holds back to the queue (another runner may take it).

    ``claim_attempts`` is left as it is: it counts claims, and the run made no
    less progress for being handed back. Returns whether the lease held (False:
    nothing was written).
    """
    async with adapter.unit(guard=lease_guard(run_id, runner_id)) as unit:
        await _requeue(adapter, run_id, "release_lease")
    return bool(unit.held)


async def hold(adapter: WorkflowStateAdapter, run_id: str, runner_id: str, *,
               now: datetime) -> bool:
    """Park a run this runner holds because an operator paused it (``Starflow.pause``):
    status paused, ``claim_state`` held, lease cleared, the pause request consumed,
    a ``run_paused_by_operator`` event. No worker claims it until it is resumed.
    Returns whether the lease held (False: nothing was written)."""
    request = await adapter.find_signal(run_id, PAUSE_EVENT)
    async with adapter.unit(guard=lease_guard(run_id, runner_id)) as unit:
        if request is not None:
            await adapter.consume_signal(request.id)
        await adapter.update_run(run_id, "hold", status="paused", claim_state=HELD,
                                 leased_by=None, lease_until=None)
        await adapter.record_event(run_id, PAUSED_EVENT, None, {"at": "step"}, now=now,
                                   method="hold")
    return bool(unit.held)


async def hand_back(adapter: WorkflowStateAdapter, run: RunInfo, runner_id: str,
                    error: StarflowError, *, now: datetime
                    ) -> Literal["requeued", "abandoned"] | None:
    """Give back a run this runner claimed but could not start (a read failed).

    The run goes straight back to the queue with its lease cleared
    (``"requeued"``), instead of holding the lease until it expires and the
    sweep requeues it. The claim still counts: once the run's claims since it
    last made progress are used up (``claim_attempts >= max_claim_attempts``),
    it is abandoned instead (``"abandoned"``: status error, claim_state
    abandoned, the error says why), so a run whose start always fails does not
    go round forever. Returns None, writing nothing, if the lease is gone.
    """
    abandon = run.claim_attempts >= run.max_claim_attempts
    async with adapter.unit(guard=lease_guard(run.id, runner_id)) as unit:
        if abandon:
            await adapter.on_run_error(
                run.id, f"could not start: reading the run failed on each of its "
                f"{run.claim_attempts} claim(s) (max_claim_attempts="
                f"{run.max_claim_attempts}); last error: {error}",
                now=now, claim_state="abandoned")
            await adapter.clear_lease(run.id)
        else:
            await _requeue(adapter, run.id, "hand_back")
    if not unit.held:
        return None
    return "abandoned" if abandon else "requeued"
