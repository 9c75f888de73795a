"""The representative workflows behind ``tests/histories/*.json`` and how each is driven.

Each scenario runs its workflow(s) in a :class:`~starflow_testing.WorkflowEnvironment`
on the memory adapter and fake time, and returns the ids of the runs whose
histories it records (a parent and its child, the two links of a
``continue_as_new`` chain). ``python -m tests.histories.record`` writes their
exports; ``tests/histories/test_golden.py`` replays the files and runs the
scenarios again to compare. This module is also the ``--app`` of
``starflow replay`` in that test: importing it registers the workflows.

Changing a workflow here changes its history: re-record deliberately (README.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

import starflow
from starflow import RetryPolicy, RunCancelled, UpdateRejected, step, workflow
from starflow_testing import WorkflowEnvironment, export_run

__all__ = ["SCENARIOS", "WORKFLOWS", "record"]

#: Attempts of :func:`flaky_charge` so far; reset by each drive of its scenario.
_attempts: dict[str, int] = {}


# -- steps with retries and a failure ----------------------------------------------

@step(retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=2)))
async def flaky_charge(amount: int) -> str:
    _attempts["charge"] = _attempts.get("charge", 0) + 1
    if _attempts["charge"] < 3:
        raise ConnectionError(f"gateway timeout (attempt {_attempts['charge']})")
    return f"ch-{amount}"


@step(name="golden_ship", retry=RetryPolicy(max_attempts=2))
async def ship(charge_id: str) -> str:
    raise ValueError(f"no courier for {charge_id}")


@workflow(name="golden_retries")
async def retries(amount: int) -> str:
    charge_id = await flaky_charge(amount)
    return await ship(charge_id)


# -- wait_for + signal, sleep, wait_for_any ------------------------------------------

@step
async def approve(order: str, who: str) -> str:
    return f"{order} approved by {who}"


@workflow(name="golden_signal")
async def signal_flow(order: str) -> str:
    decision = await starflow.wait_for("approval", timeout=timedelta(days=1))
    return await approve(order, decision["by"])


@workflow(name="golden_sleep")
async def sleep_flow(reminders: int) -> list[str]:
    sent = []
    for i in range(reminders):
        await starflow.sleep(timedelta(hours=6))
        sent.append(f"reminder {i + 1} at {starflow.now().isoformat()}")
    return sent


@workflow(name="golden_wait_any")
async def wait_any_flow() -> dict[str, Any]:
    event, payload = await starflow.wait_for_any("approve", "reject",
                                                 timeout=timedelta(hours=1))
    return {"event": event, "payload": payload}


# -- a child workflow -------------------------------------------------------------------

@step
async def resize(image: str, width: int) -> str:
    return f"{image}@{width}"


@workflow(name="golden_child")
async def child_flow(image: str) -> str:
    return await resize(image, 640)


@workflow(name="golden_parent")
async def parent_flow(image: str) -> str:
    child = await starflow.start_child(child_flow, image)
    return f"done: {await child.result()}"


# -- events and streams -----------------------------------------------------------------

@step
async def summarize(chunk: str) -> str:
    return chunk.upper()


@workflow(name="golden_streams")
async def streams_flow(chunks: list[str]) -> int:
    starflow.set_event("status", {"phase": "summarizing"})
    for chunk in chunks:
        starflow.write_stream("lines", await summarize(chunk))
    starflow.set_event("status", {"phase": "review"})
    review = await starflow.wait_for("review")
    starflow.write_stream("lines", f"review: {review}")
    starflow.close_stream("lines")
    starflow.set_event("status", {"phase": "done"})
    return len(chunks)


# -- continue_as_new ----------------------------------------------------------------

@step
async def tick(n: int) -> int:
    return n * 10


@workflow(name="golden_countdown")
async def countdown(n: int, total: int = 0) -> int:
    total += await tick(n)
    if n > 1:
        starflow.continue_as_new(n - 1, total=total)
    return total


# -- updates ------------------------------------------------------------------------

@workflow(name="golden_cart")
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


# -- patched() ------------------------------------------------------------------------

@step
async def base_price(order: str) -> int:
    return 100


@step
async def service_fee(price: int) -> int:
    return price // 10


@workflow(name="golden_patched")
async def patched_flow(order: str) -> int:
    price = await base_price(order)
    if starflow.patched("service-fee"):
        price += await service_fee(price)
    return price


# -- cancel with cleanup ----------------------------------------------------------------

@step
async def reserve_seat(show: str) -> str:
    return f"{show}/A12"


@step
async def release_seat(seat: str) -> None:
    return None


@workflow(name="golden_ticket")
async def ticket(show: str) -> str:
    seat = await reserve_seat(show)
    try:
        await starflow.wait_for("paid")
    except RunCancelled:
        await release_seat(seat)
        raise
    return seat


# -- drivers --------------------------------------------------------------------------

Driver = Callable[[WorkflowEnvironment], Awaitable[list[str]]]


async def _retries(env: WorkflowEnvironment) -> list[str]:
    _attempts.clear()
    handle = await env.start(retries, 250)
    await env.run_until_idle()
    run = await env.get_run(handle.run_id)
    assert run.status == "error", run
    return [handle.run_id]


async def _signal(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(signal_flow, "o-1")
    await env.run_until_idle()
    await env.advance(timedelta(minutes=30))
    await env.signal(handle.run_id, "approval", {"by": "ada"})
    assert await env.result(handle.run_id) == "o-1 approved by ada"
    return [handle.run_id]


async def _sleep(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(sleep_flow, 2)
    assert len(await env.result(handle.run_id)) == 2
    return [handle.run_id]


async def _wait_any(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(wait_any_flow)
    await env.run_until_idle()
    await env.signal(handle.run_id, "reject", {"reason": "budget"})
    assert (await env.result(handle.run_id))["event"] == "reject"
    return [handle.run_id]


async def _child(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(parent_flow, "cat.png")
    assert await env.result(handle.run_id) == "done: cat.png@640"
    [child] = await env.list_runs(template_id="golden_child")
    return [handle.run_id, child.id]


async def _streams(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(streams_flow, ["durable", "streams"])
    await env.run_until_idle()
    await env.signal(handle.run_id, "review", "looks good")
    assert await env.result(handle.run_id) == 2
    return [handle.run_id]


async def _continue_as_new(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(countdown, 2)
    assert await env.result(handle.run_id) == 30
    first = await env.get_run(handle.run_id)
    assert first.continued_as is not None
    return [handle.run_id, first.continued_as]


async def _update(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(cart)
    await env.run_until_idle()
    assert await env.app.update(handle.run_id, "add_item", "book", update_id="u-1") == 1
    try:
        await env.app.update(handle.run_id, "add_item", "book", update_id="u-2")
    except UpdateRejected:
        pass
    else:  # pragma: no cover - the scenario's point
        raise AssertionError("a second book was not rejected")
    assert await env.app.update(handle.run_id, "add_item", "checkout",
                                update_id="u-3") == "1 item(s) ordered"
    assert await env.result(handle.run_id) == ["book"]
    return [handle.run_id]


async def _patched(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(patched_flow, "o-7")
    assert await env.result(handle.run_id) == 110
    return [handle.run_id]


async def _cancel(env: WorkflowEnvironment) -> list[str]:
    handle = await env.start(ticket, "hamlet")
    await env.run_until_idle()
    await env.cancel(handle.run_id)  # queues the run: its cleanup runs on a worker
    await env.run_until_idle()
    ended = await env.get_run(handle.run_id)
    assert ended.status == "cancelled", ended
    return [handle.run_id]


#: Every workflow of the scenarios (what the replayer replays the files with).
WORKFLOWS = [retries, signal_flow, sleep_flow, wait_any_flow, child_flow, parent_flow,
             streams_flow, countdown, cart, patched_flow, ticket]

#: Scenario name (the JSON file's stem) -> the driver that produces its runs.
SCENARIOS: dict[str, Driver] = {
    "retries_and_failure": _retries,
    "wait_for_signal": _signal,
    "sleep": _sleep,
    "wait_for_any": _wait_any,
    "child_workflow": _child,
    "events_and_streams": _streams,
    "continue_as_new": _continue_as_new,
    "update": _update,
    "patched": _patched,
    "cancel_with_cleanup": _cancel,
}


async def record(name: str) -> list[dict[str, Any]]:
    """Run scenario ``name`` on a fresh memory environment; its runs' exports, in order."""
    async with WorkflowEnvironment("memory") as env:
        run_ids = await SCENARIOS[name](env)
        return [await export_run(env.adapter, run_id) for run_id in run_ids]
