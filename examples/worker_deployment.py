"""Worker deployment: queue runs, let workers claim them, survive a lost worker.

Runs on SQLite by default (a temporary file), on PostgreSQL with
``STARFLOW_DATABASE_URL=postgresql://…``. In one process it shows what a
deployment does across several:

1. ``sf.start`` queues runs (``claim_state`` queued) and returns at once.
2. A worker claims and drives them; one run pauses on ``wait_for``; a signal
   sends it back to the queue and a worker finishes it; a durable sleep is
   fired by the worker itself (every worker fires due timers, each once).
3. A run whose worker vanished (its lease expired) is swept and requeued.
4. ``worker.drain()`` stops the worker gracefully.

The same module serves real worker processes::

    export STARFLOW_DATABASE_URL=sqlite:///starflow.db
    starflow worker --app worker_deployment:make_app --concurrency 8   # runs + timers
    starflow server --app worker_deployment:make_app      # sweep, timers, schedules

    python examples/worker_deployment.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import anyio

import starflow
from starflow import Starflow, StarflowConfig, sleep, step, wait_for, workflow


@step
async def fetch(order_id: str) -> dict[str, str]:
    # Pass the idempotency key to the outside world: a step re-run after a
    # crash (at-least-once) must not act twice there.
    return {"order": order_id, "key": starflow.context().idempotency_key}


@step
async def ship(order_id: str, how: str) -> str:
    return f"{order_id} shipped by {how}"


@workflow(name="fulfil", max_claim_attempts=5)
async def fulfil(order_id: str, needs_approval: bool) -> str:
    await fetch(order_id)
    how = "standard"
    if needs_approval:
        decision = await wait_for("approve", timeout=timedelta(days=1))
        how = decision["how"]
    await sleep(timedelta(milliseconds=200))  # a durable timer, fired by any worker
    return await ship(order_id, how)


CONFIG = StarflowConfig(lease_ttl=timedelta(seconds=2), heartbeat_interval=timedelta(seconds=0.5),
                        sweep_interval=timedelta(seconds=0.5),
                        poll_interval=timedelta(seconds=0.1))


#: Tenants share one database; each deployment works in its own workspace.
WORKSPACE = os.environ.get("STARFLOW_WORKSPACE", "celestial")


def make_app() -> Starflow:
    """The factory ``starflow worker --app worker_deployment:make_app`` calls."""
    return Starflow.open(os.environ.get("STARFLOW_DATABASE_URL"), workspace_id=WORKSPACE,
                         config=CONFIG)


async def main(url: str) -> None:
    async with Starflow.open(url, workspace_id=WORKSPACE, config=CONFIG) as sf:
        # A worker that claimed a run and then died: its lease ran out long ago.
        lost = (await sf.start(fulfil, "o-lost", False)).run_id
        past = sf.clock.now() - timedelta(minutes=1)
        await sf.adapter.claim_runs("crashed-worker", pool=None, now=past,
                                    lease_until=past + CONFIG.lease_ttl)

        plain = [(await sf.start(fulfil, f"o-{i}", False)).run_id for i in range(3)]
        gated = (await sf.start(fulfil, "o-vip", True)).run_id
        print("queued:", len(plain) + 1, "runs, status", (await sf.get_run(gated)).status)

        worker = sf.worker(concurrency=8, grace=10)  # fires due timers too
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)  # sweeps first: the lost run goes back to the queue
            for run_id in plain:
                print(await sf.result(run_id, timeout=30))
            while (await sf.get_run(gated)).status != "paused":
                await sf.runner.wait_settled(0.1)
            handle = await sf.signal(gated, "approve", {"how": "courier"})
            print("signalled: the run is", handle.status, "for a worker again")
            print(await sf.result(gated, timeout=30))
            print(await sf.result(lost, timeout=30))
            await worker.drain()
        first = (await sf.events(lost))[0]
        print(f"recovered run: {first.event_type} ({first.payload['action']}, "
              f"was leased by {first.payload['leased_by']})")
        print(f"worker: {worker.completed} executions, {worker.released} handed back")


if __name__ == "__main__":
    database = os.environ.get("STARFLOW_DATABASE_URL")
    if database:
        anyio.run(main, database)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            anyio.run(main, f"sqlite:///{tmp}/worker_deployment.db")
