"""Cron schedules and flow-controlled queues, on fake time.

A nightly report runs at 03:00 Berlin time; three nights pass in
milliseconds on a ``FakeClock``. Then a "payments" pool gets stored limits
(at most two charges executing at once across every worker), and the queue
shows priorities, deduplication and debouncing.

In production the same calls run against SQLite or PostgreSQL: every
server maintenance loop (``starflow server``, ``starflow worker
--maintenance``, ``Starflow.open(maintenance=True)``) fires due ticks, each
exactly once, and every worker of every host obeys the pool's limits because
the claim enforces them.

    pip install 'starflow-durable[schedules]'
    python examples/schedules_and_queues.py
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import anyio
import anyio.lowlevel

import starflow
from starflow import DuplicateRun, step, workflow
from starflow_testing import WorkflowEnvironment

#: The orders charged, and how many charges were inside their step at once.
TRACE: list[str] = []
ACTIVE = {"now": 0, "most": 0}


@workflow(name="nightly-report")
async def nightly_report(team: str) -> str:
    return f"report for {team} at {starflow.now():%Y-%m-%d %H:%M} UTC"


@step
async def charge_card(order: str) -> str:
    ACTIVE["now"] += 1
    ACTIVE["most"] = max(ACTIVE["most"], ACTIVE["now"])
    TRACE.append(order)
    await anyio.lowlevel.checkpoint()  # let other workers' runs interleave
    ACTIVE["now"] -= 1
    return f"charged {order}"


@workflow(name="charge")
async def charge(order: str) -> str:
    return await charge_card(order)


@workflow(name="refund")
async def refund(order: str) -> str:
    await starflow.wait_for("approved")  # stays active until approved
    return f"refunded {order}"


async def main() -> None:
    start = datetime(2030, 3, 1, 12, tzinfo=UTC)
    # Three workers of the pool (the environment's workers poll once a fake hour).
    async with WorkflowEnvironment(pools=("payments", "payments", "payments"),
                                   start=start) as env:
        sf = env.app
        # -- schedules ---------------------------------------------------------
        rec = await sf.schedule("nightly", nightly_report, "finance", cron="0 3 * * *",
                                timezone="Europe/Berlin", catchup=timedelta(hours=6))
        print(f"schedule {rec.id}: next tick {rec.next_fire_at:%Y-%m-%d %H:%M} UTC")
        await env.advance(timedelta(days=3))
        runs = await sf.list_runs(template_id="nightly-report")
        for run in sorted(runs, key=lambda r: r.started_at or start):
            print(f"  {run.status}: {await sf.result(run.id)}")
        rec = await sf.get_schedule("nightly")
        print(f"started {rec.started}, skipped {rec.skipped_missed + rec.skipped_overlap}")

        # -- flow control ------------------------------------------------------
        await sf.set_pool_limits("payments", concurrency=2,
                                 rate_limit=(100, timedelta(minutes=1)))
        first = await sf.options(pool="payments", dedup_key="refund-1").start(refund, "o-1")
        try:
            await sf.options(pool="payments", dedup_key="refund-1").start(refund, "o-1")
        except DuplicateRun as exc:
            print(f"dedup: refused; the active run is the first one: {exc.run_id == first.run_id}")
        await sf.signal(first.run_id, "approved")
        print(f"dedup: {await env.result(first.run_id)}")
        for n in range(2, 6):
            await sf.options(pool="payments", priority=n % 2).start(charge, f"order-{n}")
        pending = None
        for amount in (10, 20, 30):  # three quick calls: one run, the last arguments
            pending = await sf.options(pool="payments", debounce=timedelta(seconds=5),
                                       debounce_key="cart-9").start(charge, f"cart-9:{amount}")
        assert pending is not None
        # The debounce window (5 s) passes quietly; the next poll claims the run.
        await env.advance(timedelta(hours=1))
        print(f"debounced: {await env.result(pending.run_id)}")
        print(f"charges run: {len(TRACE)}, at most {ACTIVE['most']} at once (limit 2)")
        print("pools:", [(p.pool, p.queued, p.active) for p in await sf.pools()])


if __name__ == "__main__":
    anyio.run(main)
