"""Act on every run a filter matches: cancel, retry and fork in bulk.

After a bad deploy a whole batch of runs failed: ``sf.retry_runs`` retries
every one the filter matches once the fix is deployed; ``sf.cancel_runs``
cancels the ones still waiting; ``dry_run=True`` only counts. The same from
the shell: ``starflow runs retry --status error --workflow order --since 2d``.

    python examples/bulk_actions.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import RunFilter, Starflow, TooManyRuns, step, workflow

#: Flip to True to "deploy the fix" of the label printer.
FIXED = {"label": False}


@step
async def charge(order_id: str) -> str:
    return f"charged {order_id}"


@step
async def print_label(order_id: str) -> str:
    if not FIXED["label"]:
        raise RuntimeError("the label printer is offline")
    return f"label for {order_id}"


@workflow(name="bulk-order")
async def order(order_id: str, region: str) -> str:
    starflow.set_attributes(region=region)
    receipt = await charge(order_id)
    if region == "eu":
        await starflow.wait_for("shipped")  # eu orders wait for the carrier
    return f"{receipt}, {await print_label(order_id)}"


async def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'bulk.db')}"
    async with Starflow.open(url) as sf:
        for i in range(4):
            await sf.run(order, f"us-{i}", "us")  # each fails at print_label
        for i in range(2):
            await sf.run(order, f"eu-{i}", "eu")  # each waits for 'shipped'

        failed = RunFilter(status="error", template_id="bulk-order")
        print("failed, dry run:", (await sf.retry_runs(failed, dry_run=True)).matched)
        try:
            await sf.retry_runs(failed, limit=3)
        except TooManyRuns:
            print("refused: more than limit=3 match, nothing was retried")

        FIXED["label"] = True  # the fix is deployed
        result = await sf.retry_runs(failed)
        print(f"retried: matched {result.matched}, acted on {result.acted}")
        print("now succeeded:", len(await sf.list_runs(status="success")))

        eu = RunFilter(attributes={"region": "eu"})
        result = await sf.cancel_runs(eu)
        print(f"cancelled: {result.acted} eu orders")

        try:
            await sf.cancel_runs(RunFilter())
        except starflow.InvalidArgument:
            print("an empty filter is refused (RunFilter(all=True) means every run)")

        result = await sf.fork_runs(RunFilter(template_id="bulk-order"),
                                    from_node="step:print_label#1")
        print(f"forked {result.acted} runs from step:print_label#1, "
              f"skipped {result.skipped_count} without it")


if __name__ == "__main__":
    anyio.run(main)
