"""The pytest plugin: the example test file runs, and suites not using it are unaffected."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

#: Each test runs pytest in a subprocess, as a user would.
pytestmark = pytest.mark.slow


def _pytest(args: list[str], cwd: Path, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=cwd, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, **(env or {})})


class TestPlugin:
    """Run pytest in a subprocess, as a user would."""

    def test_example_file_passes(self, repo_root: Path) -> None:
        """examples/test_order_workflow.py passes with the plugin's fixtures."""
        proc = _pytest(["examples/test_order_workflow.py"], repo_root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "7 passed" in proc.stdout

    def test_adapter_option(self, repo_root: Path) -> None:
        """--starflow-adapter=sqlite runs starflow_env on a SQLite file."""
        proc = _pytest(["examples/test_order_workflow.py", "--starflow-adapter=sqlite",
                        "-k", "approved"], repo_root)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 passed" in proc.stdout

    def test_suite_without_starflow_tests(self, tmp_path: Path) -> None:
        """A plain suite runs as before with the plugin auto-loaded."""
        (tmp_path / "test_plain.py").write_text("def test_one():\n    assert 1 + 1 == 2\n")
        proc = _pytest(["-W", "error", "test_plain.py"], tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "1 passed" in proc.stdout

    def test_explicit_loading_by_entry_point_name(self, tmp_path: Path) -> None:
        """With autoload off, ``-p starflow`` loads it (and its option)."""
        (tmp_path / "test_plain.py").write_text("def test_one():\n    assert True\n")
        proc = _pytest(["-p", "starflow", "--starflow-adapter=memory", "test_plain.py"],
                       tmp_path, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
        assert proc.returncode == 0, proc.stdout + proc.stderr


class TestWithoutAsyncMode:
    """Without anyio's auto mode (or its marker), one line says what to set."""

    def test_one_line_says_what_to_set(self, tmp_path: Path) -> None:
        """Each test using starflow_env fails at setup with the hint; nothing else breaks."""
        (tmp_path / "test_flow.py").write_text(
            "from starflow_testing import WorkflowEnvironment\n\n"
            "async def test_a(starflow_env: WorkflowEnvironment) -> None:\n"
            "    assert starflow_env is not None\n\n"
            "def test_plain() -> None:\n"
            "    assert True\n")
        proc = _pytest(["test_flow.py"], tmp_path)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "1 passed, 1 error" in proc.stdout, proc.stdout
        assert 'set anyio_mode = "auto" under [tool.pytest.ini_options]' in proc.stdout
        assert "coroutine" not in proc.stdout

    def test_the_marker_is_enough(self, tmp_path: Path) -> None:
        """@pytest.mark.anyio runs the test in strict mode."""
        (tmp_path / "test_flow.py").write_text(
            "import pytest\n"
            "from starflow_testing import WorkflowEnvironment\n\n"
            "@pytest.mark.anyio\n"
            "async def test_a(starflow_env: WorkflowEnvironment) -> None:\n"
            "    assert starflow_env is not None\n")
        proc = _pytest(["test_flow.py", "-p", "anyio"], tmp_path)
        assert proc.returncode == 0, proc.stdout + proc.stderr
