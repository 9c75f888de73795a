"""pytest's own timings stay real while a WorkflowEnvironment fakes time (#31).

The environment patches ``time.time()`` / ``perf_counter()`` through freezegun.
pytest reads the same functions to time each phase of a test, so without
care ``--durations`` showed decades for a setup that opened an environment
(it started on real time and ended on 2030's fake time) and negative times
for its teardown.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

#: Runs pytest in a subprocess.
pytestmark = pytest.mark.slow

USER_TESTS = '''
from datetime import timedelta

import pytest

from starflow_testing import WorkflowEnvironment


@pytest.fixture
async def env():
    async with WorkflowEnvironment() as env:  # opened in setup, closed in teardown
        yield env


async def test_env_in_fixture(env):
    await env.advance(timedelta(minutes=2))


async def test_env_in_body():
    async with WorkflowEnvironment() as env:
        await env.advance(timedelta(minutes=2))


async def test_starflow_env_fixture(starflow_env):
    await starflow_env.advance(timedelta(minutes=2))
'''

#: A line of ``--durations``: ``0.01s setup    test_x.py::test_a[asyncio]``.
DURATION = re.compile(r"^(-?[\d.]+)s (setup|call|teardown)\s+(\S+)$", re.MULTILINE)


def _run_pytest(tmp_path: Path) -> str:
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\nanyio_mode = auto\naddopts = -p anyio\n")
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--durations=0", "--durations-min=-1e12", "test_user.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "PYTEST_ADDOPTS": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


class TestDurations:
    """A suite using the fake clock gets the durations of a suite that does not."""

    def test_every_phase_is_timed_in_real_seconds(self, tmp_path: Path) -> None:
        """Each setup, call and teardown takes between 0 and 60 real seconds."""
        out = _run_pytest(tmp_path)
        durations = DURATION.findall(out)
        # 3 tests x (setup, call, teardown); negative ones are listed too (min -1e12 s).
        assert len(durations) == 9, out
        assert "hidden" not in out, out
        for seconds, phase, test in durations:
            assert 0.0 <= float(seconds) < 60.0, f"{phase} of {test}: {seconds}s\n{out}"
