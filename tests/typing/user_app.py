"""A user's module, as the docs teach it: must pass mypy --strict and pyright strict.

`assert_type` pins what a type checker infers, so a regression to `Any` fails.
"""

# pyright: strict

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, assert_type

import starflow
from starflow import RetryPolicy, RunHandle, RunInfo, Starflow, sleep, step, wait_for, workflow
from starflow import sync as sfsync


@dataclass
class Receipt:
    id: str
    cents: int


@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=1)))
async def charge(order_id: str, cents: int) -> Receipt:
    return Receipt(id=f"r-{order_id}", cents=cents)


@workflow(name="typed-order", version=1)
async def order(order_id: str, cents: int = 100) -> Receipt:
    receipt = await charge(order_id, cents)
    assert_type(receipt, Receipt)
    starflow.context().phase = "approval"
    decision: Any = await wait_for("approval", timeout=timedelta(days=2))
    await sleep(timedelta(seconds=1))
    return receipt if decision else Receipt(id="none", cents=0)


@workflow(name="typed-batch")
async def batch(order_ids: list[str]) -> int:
    """Child runs: ``start_child`` is typed like ``await order(...)``."""
    first = await order(order_ids[0])
    assert_type(first, Receipt)
    handle = await starflow.start_child(order, order_ids[1], cents=5)
    assert_type(handle, starflow.ChildHandle[Receipt])
    assert_type(await handle.result(), Receipt)
    gpu = await starflow.start_child(order, order_ids[2], 7, pool="gpu", detached=True)
    assert_type(gpu, starflow.ChildHandle[Receipt])
    one = await starflow.start_child(order, order_ids[3], run_id=None,
                                     timeout=timedelta(minutes=10))
    assert_type(await one.result(), Receipt)
    return first.cents + (await handle.result()).cents + (await gpu.result()).cents


async def client(sf: Starflow) -> None:
    handle = await sf.run(order, "o-1")
    assert_type(handle, RunHandle[Receipt])
    assert_type(await sf.result(handle), Receipt)
    assert_type(await sf.result(handle.run_id), Any)
    queued = await sf.options(run_id="6f1c2b1e-8a51-4a3e-9a57-0f1e2d3c4b5a", pool="gpu").start(
        order, "o-2", cents=250)
    assert_type(queued, RunHandle[Receipt])
    by_name = await sf.run("typed-order", "o-3")
    assert_type(by_name, RunHandle[Any])
    woken = await sf.signal(handle.run_id, "approval", {"ok": True})
    assert_type(woken.status, str)
    info = await sf.get_run(handle.run_id)
    assert_type(info, RunInfo)
    runs = await sf.list_runs(status="paused", limit=10)
    assert_type(runs, list[RunInfo])
    assert_type(await sf.get_event(handle.run_id, "receipt", type=Receipt), Receipt)
    assert_type(await sf.get_event(handle.run_id, "receipt"), Any)
    assert_type(await sf.update(handle.run_id, "refund", 5, type=Receipt), Receipt)
    assert_type(await sf.update(handle.run_id, "refund", 5), Any)
    async for streamed in sf.read_stream(handle.run_id, "receipts", type=Receipt):
        assert_type(streamed, Receipt)


async def main() -> None:
    async with Starflow.open("memory://") as sf:
        await client(sf)


def blocking() -> None:
    with sfsync.Starflow.open("memory://") as sf:
        handle = sf.run(order, "o-4")
        assert_type(handle, RunHandle[Receipt])
        assert_type(sf.result(handle, timeout=5), Receipt)
        assert_type(sf.options(pool="gpu").start(order, "o-5"), RunHandle[Receipt])
        assert_type(sf.get_run(handle.run_id), RunInfo)
        assert_type(sf.get_event(handle.run_id, "receipt", type=Receipt), Receipt)
        for streamed in sf.read_stream(handle.run_id, "receipts", type=Receipt):
            assert_type(streamed, Receipt)


# A plain ``def`` step (run in a worker thread): awaited like an async one.
@step
def refund(order_id: str, cents: int) -> Receipt:
    return Receipt(id=f"refund-{order_id}", cents=-cents)


@step(name="typed-sync-fee", retry=RetryPolicy(max_attempts=2))
def fee(cents: int) -> int:
    return cents // 100


@workflow(name="typed-refund")
async def refund_order(order_id: str) -> Receipt:
    assert_type(refund("o", 1), Awaitable[Receipt])
    receipt = await refund(order_id, 100)
    assert_type(receipt, Receipt)
    assert_type(await fee(250), int)
    return receipt


# A plain ``def`` workflow (run in a worker thread): starflow.call gives each value's type.
@workflow(name="typed-sync-order")
def sync_order(order_id: str) -> Receipt:
    receipt = starflow.call(charge, order_id, 1999)
    assert_type(receipt, Receipt)
    assert_type(starflow.call(fee, 250), int)
    approval = starflow.call(wait_for, "approval", timeout=timedelta(days=2))
    assert_type(approval, Any)
    typed_approval = starflow.call(wait_for, "approval", type=Receipt)
    assert_type(typed_approval, Receipt)
    starflow.call(sleep, timedelta(hours=1))
    child = starflow.call(starflow.start_child, refund_order, order_id)
    assert_type(child, starflow.ChildHandle[Receipt])
    assert_type(starflow.call(child.result), Receipt)
    assert_type(starflow.call(refund_order, order_id), Receipt)
    return receipt


async def run_sync_order(sf: Starflow) -> None:
    handle = await sf.run(sync_order, "o-1")
    assert_type(handle, RunHandle[Receipt])
    assert_type(await sync_order("o-2"), Receipt)  # a child run, from an async workflow
