"""Quickstart: an order workflow on the embedded SQLite default.

Two recorded steps, a durable wait for approval, a durable sleep and a phase
change. The run pauses at the wait; a signal wakes it; it sleeps durably,
resumes and prints its result.

    python examples/quickstart.py
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from datetime import timedelta

import anyio

import starflow
from starflow import RetryPolicy, Starflow, sleep, step, wait_for, workflow


@dataclass
class Receipt:
    id: str
    cents: int


@step(retry=RetryPolicy(max_attempts=5, initial_interval=timedelta(seconds=1)))
async def charge(order_id: str, cents: int) -> Receipt:
    # Pass starflow.context().idempotency_key to your payment API so that a
    # retry after a crash never charges twice.
    return Receipt(id=f"rcpt-{order_id}", cents=cents)


@step
async def ship(order_id: str) -> str:
    return f"TRACK-{order_id.upper()}"


@workflow(name="order", version=1)
async def order(order_id: str) -> dict[str, object]:
    receipt = await charge(order_id, 1999)                # recorded; never re-run once done
    starflow.context().phase = "awaiting-approval"        # a phase event
    decision = await wait_for("approval", timeout=timedelta(days=2))
    await sleep(timedelta(seconds=1))                     # a durable timer
    starflow.context().phase = "shipping"
    tracking = await ship(order_id)
    return {"receipt": receipt.id, "ok": decision["ok"], "tracking": tracking}


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(order, "o-1")
        print(f"run {run.run_id} is {run.status}, waiting for {run.waiting_for!r}")
        run = await sf.signal(run.run_id, "approval", {"ok": True})
        print(f"signalled: now {run.status} (sleeping durably)")
        result = await sf.result(run.run_id, timeout=timedelta(seconds=30))
        print("result:", result)
        for event in await sf.events(run.run_id):
            print(f"  {event.created_at:%H:%M:%S.%f} {event.event_type:<14} {event.node_id or ''}")


if __name__ == "__main__":
    anyio.run(main)
