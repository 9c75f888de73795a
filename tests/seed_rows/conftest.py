"""Fixtures for the seed's planned rows: an app over each durable adapter on a fake clock."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from starflow import Starflow, StarflowConfig
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow_testing import FakeClock

KEYS = {"k1": "a-test-secret-of-enough-length"}


def unique(prefix: str) -> str:
    """A workflow name no other test registers (the registry is process-wide)."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def eventually(check: Callable[[], Any], adapter: WorkflowStateAdapter,
                     rounds: int = 2000) -> None:
    """Let other tasks (and the database thread) work until ``await check()`` is true."""
    for _ in range(rounds):
        if await check():
            return
        await anyio.lowlevel.checkpoint()
        await anyio.to_thread.run_sync(lambda: None)  # lets the database thread run
    raise AssertionError("condition never became true")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(datetime(2030, 1, 1, tzinfo=UTC))


@pytest.fixture
def config() -> StarflowConfig:
    return StarflowConfig(wake_keys=KEYS, wake_token_ttl=timedelta(hours=1))


@pytest.fixture
async def sf(db_url: str, workspace_id: str, clock: FakeClock, config: StarflowConfig
             ) -> AsyncIterator[Starflow]:
    """An open app on a fake clock; maintenance off so only the test writes."""
    adapter = adapter_from_url(db_url, workspace_id=workspace_id)
    async with Starflow(adapter, clock=clock, config=config, maintenance=False) as app:
        yield app
