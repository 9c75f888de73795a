"""LLM token streaming: a step writes tokens one by one; a reader sees them live.

``starflow.write_stream`` inside a step is written at once (not with the
run's next boundary), so ``sf.read_stream`` yields each token while the step
is still generating. Here the "model" fails once after two tokens: the
retried attempt streams again, after what the failed one wrote (at least
once, in order), so the workflow marks each attempt with an event the reader
can show. A finished step replays without running: nothing is written twice.

    python examples/llm_token_stream.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import anyio

import starflow
from starflow import RetryPolicy, Starflow, step, wait_for, workflow

ATTEMPTS: list[int] = []


@step(retry=RetryPolicy(max_attempts=2, initial_interval=timedelta(milliseconds=10)))
async def generate(prompt: str) -> str:
    """A stand-in for a model's streaming API: yields tokens with pauses."""
    ATTEMPTS.append(1)
    starflow.write_stream("tokens", f"[attempt {len(ATTEMPTS)}]")
    starflow.set_event("status", f"generating (attempt {len(ATTEMPTS)})")
    text = ""
    for i, token in enumerate(["Durable", " ", "streams", " ", "work", "."]):
        if len(ATTEMPTS) == 1 and i == 2:
            raise ConnectionError("the model's connection dropped")
        await anyio.sleep(0.01)
        starflow.write_stream("tokens", token)
        text += token
    return text


@workflow(name="llm-answer", version=1)
async def answer() -> str:
    prompt = await wait_for("prompt")  # the caller subscribes, then asks
    text = await generate(prompt)
    starflow.close_stream("tokens")
    starflow.set_event("status", "answered")
    await wait_for("feedback")  # the wake replays: generate() is not called again
    return text


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(answer)  # paused, waiting for the prompt
        tokens: list[str] = []

        async def follow() -> None:
            async for token in sf.read_stream(run.run_id, "tokens"):
                tokens.append(token)
                print(f"token: {token!r} (attempts so far: {len(ATTEMPTS)})")
            print("stream closed")

        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            # Drives the run inline: the reader prints each token as the step writes it.
            await sf.signal(run.run_id, "prompt", "what is starflow?")
        print(f"status: {await sf.get_event(run.run_id, 'status')!r}")
        done = await sf.signal(run.run_id, "feedback", "thanks")  # replays, writes nothing
        print(f"result: {done.result!r}")
        items = await sf.adapter.list_stream_items(run.run_id)  # the closing item too
        print(f"attempts: {len(ATTEMPTS)}; tokens read: {len(tokens)}; "
              f"items stored: {len(items)}")


if __name__ == "__main__":
    anyio.run(main)
