"""Versioning: a paused v1 run finishes on v1 code while new runs use v2, and
``starflow.patched`` changes a version in place without breaking old runs.

    python examples/versioning.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import Starflow, step, wait_for, workflow


@step
async def charge(order_id: str) -> str:
    return f"receipt-{order_id}"


@step
async def send_email(order_id: str) -> str:
    return f"email:{order_id}"


@step
async def send_sms(order_id: str) -> str:
    return f"sms:{order_id}"


@workflow(name="order", version=1)
async def order_v1(order_id: str) -> str:
    receipt = await charge(order_id)
    await wait_for("shipped")
    return f"v1 {receipt} {await send_email(order_id)}"


async def main() -> None:
    path = os.path.join(tempfile.mkdtemp(), "versions.db")
    async with Starflow.open(f"sqlite:///{path}") as sf:
        old = await sf.run(order_v1, "o-1")  # paused on v1

        # Deploy version 2 next to version 1 (both registered).
        @workflow(name="order", version=2)
        async def order_v2(order_id: str) -> str:
            receipt = await charge(order_id)
            await wait_for("shipped")
            # An in-place change to v2, guarded so runs already past it replay.
            if starflow.patched("sms-notice"):
                note = await send_sms(order_id)
            else:
                note = await send_email(order_id)
            return f"v2 {receipt} {note}"

        new = await sf.run("order", "o-2")  # by name: the newest registered version
        print("old run version:", (await sf.get_run(old.run_id)).workflow_version)
        print("new run version:", (await sf.get_run(new.run_id)).workflow_version)
        print((await sf.signal(old.run_id, "shipped")).result)  # v1 code
        print((await sf.signal(new.run_id, "shipped")).result)  # v2, patched path


if __name__ == "__main__":
    anyio.run(main)
