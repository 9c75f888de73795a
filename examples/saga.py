"""Saga: book a trip in three steps and undo the finished ones when a later step fails.

``book_car`` fails on every attempt. Once its retries are spent, the workflow
gets ``starflow.StepFailed`` and runs the compensations of the steps that
succeeded, newest first. Each compensation is a recorded step too, so a crash
in the middle of the rollback resumes it instead of starting over.

The run then waits durably for a human to decide. The signal resumes it by
replay: the finished bookings, the car failure (raised again as the same
``StepFailed``) and the compensations all come back from the history, and no
handler runs a second time (see the call counts printed at the end).

    python examples/saga.py
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable
from datetime import timedelta

import anyio

from starflow import RetryPolicy, Starflow, StepFailed, step, wait_for, workflow

calls: Counter[str] = Counter()  # how often each handler really ran, in this process


@step
async def book_flight(trip: str) -> str:
    calls["book_flight"] += 1
    return f"FL-{trip}"


@step
async def book_hotel(trip: str) -> str:
    calls["book_hotel"] += 1
    return f"HT-{trip}"


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(milliseconds=10)))
async def book_car(trip: str) -> str:
    calls["book_car"] += 1
    raise RuntimeError("no cars left at the airport")


@step
async def cancel_flight(booking: str) -> None:
    calls["cancel_flight"] += 1


@step
async def cancel_hotel(booking: str) -> None:
    calls["cancel_hotel"] += 1


@workflow(name="trip", version=1)
async def trip(trip_id: str) -> dict[str, object]:
    # Each successful booking pushes the step that undoes it.
    compensations: list[Callable[[], Awaitable[None]]] = []
    try:
        flight = await book_flight(trip_id)
        compensations.append(lambda: cancel_flight(flight))
        hotel = await book_hotel(trip_id)
        compensations.append(lambda: cancel_hotel(hotel))
        car = await book_car(trip_id)  # raises StepFailed after its 3rd attempt
    except StepFailed as failure:
        for undo in reversed(compensations):
            await undo()
        # A durable wait: the process may exit here; the signal resumes by replay.
        decision = await wait_for("next-step", timeout=timedelta(days=1))
        return {"booked": False, "failed": failure.node_id, "attempts": failure.attempts,
                "error": failure.error_message, "decision": decision}
    return {"booked": True, "flight": flight, "hotel": hotel, "car": car}


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(trip, "t-42")
        print(f"rolled back; run is {run.status}, waiting for {run.waiting_for!r}")
        run = await sf.signal(run.run_id, "next-step", "refund")
        print("result:", run.result)
        print("handler calls:", dict(sorted(calls.items())))
        for event in await sf.events(run.run_id):
            print(f"  {event.event_type:<14} {event.node_id or ''}")


if __name__ == "__main__":
    anyio.run(main)
