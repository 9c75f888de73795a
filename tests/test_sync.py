"""starflow.sync.Starflow: the blocking facade, from plain threads."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import starflow
from starflow import ConfigError, RunCancelled, StarflowError, step, wait_for, workflow
from starflow.sync import Starflow


@step(name="sync-double")
async def double(x: int) -> int:
    return x * 2


@workflow(name="sync-compute")
async def compute(x: int) -> int:
    return await double(x) + 1


@workflow(name="sync-approve")
async def approve(order: str) -> str:
    decision = await wait_for("approval")
    return f"{order}:{decision['ok']}"


@workflow(name="sync-publish")
async def publish(n: int) -> int:
    starflow.set_event("count", n)
    for i in range(n):
        starflow.write_stream("items", i)
    await wait_for("done")
    return n


#: Calls of sync-fragile, and whether its bug is fixed.
FRAGILE = {"calls": 0, "fixed": False, "before": 0}


@step(name="sync-before")
async def before_fragile(x: int) -> int:
    FRAGILE["before"] += 1
    return x


@step(name="sync-fragile")
async def fragile(x: int) -> int:
    FRAGILE["calls"] += 1
    if not FRAGILE["fixed"]:
        raise ValueError("a bug in the step")
    return x + 1


@workflow(name="sync-retry")
async def fragile_flow(x: int) -> int:
    return await fragile(await before_fragile(x))


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'sync.db'}"


class TestSameMethods:
    """Each method of starflow.Starflow answers here without await."""

    def test_run_result_and_queries(self, url: str) -> None:
        """run drives inline; result, get_run, list_runs and events read it."""
        with Starflow.open(url) as sf:
            handle = sf.run(compute, 4)
            assert (handle.status, handle.result) == ("success", 9)
            value: int = sf.result(handle)
            assert value == 9
            assert sf.get_run(handle.run_id).status == "success"
            assert [r.id for r in sf.list_runs(template_id="sync-compute")] == [handle.run_id]
            assert "node_complete" in [e.event_type for e in sf.events(handle.run_id)]

    def test_events_and_streams(self, url: str) -> None:
        """get_event blocks for a value; read_stream is a plain iterator that ends
        with the run; fork makes a new run from its history."""
        with Starflow.open(url) as sf:
            handle = sf.run(publish, 3)
            assert sf.get_event(handle.run_id, "count", timeout=5) == 3
            sf.signal(handle.run_id, "done")
            assert list(sf.read_stream(handle.run_id, "items")) == [0, 1, 2]
            fork = sf.fork(handle.run_id, from_node="wait:done#1")
            assert fork.status == "paused" and fork.run_id != handle.run_id
            assert sf.get_event(fork.run_id, "count", timeout=0) == 3

    def test_signal_resume_and_cancel(self, url: str) -> None:
        """An inline run paused on a wait finishes in the signal call; cancel ends another."""
        with Starflow.open(url) as sf:
            paused = sf.run(approve, "o-1")
            assert paused.status == "paused" and paused.wake_token
            done = sf.signal(paused.run_id, "approval", {"ok": True})
            assert (done.status, done.result) == ("success", "o-1:True")
            other = sf.run(approve, "o-2")
            assert other.wake_token is not None
            assert sf.resume(other.wake_token, {"ok": False}).result == "o-2:False"
            third = sf.run(approve, "o-3")
            assert sf.cancel(third.run_id).status == "cancelled"
            with pytest.raises(RunCancelled):
                sf.result(third.run_id)

    def test_pause_and_resume(self, url: str) -> None:
        """pause/resume of a run (a signal kept while paused) and of a pool (#30)."""
        with Starflow.open(url) as sf:
            paused = sf.run(approve, "o-4")
            assert sf.pause(paused.run_id).status == "paused"
            assert sf.signal(paused.run_id, "approval", {"ok": True}).status == "paused"
            assert sf.resume(paused.run_id).result == "o-4:True"
            assert sf.pause_pool("gpu").paused
            resumed = sf.resume_pool("gpu")
            assert resumed is None  # no limits left once resumed

    def test_options_start_and_a_background_worker(self, url: str) -> None:
        """options(run_id=).start queues; a worker run for the block drives it."""
        run_id = "6f1c2b1e-8a51-4a3e-9a57-0f1e2d3c4b5a"
        with Starflow.open(url) as sf:
            queued = sf.options(run_id=run_id).start(compute, 20)
            assert (queued.run_id, queued.status) == (run_id, "queued")
            with sf.worker(concurrency=2):
                assert sf.result(queued, timeout=30) == 41
            assert sf.options(run_id=run_id).start(compute, 20).status == "success"

    def test_start_attributes_read_back(self, url: str) -> None:
        """options(attributes=) and get_attributes (#30)."""
        with Starflow.open(url) as sf:
            queued = sf.options(attributes={"customer": "c-42", "vip": True}).start(compute, 1)
            assert sf.get_attributes(queued.run_id) == {"customer": "c-42", "vip": True}
            assert [r.id for r in sf.list_runs(attributes={"customer": "c-42"})] == [
                queued.run_id]

    def test_a_start_for_later(self, url: str) -> None:
        """options(start_after=) and start(start_at=) write a scheduled run; bad input
        is refused with nothing written; cancel ends it before it runs (#30)."""
        with Starflow.open(url) as sf:
            with pytest.raises(ConfigError, match="start_at must be a timezone-aware"):
                sf.start(compute, 1, start_at=datetime(2030, 1, 1))
            assert sf.list_runs() == []
            later = sf.options(start_after=timedelta(hours=1)).start(compute, 1)
            at = datetime(2099, 1, 1, tzinfo=UTC)
            much_later = sf.start(compute, 2, start_at=at)
            runs = {r.id: r for r in sf.list_runs()}
            assert runs[later.run_id].claim_state == "scheduled"
            assert runs[much_later.run_id].not_before == at
            assert sf.cancel(later.run_id).status == "cancelled"


    def test_session_vars_sweep_and_the_warm_tier(self, url: str) -> None:
        """session_set/get, sweep, watch, live_runs and outbox_status answer too."""
        with Starflow.open(url, warm="memory://") as sf:
            sf.session_set("s-1", "cart", {"items": 2})
            assert sf.session_get("s-1", "cart") == {"items": 2}
            assert sf.sweep() == 0
            paused = sf.run(approve, "o-5")
            done = sf.run(compute, 1)
            states = list(sf.watch(done.run_id))
            assert states and states[-1].status == "success"
            assert sf.outbox_status().level in ("ok", "warn", "page")
            deadline = time.monotonic() + 10
            while paused.run_id not in {r.id for r in sf.live_runs()}:  # drained async
                assert time.monotonic() < deadline, "the paused run never reached the warm tier"
                threading.Event().wait(0.01)


def test_retry_reruns_the_failed_step(db_url: str, workspace_id: str) -> None:
    """sf.retry through the facade: the failed step runs again with the fixed code;
    the step before it does not."""
    FRAGILE.update(calls=0, fixed=False, before=0)
    with Starflow.open(db_url, workspace_id=workspace_id) as sf:
        failed = sf.run(fragile_flow, 1)
        assert failed.status == "error" and "a bug in the step" in (failed.error or "")
        FRAGILE["fixed"] = True
        done = sf.retry(failed.run_id)
        assert (done.status, done.result) == ("success", 2)
    assert (FRAGILE["before"], FRAGILE["calls"]) == (1, 2)


def test_bulk_actions(url: str) -> None:
    """cancel_runs, retry_runs and fork_runs through the facade (#30)."""
    FRAGILE.update(calls=0, fixed=False, before=0)
    with Starflow.open(url) as sf:
        paused = [sf.run(approve, f"o-{i}").run_id for i in range(3)]
        counted = sf.cancel_runs(starflow.RunFilter(template_id="sync-approve"), dry_run=True)
        assert (counted.matched, counted.acted) == (3, 0)
        done = sf.cancel_runs(starflow.RunFilter(template_id="sync-approve"))
        assert done.acted == 3
        assert {sf.get_run(r).status for r in paused} == {"cancelled"}
        failed = sf.run(fragile_flow, 1).run_id
        forked = sf.fork_runs(starflow.RunFilter(status="error"), from_node="step:sync-fragile#1")
        assert list(forked.forks) == [failed]
        FRAGILE["fixed"] = True
        retried = sf.retry_runs(starflow.RunFilter(template_id="sync-retry"), limit=None)
        assert retried.acted == 2  # the run and its fork (which failed too)
        assert sf.get_run(failed).status == "success"


class TestThreads:
    """One facade serves many threads at once, then closes cleanly."""

    def test_many_threads(self, url: str) -> None:
        """Twenty runs from eight threads all succeed, each with its own result."""
        with Starflow.open(url) as sf, ThreadPoolExecutor(8) as pool:
            handles = list(pool.map(lambda x: sf.run(compute, x), range(20)))
            values = list(pool.map(sf.result, handles))
        assert values == [2 * x + 1 for x in range(20)]
        assert len({h.run_id for h in handles}) == 20

    def test_close_cancels_waiting_calls_and_stops_the_thread(self, url: str) -> None:
        """A thread blocked in result() gets a StarflowError; no thread is left behind."""
        before = set(threading.enumerate())
        errors: list[BaseException] = []
        sf = Starflow.open(url)
        with sf:
            paused = sf.run(approve, "o-9")
            started = threading.Event()

            def wait() -> None:
                started.set()
                try:
                    sf.result(paused.run_id)
                except BaseException as exc:
                    errors.append(exc)

            waiter = threading.Thread(target=wait)
            waiter.start()
            started.wait(5)
            deadline = time.monotonic() + 5
            while not sf._pending and time.monotonic() < deadline:  # result() handed over
                threading.Event().wait(0.001)
            assert sf._pending
        waiter.join(10)
        assert not waiter.is_alive()
        assert len(errors) == 1 and isinstance(errors[0], StarflowError)
        assert "closed while this call was waiting" in str(errors[0])
        # aiosqlite's worker thread exits just after close() returns (its stop
        # result is delivered before the thread's last line): give it time.
        for thread in set(threading.enumerate()) - before:
            thread.join(10)
        assert set(threading.enumerate()) <= before
        with pytest.raises(ConfigError, match="not open"):
            sf.get_run(paused.run_id)
        # The run itself is untouched: still paused, in the database.
        with Starflow.open(url) as again:
            assert again.get_run(paused.run_id).status == "paused"

    def test_errors_reach_the_caller(self, url: str) -> None:
        """A StarflowError raised on the loop is raised in the calling thread."""
        from starflow import RunNotFound

        with Starflow.open(url) as sf, pytest.raises(RunNotFound):
            sf.get_run("00000000-0000-0000-0000-000000000000")

    def test_open_twice_is_refused(self, url: str) -> None:
        """Entering an open facade again is a ConfigError; close() twice is harmless."""
        sf = Starflow.open(url)
        with sf, pytest.raises(ConfigError, match="open already"):
            sf.__enter__()
        sf.close()


class TestModuleLevel:
    """A facade kept at module level (Flask, Django) opens on first use and closes at exit."""

    def test_a_wsgi_app_with_a_module_level_facade_serves_many_threads(self, url: str) -> None:
        """Threads of a WSGI server share a facade nobody entered: its first call opens it."""
        sf = Starflow.open(url)  # at import time, as in a Flask or Django module

        def app(environ: dict[str, object], start_response: Callable[..., object]) -> list[bytes]:
            handle = sf.run(compute, int(str(environ["QUERY_STRING"])))
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [str(sf.result(handle)).encode()]

        def request(n: int) -> bytes:
            return b"".join(app({"QUERY_STRING": str(n)}, lambda *a: None))

        before = set(threading.enumerate())
        try:
            with ThreadPoolExecutor(8) as pool:
                bodies = list(pool.map(request, range(16)))
            assert bodies == [str(n * 2 + 1).encode() for n in range(16)]
            portals = [t for t in set(threading.enumerate()) - before if "portal" in t.name]
            assert len(portals) == 1, "one loop for every thread, opened once"
        finally:
            sf.close()
        with pytest.raises(ConfigError, match="not open"):
            sf.get_run("any")  # closed stays closed: no silent reopening

    def test_a_facade_left_open_does_not_hang_the_interpreter_exit(self, tmp_path: Path) -> None:
        """A script that never closes its module-level facade exits, with its run stored."""
        script = tmp_path / "app.py"
        script.write_text(
            "from starflow import workflow\n"
            "from starflow.sync import Starflow\n"
            f"sf = Starflow.open('sqlite:///{tmp_path / 'exit.db'}')\n"
            "@workflow(name='exit-wf')\n"
            "async def wf() -> int:\n"
            "    return 7\n"
            "print(sf.result(sf.run(wf)))\n")
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                              timeout=60)
        assert (proc.returncode, proc.stdout.strip()) == (0, "7"), proc.stderr
        with Starflow.open(f"sqlite:///{tmp_path / 'exit.db'}") as sf:
            assert [r.status for r in sf.list_runs(template_id="exit-wf")] == ["success"]
