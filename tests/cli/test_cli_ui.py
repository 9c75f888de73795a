"""``starflow ui``: arguments, the token rule, and a real server process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from starflow.cli.ui import is_loopback

from .support import Cli, Seeded

ROOT = Path(__file__).resolve().parents[2]


class TestArguments:
    """Bad arguments are one line and exit 2, before anything is served."""

    def test_loopback(self) -> None:
        for host in ("127.0.0.1", "localhost", "::1", "[::1]", "127.0.0.2"):
            assert is_loopback(host), host
        for host in ("0.0.0.0", "::", "192.168.1.4", "example.com"):
            assert not is_loopback(host), host

    def test_bad_port(self, cli: Cli, seeded: Seeded) -> None:
        err = cli.fails("ui", "--db", seeded.url, "--port", "70000", code=2)
        assert "--port" in err and "65535" in err

    def test_short_token(self, cli: Cli, seeded: Seeded) -> None:
        err = cli.fails("ui", "--db", seeded.url, "--token", "short", code=2)
        assert "at least 16 characters" in err

    def test_missing_database(self, cli: Cli, tmp_path: Path) -> None:
        err = cli.fails("ui", "--db", f"sqlite:///{tmp_path / 'none.db'}")
        assert "no SQLite database" in err


def _start(*args: str) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STARFLOW_UI_TOKEN", None)
    proc = subprocess.Popen([sys.executable, "-m", "starflow", "ui", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=ROOT)
    assert proc.stdout is not None
    line = proc.stdout.readline()  # blocks until the server printed its address
    if not line:
        _, err = proc.communicate(timeout=5)
        raise AssertionError(f"starflow ui exited: {err}")
    return proc, line


def _stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=10)  # also closes the pipes
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert "Traceback" not in err, err
    return proc.returncode


@pytest.mark.slow
class TestServer:
    """The command serves until interrupted; beyond loopback only with a token."""

    def test_loopback_without_token(self, seeded: Seeded) -> None:
        proc, line = _start("--db", seeded.url)
        try:
            match = re.search(r"open (http://127\.0\.0\.1:(\d+)/)$", line.strip())
            assert match, line
            with httpx.Client(base_url=match.group(1), trust_env=False) as client:
                page = client.get("/runs")
                assert page.status_code == 200
                for run_id in seeded.paused:
                    assert run_id[:8] in page.text
                # a rebinding page arriving under another host name is turned away
                assert client.get("/runs", headers={"Host": "evil.example"}).status_code == 400
                # a live view is open while the server is stopped: it still stops promptly
                with client.stream("GET", f"/runs/{seeded.paused[0]}/stream") as live:
                    assert live.headers["content-type"].startswith("text/event-stream")
                    assert next(live.iter_text()).startswith("retry:")
                    began = time.monotonic()
                    assert _stop(proc) == 0
                    assert time.monotonic() - began < 8
        finally:
            if proc.poll() is None:
                assert _stop(proc) == 0

    def test_all_workspaces(self, seeded: Seeded) -> None:
        proc, line = _start("--db", seeded.url, "--all-workspaces")
        try:
            assert "for every workspace and env" in line, line
            match = re.search(r"open (http://127\.0\.0\.1:(\d+)/)$", line.strip())
            assert match, line
            with httpx.Client(base_url=match.group(1), trust_env=False) as client:
                home = client.get("/")
                assert home.status_code == 303
                assert home.headers["location"].endswith("/w/celestial/prod/runs")
                page = client.get("/w/celestial/prod/runs")
                assert page.status_code == 200 and seeded.paused[0][:8] in page.text
                other = client.get("/w/elsewhere/dev/runs")  # nothing there: not opened
                assert other.status_code == 404 and "has no runs" in other.text
        finally:
            assert _stop(proc) == 0

    def test_all_workspaces_needs_a_url(self, cli: Cli, seeded: Seeded,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("STARFLOW_DATABASE_URL", raising=False)
        err = cli.fails("ui", "--app", "tests.cli.cli_app", "--all-workspaces", code=2)
        assert "--all-workspaces needs --db URL" in err

    def test_any_interface_needs_the_printed_token(self, seeded: Seeded) -> None:
        proc, line = _start("--db", seeded.url, "--host", "0.0.0.0")
        try:
            match = re.search(r":(\d+)/\?token=(\S+)$", line.strip())
            assert match, line
            port, token = match.groups()
            base = f"http://127.0.0.1:{port}"
            with httpx.Client(base_url=base, trust_env=False) as client:
                assert client.get("/runs").status_code == 401
                assert client.get(f"/runs/{seeded.paused[0]}").status_code == 401
                entered = client.get(f"/?token={token}")
                assert entered.status_code == 303 and client.cookies.get("starflow_ui_token")
                assert client.get("/runs").status_code == 200
            start = time.monotonic()
        finally:
            assert _stop(proc) == 0
        assert time.monotonic() - start < 10


@pytest.mark.slow
def test_port_in_use(seeded: Seeded) -> None:
    """A port another server holds: the real command prints exactly one line, naming
    the address and the bind error (uvicorn's own log line is folded into it), and
    exits 1."""
    import socket

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STARFLOW_UI_TOKEN", None)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "starflow", "ui", "--db", seeded.url,
                               "--port", str(port)], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=60, check=False)
    assert done.returncode == 1, done
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"starflow: the ui could not listen on 127.0.0.1:{port}: ")
    assert "address already in use" in lines[0] and "--port 0" in lines[0]
