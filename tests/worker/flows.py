"""Workflows for the in-process worker tests, with gates a test opens."""

from __future__ import annotations

from datetime import timedelta

import anyio

import starflow
from starflow import sleep, step, wait_for, workflow

#: Idempotency keys of step executions, in order (reset by the ``reset`` fixture).
EXECUTED: list[str] = []
#: Gates a step waits on, by tag; created per test.
GATES: dict[str, anyio.Event] = {}
#: Set when a gated step starts, by tag.
STARTED: dict[str, anyio.Event] = {}


def reset() -> None:
    EXECUTED.clear()
    GATES.clear()
    STARTED.clear()


def gate(tag: str) -> anyio.Event:
    return GATES.setdefault(tag, anyio.Event())


def started(tag: str) -> anyio.Event:
    return STARTED.setdefault(tag, anyio.Event())


@step
async def note(tag: str) -> str:
    EXECUTED.append(starflow.context().idempotency_key)
    return tag


@step
async def gated(tag: str) -> str:
    EXECUTED.append(starflow.context().idempotency_key)
    started(tag).set()
    await gate(tag).wait()
    return tag


@workflow(name="wt-one-step")
async def one_step(tag: str) -> str:
    return await note(tag)


@workflow(name="wt-gated")
async def gated_flow(tag: str) -> str:
    """A step that waits on the test's gate, then two quick ones."""
    a = await gated(tag)
    b = await note(tag + "-after")
    c = await note(tag + "-last")
    return f"{a}/{b}/{c}"


@workflow(name="wt-signal")
async def signal_flow(tag: str) -> str:
    await note(tag)
    decision = await wait_for("go")
    return await note(f"{tag}-{decision['by']}")


@workflow(name="wt-sleep")
async def sleep_flow(tag: str) -> str:
    await note(tag)
    await sleep(timedelta(hours=1))
    return await note(tag + "-woke")


@workflow(name="wt-once", max_claim_attempts=1)
async def once_flow(tag: str) -> str:
    return await note(tag)


@workflow(name="wt-signal-gated")
async def signal_gated_flow(tag: str) -> str:
    """A quick step, a wait for ``go``, then a step that waits on the test's gate."""
    await note(tag)
    await wait_for("go")
    return await gated(tag)
