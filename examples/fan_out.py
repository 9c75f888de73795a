"""Fan-out: run steps concurrently with an anyio task group inside a workflow.

Each branch calls a recorded step. Node ids are given in call order
(``step:fetch_price#1`` … ``#4``), which is deterministic because the task
group starts its tasks in order and each branch calls its step first. Results
are written by index, so the output does not depend on which branch finished
first.

The run then waits for a signal. On resume it replays: the four branches run
again as tasks, but every ``fetch_price`` returns its recorded result without
calling the handler (the printed call count stays at 4).

    python examples/fan_out.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import anyio

from starflow import Starflow, step, wait_for, workflow

PRICES = {"eu": 120, "us": 99, "apac": 135, "latam": 87}
calls = 0  # how often fetch_price really ran, in this process


@step
async def fetch_price(region: str) -> int:
    global calls
    calls += 1
    await anyio.sleep(0.05)  # steps may do real I/O and take real time
    return PRICES[region]


@workflow(name="cheapest-region", version=1)
async def cheapest_region(regions: list[str]) -> dict[str, object]:
    prices: list[int | None] = [None] * len(regions)

    async def branch(i: int, region: str) -> None:
        prices[i] = await fetch_price(region)

    async with anyio.create_task_group() as tg:  # all branches run at once
        for i, region in enumerate(regions):
            tg.start_soon(branch, i, region)

    best = min(range(len(regions)), key=lambda i: prices[i] or 0)
    approved = await wait_for("approve", timeout=timedelta(hours=1))
    return {"region": regions[best], "price": prices[best], "approved": approved}


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(cheapest_region, ["eu", "us", "apac", "latam"])
        print(f"run is {run.status}; fetch_price ran {calls} times")
        run = await sf.signal(run.run_id, "approve", True)
        print("result:", run.result)
        print(f"after the replay fetch_price has still run {calls} times")
        steps = [e.node_id for e in await sf.events(run.run_id)
                 if e.event_type == "node_complete" and (e.node_id or "").startswith("step:")]
        print("recorded:", ", ".join(sorted(s for s in steps if s)))


if __name__ == "__main__":
    anyio.run(main)
