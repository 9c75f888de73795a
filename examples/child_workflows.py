"""Child workflows: a parent fans out to child runs and gathers their results.

``thumbnails`` starts one child run per image with ``starflow.start_child``
and waits for all of them with ``asyncio.gather`` over the handles. Each
child is a run of its own (queued for workers, retried, visible in
``starflow runs list`` and ``starflow runs show``), linked to its parent by
``parent_run_id``. While the children work, the parent is paused like at any
durable wait: no process holds it, and each child's end wakes it.
``await summarize(sizes)`` (calling a ``@workflow`` inside a workflow) is one
more child, started and awaited in one line. A child that fails raises
``WorkflowFailed`` at the parent's await, with the child's cause.

Runs on SQLite by default (a temporary file), on PostgreSQL with
``STARFLOW_DATABASE_URL=postgresql://…``; one in-process worker runs the
children (in production: ``starflow worker`` processes).

    python examples/child_workflows.py
"""

from __future__ import annotations

import asyncio
import os
import tempfile

import anyio

import starflow
from starflow import Starflow, WorkflowFailed, step, workflow


@step
async def resize(image: str) -> int:
    if image.endswith(".gif"):
        raise ValueError(f"cannot resize animated {image}")
    return 100 + len(image)  # the thumbnail's size in bytes, say


@workflow(name="thumbnail")
async def thumbnail(image: str) -> int:
    return await resize(image)


@workflow(name="summarize")
async def summarize(sizes: list[int]) -> str:
    return f"{len(sizes)} thumbnails, {sum(sizes)} bytes"


@workflow(name="thumbnails")
async def thumbnails(images: list[str]) -> dict[str, object]:
    handles = [await starflow.start_child(thumbnail, image) for image in images]
    outcomes = await asyncio.gather(*(h.result() for h in handles), return_exceptions=True)
    sizes = [o for o in outcomes if isinstance(o, int)]
    failed = [f"{image}: {o.error_type}: {o.error_message}"
              for image, o in zip(images, outcomes, strict=True)
              if isinstance(o, WorkflowFailed)]
    summary = await summarize(sizes)  # one more child, started and awaited
    return {"summary": summary, "failed": failed}


async def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL")
    with tempfile.TemporaryDirectory() as tmp:
        async with Starflow.open(url or f"sqlite:///{tmp}/children.db") as sf, \
                anyio.create_task_group() as tg:
            worker = sf.worker(concurrency=8)
            tg.start_soon(worker.run)
            run = await sf.start(thumbnails, ["cat.png", "dog.jpg", "party.gif", "sea.png"])
            result = await sf.result(run.run_id, timeout=60)
            print(f"summary: {result['summary']}")
            for line in result["failed"]:
                print(f"failed: {line}")
            children = await sf.list_runs(parent_run_id=run.run_id)
            print(f"{len(children)} child runs of {run.run_id[:8]}…:")
            for child in sorted(children, key=lambda c: (c.template_id or "", c.status)):
                print(f"  {child.template_id:<10} {child.status}")
            await worker.drain()
            tg.cancel_scope.cancel()


if __name__ == "__main__":
    anyio.run(main)
