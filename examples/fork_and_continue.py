"""Fork a failed run from the step that went wrong, retry it in place, and loop
with continue_as_new.

``sf.fork(run_id, from_node="step:charge#1")`` starts a new run whose history
is the old run's up to that step: the steps before it are replayed, not run
again. ``sf.retry(run_id)`` redoes the failed run itself the same way: the
step that failed runs again with the fixed code, the ones before it do not.
``starflow.continue_as_new(*args)`` ends a run and continues as a new one with
an empty history, so a loop that runs forever keeps each history
short; ``sf.result`` of the first run follows the chain. A child run may
continue as new too: its parent's ``await`` follows the child's chain.

    python examples/fork_and_continue.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import Starflow, step, workflow

CALLS: list[str] = []
BUG = {"deployed": True}


@step
async def reserve(order_id: str) -> str:
    CALLS.append("reserve")
    return f"reservation-{order_id}"


@step
async def charge(order_id: str) -> str:
    CALLS.append("charge")
    if BUG["deployed"]:
        raise RuntimeError("card processor rejected the currency code")
    return f"receipt-{order_id}"


@workflow(name="checkout", version=1)
async def checkout(order_id: str) -> str:
    reservation = await reserve(order_id)
    receipt = await charge(order_id)
    return f"{reservation} + {receipt}"


@step
async def poll(batch: int) -> int:
    return batch * 10


@workflow(name="poller", version=1)
async def poller(batch: int, seen: int) -> int:
    seen += await poll(batch)
    if batch < 9:
        starflow.continue_as_new(batch + 1, seen)  # a fresh, empty history
    return seen


@workflow(name="supervisor", version=1)
async def supervisor() -> int:
    # A child may continue as new too: the parent's await follows the child's
    # chain to its last run's result.
    return await poller(0, 0)


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        failed = await sf.run(checkout, "o-7")
        print(f"checkout is {failed.status}: {failed.error}")
        BUG["deployed"] = False  # the fix ships
        CALLS.clear()
        fixed = await sf.fork(failed.run_id, from_node="step:charge#1")
        print(f"fork is {fixed.status}: {fixed.result}")
        print(f"steps run by the fork: {CALLS}")
        CALLS.clear()
        retried = await sf.retry(failed.run_id)  # the failed run itself, in place
        print(f"retry is {retried.status}: {retried.result}")
        print(f"steps run by the retry: {CALLS}")

        first = await sf.run(poller, 0, 0)
        runs = await sf.list_runs(template_id="poller")
        sizes = sorted({len(await sf.events(r.id)) for r in runs})
        print(f"poller chain: {len(runs)} runs, history sizes {sizes}")
        origin = next(r.id for r in runs if r.id not in {x.continued_as for x in runs})
        print(f"result of the first run: {await sf.result(origin)}")
        print(f"last run: {first.run_id == next(r.id for r in runs if r.continued_as is None)}")

        # Child runs are queued for workers: one runs in this process here.
        async with anyio.create_task_group() as tg:
            worker = sf.worker(concurrency=2)
            tg.start_soon(worker.run)
            parent = await sf.start(supervisor)
            result = await sf.result(parent.run_id, timeout=60)
            print(f"supervisor, through its child's chain: {result}")
            await worker.drain()
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
