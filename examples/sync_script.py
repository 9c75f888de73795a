"""A blocking script (a cron job, a Django management command) with ``starflow.sync``.

No ``async`` in the caller: ``starflow.sync.Starflow`` runs the application on
a private event-loop thread. The workflow itself stays ``async def``. The
script starts an inline run, approves it, queues a second run for a worker
that runs in the background for a block, and waits for both results.

    python examples/sync_script.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

from starflow import step, wait_for, workflow
from starflow.sync import Starflow


@step
async def invoice(customer: str, cents: int) -> str:
    return f"INV-{customer}-{cents}"


@workflow(name="billing", version=1)
async def billing(customer: str, cents: int, needs_approval: bool = True) -> str:
    if needs_approval:
        await wait_for("approved", timeout=timedelta(days=1))
    return await invoice(customer, cents)


def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'billing.db')}")
    with Starflow.open(url) as sf:
        run = sf.run(billing, "acme", 1200)             # inline: returns once it pauses
        print(f"run {run.status}, waiting for {run.waiting_for!r}")
        # Signalling an inline run continues it here, in this call, until it ends.
        done = sf.signal(run.run_id, "approved")
        print("approved:", done.status, done.result)

        queued = sf.start(billing, "globex", 800, needs_approval=False)
        print("queued:", queued.status)
        with sf.worker(concurrency=4):                  # a worker on the same loop, for the block
            print("worker finished it:", sf.result(queued, timeout=30))


if __name__ == "__main__":
    main()
