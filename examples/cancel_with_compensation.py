"""Cancelling a run that cleans up after itself.

``sf.cancel(run_id)`` raises ``starflow.RunCancelled`` at the await where the
run is (here a wait for payment); the ``except`` block runs a compensation
step, then the run ends ``cancelled``. ``sf.cancel(run_id, force=True)`` would
end it at once without running any of its code.

    python examples/cancel_with_compensation.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import RunCancelled, Starflow, step, workflow

CALLS: list[str] = []


@step
async def reserve_seat(show: str) -> str:
    CALLS.append("reserve_seat")
    return f"{show}/A12"


@step
async def release_seat(seat: str) -> None:
    CALLS.append("release_seat")


@workflow(name="ticket")
async def ticket(show: str) -> str:
    seat = await reserve_seat(show)
    try:
        await starflow.wait_for("paid")
    except RunCancelled:
        await release_seat(seat)  # the compensation: recorded, runs once
        raise
    return seat


async def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'ticket.db')}"
    async with Starflow.open(url) as sf:
        handle = await sf.run(ticket, "hamlet")
        print("run is", handle.status)
        ended = await sf.cancel(handle.run_id)
        print("after cancel the run is", ended.status)
        print("steps run:", CALLS)
        events = [(e.event_type, e.node_id) for e in await sf.events(handle.run_id)]
        for event_type, node in events:
            print(" ", event_type, node or "")


if __name__ == "__main__":
    anyio.run(main)
