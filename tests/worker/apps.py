"""Workflows the worker tests run, in this process and in ``starflow worker`` processes.

Worker processes import it as ``apps`` (``--app apps:make_app``); the tests
import it as ``worker.apps``. Each step appends its idempotency key to the
side-effect log (``$STARFLOW_TEST_SIDE_LOG``) with an fsync before it works,
so the log survives a SIGKILL and shows every execution.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import anyio

import starflow
from starflow import Starflow, StarflowConfig, step, workflow


def _append(line: str) -> None:
    path = Path(os.environ.get("STARFLOW_TEST_SIDE_LOG", "side-effects.log"))
    with path.open("a") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


async def record(tag: str = "") -> None:
    """Append this step execution to the side-effect log."""
    key = starflow.context().idempotency_key + tag
    await anyio.to_thread.run_sync(_append, f"{key}\t{time.time():.6f}\t{os.getpid()}")


@step
async def chunk(i: int, delay: float) -> int:
    await record()
    await anyio.sleep(delay)
    return i


@workflow(name="worker-chunks", max_claim_attempts=100)
async def chunks(n: int, delay: float) -> int:
    """``n`` steps of ``delay`` seconds each; returns ``sum(range(n))``."""
    total = 0
    for i in range(n):
        total += await chunk(i, delay)
    return total


@step
async def long_step(seconds: float) -> str:
    await record()
    await anyio.sleep(seconds)
    await record(":end")
    return "done"


@workflow(name="worker-long")
async def long_running(seconds: float) -> str:
    """A quick step, a long one, a quick one."""
    await chunk(0, 0.0)
    out = await long_step(seconds)
    await chunk(1, 0.0)
    return out


@workflow(name="worker-child-leaf", max_claim_attempts=100)
async def child_leaf(i: int, delay: float) -> int:
    """A child run: two steps; returns ``i``."""
    await chunk(i, delay)
    return await chunk(i, delay)


@workflow(name="worker-child-parent", max_claim_attempts=100)
async def child_parent(n: int, delay: float) -> int:
    """Starts ``n`` children and gathers them; returns ``sum(range(n))``."""
    import asyncio

    handles = [await starflow.start_child(child_leaf, i, delay) for i in range(n)]
    return sum(await asyncio.gather(*(h.result() for h in handles)))


def make_app() -> Starflow:
    """The app factory ``starflow worker --app apps:make_app`` calls."""
    env = os.environ
    config = StarflowConfig(
        lease_ttl=timedelta(seconds=float(env.get("SF_LEASE", "30"))),
        heartbeat_interval=timedelta(seconds=float(env.get("SF_HEARTBEAT", "10"))),
        sweep_interval=timedelta(seconds=float(env.get("SF_SWEEP", "30"))),
        poll_interval=timedelta(seconds=float(env.get("SF_POLL", "1"))),
    )
    return Starflow.open(env.get("STARFLOW_DATABASE_URL"), config=config)
