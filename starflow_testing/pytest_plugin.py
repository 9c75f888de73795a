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

A test that uses ``starflow_env`` where no async plugin will run it (anyio
in its default strict mode without the ``anyio`` marker) fails at setup
with one line saying what to set, instead of pytest's errors about an
unawaited coroutine.
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


#: What a test using ``starflow_env`` needs when no async plugin runs it.
ASYNC_MODE_HINT = (
    "starflow_env is an async fixture and no async test runner is set for this test: set "
    "anyio_mode = \"auto\" under [tool.pytest.ini_options] (or mark the test "
    "@pytest.mark.anyio)")


def _ini(config: pytest.Config, name: str) -> str | None:
    try:
        value = config.getini(name)
    except ValueError:  # that plugin is not installed: its option is unknown
        return None
    return str(value) if value else None


def _runs_async(item: pytest.Item) -> bool:
    """Whether anyio's (or pytest-asyncio's) plugin runs this test's async fixtures."""
    if item.get_closest_marker("anyio") is not None:
        return True
    if item.get_closest_marker("asyncio") is not None:
        return True
    return "auto" in (_ini(item.config, "anyio_mode"), _ini(item.config, "asyncio_mode"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if "starflow_env" in getattr(item, "fixturenames", ()) and not _runs_async(item):
        pytest.fail(ASYNC_MODE_HINT, pytrace=False)


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
