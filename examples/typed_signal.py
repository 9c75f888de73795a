"""A typed wait: a signal whose payload does not fit is refused, and the run waits on.

``wait_for("order", type=Order)`` records ``Order`` with the wait. A signal
whose payload does not decode to it is refused by ``sf.signal`` before
anything is written (``SerializationError`` naming the field); the run stays
paused, and a payload that fits wakes it.

    python examples/typed_signal.py
"""

from __future__ import annotations

import os
import tempfile

import anyio
import msgspec

from starflow import SerializationError, Starflow, wait_for, workflow


class Order(msgspec.Struct):
    sku: str
    qty: int


@workflow(name="fulfil", version=1)
async def fulfil(customer: str) -> str:
    order = await wait_for("order", type=Order)
    return f"{customer}: {order.qty} x {order.sku}"


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(fulfil, "ada")
        print(f"run is {run.status}, waiting for {run.waiting_for!r}")
        try:
            await sf.signal(run.run_id, "order", {"sku": "lamp", "qty": "two"})
        except SerializationError as exc:
            print(f"refused: {exc}")
        print(f"run is still {(await sf.get_run(run.run_id)).status}")
        done = await sf.signal(run.run_id, "order", {"sku": "lamp", "qty": 2})
        print(f"run is {done.status}: {done.result}")


if __name__ == "__main__":
    anyio.run(main)
