"""Human approval through a wake token handed to an external system.

A step asks an "external approvals service" for a decision and gives it the
wake token of the wait the workflow is about to enter. The run pauses durably;
later the service calls ``sf.resume(token, decision)`` and the workflow
continues. A forged token is rejected without writing anything.

    python examples/human_approval.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta
from typing import Any

import anyio

import starflow
from starflow import InvalidWakeToken, Starflow, step, wait_for, workflow

#: Stand-in for an external system (a ticketing tool, a Slack bot...).
APPROVALS_SERVICE: dict[str, dict[str, Any]] = {}


@step
async def request_approval(order_id: str, amount: int) -> None:
    """Send the request, with the token that resumes the run, to the service."""
    token = starflow.wake_token("approval", timeout=timedelta(days=2))
    APPROVALS_SERVICE[order_id] = {"amount": amount, "callback_token": token}


@workflow(name="refund")
async def refund(order_id: str, amount: int) -> str:
    await request_approval(order_id, amount)
    decision = await wait_for("approval", timeout=timedelta(days=2))
    return f"refund {order_id}: {'approved' if decision['ok'] else 'rejected'} by {decision['by']}"


async def main() -> None:
    path = os.path.join(tempfile.mkdtemp(), "approval.db")
    async with Starflow.open(f"sqlite:///{path}") as sf:
        handle = await sf.run(refund, "o-17", 4200)
        print("run is", handle.status)  # paused, nothing running

        # ... hours later, the service calls back with the token it was given.
        request = APPROVALS_SERVICE["o-17"]
        try:
            await sf.resume(request["callback_token"][:-4] + "AAAA", {"ok": True, "by": "eve"})
        except InvalidWakeToken as exc:
            print("forged token rejected:", exc.reason)
        done = await sf.resume(request["callback_token"], {"ok": True, "by": "alice"})
        print(done.status, "->", done.result)


if __name__ == "__main__":
    anyio.run(main)
