"""Type checkers see through @workflow and @step."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _mypy(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--config-file", "/dev/null",
         str(path)], capture_output=True, text=True, check=False)


@pytest.mark.slow
def test_decorated_functions_keep_their_signatures() -> None:
    """Correct use type-checks under --strict."""
    proc = _mypy(HERE / "check_signatures.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_wrong_arguments_are_type_errors() -> None:
    """A str where an int goes, and a wrong result type, are both reported."""
    proc = _mypy(HERE / "check_errors.py")
    assert proc.returncode == 1
    assert 'Argument 1 to "add" has incompatible type "str"' in proc.stdout
    assert 'Incompatible types in assignment (expression has type "int"' in proc.stdout
    assert proc.stdout.count('incompatible type "str"; expected "int"') == 1
    # run() is overloaded (a workflow function, or a name): mypy names the call.
    assert 'No overload variant of "run" of "RunOptions" matches argument types ' \
        '"Callable[[int, int], Awaitable[int]]", "str", "int"' in proc.stdout
