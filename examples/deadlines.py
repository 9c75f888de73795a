"""Deadlines: a workflow that must finish within a day, a step that must answer in 30 s.

``@workflow(timeout=...)`` is a deadline from the run's start on the
runtime's clock: it counts across restarts and durable waits. Past it the
run ends in ``error`` and ``sf.result`` raises ``WorkflowFailed`` with
``error_type == "WorkflowTimeout"`` (attached child runs are cancelled with
it). ``sf.options(timeout=...)`` sets another deadline for one run.

``@step(timeout=...)`` cancels an attempt that runs longer; the attempt
counts as failed, so the step's ``RetryPolicy`` retries it.

Here on fake time (``starflow_testing.WorkflowEnvironment``): the day and
the slow attempts pass in milliseconds.

    python examples/deadlines.py
"""

from __future__ import annotations

from datetime import timedelta

import anyio

from starflow import RetryPolicy, WorkflowFailed, step, wait_for, workflow
from starflow_testing import WorkflowEnvironment

ATTEMPTS: list[str] = []


@step(timeout=timedelta(seconds=30),
      retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=5)))
async def quote(order_id: str) -> int:
    ATTEMPTS.append(order_id)
    if len(ATTEMPTS) < 3:
        await anyio.sleep_forever()  # a supplier that does not answer
    return 42


@workflow(name="approval", timeout=timedelta(days=1))
async def approval(order_id: str) -> str:
    price = await quote(order_id)
    decision = await wait_for("approve")  # nobody approves in time
    return f"{order_id}: {price} {decision}"


async def main() -> None:
    async with WorkflowEnvironment() as env:
        begin = env.now()
        run = await env.start(approval, "o-1")
        try:
            await env.result(run.run_id)
        except WorkflowFailed as exc:
            print(f"run ended: {exc.status}, error_type {exc.error_type}")
        print(f"after {env.now() - begin} of fake time")
        print(f"quote attempts: {len(ATTEMPTS)} (two timed out after 30 s each)")
        retries = [e.payload_json for e in await env.events(run.run_id)
                   if e.event_type == "node_retry"]
        for r in retries:
            print(f"  attempt {r['attempt']}: {r['error']['type']}")
        # The same workflow with a longer deadline for one run: approved in time.
        longer = await env.app.options(timeout=timedelta(days=3)).start(approval, "o-2")
        await env.run_until_idle()
        await env.signal(longer.run_id, "approve", "ok")
        print(f"with sf.options(timeout=3 days): {await env.result(longer.run_id)}")


if __name__ == "__main__":
    anyio.run(main)
