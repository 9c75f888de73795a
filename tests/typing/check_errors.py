"""Must FAIL mypy: wrong argument types to decorated functions are caught."""

from __future__ import annotations

from starflow import Starflow, step


@step
async def add(a: int, b: int) -> int:
    return a + b


async def misuse() -> None:
    await add("one", 2)
    result: str = await add(1, 2)
    _ = result


async def misuse_options(sf: Starflow) -> None:
    await sf.options(run_id="x").run(add, "one", 2)
