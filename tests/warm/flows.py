"""Workflows the warm-tier tests run (registered once, unique names)."""

from __future__ import annotations

from typing import Any

import starflow
from starflow import step, wait_for, workflow


@step
async def warm_add(a: int, b: int) -> int:
    return a + b


@step
async def warm_work(units: int) -> int:
    for done in range(1, units + 1):
        await starflow.progress({"done": done, "of": units})
    return units


@workflow(name="warm-sum")
async def sum_flow(a: int, b: int) -> int:
    return await warm_add(a, b)


@workflow(name="warm-approval")
async def approval_flow(order_id: str) -> dict[str, Any]:
    total = await warm_add(1, 2)
    starflow.context().phase = "awaiting-approval"
    decision = await wait_for("approval")
    return {"order": order_id, "total": total, "decision": decision}


@workflow(name="warm-progress")
async def progress_flow(units: int) -> int:
    done = await warm_work(units)
    await wait_for("go")
    return done
