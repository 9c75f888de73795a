"""A week-long durable sleep, tested in milliseconds on fake time.

``trial`` sends a welcome mail, sleeps durably for seven days, then sends a
reminder. In production the process does not stay alive for that week: the
run pauses with a timer row in the database, and whichever process runs
maintenance (``Starflow.open``, a worker with ``maintenance=True``, or
``starflow server``) wakes it when the timer is due, by replay.

Here it runs in ``starflow_testing.WorkflowEnvironment``: a ``FakeClock`` and
time skipping, so the seven days pass as soon as every run is blocked on a
timer. ``starflow.now()`` inside the workflow and the event timestamps show
the fake week.

    python examples/long_sleep.py
"""

from __future__ import annotations

from datetime import timedelta

import anyio

import starflow
from starflow import sleep, step, workflow
from starflow_testing import WorkflowEnvironment


@step
async def send_mail(user: str, template: str) -> str:
    return f"{template} mail sent to {user}"


@workflow(name="trial", version=1)
async def trial(user: str) -> list[str]:
    sent = [await send_mail(user, "welcome")]
    started = starflow.now()  # deterministic time: the same on every replay
    await sleep(timedelta(days=7))
    sent.append(await send_mail(user, "reminder"))
    sent.append(f"slept {starflow.now() - started}")
    return sent


async def main() -> None:
    async with WorkflowEnvironment() as env:
        begin = env.now()
        run = await env.start(trial, "ada@example.com")
        for line in await env.result(run.run_id):
            print(line)
        print(f"fake time passed: {env.now() - begin}")
        for event in await env.events(run.run_id):
            print(f"  {event.created_at:%Y-%m-%d %H:%M} {event.event_type:<14} "
                  f"{event.node_id or ''}")


if __name__ == "__main__":
    anyio.run(main)
