"""pytest plugin: the ``starflow_env`` and ``fake_clock`` fixtures.

Registered through the ``pytest11`` entry point, so it loads wherever
starflow is installed. It adds one command-line option and two fixtures,
nothing autouse, and imports the runtime only when a fixture is used: a test
suite that does not use it is not affected.

``starflow_env`` is async: run your tests with anyio's pytest plugin
(``anyio_mode = "auto"`` or ``@pytest.mark.anyio``). Choose the database with
``--starflow-adapter=memory|sqlite|postgres`` (default ``memory``) or per test
through indirect parametrization::

    @pytest.mark.parametrize("starflow_env", ["memory", "sqlite"], indirect=True)
    async def test_order(starflow_env: WorkflowEnvironment) -> None: ...
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .clock import FakeClock
    from .environment import WorkflowEnvironment

ADAPTERS = ("memory", "sqlite", "postgres")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("starflow", "starflow workflow testing")
    group.addoption(
        "--starflow-adapter",
        action="store",
        default=None,
        help="database for the starflow_env fixture: memory (default), sqlite, postgres "
             "or a URL",
    )


def _adapter_kind(request: pytest.FixtureRequest) -> str:
    param = getattr(request, "param", None)
    if param is not None:
        return str(param)
    option = request.config.getoption("--starflow-adapter", default=None)
    return str(option) if option else "memory"


@pytest.fixture
def fake_clock() -> FakeClock:
    """A fresh :class:`~starflow_testing.FakeClock` at 2030-01-01 UTC."""
    from .clock import FakeClock

    return FakeClock()


@pytest.fixture
async def starflow_env(request: pytest.FixtureRequest) -> AsyncIterator[WorkflowEnvironment]:
    """An open :class:`~starflow_testing.WorkflowEnvironment` with time skipping.

    Parametrize it indirectly with an adapter kind (``"memory"``, ``"sqlite"``,
    ``"postgres"``) or a URL, or pass ``--starflow-adapter``.
    """
    from .environment import WorkflowEnvironment

    async with WorkflowEnvironment(adapter=_adapter_kind(request)) as env:
        yield env
