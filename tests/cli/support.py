"""Helpers for the CLI tests: ``starflow.cli.main`` in-process, a seeded SQLite file."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from starflow import Starflow
from starflow.cli import main

from . import cli_app

HERE = Path(__file__).parent
#: ``--app`` for in-process runs: the module object the tests imported, not a second copy.
APP = cli_app.__name__


@dataclass
class Result:
    code: int
    out: str
    err: str


@dataclass
class Seeded:
    """Runs in a SQLite file: three paused on ``approval``, one finished."""

    url: str
    path: Path
    paused: list[str]
    tokens: dict[str, str]
    done: str


class Cli:
    """Runs ``starflow ARGS`` in this process and captures what it printed."""

    def __init__(self, capsys: pytest.CaptureFixture[str]) -> None:
        self.capsys = capsys

    def __call__(self, *args: str) -> Result:
        self.capsys.readouterr()
        code = main(list(args))
        captured = self.capsys.readouterr()
        return Result(code, captured.out, captured.err)

    def fails(self, *args: str, code: int = 1) -> str:
        """Run, expect exit ``code`` and one stderr line (no traceback); return the line."""
        result = self(*args)
        assert result.code == code, result
        lines = result.err.strip().splitlines()
        assert len(lines) == 1, result.err
        assert "Traceback" not in result.err
        return lines[0]


async def seed(url: str) -> Seeded:
    async with Starflow.open(url, maintenance=False) as sf:
        paused, tokens = [], {}
        for i in range(3):
            handle = await sf.run(cli_app.cli_order, f"o-{i}")
            assert handle.status == "paused" and handle.wake_token
            paused.append(handle.run_id)
            tokens[handle.run_id] = handle.wake_token
        done = (await sf.run(cli_app.cli_quick, 21)).run_id
    path = Path(url.removeprefix("sqlite:///"))
    return Seeded(url=url, path=path, paused=paused, tokens=tokens, done=done)
