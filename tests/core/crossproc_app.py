"""A workflow module imported by separate processes in test_cross_process.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import anyio

from starflow import Starflow, step, wait_for, workflow

LOG = Path(os.environ.get("STARFLOW_TEST_CALL_LOG", "calls.log"))


@step
async def reserve(item: str) -> str:
    with LOG.open("a") as f:
        f.write(f"reserve:{item}:{os.getpid()}\n")
    return f"reserved-{item}"


@step
async def ship(item: str, approver: str) -> str:
    with LOG.open("a") as f:
        f.write(f"ship:{item}:{os.getpid()}\n")
    return f"shipped-{item}-by-{approver}"


@workflow(name="crossproc")
async def crossproc(item: str) -> dict[str, str]:
    r = await reserve(item)
    decision = await wait_for("approve")
    s = await ship(item, decision["by"])
    return {"reserve": r, "ship": s}


@step(name="crossproc-pack")
def pack(item: str) -> str:
    """A plain step that blocks while ``STARFLOW_TEST_HANG`` is set (the process is
    killed there)."""
    with LOG.open("a") as f:
        f.write(f"pack:{item}:{os.getpid()}\n")
    if os.environ.get("STARFLOW_TEST_HANG"):
        time.sleep(60)
    return f"packed-{item}"


@workflow(name="crossproc-sync")
def crossproc_sync(item: str) -> dict[str, str]:
    """A plain ``def`` workflow: its first step finishes, its second is where the
    process dies."""
    return {"reserve": reserve(item), "pack": pack(item)}


async def work_until(sf: Starflow, run_id: str, statuses: set[str]) -> str:
    """Run a worker in this process until the run reaches one of ``statuses``."""
    worker = sf.worker(concurrency=4)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        while (status := (await sf.get_run(run_id)).status) not in statuses:
            await sf.runner.wait_settled(0.05)
        worker.stop()
    return status


async def main(argv: list[str]) -> None:
    url, workspace, action = argv[0], argv[1], argv[2]
    async with Starflow.open(url, workspace_id=workspace, maintenance=False) as sf:
        if action == "start":
            handle = await sf.run(crossproc, argv[3])
            print(handle.run_id, handle.status)
        elif action == "signal":
            handle = await sf.signal(argv[3], "approve", {"by": argv[4]})
            print(handle.run_id, handle.status, handle.result)
        elif action == "start-queued":
            # Queued for workers; this process's worker drives it to the wait.
            handle = await sf.start(crossproc, argv[3])
            print(handle.run_id, await work_until(sf, handle.run_id, {"paused"}))
        elif action == "start-sync":  # argv[3] is the run id; the test kills it inside
            handle = await sf.options(run_id=argv[3]).run(crossproc_sync, argv[4])
            print(handle.run_id, handle.status)
        elif action == "signal-and-work":
            handle = await sf.signal(argv[3], "approve", {"by": argv[4]})
            assert handle.status == "queued", handle  # worker runs go back to the queue
            print(handle.run_id, await work_until(sf, handle.run_id, {"success", "error"}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
