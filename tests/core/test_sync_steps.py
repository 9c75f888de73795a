"""Plain ``def`` steps run in a worker thread, recorded like async steps (plain ``def``
workflows: tests/core/test_sync_workflows.py)."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta
from typing import Any

import anyio
import anyio.lowlevel
import anyio.to_thread
import pytest

import starflow
from starflow import (
    ConfigError,
    RetryPolicy,
    Starflow,
    StarflowConfig,
    StepFailed,
    WorkflowDefinitionError,
    step,
    wait_for,
    workflow,
)
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def env_kind(adapter_kind: str) -> str:
    if adapter_kind == "postgres":
        require_postgres()
    return adapter_kind


calls: list[dict[str, Any]] = []


@step
def charge(amount: int) -> str:
    """A blocking step: it records the thread it ran on and what the context says."""
    ctx = starflow.context()
    calls.append({"thread": threading.get_ident(), "node": ctx.node_id,
                  "key": ctx.idempotency_key, "run": ctx.run_id})
    return f"charged-{amount}"


@workflow(name="sync-step-then-wait")
async def charge_then_wait(amount: int) -> str:
    receipt = await charge(amount)
    await wait_for("go")
    return receipt


class TestSyncStep:
    async def test_runs_in_a_thread_recorded_and_not_rerun_on_replay(
            self, sf: Starflow) -> None:
        calls.clear()
        loop_thread = threading.get_ident()
        handle = await sf.run(charge_then_wait, 7)
        assert handle.status == "paused"
        assert len(calls) == 1
        assert calls[0]["thread"] != loop_thread  # a worker thread, not the loop's
        # The context (node id, idempotency key) reaches the thread.
        assert calls[0]["node"] == "step:charge#1"
        assert calls[0]["key"] == f"{handle.run_id}:step:charge#1"
        assert calls[0]["run"] == handle.run_id
        events = await sf.events(handle.run_id)
        done = [e for e in events if e.event_type == "node_complete"]
        assert [e.node_id for e in done] == ["step:charge#1"]
        done_handle = await sf.signal(handle.run_id, "go")
        assert done_handle.status == "success" and done_handle.result == "charged-7"
        assert len(calls) == 1  # replayed from its record, not called again

    async def test_retried_with_its_policy(self, sf: Starflow) -> None:
        attempts: list[int] = []

        @step(name=unique("sync-flaky"),
              retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(0)))
        def flaky() -> int:
            attempts.append(threading.get_ident())
            if len(attempts) < 3:
                raise ConnectionError(f"attempt {len(attempts)}")
            return len(attempts)

        @workflow(name=unique("sync-flaky-flow"))
        async def flow() -> int:
            return await flaky()

        handle = await sf.run(flow)
        assert (handle.status, handle.result) == ("success", 3)
        assert len(attempts) == 3 and threading.get_ident() not in attempts
        retries = [e.payload_json for e in await sf.events(handle.run_id)
                   if e.event_type == "node_retry"]
        assert [r["error"]["type"] for r in retries] == ["builtins.ConnectionError"] * 2

    async def test_exception_recorded_as_for_async_steps(self, sf: Starflow) -> None:
        @step(name=unique("sync-boom"))
        def boom(x: int) -> int:
            raise ValueError(f"bad amount {x}")

        @workflow(name=unique("sync-boom-flow"))
        async def flow() -> str:
            try:
                await boom(3)
            except StepFailed as exc:
                return f"{exc.error_type}: {exc.error_message}"
            return "no error"

        handle = await sf.run(flow)
        assert handle.result == "builtins.ValueError: bad amount 3"
        errors = [e.payload_json for e in await sf.events(handle.run_id)
                  if e.event_type == "node_error"]
        assert len(errors) == 1
        error = errors[0]["error"]
        assert (error["type"], error["message"]) == ("builtins.ValueError", "bad amount 3")
        assert error["attempts"] == 1

    async def test_a_blocked_sync_step_does_not_block_other_runs(self, sf: Starflow) -> None:
        """Two runs in flight: one's step blocks its thread, the other runs to its end."""
        entered, release = threading.Event(), threading.Event()

        @step(name=unique("sync-blocking"))
        def blocking() -> str:
            entered.set()
            if not release.wait(30):  # a blocking call (time.sleep, a sync client)
                raise TimeoutError("never released")
            return "unblocked"

        @step(name=unique("sync-quick"))
        def quick(n: int) -> int:
            return n + 1

        @workflow(name=unique("sync-slow-flow"))
        async def slow() -> str:
            return await blocking()

        @workflow(name=unique("sync-quick-flow"))
        async def fast(n: int) -> int:
            return await quick(n) + await quick(n)

        results: dict[str, Any] = {}
        try:
            async with anyio.create_task_group() as tg:
                async def run_slow() -> None:
                    results["slow"] = await sf.run(slow)

                tg.start_soon(run_slow)
                await anyio.to_thread.run_sync(entered.wait, 30)
                other = await sf.run(fast, 1)  # while the first run's thread blocks
                assert (other.status, other.result) == ("success", 4)
                assert "slow" not in results
                release.set()
        finally:
            release.set()
        assert (results["slow"].status, results["slow"].result) == ("success", "unblocked")

    async def test_called_outside_a_run_it_is_awaitable(self) -> None:
        with pytest.raises(starflow.OutsideWorkflow):
            await charge(2)  # the step reads starflow.context(), only set in a run

        @step(name=unique("sync-plain"))
        def where() -> int:
            return threading.get_ident()

        assert await where() != threading.get_ident()


class TestSyncStepTimeout:
    async def test_past_its_timeout_the_attempt_fails_and_the_thread_is_abandoned(
            self, env_kind: str) -> None:
        entered, release = threading.Event(), threading.Event()
        finished: list[str] = []

        @step(name=unique("sync-hangs"), timeout=timedelta(seconds=5))
        def hangs() -> str:
            entered.set()
            release.wait(30)
            finished.append("thread finished")
            return "too late"

        @workflow(name=unique("sync-hangs-flow"))
        async def flow() -> str:
            try:
                return await hangs()
            except StepFailed as exc:
                return exc.error_type

        try:
            async with WorkflowEnvironment(adapter=env_kind) as env:
                handle = await env.start(flow)
                assert await env.result(handle) == "starflow.errors.StepTimeout"
                # Its thread (if it started before the deadline) is still blocked:
                # abandoned, its result to be discarded.
                assert finished == []
        finally:
            release.set()


class TestThreadLimit:
    async def test_sync_step_threads_bounds_the_threads(self, sf: Starflow) -> None:
        """With one thread, a second sync step waits for the first to finish."""
        first_in, release = threading.Event(), threading.Event()
        order: list[str] = []

        @step(name=unique("sync-first"))
        def first() -> None:
            order.append("first in")
            first_in.set()
            release.wait(30)
            order.append("first out")

        @step(name=unique("sync-second"))
        def second() -> None:
            order.append("second in")

        @workflow(name=unique("sync-limit-a"))
        async def flow_a() -> None:
            await first()

        @workflow(name=unique("sync-limit-b"))
        async def flow_b() -> None:
            await second()

        async with Starflow(sf.adapter, config=StarflowConfig(sync_step_threads=1),
                                 maintenance=False) as app:
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(app.run, flow_a)
                    await anyio.to_thread.run_sync(first_in.wait, 30)
                    tg.start_soon(app.run, flow_b)
                    limiter = app.runner.runtime.step_threads()
                    with anyio.fail_after(30):  # the limiter has no event to wait on
                        while limiter.statistics().tasks_waiting == 0:
                            await anyio.lowlevel.checkpoint()  # until the second step queues
                    assert order == ["first in"]
                    release.set()
            finally:
                release.set()
        assert order == ["first in", "first out", "second in"]

    def test_bad_thread_count_refused(self) -> None:
        for bad in (0, -1, True, 1.5):
            with pytest.raises(ConfigError, match="sync_step_threads"):
                StarflowConfig(sync_step_threads=bad)  # type: ignore[arg-type]


class TestSyncDefinitions:
    def test_generator_steps_refused(self) -> None:
        def gen() -> Any:
            yield 1

        with pytest.raises(WorkflowDefinitionError, match="generator function"):
            step(name=unique("sync-gen"))(gen)

    async def test_a_def_returning_an_awaitable_is_an_error(self, sf: Starflow) -> None:
        async def later() -> int:
            return 1

        @step(name=unique("sync-returns-coro"))
        def returns_coro() -> Any:
            return later()

        @workflow(name=unique("sync-returns-coro-flow"))
        async def flow() -> str:
            try:
                await returns_coro()
            except StepFailed as exc:
                return exc.error_type
            return "no error"

        handle = await sf.run(flow)
        assert handle.result == "starflow.errors.WorkflowDefinitionError"


class TestSyncPoolStep:
    async def test_a_job_worker_runs_it_in_a_thread(self) -> None:
        pool = unique("sync-pool")
        threads: list[int] = []

        @step(name=unique("sync-remote"), pool=pool)
        def remote(x: int) -> int:
            threads.append(threading.get_ident())
            return x * 2

        @workflow(name=unique("sync-remote-flow"))
        async def flow() -> int:
            return await remote(21)

        async with WorkflowEnvironment() as env:
            handle = await env.run(flow)
            assert handle.status == "paused"
            jobs = env.app.job_worker(pool)
            async with anyio.create_task_group() as tg:
                tg.start_soon(jobs.work_once)
                await env.quiesce()
            assert await env.result(handle.run_id) == 42
            assert len(threads) == 1 and threads[0] != threading.get_ident()


class Ledger:
    def __init__(self) -> None:
        self.entries: list[int] = []

    @step(name="sync-ledger-add")
    def add(self, cents: int) -> int:
        self.entries.append(cents)
        return sum(self.entries)


ledger = Ledger()


@workflow(name="sync-method-step")
async def book(cents: int) -> int:
    await ledger.add(cents)
    return await ledger.add(cents)


class TestSyncMethodStep:
    async def test_a_sync_method_step_runs_on_its_instance(self, sf: Starflow) -> None:
        ledger.entries.clear()
        handle = await sf.run(book, 5)
        assert (handle.status, handle.result) == ("success", 10)
        assert ledger.entries == [5, 5]
        started = [e.payload_json["input"] for e in await sf.events(handle.run_id)
                   if e.event_type == "node_start"]
        assert started == [{"args": [5], "kwargs": {}}] * 2  # self is not recorded
