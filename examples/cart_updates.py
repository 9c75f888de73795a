"""Updates: ask a running workflow something and get its answer.

The caller sends ``sf.update(run_id, "add_item", item)``; the workflow
receives it with ``starflow.receive("add_item")`` and answers with
``req.reply(...)`` or ``req.reject(reason)``. A retry with the same
``update_id`` gets the same answer and never adds the item twice.

    python examples/cart_updates.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

import starflow
from starflow import Starflow, UpdateRejected, workflow


@workflow(name="cart")
async def cart() -> list[str]:
    items: list[str] = []
    while True:
        req = await starflow.receive("add_item")
        if req.payload == "checkout":
            await req.reply(f"{len(items)} item(s) ordered")
            return items
        if req.payload in items:
            await req.reject(f"{req.payload} is already in the cart")
            continue
        items.append(req.payload)
        await req.reply(len(items))


async def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'cart.db')}"
    async with Starflow.open(url) as sf:
        run_id = (await sf.run(cart)).run_id
        print("items after adding a book:", await sf.update(run_id, "add_item", "book",
                                                            update_id="req-1"))
        print("the same request retried:", await sf.update(run_id, "add_item", "book",
                                                           update_id="req-1"))
        try:
            await sf.update(run_id, "add_item", "book")  # a new request for the same item
        except UpdateRejected as exc:
            print("rejected:", exc.reason)
        print("items after adding a pen:", await sf.update(run_id, "add_item", "pen"))
        print("checkout:", await sf.update(run_id, "add_item", "checkout"))
        print("result:", await sf.result(run_id))


if __name__ == "__main__":
    anyio.run(main)
