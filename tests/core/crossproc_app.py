"""A workflow module imported by separate processes in test_cross_process.py."""

from __future__ import annotations

import os
import sys
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


async def main(argv: list[str]) -> None:
    url, action = argv[0], argv[1]
    async with Starflow.open(url, maintenance=False) as sf:
        if action == "start":
            handle = await sf.run(crossproc, argv[2])
            print(handle.run_id, handle.status)
        elif action == "signal":
            handle = await sf.signal(argv[2], "approve", {"by": argv[3]})
            print(handle.run_id, handle.status, handle.result)


if __name__ == "__main__":
    anyio.run(main, sys.argv[1:])
