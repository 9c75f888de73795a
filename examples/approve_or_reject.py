"""Wait for whichever of two signals comes first: approve or reject.

``starflow.wait_for_any`` returns ``(event, payload)`` for the first signal
among its events; a signal for another event stays in the inbox. Two
signals sent at the same moment: exactly one wins.

    python examples/approve_or_reject.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import anyio

import starflow
from starflow import Starflow, workflow


@workflow(name="expense")
async def expense(amount: int) -> str:
    event, payload = await starflow.wait_for_any("approve", "reject",
                                                 timeout=timedelta(days=3))
    verdict = "approved" if event == "approve" else "rejected"
    return f"{amount} {verdict} by {payload['by']}"


async def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'expense.db')}"
    async with Starflow.open(url) as sf:
        handle = await sf.run(expense, 120)
        print("run is", handle.status, "waiting for", handle.waiting_for)

        async def send(event: str, by: str) -> None:
            await sf.signal(handle.run_id, event, {"by": by})

        async with anyio.create_task_group() as tg:  # two deciders race
            tg.start_soon(send, "approve", "ann")
            tg.start_soon(send, "reject", "bob")
        result = await sf.result(handle.run_id, timeout=10)
        print("result:", result)
        loser = "reject" if "approved" in result else "approve"
        left = await sf.runner.adapter.find_signal(handle.run_id, loser)
        print("the other signal is still in the inbox:", left is not None)


if __name__ == "__main__":
    anyio.run(main)
