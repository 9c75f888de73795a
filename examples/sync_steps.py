"""Plain ``def`` steps: blocking code in a worker thread, recorded like any step.

``fetch_rate`` and ``charge`` are ordinary functions (think ``requests`` or a
database driver without asyncio). ``@step`` runs each attempt in a worker
thread, so the blocking call does not stall the event loop: two runs are in
flight at once below, and the second finishes while the first one's thread is
still blocked. The workflow stays ``async def`` and awaits them like async
steps; retries, the idempotency key and replay work the same.

    python examples/sync_steps.py
"""

from __future__ import annotations

import os
import tempfile
import threading
from datetime import timedelta

import anyio
import anyio.to_thread

import starflow
from starflow import RetryPolicy, Starflow, step, wait_for, workflow

RATES = {"EUR": 1.08, "GBP": 1.27}
gate = threading.Event()  # holds the first charge, like a slow payment API
entered = threading.Event()
charged: list[str] = []
attempts = {"fetch_rate": 0}


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(0)))
def fetch_rate(currency: str) -> float:
    """A blocking lookup that fails once (retried like an async step)."""
    attempts["fetch_rate"] += 1
    if attempts["fetch_rate"] == 1:
        raise ConnectionError("rate service unavailable")
    return RATES[currency]


@step
def charge(order_id: str, cents: int) -> str:
    """A blocking charge; the context (idempotency key) is there in the thread."""
    key = starflow.context().idempotency_key
    if order_id == "o-slow":
        entered.set()
        gate.wait(30)  # blocks this thread only, not the event loop
    charged.append(order_id)
    return f"{order_id}: {cents} cents (key ...{key[-13:]})"


@workflow(name="sync-step-order")
async def order(order_id: str, amount: float, currency: str) -> str:
    rate = await fetch_rate(currency)
    receipt = await charge(order_id, round(amount * rate * 100))
    if order_id == "o-slow":
        await wait_for("shipped")  # on resume, both steps replay without running
    return receipt


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    slow: dict[str, str] = {}
    async with Starflow.open(db) as sf, anyio.create_task_group() as tg:

        async def run_slow() -> None:
            slow["run_id"] = (await sf.run(order, "o-slow", 10.0, "EUR")).run_id

        tg.start_soon(run_slow)
        await anyio.to_thread.run_sync(entered.wait, 30)  # its charge is blocked now
        fast = await sf.run(order, "o-fast", 5.0, "GBP")
        print(f"while o-slow's charge blocks its thread: {fast.result}")
        gate.set()  # the first run's charge returns; it goes on to pause at its wait
    async with Starflow.open(db) as sf:
        done = await sf.signal(slow["run_id"], "shipped")
        print(f"o-slow: {done.status}, {done.result}")
    print(f"charged: {charged}; fetch_rate attempts: {attempts['fetch_rate']}")


if __name__ == "__main__":
    anyio.run(main)
