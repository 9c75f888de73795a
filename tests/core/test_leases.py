"""Leases and heartbeats as the state model's lease section says, and racing wakes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import anyio
import pytest

from starflow import RunInfo, Starflow, StarflowConfig, step, wait_for, workflow
from starflow.adapters import adapter_from_url
from starflow_testing import FakeClock, FaultInjectingAdapter, capture_logs

gate: dict[str, anyio.Event] = {}


@step
async def slow_step() -> str:
    gate["started"].set()
    await gate["release"].wait()
    return "done"


@workflow(name="leases-slow")
async def slow() -> str:
    return await slow_step()


@workflow(name="leases-wait")
async def waits() -> object:
    return await wait_for("go")


async def row_when(sf: Starflow, run_id: str, check: Callable[[RunInfo], bool]) -> RunInfo:
    """The run row once ``check`` holds: a write the clock released may still be in
    flight on a driver thread or socket (each read is itself a round trip)."""
    with anyio.fail_after(10):  # a real-time safety net only; it returns far sooner
        while True:
            run = await sf.get_run(run_id)
            if check(run):
                return run


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def faulty(db_url: str, workspace_id: str) -> FaultInjectingAdapter:
    # refresh_lease calls 1 and 2 fail: a blip shorter than the TTL.
    return FaultInjectingAdapter(adapter_from_url(db_url, workspace_id=workspace_id),
                                 fail={"refresh_lease": {1, 2}})


@pytest.fixture
async def sf(faulty: FaultInjectingAdapter, clock: FakeClock) -> AsyncIterator[Starflow]:
    async with Starflow(faulty, clock=clock, maintenance=False) as app:
        yield app


class TestHeartbeat:
    """The engine refreshes its lease every 10 s; failures are logged, never raised."""

    async def test_refresh_every_interval_and_failures_only_logged(
        self, sf: Starflow, clock: FakeClock, faulty: FaultInjectingAdapter
    ) -> None:
        """Two failed refreshes (20 s) stay within the 30 s TTL; the run finishes."""
        gate["started"], gate["release"] = anyio.Event(), anyio.Event()
        start = clock.now()
        with capture_logs("warning") as logs:
            async with anyio.create_task_group() as tg:
                result: dict[str, object] = {}

                async def run() -> None:
                    result["handle"] = await sf.run(slow)

                tg.start_soon(run)
                await gate["started"].wait()
                runs = await sf.list_runs()
                assert runs[0].lease_until == start + timedelta(seconds=30)
                await clock.advance(timedelta(seconds=20))  # refreshes 1 and 2 fail
                run_row = await sf.get_run(runs[0].id)
                assert run_row.lease_until == start + timedelta(seconds=30)
                await clock.advance(timedelta(seconds=10))  # refresh 3 succeeds at 30 s
                run_row = await row_when(sf, runs[0].id,
                                         lambda r: r.lease_until != start + timedelta(seconds=30))
                assert run_row.lease_until == start + timedelta(seconds=60)
                assert run_row.last_heartbeat == start + timedelta(seconds=30)
                gate["release"].set()
        handle = result["handle"]
        assert getattr(handle, "status", None) == "success"
        failures = [e for e in logs if e["event"] == "lease refresh failed"]
        assert len(failures) == 2
        done = await sf.get_run(runs[0].id)
        assert done.leased_by is None and done.lease_until is None  # cleared on terminal


async def test_two_racing_signals_wake_the_run_once(db_url: str, workspace_id: str) -> None:
    """Two signals for one wait: exactly one resumes the run; the other stays queued,
    or, if the run already finished by the time it arrived, is refused."""
    from starflow import RunFinished

    async with Starflow.open(db_url, workspace_id=workspace_id, maintenance=False,
                             config=StarflowConfig()) as sf:
        handle = await sf.run(waits)
        assert handle.status == "paused"
        refused: list[int] = []

        async def send(payload: int) -> None:
            try:
                await sf.signal(handle.run_id, "go", payload)
            except RunFinished:
                refused.append(payload)

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, 1)
            tg.start_soon(send, 2)
        run = await sf.get_run(handle.run_id)
        assert run.status == "success" and run.result_json in (1, 2)
        events = await sf.events(handle.run_id)
        assert [e.event_type for e in events].count("run_resumed") == 1
        leftover = await sf.adapter.find_signal(handle.run_id, "go")
        other = 3 - run.result_json
        if refused:
            assert refused == [other] and leftover is None
        else:
            assert leftover is not None and leftover.payload == other


async def test_timer_in_a_process_without_the_code_hands_the_run_to_workers(
        db_url: str, workspace_id: str) -> None:
    """A maintenance process that lacks the workflow requeues the woken inline run."""
    from datetime import timedelta as td

    from starflow import sleep
    from starflow.workflow.decorators import registry

    @workflow(name="leases-sleeper")
    async def sleeper() -> str:
        await sleep(td(seconds=5))
        return "woke"

    clock = FakeClock()
    async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock,
                             maintenance=False) as sf:
        handle = await sf.run(sleeper)
        assert handle.status == "paused"
        await clock.advance(td(seconds=6))
        [due] = await sf.runner.due_timers()
        definition = sleeper.__starflow_workflow__  # type: ignore[attr-defined]
        registry._by_key.pop((definition.name, definition.version))
        try:
            assert await sf.runner.fire_timer(due) is not None
            run = await sf.get_run(handle.run_id)
            assert (run.status, run.claim_state, run.leased_by) == ("queued", "queued", None)
        finally:
            registry.add(definition)
        worker = sf.worker()
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            assert await sf.result(handle.run_id) == "woke"
            worker.stop()


class TestSharedHeartbeat:
    """One runner task refreshes every engine's lease on the engine's own schedule."""

    async def test_staggered_runs_refresh_on_their_own_schedules(
            self, db_url: str, workspace_id: str) -> None:
        """Runs started 4 s apart are refreshed 10 s after their own start, then every 10 s."""
        clock = FakeClock()
        gate["started"], gate["release"] = anyio.Event(), anyio.Event()
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock,
                                 maintenance=False) as sf:
            assert sf.runner.heartbeats.running
            t0 = clock.now()
            handles: list[object] = []
            async with anyio.create_task_group() as tg:
                async def run() -> None:
                    handles.append(await sf.run(slow))

                tg.start_soon(run)
                await gate["started"].wait()
                gate["started"] = anyio.Event()
                await clock.advance(timedelta(seconds=4))
                tg.start_soon(run)
                await gate["started"].wait()
                first, second = sorted(await sf.list_runs(), key=lambda r: r.started_at)
                await clock.advance(timedelta(seconds=6))   # t0 + 10 s: the first refreshes
                a = await row_when(sf, first.id, lambda r: r.last_heartbeat != t0)
                b = await sf.get_run(second.id)
                assert a.last_heartbeat == t0 + timedelta(seconds=10)
                assert b.last_heartbeat == t0 + timedelta(seconds=4)
                await clock.advance(timedelta(seconds=4))   # t0 + 14 s: the second refreshes
                b = await row_when(sf, second.id,
                                   lambda r: r.last_heartbeat != t0 + timedelta(seconds=4))
                assert b.last_heartbeat == t0 + timedelta(seconds=14)
                assert b.lease_until == t0 + timedelta(seconds=44)
                gate["release"].set()
            assert [getattr(h, "status", None) for h in handles] == ["success", "success"]

    async def test_without_the_shared_loop_each_engine_beats_itself(
            self, db_url: str, workspace_id: str) -> None:
        """A Runner used without the application's loop still refreshes its leases."""
        from starflow.runtime.runner import Runner
        from starflow.tokens import Keyring
        from starflow.workflow.decorators import definition_of

        clock = FakeClock()
        gate["started"], gate["release"] = anyio.Event(), anyio.Event()
        adapter = adapter_from_url(db_url, workspace_id=workspace_id)
        await adapter.open()
        try:
            runner = Runner(adapter, clock=clock, config=StarflowConfig(),
                            keyring=Keyring({"k": "a-test-secret-of-enough-length"}))
            assert not runner.heartbeats.running
            t0 = clock.now()
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: runner.start(definition_of(slow), (), {}, run_id=None,
                                                   inline=True))
                await gate["started"].wait()
                await clock.advance(timedelta(seconds=10))
                with anyio.fail_after(10):  # a real-time safety net only
                    while True:
                        [run] = await adapter.list_runs()
                        if run.last_heartbeat != t0:
                            break
                assert run.last_heartbeat == t0 + timedelta(seconds=10)
                gate["release"].set()
        finally:
            await adapter.close()


class TestHeartbeatLoopCost:
    """The shared loop wakes for the earliest lease only, never once per run."""

    async def test_runs_starting_behind_a_live_lease_do_not_wake_the_loop(
            self, monkeypatch: pytest.MonkeyPatch) -> None:
        import starflow.engine.heartbeats as heartbeats_module
        from starflow.engine.heartbeats import Heartbeats

        class Beating:
            def __init__(self) -> None:
                self.refreshed: list[object] = []

            async def refresh_lease_once(self) -> bool:
                self.refreshed.append(clock.now())
                return True

        clock = FakeClock()
        waits = 0
        real_wait_event = heartbeats_module.wait_event

        async def counting(*args: object) -> bool:
            nonlocal waits
            waits += 1
            return await real_wait_event(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(heartbeats_module, "wait_event", counting)
        beats = Heartbeats(clock, StarflowConfig())
        async with anyio.create_task_group() as tg:
            await tg.start(beats.run)
            first = Beating()
            beats.add(first)  # type: ignore[arg-type]
            await clock.settle()
            before = waits
            # 50 short runs, one after another, while `first` holds its lease.
            for _ in range(50):
                short = Beating()
                beats.add(short)  # type: ignore[arg-type]
                await clock.settle()
                beats.remove(short)  # type: ignore[arg-type]
            assert waits == before
            await clock.advance(timedelta(seconds=10))
            assert first.refreshed == [clock.now()]
            # The finished runs' entries are gone: nothing but `first` is scheduled.
            assert [entry[2] for entry in beats._due] == [first]
            tg.cancel_scope.cancel()
