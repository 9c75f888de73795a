"""Pydantic models as workflow values: in and out of steps, typed waits, events.

Steps and workflows take and return Pydantic v2 models. starflow stores
``model_dump(mode="json")`` and decodes by annotation with ``model_validate``,
so after the pause the replayed step outputs are ``Order`` and ``Quote``
instances again, not dicts, and ``sf.result`` is the annotated ``Invoice``.
A signal that does not validate against the wait's model is refused.

    pip install 'starflow-durable[pydantic]'
    python examples/pydantic_orders.py
"""

from __future__ import annotations

import os
import tempfile

import anyio
from pydantic import BaseModel, Field

import starflow
from starflow import SerializationError, Starflow, step, wait_for, workflow


class Line(BaseModel):
    sku: str
    qty: int = Field(gt=0)
    cents: int


class Order(BaseModel):
    id: str
    lines: list[Line]
    coupon: str | None = None


class Quote(BaseModel):
    order: Order
    total_cents: int


class Approval(BaseModel):
    by: str


class Invoice(BaseModel):
    quote: Quote
    approved_by: str


calls: list[str] = []


@step
async def price(order: Order) -> Quote:
    calls.append("price")
    total = sum(line.qty * line.cents for line in order.lines)
    return Quote(order=order, total_cents=total // 2 if order.coupon else total)


@workflow(name="invoice-order", version=1)
async def invoice(order: Order) -> Invoice:
    quote = await price(order)
    print(f"  in the workflow: {type(quote).__name__} with {type(quote.order).__name__}")
    starflow.set_event("quote", quote)
    approval = await wait_for("approve", type=Approval)
    return Invoice(quote=quote, approved_by=approval.by)


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        order = Order(id="o-1", lines=[Line(sku="lamp", qty=2, cents=1500)], coupon="HALF")
        run = await sf.run(invoice, order)
        print(f"run is {run.status}, waiting for {run.waiting_for!r}")
        quote = await sf.get_event(run.run_id, "quote", type=Quote)
        print(f"quote event: {quote!r}")
        try:
            await sf.signal(run.run_id, "approve", {"by": None})
        except SerializationError as exc:
            print(f"refused: {str(exc).splitlines()[0]}")
        done = await sf.signal(run.run_id, "approve", Approval(by="ada"))
        result = await sf.result(done)
        print(f"run is {done.status}: {type(result).__name__} {result.model_dump()}")
        print(f"price ran {len(calls)} time(s)")


if __name__ == "__main__":
    anyio.run(main)
