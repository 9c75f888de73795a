"""Must FAIL the type checkers, on exactly the lines with an error comment."""

from __future__ import annotations

from starflow import Starflow, call, start_child, step, workflow
from starflow import sync as sfsync


@workflow(name="typed-errors")
async def wf(x: int) -> str:
    return str(x)


async def misuse(sf: Starflow) -> None:
    await sf.run(wf, "one")  # error: a str where the workflow takes an int
    await sf.start(wf)  # error: the argument is missing
    handle = await sf.run(wf, 1)
    number: int = await sf.result(handle)  # error: the result is a str
    await sf.options(pool="gpu").start(wf, 1, 2)  # error: too many arguments
    _ = number


@workflow(name="typed-child-errors")
async def parent() -> None:
    await start_child(wf, "one")  # error: a str where the child workflow takes an int
    await start_child(wf)  # error: the child's argument is missing
    await start_child(wf, 1, 2)  # error: too many arguments for the child
    await start_child(wf, "one", pool="gpu")  # error: a str, with an option
    await start_child(wf, 1, detached="yes")  # error: detached is a bool
    await start_child(wf, 1, timeout=600)  # error: timeout is a timedelta
    handle = await start_child(wf, 1)
    number: int = await handle.result()  # error: the child's result is a str
    _ = number


def blocking(sf: sfsync.Starflow) -> None:
    sf.run(wf, "one")  # error: a str where the workflow takes an int
    value: int = sf.result(sf.run(wf, 1))  # error: the result is a str
    _ = value


@step
def sync_fee(cents: int) -> int:
    return cents // 100


@step(name="typed-sync-errors")
def sync_named(cents: int) -> int:
    return cents


@workflow(name="typed-sync-step-errors")
async def uses_sync_steps() -> None:
    await sync_fee("one")  # error: a str where the sync step takes an int
    label: str = await sync_named(1)  # error: the sync step returns an int
    total: int = sync_fee(1)  # error: a sync step's call is awaitable, not its result
    _ = (label, total)


@workflow(name="typed-sync-workflow-errors")
def sync_workflow(x: int) -> str:
    call(sync_fee, "one")  # error: a str where the step takes an int
    label: str = call(sync_fee, 1)  # error: the step returns an int
    call(wf, 1, 2)  # error: too many arguments for the child workflow
    call(sync_fee, 1)  # fine
    return label


async def runs_sync_workflow(sf: Starflow) -> None:
    await sf.run(sync_workflow, "one")  # error: a str where the plain def workflow takes an int
    count: int = await sf.result(await sf.run(sync_workflow, 1))  # error: it returns a str
    _ = count
