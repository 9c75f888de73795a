"""Fixtures for the core runtime tests: an app over each durable adapter, and a spy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta

import pytest

from starflow import Starflow, StarflowConfig
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.delegating import DelegatingAdapter
from starflow.adapters.units import Unit


class SpyAdapter(DelegatingAdapter):
    """Records every unit written through it (the boundary calls, grouped by transaction)."""

    def __init__(self, inner: WorkflowStateAdapter) -> None:
        super().__init__(inner)
        self.units: list[list[str]] = []

    async def execute(self, unit: Unit) -> bool:
        held = await self.inner.execute(unit)
        if held:
            self.units.append(unit.methods)
        return held

    @property
    def calls(self) -> list[str]:
        return [m for u in self.units for m in u]


@pytest.fixture
async def spy(db_url: str, workspace_id: str) -> AsyncIterator[SpyAdapter]:
    yield SpyAdapter(adapter_from_url(db_url, workspace_id=workspace_id))


@pytest.fixture
async def sf(spy: SpyAdapter) -> AsyncIterator[Starflow]:
    """An open app over a spying adapter; maintenance off so only the test writes."""
    async with Starflow(spy, maintenance=False) as app:
        yield app


@pytest.fixture
async def slow_poll(spy: SpyAdapter) -> AsyncIterator[Starflow]:
    """An app whose readers would poll only once a minute: a reader that returns
    within seconds was woken by a commit, not by a poll."""
    config = StarflowConfig(poll_interval=timedelta(seconds=60))
    async with Starflow(spy, config=config, maintenance=False) as app:
        yield app
