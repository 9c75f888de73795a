"""Checked by mypy in tests/typing/test_typing.py: decorators keep signatures."""

from __future__ import annotations

from starflow import Starflow, step, workflow


@step
async def add(a: int, b: int) -> int:
    return a + b


@workflow(name="typed", version=1)
async def typed(x: int) -> str:
    total: int = await add(x, 1)
    return str(total)


async def use(sf: Starflow) -> None:
    handle = await sf.run(typed, 1)
    run_id: str = handle.run_id
    value: str = await typed(2)
    _ = (run_id, value)
