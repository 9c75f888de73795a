"""Fixtures for the CLI tests: ``starflow.cli.main`` in-process over a seeded SQLite file."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import structlog

from starflow import logs

from .support import Cli, Seeded, seed


@pytest.fixture(autouse=True)
def _restore_logging(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """main() configures logging for the process: put it back after each test."""
    for name in ("STARFLOW_DATABASE_URL", "STARFLOW_URL", "STARFLOW_WORKSPACE", "STARFLOW_ENV",
                 "STARFLOW_TRACEBACK"):
        monkeypatch.delenv(name, raising=False)
    sf, root = logging.getLogger("starflow"), logging.getLogger()
    config = structlog.get_config()
    saved = (list(sf.handlers), sf.level, sf.propagate, list(root.handlers), root.level,
             dict(logs._installed))
    yield
    structlog.reset_defaults()
    structlog.configure(**config)
    sf.handlers[:], sf.level, sf.propagate = saved[0], saved[1], saved[2]
    root.handlers[:], root.level = saved[3], saved[4]
    logs._installed.clear()
    logs._installed.update(saved[5])


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(capsys)


@pytest.fixture
def seeded(tmp_path: Path) -> Seeded:
    return anyio.run(seed, f"sqlite:///{tmp_path / 'cli.db'}")
