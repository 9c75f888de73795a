"""Deadlines (#17): ``@workflow(timeout=)``, ``sf.options(timeout=)`` and ``@step(timeout=)``,
on the runtime's clock (the fake clock here)."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest

import starflow
from starflow import (
    ConfigError,
    RetryPolicy,
    Starflow,
    StepFailed,
    WorkflowDefinitionError,
    WorkflowFailed,
    sleep,
    step,
    wait_for,
    workflow,
)
from starflow_testing import WorkflowEnvironment
from tests.conftest import require_postgres


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@workflow(name="dl-sleeper", timeout=timedelta(hours=1))
async def sleeper(hours: float) -> str:
    await sleep(timedelta(hours=hours))
    return "woke"


@workflow(name="dl-plain")
async def plain(hours: float) -> str:
    await sleep(timedelta(hours=hours))
    return "woke"


@workflow(name="dl-child-waiter")
async def child_waiter() -> str:
    return str(await wait_for("never"))


@workflow(name="dl-parent", timeout=timedelta(minutes=30))
async def parent_with_child() -> str:
    handle = await starflow.start_child(child_waiter)
    return await handle.result()


@step(name="dl-hangs")
async def hangs() -> None:
    await anyio.Event().wait()  # never set: only a deadline ends it


@workflow(name="dl-running", timeout=timedelta(minutes=5))
async def running() -> None:
    await hangs()


@pytest.fixture
def env_kind(adapter_kind: str) -> str:
    if adapter_kind == "postgres":
        require_postgres()
    return adapter_kind


class TestWorkflowTimeout:
    async def test_a_paused_run_times_out_at_its_deadline(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(sleeper, 2)
            started = env.now()
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle)
            assert info.value.error_type == "WorkflowTimeout"
            run = await env.get_run(handle.run_id)
            assert run.status == "error"
            assert run.deadline_at == started + timedelta(hours=1)
            assert env.now() == started + timedelta(hours=1)  # not the 2 h sleep

    async def test_within_its_deadline_the_run_succeeds(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(sleeper, 0.5)
            assert await env.result(handle) == "woke"

    async def test_a_running_step_is_stopped_at_the_deadline(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(running)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle)
            assert info.value.error_type == "WorkflowTimeout"
            assert (await env.get_run(handle.run_id)).status == "error"

    async def test_options_timeout_overrides_per_run(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            short = await env.app.options(timeout=timedelta(minutes=10)).start(plain, 1)
            longer = await env.app.options(timeout=timedelta(hours=3)).start(sleeper, 2)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(short)
            assert info.value.error_type == "WorkflowTimeout"
            assert await env.result(longer) == "woke"

    async def test_attached_children_are_cancelled_with_a_timed_out_parent(
            self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(parent_with_child)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle)
            assert info.value.error_type == "WorkflowTimeout"
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            await env.run_until_idle()
            assert (await env.get_run(kid.id)).status == "cancelled"

    async def test_the_deadline_survives_a_restart(self, env_kind: str, tmp_path: Path
                                                   ) -> None:
        """The deadline is the row's: a new process (another app) honours it."""
        if env_kind == "memory":
            pytest.skip("needs a database two apps share")
        url = (f"sqlite:///{tmp_path}/restart.db" if env_kind == "sqlite"
               else os.environ["STARFLOW_TEST_POSTGRES_URL"])
        workspace = unique("ws")
        async with WorkflowEnvironment(adapter=url, workspace_id=workspace,
                                       time_skipping=False) as first:
            handle = await first.start(sleeper, 5)
            await first.run_until_idle()
            run = await first.get_run(handle.run_id)
            assert run.status == "paused"
            assert run.deadline_at == run.started_at + timedelta(hours=1)  # type: ignore[operator]
            waits = await first.adapter.list_waits(handle.run_id)
            assert [w.deadline for w in waits] == [run.deadline_at]
            started = first.now()
        async with WorkflowEnvironment(adapter=url, workspace_id=workspace,
                                       start=started) as second:
            with pytest.raises(WorkflowFailed) as info:
                await second.result(handle.run_id)
            assert info.value.error_type == "WorkflowTimeout"
            assert second.now() == started + timedelta(hours=1)


class TestStepTimeout:
    async def test_a_slow_attempt_counts_as_failed_and_is_retried(self,
                                                                 env_kind: str) -> None:
        attempts: list[int] = []

        @step(name=unique("dl-slow"), timeout=timedelta(seconds=10),
              retry=RetryPolicy(max_attempts=3, initial_interval=timedelta(seconds=1)))
        async def slow() -> str:
            attempts.append(len(attempts) + 1)
            if len(attempts) < 3:
                await anyio.Event().wait()  # hangs: the timeout cancels it
            return "third time"

        @workflow(name=unique("dl-slow-flow"))
        async def flow() -> str:
            return await slow()

        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(flow)
            assert await env.result(handle) == "third time"
            assert attempts == [1, 2, 3]
            retries = [e.payload_json for e in await env.events(handle.run_id)
                       if e.event_type == "node_retry"]
            assert [r["error"]["type"] for r in retries] == ["starflow.errors.StepTimeout"] * 2

    async def test_past_the_last_attempt_the_step_fails(self, env_kind: str) -> None:
        @step(name=unique("dl-never"), timeout=timedelta(seconds=5))
        async def never() -> None:
            await anyio.Event().wait()

        @workflow(name=unique("dl-never-flow"))
        async def flow() -> str:
            try:
                await never()
            except StepFailed as exc:
                return exc.error_type
            return "finished"

        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(flow)
            assert await env.result(handle) == "starflow.errors.StepTimeout"


class TestBadTimeouts:
    """Refused with a StarflowError before anything is written."""

    def test_bad_workflow_and_step_timeouts(self) -> None:
        async def fn() -> None:
            return None

        for bad in (timedelta(0), timedelta(seconds=-1), 5, "1h"):
            with pytest.raises(WorkflowDefinitionError, match="timeout must be a positive"):
                workflow(name=unique("dl-bad"), timeout=bad)(fn)  # type: ignore[arg-type]
            with pytest.raises(WorkflowDefinitionError, match="timeout must be a positive"):
                step(name=unique("dl-bad-step"), timeout=bad)(fn)  # type: ignore[arg-type]

    async def test_bad_options_timeout(self) -> None:
        async with WorkflowEnvironment() as env:
            with pytest.raises(ConfigError, match="timeout must be a positive"):
                env.app.options(timeout=timedelta(0))
            assert await env.list_runs() == []


class TestPoolStepTimeout:
    async def test_a_job_workers_attempt_is_bounded_too(self) -> None:
        """A ``@step(pool=..., timeout=...)`` attempt on a job worker: cancelled past
        its timeout on the runtime's clock, a failed attempt like in-process."""
        pool = unique("tpool")

        @step(name=unique("dl-remote"), pool=pool, timeout=timedelta(seconds=30))
        async def remote() -> str:
            await anyio.Event().wait()
            return "never"

        @workflow(name=unique("dl-remote-flow"))
        async def flow() -> str:
            try:
                return await remote()
            except StepFailed as exc:
                return exc.error_type

        async with WorkflowEnvironment() as env:
            handle = await env.run(flow)
            assert handle.status == "paused"
            jobs = env.app.job_worker(pool)
            async with anyio.create_task_group() as tg:
                tg.start_soon(jobs.work_once)
                await env.quiesce()
                await env.advance(timedelta(seconds=31))
            assert await env.result(handle.run_id) == "starflow.errors.StepTimeout"


@workflow(name="dl-chain", timeout=timedelta(hours=1))
async def chain_sleeper(links: int) -> str:
    await sleep(timedelta(minutes=40))
    if links > 1:
        starflow.continue_as_new(links - 1)
    return "done"


class TestChainDeadline:
    """The deadline bounds a ``continue_as_new`` chain (Temporal's execution timeout),
    not each of its runs."""

    async def test_the_next_run_keeps_the_deadline(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            started = env.now()
            handle = await env.start(chain_sleeper, 2)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle)  # follows the chain
            assert info.value.error_type == "WorkflowTimeout"
            assert env.now() == started + timedelta(hours=1)  # not 80 minutes
            runs = await env.list_runs(template_id="dl-chain")
            assert len(runs) == 2
            assert {r.deadline_at for r in runs} == {started + timedelta(hours=1)}
            assert sorted(r.status for r in runs) == ["error", "success"]


class PolledClock:
    """Wall-clock-like time for the tests: it moves only when a step moves it, and a
    sleeper sees that only at its own next check (a loop turn), as a real sleeper
    that cannot run while another task holds the event loop."""

    def __init__(self) -> None:
        self.current = datetime(2030, 1, 1, tzinfo=UTC)

    def now(self) -> datetime:
        return self.current

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self.current + timedelta(seconds=max(0.0, seconds)))

    async def sleep_until(self, deadline: datetime) -> None:
        await anyio.lowlevel.checkpoint()
        while self.current < deadline:
            await anyio.lowlevel.checkpoint()


POLLED = PolledClock()
#: Runs of the forever chain started, so the test ends even when the deadline is missed.
CHAIN_LINKS: list[int] = []
MAX_LINKS = 50


@step(name="dl-minute-passes")
async def minute_passes() -> None:
    POLLED.current += timedelta(minutes=1)


@workflow(name="dl-forever", timeout=timedelta(minutes=10))
async def forever(n: int) -> int:
    CHAIN_LINKS.append(n)
    if n >= MAX_LINKS:
        return n  # the deadline was missed: stop here, the test fails
    await minute_passes()
    starflow.continue_as_new(n + 1)


class TestInlineChainDeadline:
    """An inline ``continue_as_new`` chain (``sf.run``) ends at its deadline: every
    execution checks it before the body runs, not only the watchdog task."""

    async def test_the_chain_ends_with_workflow_timeout(self, db_url: str,
                                                        workspace_id: str) -> None:
        CHAIN_LINKS.clear()
        started = POLLED.now()
        async with Starflow.open(db_url, clock=POLLED, workspace_id=workspace_id,
                                 maintenance=False) as sf:
            handle = await sf.run(forever, 0)
            assert handle.status == "error"
            with pytest.raises(WorkflowFailed) as info:
                await sf.result(handle.run_id)  # the chain's last run
            assert info.value.error_type == "WorkflowTimeout"
            # One minute per run: the 11th run starts past the 10-minute deadline.
            assert len(CHAIN_LINKS) <= 11
            runs = await sf.list_runs(template_id="dl-forever")
            assert {r.deadline_at for r in runs} == {started + timedelta(minutes=10)}
            assert sorted(r.status for r in runs).count("error") == 1


@workflow(name="dl-quick", timeout=timedelta(minutes=5))
async def quick() -> str:
    return "ran"


@workflow(name="dl-awaits-unserved")
async def awaits_unserved() -> str:
    handle = await starflow.start_child(quick, pool="nobody-serves-this")
    try:
        return await handle.result()
    except WorkflowFailed as exc:
        return f"{exc.error_type} ({exc.run_id})"


class TestQueuedDeadline:
    """A queued run past its deadline ends with ``WorkflowTimeout`` at the deadline,
    from the timer loop: no worker has to claim it first."""

    async def test_a_queued_run_no_worker_claims_ends_at_its_deadline(
            self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            started = env.now()
            handle = await env.app.options(timeout=timedelta(minutes=10),
                                           pool="nobody-serves-this").start(plain, 0.1)
            with pytest.raises(WorkflowFailed) as info:
                await env.result(handle)
            assert info.value.error_type == "WorkflowTimeout"
            assert "while queued" in (info.value.error_message or "")
            assert env.now() == started + timedelta(minutes=10)
            run = await env.get_run(handle.run_id)
            assert (run.status, run.claim_state, run.claim_attempts) == ("error", "failed", 0)
            assert run.completed_at == started + timedelta(minutes=10)

    async def test_the_parent_of_a_timed_out_queued_child_is_woken(
            self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            started = env.now()
            handle = await env.start(awaits_unserved)
            text = await env.result(handle)
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            assert text == f"WorkflowTimeout ({kid.id})"
            assert (kid.status, kid.claim_attempts) == ("error", 0)
            assert env.now() == started + timedelta(minutes=5)

    async def test_run_until_idle_skips_to_it(self, env_kind: str) -> None:
        """A deadline is a timer: with nothing else left, time skips to it."""
        async with WorkflowEnvironment(adapter=env_kind) as env:
            started = env.now()
            handle = await env.app.options(timeout=timedelta(hours=2),
                                           pool="nobody-serves-this").start(plain, 0.1)
            await env.run_until_idle()
            run = await env.get_run(handle.run_id)
            assert (run.status, run.completed_at) == ("error", started + timedelta(hours=2))

    async def test_the_timer_loop_ends_it_not_the_env(self, env_kind: str) -> None:
        """Without time skipping: the clock moved by hand past the deadline, the
        maintenance timer loop ends the queued run."""
        async with WorkflowEnvironment(adapter=env_kind, time_skipping=False) as env:
            handle = await env.app.options(timeout=timedelta(minutes=10),
                                           pool="nobody-serves-this").start(plain, 0.1)
            await env.advance(timedelta(minutes=9))
            await env.run_until_idle()
            assert (await env.get_run(handle.run_id)).status == "queued"
            await env.advance(timedelta(minutes=1))
            await env.run_until_idle()
            run = await env.get_run(handle.run_id)
            assert run.status == "error"
            assert run.failure is not None and run.failure.type == "WorkflowTimeout"


@workflow(name="dl-child-timeout-parent")
async def parent_child_timeout(hours: float, minutes: float) -> str:
    handle = await starflow.start_child(plain, hours, timeout=timedelta(minutes=minutes))
    try:
        return await handle.result()
    except WorkflowFailed as exc:
        return f"{exc.error_type} ({exc.run_id})"


@workflow(name="dl-child-timeout-bad")
async def parent_bad_child_timeout(kind: int) -> str:
    bad: object = [timedelta(0), 5, timedelta(days=-1)][kind]
    try:
        await starflow.start_child(plain, 0.1, timeout=bad)  # type: ignore[arg-type]
    except starflow.InvalidArgument as exc:
        return str(exc)
    return "accepted"


class TestChildTimeout:
    """#30: ``start_child(..., timeout=)`` sets one child run's deadline."""

    async def test_the_child_ends_at_its_deadline_and_the_parent_sees_it_failed(
            self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            started = env.now()
            handle = await env.start(parent_child_timeout, 2, 10)
            text = await env.result(handle)
            [kid] = await env.list_runs(parent_run_id=handle.run_id)
            assert text == f"WorkflowTimeout ({kid.id})"
            assert kid.status == "error"
            assert kid.deadline_at == started + timedelta(minutes=10)
            assert env.now() == started + timedelta(minutes=10)  # not the child's 2 h

    async def test_within_its_timeout_the_child_returns(self, env_kind: str) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            handle = await env.start(parent_child_timeout, 0.5, 60)
            assert await env.result(handle) == "woke"

    async def test_a_bad_child_timeout_is_refused_before_writing(self, env_kind: str
                                                                 ) -> None:
        async with WorkflowEnvironment(adapter=env_kind) as env:
            for kind in range(3):
                handle = await env.start(parent_bad_child_timeout, kind)
                text = await env.result(handle)
                assert "timeout must be a positive timedelta" in text, text
                assert await env.list_runs(parent_run_id=handle.run_id) == []
