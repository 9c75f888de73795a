"""Pausing and resuming a run, and a pool, as an operator.

``sf.pause(run_id)`` holds a run at its next boundary and keeps its state: a
signal sent meanwhile is recorded but does not wake it. ``sf.resume(run_id)``
puts it back where it was, and the kept signal is delivered then.
``sf.pause_pool(name)`` stops workers claiming a pool's queued runs until
``sf.resume_pool(name)``.

    python examples/pause_and_resume.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import Starflow, step, workflow

CALLS: list[str] = []


@step
async def draft(doc: str) -> str:
    CALLS.append("draft")
    return f"{doc} v1"


@step
async def publish(text: str, editor: str) -> str:
    CALLS.append("publish")
    return f"{text}, approved by {editor}"


@workflow(name="article")
async def article(doc: str) -> str:
    text = await draft(doc)
    review = await starflow.wait_for("approved")
    return await publish(text, review["by"])


async def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'pause.db')}"
    async with Starflow.open(url) as sf:
        handle = await sf.run(article, "launch-post")
        print("run is", handle.status, "waiting for", handle.waiting_for)

        await sf.pause(handle.run_id)  # an operator holds it
        run = await sf.get_run(handle.run_id)
        print("after pause:", run.status, run.claim_state)

        sent = await sf.signal(handle.run_id, "approved", {"by": "ada"})
        print("signal sent while paused; run is still", sent.status)

        done = await sf.resume(handle.run_id)  # the kept signal is delivered now
        print("after resume:", done.status, "->", done.result)
        print("steps run:", CALLS)
        for event in await sf.events(handle.run_id):
            print(" ", event.event_type, event.node_id or "")

        # A pool: its queued runs wait while it is paused; its limits are kept.
        limits = await sf.pause_pool("gpu")
        queued = await sf.options(pool="gpu").start(article, "gpu-post")
        print("pool gpu paused:", limits.paused, "; its run is", queued.status)
        resumed = await sf.resume_pool("gpu")
        print("pool gpu resumed (no limits left):", resumed is None)


if __name__ == "__main__":
    anyio.run(main)
