"""A plain ``def`` workflow: no ``async``, no ``await``, the same durable run.

``order`` is an ordinary function. starflow runs it in a worker thread; each
step, wait and child workflow it calls through ``starflow.call`` runs on the
event loop and returns its value, typed for mypy and pyright (calling them
directly, ``reserve(item)``, returns the value too, but type checkers see an
awaitable). The run pauses at ``wait_for`` (its thread ends; the process could
exit), and the signal replays it: ``reserve`` and ``price`` return their
recorded values without running again, then the rest runs. The second run is
cancelled at its wait: ``RunCancelled`` is raised there, in the thread, and
the compensation step runs.

    python examples/sync_workflow.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import anyio

import starflow
from starflow import RetryPolicy, RunCancelled, Starflow, step, workflow

calls: list[str] = []


@step
def reserve(item: str) -> str:
    """A blocking call (a sync client, a driver without asyncio)."""
    calls.append(f"reserve {item}")
    return f"R-{item}"


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(0)))
async def price(item: str) -> int:
    """An async step: called the same way from a plain def workflow."""
    calls.append(f"price {item}")
    if calls.count(f"price {item}") == 1:
        raise ConnectionError("pricing service unavailable")  # retried by its policy
    return 1250


@step
def release(reservation: str) -> None:
    calls.append(f"release {reservation}")


@workflow(name="sync-label")
def label(item: str) -> str:
    """A child workflow, plain def too."""
    return f"label for {item}"


@workflow(name="sync-order")
def order(item: str) -> dict[str, object]:
    reservation = starflow.call(reserve, item)        # a str: the value, not a coroutine
    cents = starflow.call(price, item)                # async steps are called the same way
    starflow.context().phase = "awaiting approval"
    try:
        decision = starflow.call(starflow.wait_for, "approve", timeout=timedelta(days=2))
    except RunCancelled:
        starflow.call(release, reservation)           # compensation, then the run ends
        raise
    starflow.call(starflow.sleep, timedelta(seconds=1))   # a durable timer (or a month)
    return {"reservation": reservation, "cents": cents, "by": decision["by"],
            "label": starflow.call(label, item)}      # a child run, awaited durably


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db, maintenance=True) as sf, anyio.create_task_group() as tg:
        worker = sf.worker(concurrency=4)  # runs the child, and the run after its timer
        tg.start_soon(worker.run)
        first = await sf.run(order, "lamp")
        print(f"lamp: {first.status} (waiting for {first.waiting_for})")
        await sf.signal(first.run_id, "approve", {"by": "ada"})
        print(f"lamp: {await sf.result(first.run_id, timeout=30)}")
        second = await sf.run(order, "desk")
        cancelled = await sf.cancel(second.run_id)
        print(f"desk: {cancelled.status}")
        await worker.drain()
        tg.cancel_scope.cancel()
    print(f"calls: {calls}")

if __name__ == "__main__":
    anyio.run(main)
