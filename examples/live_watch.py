"""Live status from the warm tier: ``sf.watch``, ``starflow.progress`` and ``sf.live_runs``.

A step reports its progress (warm tier only: it never reaches the database);
a watcher prints every live update the warm tier pushes, the way a dashboard
would, until the run ends. Resume and history still read the database (cold):
the warm tier is a hint, up to a couple of seconds stale.

    python examples/live_watch.py                      # in-memory warm tier
    STARFLOW_WARM_URL=redis://localhost:6379/0 python examples/live_watch.py
"""

from __future__ import annotations

import os
import tempfile
import uuid

import anyio

import starflow
from starflow import Starflow, step, wait_for, workflow


@step
async def crunch(chunks: int) -> int:
    for done in range(1, chunks + 1):
        await anyio.sleep(0.02)  # the real work
        await starflow.progress({"done": done, "of": chunks})
    return chunks * 10


@workflow(name="live-report")
async def report(chunks: int) -> dict[str, int]:
    total = await crunch(chunks)
    starflow.context().phase = "awaiting-review"
    await wait_for("reviewed")
    return {"total": total}


def describe(live: starflow.LiveRun) -> str:
    progress = live.progress.get("step:crunch#1")
    last = live.last_event["event_type"] if live.last_event else "-"
    shown = f" progress={progress['done']}/{progress['of']}" if progress else ""
    return f"status={live.status}{shown} last_event={last}"


async def main() -> None:
    warm = os.environ.get("STARFLOW_WARM_URL", "memory://")
    url = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{tempfile.mkdtemp()}/live_watch.db")
    async with Starflow.open(url, warm=warm) as sf:
        run_id = str(uuid.uuid4())
        finished = anyio.Event()

        async def watcher() -> None:
            async for live in sf.watch(run_id):
                print("live:", describe(live))
            finished.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(watcher)
            handle = await sf.options(run_id=run_id).run(report, 4)
            print("run is", handle.status, "- waiting for 'reviewed'")
            # A hint: may still show the state of a moment ago.
            print("live runs:", [r.status for r in await sf.live_runs()])
            await sf.signal(run_id, "reviewed")
            with anyio.fail_after(5):
                await finished.wait()
        print("result (read cold):", await sf.result(run_id))
        status = await sf.outbox_status()
        print(f"outbox: pending={status.pending} level={status.level}")


if __name__ == "__main__":
    anyio.run(main)
