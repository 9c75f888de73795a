"""Workflows the CLI tests run and load with ``--app cli_app`` (tests/cli is on sys.path)."""

from __future__ import annotations

from datetime import timedelta

import starflow
from starflow import RetryPolicy, step, wait_for, workflow


@step()
async def cli_charge(order_id: str) -> str:
    return f"receipt-{order_id}"


@workflow(name="cli_order", version=1, signals=("approval",))
async def cli_order(order_id: str) -> dict[str, object]:
    receipt = await cli_charge(order_id)
    decision = await wait_for("approval")
    return {"receipt": receipt, "ok": decision["ok"]}


@workflow(name="cli_quick", version=1)
async def cli_quick(n: int) -> int:
    return n * 2


#: Flip to False to "deploy the fix" for cli_flaky.
BODY_BUG = {"on": True}


@workflow(name="cli_flaky", version=1)
async def cli_flaky(order_id: str) -> str:
    receipt = await cli_charge(order_id)
    if BODY_BUG["on"]:
        raise RuntimeError("a bug in the workflow body")
    return receipt


#: Flip ``fixed`` to True to "deploy the fix" for cli_ship; ``calls`` counts each step.
STEP_BUG = {"fixed": False, "charge": 0, "ship": 0}


@step()
async def cli_counted_charge(order_id: str) -> str:
    STEP_BUG["charge"] += 1
    return f"receipt-{order_id}"


@step()
async def cli_ship(order_id: str) -> str:
    STEP_BUG["ship"] += 1
    if not STEP_BUG["fixed"]:
        raise LookupError(f"no address for {order_id}")
    return f"shipped-{order_id}"


@workflow(name="cli_step_bug", version=1)
async def cli_step_bug(order_id: str) -> str:
    return f"{await cli_counted_charge(order_id)} {await cli_ship(order_id)}"


#: How many attempts of cli_gateway fail before one succeeds.
GATEWAY_FAILS = {"left": 2}


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(0)))
async def cli_gateway(order_id: str) -> str:
    if GATEWAY_FAILS["left"] > 0:
        GATEWAY_FAILS["left"] -= 1
        raise ConnectionError(f"gateway down for {order_id}")
    return f"paid-{order_id}"


@workflow(name="cli_retrying", version=1)
async def cli_retrying(order_id: str) -> str:
    starflow.context().phase = "paying"
    return await cli_gateway(order_id)


@workflow(name="cli_parent", version=1)
async def cli_parent(n: int) -> int:
    """Two child runs of cli_quick: one awaited, one detached and left alone."""
    await starflow.start_child(cli_quick, n + 1, detached=True)
    return await cli_quick(n)
