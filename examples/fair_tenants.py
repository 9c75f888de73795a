"""Fair pools: one tenant's backlog does not starve the others.

A tenant ("big-co") queues 100 runs, then a small tenant queues 5. A worker
serving the pool one run at a time reaches the small tenant's runs only after
all of big-co's on a plain pool (oldest first), but within its first ten
claims on a fair pool (``fair=True``: round robin across concurrency keys).
Then weights: ``key_weights={"premium": 3}`` serves the premium tenant three
times as often as a tenant of weight 1 while both have runs queued.

    python examples/fair_tenants.py      # $STARFLOW_DATABASE_URL, else sqlite:///fair_tenants.db
"""

from __future__ import annotations

import uuid
from collections import Counter

import anyio

from starflow import Starflow, step, workflow

#: The tenants in the order their runs executed, per pool.
ORDER: dict[str, list[str]] = {}


@step
async def serve(pool: str, tenant: str) -> None:
    ORDER.setdefault(pool, []).append(tenant)


@workflow(name="tenant-job")
async def tenant_job(pool: str, tenant: str) -> str:
    await serve(pool, tenant)
    return tenant


async def drain(sf: Starflow, pool: str, queued: list[tuple[str, int]]) -> list[str]:
    """Queue ``count`` runs per tenant (in that order), then let one worker
    with one slot run them all; the tenants in the order they ran."""
    run_ids = []
    for tenant, count in queued:
        opts = sf.options(pool=pool, concurrency_key=tenant)
        run_ids += [(await opts.start(tenant_job, pool, tenant)).run_id for _ in range(count)]
    worker = sf.worker(pool=pool, concurrency=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(worker.run)
        for run_id in run_ids:
            await sf.result(run_id)
        worker.stop(0)
    return ORDER[pool]


async def main() -> None:
    # A workspace of its own, so the example can run again on the same database.
    async with Starflow.open(workspace_id=f"fair-demo-{uuid.uuid4().hex[:8]}",
                             maintenance=False) as sf:
        backlog = [("big-co", 100), ("small-co", 5)]
        for pool, fair in (("plain", False), ("fair", True)):
            await sf.set_pool_limits(pool, concurrency=1, fair=fair)
            order = await drain(sf, pool, backlog)
            last = max(i for i, t in enumerate(order) if t == "small-co") + 1
            print(f"{pool} pool: small-co's last run was claim {last} of {len(order)}")
        print("fair pool, first ten claims:", " ".join(ORDER["fair"][:10]))

        await sf.set_pool_limits("weighted", fair=True, key_weights={"premium": 3})
        order = await drain(sf, "weighted", [("basic", 40), ("premium", 40)])
        first = Counter(order[:20])
        print(f"weighted pool, first 20 claims: premium {first['premium']}, "
              f"basic {first['basic']}")
        for usage in await sf.pools():
            if usage.pool == "weighted" and usage.limits is not None:
                print("stored:", usage.limits.fair, usage.limits.key_weights)


if __name__ == "__main__":
    anyio.run(main)
