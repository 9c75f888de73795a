"""WorkflowEnvironment: time skipping, the embedded worker, killed runners and the sweep."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import pytest

import starflow
from starflow import ResultTimeout, StarflowConfig, WaitTimeout, sleep, step, wait_for, workflow
from starflow_testing import RunnerKilled, WorkflowEnvironment, capture_logs

T0 = datetime(2030, 1, 1, tzinfo=UTC)


@step
async def t_env_greet(name: str) -> str:
    return f"hello {name}"


@step
async def t_env_wall_clock() -> str:
    # Step code may read real time; in an environment it reads the fake time.
    return datetime.now(UTC).isoformat()


@workflow(name="t_env_month")
async def month_long(name: str) -> dict[str, str]:
    greeting = await t_env_greet(name)
    await sleep(timedelta(days=30))
    seen = await t_env_wall_clock()
    try:
        await wait_for("approval", timeout=timedelta(days=2))
        decision = "approved"
    except WaitTimeout:
        decision = "timed out"
    return {"greeting": greeting, "decision": decision, "seen": seen}


class TestTimeSkipping:
    """Durable waits are skipped while a test awaits a result."""

    async def test_thirty_day_sleep_and_wait_timeout(self, env_adapter: str) -> None:
        """A 30-day sleep and a 2-day wait timeout finish in well under a second."""
        async with WorkflowEnvironment(adapter=env_adapter) as env:
            wall = anyio.current_time()  # the event loop's real clock
            handle = await env.run(month_long, "ada")
            assert handle.status == "paused"
            result = await env.result(handle.run_id)
            elapsed = anyio.current_time() - wall
            assert elapsed < 1.0, elapsed
            assert result["greeting"] == "hello ada"
            assert result["decision"] == "timed out"
            assert result["seen"] == (T0 + timedelta(days=30)).isoformat()
            assert env.now() == T0 + timedelta(days=32)
            events = await env.events(handle.run_id)
            sleep_done = next(e for e in events if e.node_id == "sleep#1"
                              and e.event_type == "node_complete")
            first = events[0]
            assert sleep_done.created_at - first.created_at == timedelta(days=30)
            timeout = next(e for e in events if e.node_id == "wait:approval#1")
            assert timeout.event_type == "node_error"
            assert timeout.created_at == T0 + timedelta(days=32)
            assert (await env.get_run(handle.run_id)).status == "success"

    async def test_no_skipping_while_nobody_awaits(self) -> None:
        """Without an awaiting caller, fake time stays where it is."""
        async with WorkflowEnvironment() as env:
            handle = await env.run(month_long, "bob")
            await env.quiesce()
            assert env.now() == T0
            assert (await env.get_run(handle.run_id)).status == "paused"

    async def test_time_skipping_off(self) -> None:
        """With time_skipping=False, only advance() moves time, sleeper by sleeper."""

        @workflow(name="t_env_short")
        async def short() -> str:
            await sleep(timedelta(minutes=2))
            try:
                return str(await wait_for("approval", timeout=timedelta(minutes=1)))
            except WaitTimeout:
                return "timed out"

        async with WorkflowEnvironment(time_skipping=False) as env:
            handle = await env.run(short)
            await env.run_until_idle()
            assert env.now() == T0
            assert (await env.get_run(handle.run_id)).status == "paused"  # on the sleep
            await env.advance(timedelta(minutes=2) - timedelta(microseconds=1))
            events = await env.events(handle.run_id)
            assert not [e for e in events
                        if e.node_id == "sleep#1" and e.event_type != "node_start"]
            await env.advance(timedelta(microseconds=1))
            events = await env.events(handle.run_id)
            done = [e for e in events if e.node_id == "sleep#1"]
            assert [e.created_at for e in done] == [T0 + timedelta(minutes=2)]
            await env.advance(timedelta(minutes=1))
            assert await env.result(handle.run_id) == "timed out"

    async def test_signal_before_timeout(self) -> None:
        """A signal sent while the run sleeps is delivered at its wait."""
        async with WorkflowEnvironment() as env:
            handle = await env.run(month_long, "dee")
            await env.signal(handle.run_id, "approval", {"ok": True})
            result = await env.result(handle.run_id)
            assert result["decision"] == "approved"
            assert env.now() == T0 + timedelta(days=30)

    async def test_result_of_a_run_nobody_can_wake(self) -> None:
        """result() says so instead of hanging when only a signal could help."""

        @workflow(name="t_env_forever")
        async def forever() -> None:
            await wait_for("never")

        async with WorkflowEnvironment() as env:
            handle = await env.run(forever)
            start = time.monotonic()
            with pytest.raises(ResultTimeout, match="cannot make progress"):
                await env.result(handle.run_id)
            assert time.monotonic() - start < 5


@step
async def t_env_double(x: int) -> int:
    return 2 * x


@workflow(name="t_env_queued")
async def queued(x: int) -> int:
    y = await t_env_double(x)
    await sleep(timedelta(hours=1))
    return await t_env_double(y)


class TestWorker:
    """Queued runs progress through the embedded worker."""

    async def test_run_until_idle_drives_queued_runs(self, env_adapter: str) -> None:
        """run_until_idle() claims, drives and skips timers until every run ended."""
        async with WorkflowEnvironment(adapter=env_adapter) as env:
            handles = [await env.start(queued, i) for i in range(3)]
            await env.run_until_idle()
            for i, handle in enumerate(handles):
                run = await env.get_run(handle.run_id)
                assert run.status == "success", run
                assert await env.result(handle.run_id) == 4 * i
            assert env.now() == T0 + timedelta(hours=1)

    async def test_result_of_a_queued_run(self) -> None:
        """result() of a queued run waits for the worker and skips its timer."""
        async with WorkflowEnvironment() as env:
            handle = await env.start(queued, 5)
            assert handle.status == "queued"
            assert await env.result(handle.run_id) == 20


_gates: dict[str, tuple[anyio.Event, anyio.Event]] = {}
_calls: dict[str, int] = {}


@step
async def t_env_blocking(key: str) -> str:
    _calls[key] = _calls.get(key, 0) + 1
    started, release = _gates[key]
    started.set()
    await release.wait()
    return "done"


@workflow(name="t_env_lease_once", max_claim_attempts=1)
async def lease_once(key: str) -> str:
    return await t_env_blocking(key)


@workflow(name="t_env_lease_retry")
async def lease_retry(key: str) -> str:
    return await t_env_blocking(key)


def _gate(key: str) -> tuple[anyio.Event, anyio.Event]:
    _gates[key] = (anyio.Event(), anyio.Event())
    _calls[key] = 0
    return _gates[key]


class TestKilledRunner:
    """A killed runner keeps its lease until the sweep finds it, at the exact tick."""

    CONFIG = StarflowConfig(lease_ttl=timedelta(seconds=30),
                            sweep_interval=timedelta(seconds=30))

    async def test_sweep_abandons_at_the_right_tick(self, env_adapter: str) -> None:
        """Lease 30 s, sweep every 30 s: running at 59.999999 s, runner_lost at 60 s."""
        started, _ = _gate("once")
        async with WorkflowEnvironment(adapter=env_adapter, config=self.CONFIG) as env:
            handle = await env.start(lease_once, "once")
            await started.wait()
            run = await env.get_run(handle.run_id)
            assert run.lease_until == T0 + timedelta(seconds=30)
            await env.kill_runner(handle.run_id)

            await env.advance(timedelta(seconds=60) - timedelta(microseconds=1))
            run = await env.get_run(handle.run_id)
            assert run.status == "running"
            assert run.lease_until == T0 + timedelta(seconds=30)  # never refreshed again
            assert run.leased_by is not None
            assert not [e for e in await env.events(handle.run_id)
                        if e.event_type == "runner_lost"]

            await env.advance(timedelta(microseconds=1))
            run = await env.get_run(handle.run_id)
            assert (run.status, run.claim_state, run.error) == ("error", "abandoned",
                                                                "runner_lost")
            lost = [e for e in await env.events(handle.run_id) if e.event_type == "runner_lost"]
            assert len(lost) == 1
            assert lost[0].created_at == T0 + timedelta(seconds=60)

    async def test_sweep_requeues_and_another_claim_finishes(self, env_adapter: str) -> None:
        """Under max_claim_attempts the sweep requeues; the run then completes."""
        started, release = _gate("retry")
        async with WorkflowEnvironment(adapter=env_adapter, config=self.CONFIG) as env:
            handle = await env.start(lease_retry, "retry")
            await started.wait()
            await env.kill_runner(handle.run_id)

            await env.advance(timedelta(seconds=60) - timedelta(microseconds=1))
            run = await env.get_run(handle.run_id)
            assert (run.status, run.claim_attempts) == ("running", 1)
            assert _calls["retry"] == 1

            await env.advance(timedelta(microseconds=1))
            lost = [e for e in await env.events(handle.run_id) if e.event_type == "runner_lost"]
            assert [e.payload["action"] for e in lost] == ["requeued"]
            assert lost[0].created_at == T0 + timedelta(seconds=60)
            run = await env.get_run(handle.run_id)
            assert run.claim_attempts == 2  # claimed again at once by the worker
            assert _calls["retry"] == 2  # the step is at-least-once across the crash
            release.set()
            assert await env.result(handle.run_id) == "done"

    async def test_killed_inline_run_raises_runner_killed(self, env_adapter: str) -> None:
        """env.run() of a killed run raises RunnerKilled, not a takeover's LeaseLostError."""
        started, _ = _gate("inline")
        async with WorkflowEnvironment(adapter=env_adapter, config=self.CONFIG) as env:
            errors: list[BaseException] = []
            async with anyio.create_task_group() as tg:
                async def drive() -> None:
                    try:
                        await env.run(lease_once, "inline")
                    except Exception as exc:
                        errors.append(exc)

                tg.start_soon(drive)
                await started.wait()
                [run] = await env.list_runs()
                await env.kill_runner(run.id)
            [error] = errors
            assert type(error) is RunnerKilled, repr(error)
            assert not isinstance(error, starflow.LeaseLostError)
            assert error.run_id == run.id
            assert "killed" in str(error) and "took it over" not in str(error)
            after = await env.get_run(run.id)  # nothing more was written: the lease stays
            assert (after.status, after.leased_by, after.lease_until) == (
                "running", run.leased_by, run.lease_until)

    async def test_killed_worker_run_logs_no_takeover(self, env_adapter: str) -> None:
        """The embedded worker logs a killed run as killed, not as a failure or a takeover."""
        started, release = _gate("worker")
        async with WorkflowEnvironment(adapter=env_adapter, config=self.CONFIG) as env:
            with capture_logs() as logs:
                handle = await env.start(lease_retry, "worker")
                await started.wait()
                await env.kill_runner(handle.run_id)
                await env.advance(timedelta(seconds=60))   # swept, reclaimed
            release.set()
            assert await env.result(handle.run_id) == "done"
        assert not [e for e in logs if e["log_level"] in ("error", "warning")
                    and e.get("run_id") == handle.run_id and e["event"] != "runner lost"], logs
        assert not [e for e in logs if "LeaseLost" in str(e) or "took it over" in str(e)]
        killed = [e for e in logs if e["event"] == "runner killed (simulated SIGKILL)"]
        assert [e["run_id"] for e in killed] == [handle.run_id]

    async def test_kill_a_run_that_is_not_executing(self) -> None:
        """kill_runner() refuses a run no engine of the environment drives."""
        async with WorkflowEnvironment() as env:
            handle = await env.run(month_long, "eve")
            with pytest.raises(starflow.StarflowError, match="not executing"):
                await env.kill_runner(handle.run_id)


@step
async def t_env_stamp() -> datetime:
    return datetime.now(UTC)


@workflow(name="t_env_stamp_flow")
async def stamp_flow() -> datetime:
    return await t_env_stamp()


class TestWallClockValues:
    """Values made from the patched wall clock can be stored (regression)."""

    async def test_step_returning_datetime_now(self) -> None:
        """freezegun's FakeDatetime is stored like a datetime (serde enc_hook)."""
        async with WorkflowEnvironment() as env:
            await env.advance(timedelta(seconds=7))
            handle = await env.run(stamp_flow)
            assert handle.status == "success"
            assert await env.result(handle.run_id) == T0 + timedelta(seconds=7)


@workflow(name="t_env_until_flow")
async def until_flow() -> None:
    await starflow.wait_for("go")  # woken by a worker: now() is read back from the database
    await starflow.session_set("s", "k", 1, keep_until=starflow.now() + timedelta(days=3))


class TestFakeTimeEncodesLikeRealTime:
    """An instant encodes, and hashes, the same from freezegun's class and the stdlib's."""

    def test_subclass_encodes_as_the_stdlib_value(self) -> None:
        from starflow.serde import args_hash, encode

        class Sub(datetime):
            pass

        real = datetime(2030, 1, 10, 12, 30, 5, 7, tzinfo=UTC)
        fake = Sub(2030, 1, 10, 12, 30, 5, 7, tzinfo=UTC)
        assert encode(fake) == encode(real) == b'"2030-01-10T12:30:05.000007Z"'
        assert args_hash([fake]) == args_hash([real])

    async def test_a_run_recorded_under_fake_time_replays_outside_it(
            self, tmp_path: Path) -> None:
        """Regression: on SQLite ``starflow.now()`` is freezegun's class (parsed while
        patched), and the step's arguments hashed "+00:00" there but "Z" on replay."""
        from starflow.admin.history import export_run
        from starflow.admin.replayer import Replayer

        async with WorkflowEnvironment(f"sqlite:///{tmp_path / 'fake.db'}") as env:
            handle = await env.start(until_flow)
            await env.run_until_idle()
            await env.signal(handle.run_id, "go")
            await env.run_until_idle()
            assert (await env.get_run(handle.run_id)).status == "success"
            history = await export_run(env.adapter, handle.run_id)
        # Replayed after the environment closed: real datetime, no freezegun.
        result = await Replayer([until_flow]).replay_history(history)
        assert result.ok, result.error


class TestConcurrentQuiesce:
    """A test advancing the clock while a background env.run waits does not livelock."""

    async def test_manual_advance_during_a_background_run(self) -> None:
        """env.run in a task (its time skipper waiting) and env.clock.advance together."""
        from datetime import timedelta as td

        import anyio

        from starflow import StarflowConfig, step, workflow
        from starflow_testing import WorkflowEnvironment

        gate = {"started": anyio.Event(), "release": anyio.Event()}

        @step(name="quiesce-hold")
        async def hold_step() -> None:
            gate["started"].set()
            await gate["release"].wait()

        @workflow(name="quiesce-hold")
        async def hold() -> None:
            await hold_step()

        config = StarflowConfig(heartbeat_interval=td(seconds=1))
        async with WorkflowEnvironment("memory", config=config, patch_time=False) as env:
            start = env.clock.now()
            async with anyio.create_task_group() as tg:
                tg.start_soon(env.run, hold)
                await gate["started"].wait()
                with anyio.fail_after(30):  # a safety net: the bug was an endless spin
                    await env.clock.advance(td(seconds=2))
                (run,) = await env.list_runs()
                assert run.last_heartbeat == start + td(seconds=2)
                gate["release"].set()


@workflow(name="t_env_keyed")
async def keyed(n: int) -> int:
    await wait_for("go")
    return n


class TestRunKeys:
    """The environment takes run keys (#30) as the app does."""

    async def test_result_and_kill_by_key(self, env_adapter: str) -> None:
        """result(key) of a run nobody can wake says so (it found the run), and
        kill_runner(key) names the run by its id."""
        async with WorkflowEnvironment(adapter=env_adapter) as env:
            handle = await env.app.options(run_id="order-1").run(keyed, 1)
            start = time.monotonic()
            with pytest.raises(ResultTimeout, match=f"run {handle.run_id} cannot make progress"):
                await env.result("order-1")
            assert time.monotonic() - start < 5
            with pytest.raises(starflow.StarflowError,
                               match=f"run {handle.run_id} is not executing"):
                await env.kill_runner("order-1")
            assert (await env.signal("order-1", "go")).status == "success"
            assert await env.result("order-1") == 1
