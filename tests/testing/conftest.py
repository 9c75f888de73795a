"""Fixtures for the test harness's own tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import require_postgres


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def env_adapter(request: pytest.FixtureRequest) -> str:
    """Every adapter kind a WorkflowEnvironment builds itself."""
    kind = str(request.param)
    if kind == "postgres":
        require_postgres()
    return kind


@pytest.fixture
def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]
