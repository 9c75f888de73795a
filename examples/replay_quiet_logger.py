"""``starflow.logger``: log lines from workflow code that do not repeat on replay.

The workflow body runs again from the top each time the run wakes, replaying
its recorded history. ``print`` would repeat its lines; ``starflow.logger``
(stdlib ``logging``, logger ``starflow.workflow``) drops them while the run
replays, and tags each record with the run id and node.

    python examples/replay_quiet_logger.py
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile

import anyio

import starflow
from starflow import Starflow, step, workflow


@step
async def charge(order_id: str) -> int:
    return 42


@workflow(name="order")
async def order(order_id: str) -> int:
    print("print: body runs")  # repeats on every wake
    starflow.logger.info("order %s started", order_id)
    amount = await charge(order_id)
    starflow.logger.info("charged %s; waiting for shipment", amount)
    await starflow.wait_for("shipped")
    starflow.logger.info("shipped")
    await starflow.wait_for("delivered")
    starflow.logger.info("delivered")
    return amount


async def main() -> None:
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("log: %(message)s [%(node_id)s]"))
    logging.getLogger("starflow.workflow").addHandler(handler)
    logging.getLogger("starflow.workflow").setLevel(logging.INFO)
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'order.db')}"
    async with Starflow.open(url) as sf:
        run_id = (await sf.run(order, "o-1")).run_id
        await sf.signal(run_id, "shipped")
        done = await sf.signal(run_id, "delivered")
        print("result:", done.result)


if __name__ == "__main__":
    anyio.run(main)
