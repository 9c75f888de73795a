"""Durable events and streams: a run publishes its progress while callers read it.

The workflow publishes a status with ``starflow.set_event`` and appends lines
to a stream with ``starflow.write_stream``; ``sf.get_event`` returns the
status as soon as it is written, and ``async for line in sf.read_stream(...)``
follows the stream live, from its first line, until ``close_stream``. Both
are recorded in the run's history: the wake's replay writes nothing twice.

    python examples/events_and_streams.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import Starflow, step, wait_for, workflow


@step
async def summarize(chunk: str) -> str:
    return chunk.upper()


@workflow(name="summarizer", version=1)
async def summarizer(chunks: list[str]) -> int:
    starflow.set_event("status", "summarizing")
    for chunk in chunks:
        starflow.write_stream("lines", await summarize(chunk))
    starflow.set_event("status", "waiting for review")
    review = await wait_for("review")  # the run pauses here; the stream stays open
    starflow.write_stream("lines", f"review: {review}")
    starflow.close_stream("lines")
    starflow.set_event("status", "done")
    return len(chunks)


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(summarizer, ["durable", "events", "streams"])
        print(f"run is {run.status}; status event: "
              f"{await sf.get_event(run.run_id, 'status', timeout=5)!r}")

        async def follow() -> None:
            async for line in sf.read_stream(run.run_id, "lines"):
                print(f"stream: {line}")
            print("stream closed")

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            await sf.signal(run.run_id, "review", "looks good")
        print(f"status event: {await sf.get_event(run.run_id, 'status', timeout=5)!r}")
        print(f"result: {await sf.result(run.run_id)}")
        written = [e.node_id for e in await sf.events(run.run_id)
                   if e.node_id and e.node_id.startswith("stream:")]
        print(f"stream writes recorded once each: {written}")


if __name__ == "__main__":
    anyio.run(main)
