"""Fixtures for the worker tests: a database per test, apps over a probing adapter."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import timedelta
from pathlib import Path

import pytest

from starflow import Clock, Starflow, StarflowConfig
from starflow.adapters import adapter_from_url
from starflow_testing import FakeClock

from . import flows
from .support import Probe, make_clock

#: The state model's numbers, on a fake clock.
CONFIG = StarflowConfig(lease_ttl=timedelta(seconds=30), heartbeat_interval=timedelta(seconds=10),
                        sweep_interval=timedelta(seconds=30), poll_interval=timedelta(seconds=1))

OpenApp = Callable[..., AbstractAsyncContextManager[tuple[Starflow, Probe]]]


@pytest.fixture(autouse=True)
def _reset_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database shared by every app of the test (SQLite file; PostgreSQL leg)."""
    if request.param == "postgres":
        from conftest import POSTGRES_URL, require_postgres  # the suite's root conftest

        require_postgres()
        return str(POSTGRES_URL)
    return f"sqlite:///{tmp_path / 'starflow.db'}"


@pytest.fixture
def clock() -> FakeClock:
    return make_clock()


@pytest.fixture
def open_app(url: str, workspace_id: str, clock: Clock) -> OpenApp:
    """``async with open_app() as (sf, probe)``: one more process-like app on the database."""

    @asynccontextmanager
    async def opener(config: StarflowConfig = CONFIG, runner_id: str | None = None
                     ) -> AsyncIterator[tuple[Starflow, Probe]]:
        probe = Probe(adapter_from_url(url, workspace_id=workspace_id))
        async with Starflow(probe, config=config, clock=clock, maintenance=False,
                            runner_id=runner_id) as sf:
            yield sf, probe

    return opener
