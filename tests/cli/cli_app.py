"""Workflows the CLI tests run and load with ``--app cli_app`` (tests/cli is on sys.path)."""

from __future__ import annotations

from starflow import step, wait_for, workflow


@step()
async def cli_charge(order_id: str) -> str:
    return f"receipt-{order_id}"


@workflow(name="cli_order", version=1)
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
