"""Run keys: start a run under your own business key, and reach it by that key.

A payment provider delivers its "order paid" webhook at least once, so the
handler may see one payment twice. Starting the order's run with
``sf.options(run_id=f"order-{order_id}")`` makes the start idempotent by the
order id itself: the second delivery returns the run the first one started,
and nothing runs twice. There is no id to store: every call that takes a run
id (``signal``, ``result``, ``get_run``, ``cancel``, the CLI, the web page)
takes the key too. The run's id is still a UUID, derived from the key (and
the workspace and environment), and ``RunInfo.run_key`` keeps the key.

    python examples/run_keys.py
"""

from __future__ import annotations

import os
import tempfile

import anyio

from starflow import InvalidArgument, RunHandle, RunIdConflict, Starflow, step, wait_for, workflow

CHARGED: list[str] = []


@step
async def capture_payment(order_id: str, cents: int) -> str:
    CHARGED.append(order_id)
    return f"rcpt-{order_id}-{cents}"


@workflow(name="fulfil-order")
async def fulfil(order_id: str, cents: int) -> dict[str, str]:
    receipt = await capture_payment(order_id, cents)
    tracking = await wait_for("shipped", type=str)
    return {"receipt": receipt, "tracking": tracking}


@workflow(name="refund-order")
async def refund(order_id: str) -> str:
    return f"refunded {order_id}"


async def on_order_paid(sf: Starflow, order_id: str, cents: int) -> RunHandle[dict[str, str]]:
    """The webhook handler: the order id is the run key, so a redelivery starts nothing."""
    return await sf.options(run_id=f"order-{order_id}").run(fulfil, order_id, cents)


async def main() -> None:
    url = os.environ.get("STARFLOW_DATABASE_URL") or \
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'keys.db')}"
    async with Starflow.open(url) as sf:
        first = await on_order_paid(sf, "A-1001", 1999)
        again = await on_order_paid(sf, "A-1001", 1999)  # the webhook, delivered again
        print(f"same run: {again.run_id == first.run_id}; payment captured "
              f"{len(CHARGED)} time(s)")

        run = await sf.get_run("order-A-1001")  # by key: no id to look up or store
        print(f"key {run.run_key!r} names run {run.id} ({run.status})")

        await sf.signal("order-A-1001", "shipped", "TRK-77")
        print("result:", await sf.result("order-A-1001"))

        # One key names one run: another workflow under it is refused...
        try:
            await sf.options(run_id="order-A-1001").run(refund, "A-1001")
        except RunIdConflict as exc:
            print(f"refused: the key names a {exc.existing_workflow!r} run, "
                  f"not {exc.requested_workflow!r}")
        # ...so put the workflow in the key when one order starts several.
        refunded = await sf.options(run_id="refund-A-1001").run(refund, "A-1001")
        print("refund:", refunded.result)

        # Keys are checked before anything is written.
        try:
            sf.options(run_id="order-A-1001 ")
        except InvalidArgument as exc:
            print("bad key:", str(exc).split(": ", 1)[1])


if __name__ == "__main__":
    anyio.run(main)
