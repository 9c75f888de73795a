"""A user's tests for an order workflow, written with starflow's pytest plugin.

Run with ``pytest examples/test_order_workflow.py`` (anyio's pytest plugin in
auto mode, as in this repository's configuration) or ``python`` on this file. The ``starflow_env``
fixture comes from ``starflow_testing.pytest_plugin``, which pytest loads
automatically once starflow is installed.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import starflow
from starflow import RetryPolicy, WaitTimeout, sleep, step, wait_for, workflow
from starflow_testing import FakeClock, FaultInjectingAdapter, Replayer, WorkflowEnvironment

charged: list[str] = []


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=5)))
async def charge(order_id: str, cents: int) -> str:
    charged.append(order_id)
    return f"receipt-{order_id}-{cents}"


@step
async def ship(order_id: str) -> str:
    # Step code may read the wall clock; under the environment it is fake time.
    return f"shipped {order_id} at {datetime.now(UTC):%Y-%m-%d}"


@workflow(name="example_order")
async def order(order_id: str) -> dict[str, str]:
    receipt = await charge(order_id, 1999)
    try:
        decision = await wait_for("approval", timeout=timedelta(days=2))
    except WaitTimeout:
        return {"receipt": receipt, "status": "expired"}
    if not decision["ok"]:
        return {"receipt": receipt, "status": "rejected"}
    starflow.context().phase = "shipping"
    await sleep(timedelta(days=1))  # a cooling-off period
    return {"receipt": receipt, "status": await ship(order_id)}


async def test_approved_order_ships_a_day_later(starflow_env: WorkflowEnvironment) -> None:
    handle = await starflow_env.run(order, "o-1")
    assert handle.status == "paused" and handle.waiting_for == "approval"

    await starflow_env.signal(handle.run_id, "approval", {"ok": True})
    result = await starflow_env.result(handle.run_id)  # skips the 1-day sleep

    assert result == {"receipt": "receipt-o-1-1999", "status": "shipped o-1 at 2030-01-02"}


async def test_unanswered_order_expires_after_two_days(starflow_env: WorkflowEnvironment
                                                       ) -> None:
    handle = await starflow_env.start(order, "o-2")  # queued: the embedded worker runs it
    result = await starflow_env.result(handle.run_id)
    assert result["status"] == "expired"
    assert starflow_env.now() - datetime(2030, 1, 1, tzinfo=UTC) == timedelta(days=2)


@pytest.mark.parametrize("starflow_env", ["memory", "sqlite"], indirect=True)
async def test_on_each_database(starflow_env: WorkflowEnvironment) -> None:
    handle = await starflow_env.run(order, "o-3")
    await starflow_env.signal(handle.run_id, "approval", {"ok": False})
    assert (await starflow_env.result(handle.run_id))["status"] == "rejected"


async def test_a_failed_checkpoint_write_is_retried() -> None:
    faults: list[FaultInjectingAdapter] = []

    def wrap(adapter: starflow.WorkflowStateAdapter) -> starflow.WorkflowStateAdapter:
        faults.append(FaultInjectingAdapter(adapter, fail={"save_checkpoint": 1}))
        return faults[0]

    async with WorkflowEnvironment(wrap=wrap) as env:
        handle = await env.run(order, "o-4")
        assert handle.status == "paused"  # the engine retried the failed write
        assert faults[0].failures == ["save_checkpoint"]


async def test_history_still_replays(starflow_env: WorkflowEnvironment) -> None:
    handle = await starflow_env.run(order, "o-5")
    await starflow_env.signal(handle.run_id, "approval", {"ok": True})
    await starflow_env.result(handle.run_id)
    results = await Replayer(workflows=[order]).replay_workflow(starflow_env, order)
    assert [r.ok for r in results] == [True]


async def test_fake_clock_fixture(fake_clock: FakeClock) -> None:
    await fake_clock.advance(timedelta(minutes=5))
    assert fake_clock.now() == datetime(2030, 1, 1, 0, 5, tzinfo=UTC)


if __name__ == "__main__":
    # `python examples/test_order_workflow.py` runs these tests with pytest (in a fresh
    # interpreter: this one has imported starflow_testing before pytest could rewrite it).
    import subprocess
    import sys

    raise SystemExit(subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "anyio",
                                      "-p", "no:cacheprovider", __file__]))
