"""Delayed starts: run a workflow later, durably, with ``start_after`` / ``start_at``.

``sf.options(start_after=timedelta(...)).start(wf, *args)`` (or ``start_at=``
a timezone-aware datetime; ``sf.start(wf, *args, start_after=...)`` works
too, untyped) writes the run now: it is listed at once, queued,
with its start time (``RunInfo.starts_at``), so a crash or a deploy in
between loses nothing. No worker claims it before that time; a worker
sleeping with nothing to do wakes up for it then. ``sf.cancel`` ends it
before it starts, without running any of its code. With ``run_id=`` the
start is idempotent: a retried request returns the same run.

Here on fake time (``starflow_testing.WorkflowEnvironment``, which also runs
a worker): a day passes in milliseconds.

    python examples/delayed_start.py
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import anyio

from starflow import step, workflow
from starflow_testing import WorkflowEnvironment

SENT: list[str] = []


@step
async def send_email(to: str, text: str) -> None:
    SENT.append(f"{to}: {text}")


@workflow(name="trial-reminder")
async def trial_reminder(user: str) -> str:
    await send_email(user, "your trial ends tomorrow")
    return f"reminded {user}"


async def main() -> None:
    async with WorkflowEnvironment(start=datetime(2030, 1, 1, 9, tzinfo=UTC)) as env:
        sf = env.app
        # An idempotent start for later: the same request id gives the same run.
        request = str(uuid.uuid5(uuid.NAMESPACE_URL, "signup/ada"))
        ada = await sf.options(run_id=request, start_after=timedelta(days=1)).start(
            trial_reminder, "ada@example.com")
        again = await sf.options(run_id=request, start_after=timedelta(days=1)).start(
            trial_reminder, "ada@example.com")
        print(f"same run on retry: {again.run_id == ada.run_id}")
        # sf.start(wf, x, start_at=...) works too, but only options() is checked
        # by type checkers (start's other keywords are the workflow's).
        bob = await sf.options(start_at=datetime(2030, 1, 1, 18, tzinfo=UTC)).start(
            trial_reminder, "bob@example.com")
        for run in await sf.list_runs():
            print(f"{run.template_id} {run.status}, starts at {run.starts_at:%Y-%m-%d %H:%M}")
        await sf.cancel(bob.run_id)  # before it starts: none of its code runs
        reminded: str = await env.result(ada)
        print(f"ada: {reminded} at {env.now():%Y-%m-%d %H:%M}")
        print(f"bob: {(await sf.get_run(bob.run_id)).status}")
        print(f"emails sent: {SENT}")


if __name__ == "__main__":
    anyio.run(main)
