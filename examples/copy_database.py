"""Move a paused run to another database and finish it there.

A refund waits for a human approval on the "old" database; the wake token was
already handed to the approvals service. ``copy_database`` (what ``starflow
copy`` runs) moves everything the run needs, including the key that signed
the token; the run then resumes on the "new" database with the old token.

Both databases are SQLite files here so the example runs anywhere; with
PostgreSQL, pass ``postgresql://…`` as the target (or run
``starflow copy --from sqlite:///old.db --to postgresql://… --all-tenants``).

    python examples/copy_database.py
"""

from __future__ import annotations

import os
import tempfile
from datetime import timedelta

import anyio

import starflow
from starflow import Starflow, step, wait_for, workflow
from starflow.admin.copy import CopyOptions, copy_database

#: Stand-in for the external system holding the wake token.
CALLBACKS: dict[str, str] = {}


@step
async def ask_for_approval(order_id: str) -> None:
    CALLBACKS[order_id] = starflow.wake_token("approval", timeout=timedelta(days=14))


@workflow(name="copy_example_refund")
async def refund(order_id: str) -> str:
    await ask_for_approval(order_id)
    decision = await wait_for("approval", timeout=timedelta(days=14))
    return f"refund {order_id}: {decision}"


async def main() -> None:
    where = tempfile.mkdtemp()
    old, new = (f"sqlite:///{os.path.join(where, name)}" for name in ("old.db", "new.db"))
    async with Starflow.open(old) as sf:
        handle = await sf.run(refund, "o-42")
        print("on the old database the run is", handle.status)

    report = await copy_database(CopyOptions(source=old, target=new, all_tenants=True))
    print(f"copied {report.runs} run(s), {report.rows_written} rows, "
          f"{report.verified} verified, conflicts: {len(report.conflicts)}")
    again = await copy_database(CopyOptions(source=old, target=new, all_tenants=True))
    print(f"copied again: {again.rows_written} rows written (nothing was missing)")

    async with Starflow.open(new) as sf:
        done = await sf.resume(CALLBACKS["o-42"], "approved by alice")
        print("on the new database:", done.status, "->", done.result)


if __name__ == "__main__":
    anyio.run(main)
