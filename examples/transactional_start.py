"""Start a workflow in your own database transaction: the order and its run commit together.

``sf.start(wf, *args, connection=conn)`` writes the run on your connection,
inside the transaction that writes your business row. Commit: both exist, and
a worker runs the workflow. Roll back (the card was declined, the request
failed): neither exists, so there is never an order without its fulfilment run,
nor a run for an order that was never placed.

SQLite by default (an aiosqlite connection to the app's file); set
``STARFLOW_DATABASE_URL=postgresql://…`` to run it on PostgreSQL (an asyncpg
connection).

    python examples/transactional_start.py
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import anyio

from starflow import Starflow, step, workflow

URL = os.environ.get("STARFLOW_DATABASE_URL", "sqlite:///orders.db")
POSTGRES = URL.startswith(("postgresql://", "postgres://"))


@step
async def ship(order_id: str) -> str:
    return f"parcel for {order_id}"


@workflow(name="fulfil-order")
async def fulfil(order_id: str) -> str:
    return await ship(order_id)


class Shop:
    """The application's own tables, on its own connection."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    @classmethod
    async def connect(cls) -> Shop:
        if POSTGRES:
            import asyncpg  # type: ignore[import-untyped]

            conn = await asyncpg.connect(URL)
            await conn.execute("CREATE TABLE IF NOT EXISTS shop_orders "
                               "(id uuid PRIMARY KEY, ref text NOT NULL, cents int NOT NULL)")
        else:
            import aiosqlite

            conn = await aiosqlite.connect(URL.removeprefix("sqlite:///"))
            await conn.execute("CREATE TABLE IF NOT EXISTS shop_orders "
                               "(id TEXT PRIMARY KEY, ref TEXT NOT NULL, cents INTEGER NOT NULL)")
            await conn.commit()
        return cls(conn)

    async def place(self, sf: Starflow, order_id: str, ref: str, cents: int) -> None:
        """Insert the order and start its fulfilment in one transaction.

        The order's id is its run's id too: a retried request that gets this far
        again finds the run instead of starting a second one.
        """
        start = sf.options(run_id=order_id, connection=self.conn)
        if POSTGRES:
            async with self.conn.transaction():
                await self.conn.execute("INSERT INTO shop_orders VALUES ($1, $2, $3)",
                                        order_id, ref, cents)
                await start.start(fulfil, ref)
                check(cents)  # raising here rolls back the order and the run
            return
        await self.conn.execute("BEGIN")
        try:
            await self.conn.execute("INSERT INTO shop_orders VALUES (?, ?, ?)",
                                    (order_id, ref, cents))
            await start.start(fulfil, ref)
            check(cents)
        except BaseException:
            await self.conn.rollback()
            raise
        await self.conn.commit()

    async def orders(self) -> list[str]:
        sql = "SELECT ref FROM shop_orders ORDER BY ref"
        if POSTGRES:
            return [r[0] for r in await self.conn.fetch(sql)]
        return [r[0] for r in await self.conn.execute_fetchall(sql)]

    async def close(self) -> None:
        if POSTGRES:
            await self.conn.execute("DROP TABLE shop_orders")
        await self.conn.close()


class CardDeclined(Exception):
    pass


def check(cents: int) -> None:
    if cents > 100_000:
        raise CardDeclined(f"{cents} cents is over the card's limit")


async def main() -> None:
    async with Starflow.open(URL) as sf:
        shop = await Shop.connect()
        try:
            ok, declined = str(uuid.uuid4()), str(uuid.uuid4())
            await shop.place(sf, ok, "o-1", 1999)
            print("o-1 placed; its run is", (await sf.get_run(ok)).status)
            try:
                await shop.place(sf, declined, "o-2", 250_000)
            except CardDeclined as exc:
                print("o-2 declined:", exc)
            print("o-2 has a run:", any(r.id == declined for r in await sf.list_runs()))
            print("orders in the table:", await shop.orders())
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                print("o-1 fulfilled:", await sf.result(ok, timeout=30))
                tg.cancel_scope.cancel()
        finally:
            await shop.close()


if __name__ == "__main__":
    anyio.run(main)
