"""Why a run failed, as data: the failing step, its cause and where it raised.

A step raises past its retries; the run ends in ``error``. ``sf.result``
raises ``WorkflowFailed`` carrying the recorded cause, and ``sf.get_run``
returns it as ``RunInfo.failure`` (node, type, message, attempts, traceback),
read from the run's row, never parsed out of its error text. Each failed
attempt that was retried is in the run's history as a ``node_retry`` event
(attempt, error, the delay chosen before the next one).

    python examples/failure_data.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import anyio

from starflow import RetryPolicy, Starflow, WorkflowFailed, step, workflow

PRICES = {"book": 1200}


@step(retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(0)))
async def price_of(item: str) -> int:
    return PRICES[item]  # KeyError for an unknown item


@workflow(name="checkout", version=1)
async def checkout(items: list[str]) -> int:
    total = 0
    for item in items:
        total += await price_of(item)
    return total


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(checkout, ["book", "lamp: brass, 'Error: none'"])
        print(f"run is {run.status}")
        try:
            await sf.result(run.run_id)
        except WorkflowFailed as exc:
            print(f"failed at {exc.node_id} after {exc.attempts} attempt(s): "
                  f"{exc.error_type}: {exc.error_message}")
        failure = (await sf.get_run(run.run_id)).failure
        assert failure is not None and failure.traceback is not None
        # The traceback starts with the step's exception: its innermost frame is
        # where the step raised.
        cause = failure.traceback.split("The above exception")[0]
        frames = [line.strip() for line in cause.splitlines() if line.strip().startswith("File ")]
        print("raised", frames[-1].rsplit(", ", 1)[-1])
        for event in await sf.events(run.run_id):
            if event.event_type == "node_retry":
                retry = event.payload
                print(f"attempt {retry['attempt']} of {event.node_id} failed "
                      f"({retry['error']['type']}), retried after {retry['delay_ms']} ms")


if __name__ == "__main__":
    anyio.run(main)
