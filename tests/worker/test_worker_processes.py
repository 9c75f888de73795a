"""Real worker processes: SIGKILL crash recovery, cross-process cancel, SIGTERM drain."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import anyio
import pytest

from starflow import Starflow

from .apps import child_parent, chunks, long_running
from .support import side_effects, spawn_worker, stop

pytestmark = pytest.mark.slow

FAST = {"SF_LEASE": "1.0", "SF_HEARTBEAT": "0.25", "SF_SWEEP": "0.3", "SF_POLL": "0.05"}


def _url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'workers.db'}"


async def _wait(predicate_async: object, limit: float, what: str) -> None:
    """Poll (real time: these tests drive real processes) until the predicate holds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if await predicate_async():  # type: ignore[operator]
            return
        await anyio.sleep(0.05)
    raise AssertionError(f"timed out after {limit:g} s waiting for {what}")


class TestCrashRecovery:
    """3 workers, 50 runs, random SIGKILLs: every run succeeds, no step re-runs once done."""

    async def test_sigkill_workers(self, tmp_path: Path) -> None:
        url, side = _url(tmp_path), tmp_path / "side.log"
        env = {**FAST, "STARFLOW_TEST_SIDE_LOG": str(side)}
        log = tmp_path / "workers.log"
        async with Starflow.open(url, maintenance=False) as sf:
            run_ids = [(await sf.start(chunks, 5, 0.1)).run_id for _ in range(50)]
        args = ("--concurrency", "4", "--maintenance", "--grace", "0")
        procs = [spawn_worker(url, log, *args, **env) for _ in range(3)]
        rng = random.Random(1234)
        kills = 0
        began = time.monotonic()
        try:
            async with Starflow.open(url, maintenance=False) as sf:
                async def finished() -> int:
                    return len(await sf.list_runs(status="success", limit=100))

                async def busy() -> list[str]:
                    """The runners holding a running run now."""
                    return [r.leased_by or "" for r in await sf.list_runs(status="running")]

                # Kill only once workers run runs: on a loaded machine a worker takes
                # seconds to start, and kills of idle workers would test nothing.
                await _wait(busy, 60, "a worker to claim a run")
                while kills < 8 and await finished() < 45:
                    await anyio.sleep(rng.uniform(0.4, 0.9))
                    holders = await busy()
                    # Prefer a worker that holds a run (its pid is in the runner id).
                    holding = [i for i, p in enumerate(procs)
                               if any(f":{p.pid}:" in h for h in holders)]
                    i = rng.choice(holding) if holding else rng.randrange(len(procs))
                    procs[i].send_signal(signal.SIGKILL)
                    procs[i].wait(timeout=10)
                    kills += 1
                    procs[i] = spawn_worker(url, log, *args, **env)

                async def all_done() -> bool:
                    return await finished() == 50

                await _wait(all_done, 45, "all 50 runs to succeed")
                elapsed = time.monotonic() - began
                runs = [await sf.get_run(r) for r in run_ids]
                assert {r.status for r in runs} == {"success"}
                assert {r.result_json for r in runs} == {10}
                completed: dict[str, float] = {}
                lost = 0
                for run_id in run_ids:
                    events = await sf.events(run_id)
                    lost += sum(1 for e in events if e.event_type == "runner_lost")
                    done = Counter(e.node_id for e in events if e.event_type == "node_complete")
                    assert set(done.values()) == {1}, (run_id, done)  # one completion each
                    for e in events:
                        if e.event_type == "node_complete":
                            completed[f"{run_id}:{e.node_id}"] = e.created_at.timestamp()
        finally:
            stop(procs)
        executions = list(side_effects(side))
        assert {key for key, _, _ in executions} == set(completed)
        # No step whose node_complete was written ran again afterwards.
        late = [(key, ts) for key, ts, _ in executions if ts > completed[key]]
        assert late == []
        assert kills >= 3 and lost >= 1  # the kills did hit running runs
        reruns = len(executions) - len(completed)
        print(f"crash test: {kills} kills, {lost} runner_lost, {reruns} at-least-once "
              f"re-executions, {elapsed:.1f} s")


class TestCrossProcessCancel:
    """A run driven by a worker in another process stops at its next boundary."""

    async def test_cancel_reaches_another_process(self, tmp_path: Path) -> None:
        url, side, log = _url(tmp_path), tmp_path / "side.log", tmp_path / "worker.log"
        proc = spawn_worker(url, log, "--concurrency", "2", **FAST,
                            STARFLOW_TEST_SIDE_LOG=str(side))
        try:
            async with Starflow.open(url, maintenance=False) as sf:
                run_id = (await sf.start(long_running, 30.0)).run_id

                async def long_step_running() -> bool:
                    return any(k.endswith("step:long_step#1") for k, _, _ in side_effects(side))

                await _wait(long_step_running, 20, "the long step to start")
                handle = await sf.cancel(run_id, force=True)
                assert handle.status == "cancelled"

                async def stopped() -> bool:
                    return "lease lost" in log.read_text()

                await _wait(stopped, 10, "the worker to notice at its heartbeat")
                run = await sf.get_run(run_id)
                assert (run.status, run.claim_state, run.leased_by) == (
                    "cancelled", "failed", None)
                types = [e.event_type for e in await sf.events(run_id)]
                assert types[-1] == "run_cancelled"
                assert types.count("node_complete") == 1  # the first quick step only
                keys = [k for k, _, _ in side_effects(side)]
                assert not any(k.endswith(":end") for k in keys)  # the long step was cut
                assert not any(k.endswith("step:chunk#2") for k in keys)
                # The worker lives on and takes new work.
                other = (await sf.start(chunks, 2, 0.0)).run_id
                assert await sf.result(other, timeout=20) == 1
        finally:
            stop([proc])


class TestSigtermDrain:
    """SIGTERM: stop claiming, hand runs back at their next boundary or after --grace."""

    async def test_hand_back_at_the_next_step_boundary(self, tmp_path: Path) -> None:
        url, side, log = _url(tmp_path), tmp_path / "side.log", tmp_path / "worker.log"
        env = {**FAST, "STARFLOW_TEST_SIDE_LOG": str(side)}
        proc = spawn_worker(url, log, "--grace", "20", **env)
        try:
            async with Starflow.open(url, maintenance=False) as sf:
                run_id = (await sf.start(chunks, 10, 0.3)).run_id

                async def two_steps_done() -> bool:
                    events = await sf.events(run_id)
                    return sum(e.event_type == "node_complete" for e in events) >= 2

                await _wait(two_steps_done, 20, "two steps")
                began = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=10) == 0
                assert time.monotonic() - began < 5  # one step, not the 20 s grace
                run = await sf.get_run(run_id)
                assert (run.status, run.claim_state, run.leased_by, run.lease_until) == (
                    "queued", "queued", None, None)
                events = await sf.events(run_id)
                starts = [e.node_id for e in events if e.event_type == "node_start"]
                done = [e.node_id for e in events if e.event_type == "node_complete"]
                assert starts == done  # the step in flight finished before the hand-back
                assert "worker stopped" in log.read_text()
                # Another worker takes over at once and no finished step runs again.
                proc = spawn_worker(url, log, **env)
                assert await sf.result(run_id, timeout=30) == 45
            keys = [k for k, _, _ in side_effects(side)]
            assert len(keys) == len(set(keys)) == 10
        finally:
            stop([proc])

    async def test_grace_expiry_cancels_and_releases(self, tmp_path: Path) -> None:
        url, side, log = _url(tmp_path), tmp_path / "side.log", tmp_path / "worker.log"
        env = {**FAST, "STARFLOW_TEST_SIDE_LOG": str(side)}
        proc = spawn_worker(url, log, "--grace", "0.5", **env)
        try:
            async with Starflow.open(url, maintenance=False) as sf:
                run_id = (await sf.start(long_running, 60.0)).run_id

                async def long_step_running() -> bool:
                    return any(k.endswith("step:long_step#1") for k, _, _ in side_effects(side))

                await _wait(long_step_running, 20, "the long step to start")
                began = time.monotonic()
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(timeout=10) == 0
                assert time.monotonic() - began < 5
                run = await sf.get_run(run_id)
                assert (run.status, run.claim_state, run.leased_by) == ("queued", "queued", None)
                assert "grace period over" in log.read_text()
        finally:
            stop([proc])


def test_subprocess_module_importable() -> None:
    """The worker app module imports standalone (as worker processes load it)."""
    from .support import cli

    out = cli("worker", "--help")
    assert out.returncode == 0 and "--grace" in out.stdout
    assert subprocess.run is not None


class TestChildrenSurviveSigkill:
    """A parent waits on children while the workers driving them are SIGKILLed: every
    child finishes once, the parent once, and no child is started twice (#17)."""

    async def test_sigkill_while_the_parent_waits_on_children(self, tmp_path: Path) -> None:
        url, side = _url(tmp_path), tmp_path / "side.log"
        env = {**FAST, "STARFLOW_TEST_SIDE_LOG": str(side)}
        log = tmp_path / "workers.log"
        n = 12
        async with Starflow.open(url, maintenance=False) as sf:
            parent_id = (await sf.start(child_parent, n, 0.3)).run_id
        args = ("--concurrency", "6", "--maintenance", "--grace", "0")
        procs = [spawn_worker(url, log, *args, **env) for _ in range(2)]
        kills = 0
        try:
            async with Starflow.open(url, maintenance=False) as sf:
                async def children_running() -> bool:
                    parent = await sf.get_run(parent_id)
                    kids = await sf.list_runs(parent_run_id=parent_id, status="running")
                    return parent.status == "paused" and len(kids) > 0

                for _ in range(3):
                    await _wait(children_running, 60, "the parent to wait on running children")
                    running = await sf.list_runs(parent_run_id=parent_id, status="running")
                    holders = {r.leased_by or "" for r in running}
                    i = next((i for i, p in enumerate(procs)
                              if any(f":{p.pid}:" in h for h in holders)), 0)
                    procs[i].send_signal(signal.SIGKILL)
                    procs[i].wait(timeout=10)
                    kills += 1
                    procs[i] = spawn_worker(url, log, *args, **env)

                async def parent_done() -> bool:
                    return (await sf.get_run(parent_id)).is_terminal

                await _wait(parent_done, 90, "the parent to end")
                parent = await sf.get_run(parent_id)
                assert (parent.status, parent.result_json) == ("success", sum(range(n)))
                kids = await sf.list_runs(parent_run_id=parent_id, limit=100)
                assert len(kids) == n  # no child started twice
                assert {k.status for k in kids} == {"success"}
                lost = 0
                completed: dict[str, float] = {}
                for run_id in [parent_id, *(k.id for k in kids)]:
                    events = await sf.events(run_id)
                    lost += sum(1 for e in events if e.event_type == "runner_lost")
                    done = Counter(e.node_id for e in events if e.event_type == "node_complete")
                    assert set(done.values()) == {1}, (run_id, done)  # each node once
                    for e in events:
                        if e.event_type == "node_complete" and run_id != parent_id:
                            completed[f"{run_id}:{e.node_id}"] = e.created_at.timestamp()
                assert kills == 3 and lost >= 1
        finally:
            stop(procs)
        executions = list(side_effects(side))
        assert {key for key, _, _ in executions} == set(completed)
        # No child step whose node_complete was written ran again afterwards.
        assert [(k, ts) for k, ts, _ in executions if ts > completed[k]] == []
