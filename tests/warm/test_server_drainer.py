"""``starflow server --db URL --warm URL``: the outbox drainer without ``--app``.

A process that cannot run the workflows (no ``--app``) still drains the mirror
outbox that apps wrote with ``Starflow.open(..., warm=...)`` and
``maintenance=False``, into the warm tier.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import anyio
import pytest

from starflow import Starflow

from .conftest import REDIS_URL, open_warm, require_redis
from .flows import sum_flow

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def _spawn_server(log: Path, *args: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen([sys.executable, "-m", "starflow", "server", *args],
                                stdout=out, stderr=subprocess.STDOUT, cwd=str(ROOT))


async def test_server_drains_the_outbox_without_an_app(tmp_path: Path) -> None:
    require_redis()
    url = f"sqlite:///{tmp_path / 'sf.db'}"
    ws = f"ws-srv-{uuid.uuid4().hex[:10]}"
    async with Starflow.open(url, workspace_id=ws, warm=REDIS_URL, maintenance=False) as sf:
        run_id = (await sf.run(sum_flow, 2, 3)).run_id
        assert (await sf.outbox_status()).pending > 0  # nobody drains here
    warm = open_warm(REDIS_URL, ws)
    await warm.open()
    proc = _spawn_server(tmp_path / "server.log", "--db", url, "--workspace", ws,
                         "--warm", REDIS_URL)
    try:
        deadline = time.monotonic() + 20
        while True:
            state = await warm.get_run(run_id)
            if state is not None and state.get("status") == "success":
                break
            assert proc.poll() is None, (tmp_path / "server.log").read_text()
            assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            await anyio.sleep(0.1)
        assert state["result_json"] == 5
        async with Starflow.open(url, workspace_id=ws, maintenance=False) as sf:
            async def drained() -> bool:
                return (await sf.outbox_status()).pending == 0

            while not await drained():
                assert time.monotonic() < deadline
                await anyio.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=15)
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(REDIS_URL)
        keys = [k async for k in client.scan_iter(match=f"starflow:{ws}:*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()
        await warm.close()
    out = (tmp_path / "server.log").read_text()
    assert "outbox drainer" in out and "server stopped" in out


def test_warm_needs_db_not_app(tmp_path: Path) -> None:
    worker_tests = ROOT / "tests" / "worker"  # apps:make_app lives there
    done = subprocess.run(
        [sys.executable, "-m", "starflow", "server", "--app", "apps:make_app",
         "--warm", "memory://"], capture_output=True, text=True, cwd=str(worker_tests),
        timeout=30, check=False,
        env={**os.environ, "PYTHONPATH": f"{worker_tests}{os.pathsep}{ROOT}",
             "STARFLOW_DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"})
    assert done.returncode == 2
    assert "--warm goes with --db" in done.stderr
