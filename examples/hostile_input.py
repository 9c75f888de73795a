"""Hostile input: what no database can hold is refused at the door, once, with its path.

A step that returns a string with a NUL character (PostgreSQL cannot store
one) runs once; the run then ends with a ``SerializationError`` that names the
node and the JSON path, instead of failing the write and running the step
again elsewhere. Names past their documented limit (docs/errors.md, Limits)
are refused with an ``InvalidArgument`` before anything is written, the same
way on SQLite and PostgreSQL; so is a duration longer than starflow can add
to the clock (``limits.MAX_DURATION``, 100 years).

    python examples/hostile_input.py
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from datetime import timedelta

import anyio

from starflow import InvalidArgument, SerializationError, Starflow, step, workflow
from starflow.limits import MAX_NAME_LENGTH

calls: Counter[str] = Counter()


@step
async def read_card() -> dict[str, str]:
    calls["read_card"] += 1
    return {"holder": "Ada\x00Lovelace"}  # a NUL from a badly decoded C string


@workflow(name="hostile-example")
async def charge() -> dict[str, str]:
    return await read_card()


@workflow(name="hostile-example-args")
async def charge_with(items: list[object]) -> int:
    return len(items)


def _nested(depth: int) -> list[object]:
    value: list[object] = []
    for _ in range(depth - 1):
        value = [value]
    return value


async def main() -> None:
    db = os.environ.get("STARFLOW_DATABASE_URL") or (
        f"sqlite:///{os.path.join(tempfile.mkdtemp(), 'starflow.db')}")
    async with Starflow.open(db) as sf:
        run = await sf.run(charge)
        info = await sf.get_run(run.run_id)
        print(f"run {run.status}; read_card ran {calls['read_card']} time(s)")
        print("error:", (info.error or "").split(". It was not written")[0])

        try:
            await sf.run(charge_with, _nested(300))
        except SerializationError as exc:  # an argument: refused before the run exists
            print("refused:", str(exc).split(". It was not written")[0])
        try:
            await sf.signal(run.run_id, "e" * (MAX_NAME_LENGTH + 1))
        except InvalidArgument as exc:
            print("refused:", str(exc)[:70], "…")
        try:
            await sf.session_set("session\x00", "key", 1)
        except InvalidArgument as exc:
            print("refused:", exc)
        try:
            await sf.prune(older_than=timedelta(days=10**8))
        except InvalidArgument as exc:
            print("refused:", str(exc)[:90], "…")


if __name__ == "__main__":
    anyio.run(main)
