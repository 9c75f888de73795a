"""A user's module and the examples type-check under mypy --strict and pyright; misuse fails.

pyright runs when it is installed (the dev extra installs it from PyPI; it
needs Node.js), and is skipped otherwise.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
EXAMPLES = sorted(str(p) for p in (ROOT / "examples").glob("*.py"))


def _mypy(*paths: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file",
         "/dev/null", "--show-error-codes", "--no-error-summary", *paths],
        capture_output=True, text=True, check=False, cwd=ROOT)


def _pyright(*paths: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("pyright", path=str(Path(sys.executable).parent)) or shutil.which(
        "pyright")
    if exe is None:
        pytest.skip("pyright is not installed (pip install pyright)")
    return subprocess.run([exe, "--pythonpath", sys.executable, *paths],
                          capture_output=True, text=True, check=False, cwd=ROOT)


def _marked_lines(path: Path) -> set[int]:
    return {n for n, line in enumerate(path.read_text().splitlines(), 1) if "  # error:" in line}


@pytest.mark.slow
class TestMypy:
    """mypy --strict: the user's module and every example are clean."""

    def test_user_module_and_examples(self) -> None:
        """No error at all, with assert_type pinning inferred types."""
        proc = _mypy(str(HERE / "user_app.py"), *EXAMPLES)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def test_misuse_is_reported_where_marked(self) -> None:
        """Each line with an error comment is reported, and no other line."""
        path = HERE / "user_errors.py"
        proc = _mypy(str(path))
        lines = {int(m) for m in re.findall(r"user_errors\.py:(\d+): error", proc.stdout)}
        assert lines == _marked_lines(path), proc.stdout


@pytest.mark.slow
class TestPyright:
    """pyright: the user's module (strict) and the examples are clean."""

    def test_user_module_and_examples(self) -> None:
        """No error at all."""
        proc = _pyright(str(HERE / "user_app.py"), *EXAMPLES)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    def test_misuse_is_reported_where_marked(self) -> None:
        """Each line with an error comment is reported, and no other line."""
        path = HERE / "user_errors.py"
        proc = _pyright(str(path))
        lines = {int(m) for m in re.findall(r"user_errors\.py:(\d+):\d+ - error", proc.stdout)}
        assert lines == _marked_lines(path), proc.stdout
