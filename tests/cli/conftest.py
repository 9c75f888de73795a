"""Fixtures for the CLI tests: ``starflow.cli.main`` in-process over a seeded SQLite file."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import structlog

from starflow.logs import get_level, set_level

from .support import Cli, Seeded, seed


@pytest.fixture(autouse=True)
def _restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """main() configures structlog for the process: put it back after each test."""
    monkeypatch.delenv("STARFLOW_DATABASE_URL", raising=False)
    monkeypatch.delenv("STARFLOW_TRACEBACK", raising=False)
    config, level = structlog.get_config(), get_level()
    yield
    structlog.reset_defaults()
    structlog.configure(**config)
    set_level(level)


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys)


@pytest.fixture
def seeded(tmp_path: Path) -> Seeded:
    return anyio.run(seed, f"sqlite:///{tmp_path / 'cli.db'}")
