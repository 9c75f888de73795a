"""Waiting for several kinds of message at once (Temporal's message_passing sample).

A greeting workflow handles, in any order, until it is told to stop:

- the ``set_language`` update (answered with the previous language, or
  rejected for a language it does not know),
- the ``get_language`` update (answered with the current one),
- the ``approve`` signal, which ends it.

``starflow.wait_for_message(signals=[...], updates=[...])`` returns whichever
came first as a ``Message``; an update carries the request to ``reply`` to.
The run pauses between messages (the process may exit), and each message
wakes it, whichever kind it is.

    python examples/message_passing.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import Starflow, UpdateRejected, workflow

GREETINGS = {"en": "Hello, world", "fr": "Bonjour, monde", "es": "Hola, mundo"}


@workflow(name="greeting", version=1)
async def greeting() -> str:
    language = "en"
    while True:
        msg = await starflow.wait_for_message(
            signals=["approve"], updates=["set_language", "get_language"])
        if msg.update is None:  # the approve signal
            starflow.logger.info("approved by %s", msg.payload)
            return GREETINGS[language]
        if msg.name == "get_language":
            await msg.update.reply(language)
        elif msg.payload not in GREETINGS:
            await msg.update.reject(f"no greeting in {msg.payload!r}")
        else:
            previous, language = language, msg.payload
            await msg.update.reply(previous)


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(greeting)
        print(f"run is {run.status}")
        print("language:", await sf.update(run.run_id, "get_language"))
        print("previous language:", await sf.update(run.run_id, "set_language", "fr"))
        try:
            await sf.update(run.run_id, "set_language", "tlh")
        except UpdateRejected as exc:
            print("rejected:", exc.reason)
    # The process may exit here: the run is paused in its database row.
    async with Starflow.open(db) as sf:
        print("language after a restart:", await sf.update(run.run_id, "get_language"))
        done = await sf.signal(run.run_id, "approve", "ann")
        print(f"run is {done.status}: {done.result!r}")
        waits = [e.node_id for e in await sf.events(run.run_id)
                 if e.event_type == "node_complete" and e.node_id
                 and e.node_id.startswith("any:")]
        print(f"messages handled: {len(waits)}")


if __name__ == "__main__":
    anyio.run(main)
