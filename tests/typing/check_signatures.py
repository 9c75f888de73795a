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


async def use_options(sf: Starflow) -> None:
    handle = await sf.options(run_id="6f1c2b1e-8a51-4a3e-9a57-0f1e2d3c4b5a").run(typed, 1)
    queued = await sf.options(pool="gpu").start(typed, 2)
    tagged = await sf.options(attributes={"customer": "c-42", "tier": 2}).start(typed, 3)
    attributes: dict[str, str | int | bool] = await sf.get_attributes(tagged.run_id)
    _ = (handle.status, queued.status, attributes)
