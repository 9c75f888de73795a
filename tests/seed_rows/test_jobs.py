"""Worker jobs: @step(pool=...) dispatches to job workers; leases, failure, reclaim."""

from __future__ import annotations

import uuid
from datetime import timedelta

import anyio
import msgspec

from starflow import Starflow, StarflowConfig, StepFailed, step, workflow
from starflow.runtime.jobs import current_job
from starflow.workflow.context import IDEMPOTENCY_KEY
from starflow_testing import FakeClock

from .conftest import eventually, unique

POOL = f"gpu-{uuid.uuid4().hex[:6]}"
seen_keys: list[str] = []


@step(name="jobs_render", pool=POOL)
async def render(x: int) -> int:
    job = current_job()
    assert job is not None
    seen_keys.append(job.idempotency_key)
    return x * 2


@step(name="jobs_explode", pool=POOL)
async def explode(x: int) -> int:
    raise ValueError(f"cannot render {x}")


def render_workflow() -> object:
    @workflow(name=unique("render"))
    async def wf(x: int) -> int:
        return await render(x) + 1

    return wf


class TestDispatch:
    """The workflow writes a job, waits durably, and resumes with the job's result."""

    async def test_dispatch_and_completion(self, sf: Starflow) -> None:
        seen_keys.clear()
        h = await sf.run(render_workflow(), 20)  # type: ignore[arg-type]
        assert h.status == "paused" and h.waiting_for is None and h.wake_token
        jobs = await sf.adapter.list_jobs(run_id=h.run_id)
        key = f"{h.run_id}:step:jobs_render#1"
        assert [(j.status, j.pool, j.idempotency_key) for j in jobs] == [("queued", POOL, key)]
        run = await sf.get_run(h.run_id)
        assert run.checkpoint_json is not None
        assert run.checkpoint_json["variables"][IDEMPOTENCY_KEY] == {"step:jobs_render#1": key}

        assert await sf.job_worker(POOL).work_once() == 1
        assert await sf.result(h.run_id) == 41
        job = await sf.adapter.get_job(jobs[0].id)
        assert job is not None and (job.status, job.result, job.attempts) == ("complete", 40, 1)
        assert seen_keys == [key]
        assert await sf.job_worker(POOL).work_once() == 0  # nothing left, nothing re-run

    async def test_failure_raises_step_failed(self, sf: Starflow) -> None:
        @workflow(name=unique("explode"))
        async def wf(x: int) -> str:
            try:
                await explode(x)
            except StepFailed as exc:
                return f"{exc.node_id}|{exc.error_type}|{exc.error_message}"
            return "unreachable"

        h = await sf.run(wf, 7)
        assert await sf.job_worker(POOL).work_once() == 1
        assert await sf.result(h.run_id) == (
            "step:jobs_explode#1|builtins.ValueError|cannot render 7")
        (job,) = await sf.adapter.list_jobs(run_id=h.run_id)
        assert job.status == "failed" and job.error["type"] == "builtins.ValueError"

    async def test_retry_dispatches_the_failed_job_again(self, sf: Starflow) -> None:
        """A run failed by its job's step: a retry queues the job again (same row and
        idempotency key; the fix deployed to the job workers) and the run ends with
        its result."""
        fixed = {"on": False}

        @step(name=unique("jobs_flaky"), pool=POOL)
        async def flaky(x: int) -> int:
            if not fixed["on"]:
                raise ValueError(f"cannot render {x}")
            return x * 3

        @workflow(name=unique("flaky"))
        async def wf(x: int) -> int:
            return await flaky(x)

        h = await sf.run(wf, 2)
        assert await sf.job_worker(POOL).work_once() == 1
        assert (await sf.get_run(h.run_id)).status == "error"
        (failed,) = await sf.adapter.list_jobs(run_id=h.run_id)
        assert failed.status == "failed"
        fixed["on"] = True
        again = await sf.retry(h.run_id)
        assert again.status == "paused"
        (queued,) = await sf.adapter.list_jobs(run_id=h.run_id)
        assert (queued.id, queued.status, queued.attempts, queued.error) == (
            failed.id, "queued", 0, None)
        assert await sf.job_worker(POOL).work_once() == 1
        assert await sf.result(h.run_id) == 6
        (done,) = await sf.adapter.list_jobs(run_id=h.run_id)
        assert (done.status, done.result, done.idempotency_key) == (
            "complete", 6, failed.idempotency_key)

    async def test_worker_loop_serves_jobs(self, sf: Starflow) -> None:
        worker = sf.job_worker(POOL, concurrency=2)
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.run)
            h = await sf.run(render_workflow(), 1)  # type: ignore[arg-type]
            assert await sf.result(h.run_id) == 3
            worker.stop()
        assert worker.completed == 1


class TestLeases:
    """A job whose worker dies is claimed again once its lease has expired."""

    async def test_dead_workers_job_is_reclaimed(self, sf: Starflow, clock: FakeClock) -> None:
        h = await sf.run(render_workflow(), 5)  # type: ignore[arg-type]
        now = clock.now()
        (claimed,) = await sf.adapter.claim_jobs("dead-worker", pool=POOL, now=now,
                                                 lease_until=now + sf.config.lease_ttl)
        live = sf.job_worker(POOL)
        assert await live.work_once() == 0  # leased by the dead worker
        await clock.advance(sf.config.lease_ttl + timedelta(seconds=1))
        assert await live.work_once() == 1
        assert await sf.result(h.run_id) == 11
        job = await sf.adapter.get_job(claimed.id)
        assert job is not None and (job.status, job.attempts, job.leased_by) == (
            "complete", 2, None)
        # The dead worker cannot extend a lease it lost.
        assert not await sf.adapter.heartbeat_job(claimed.id, "dead-worker", now=clock.now(),
                                                  lease_until=clock.now())

    async def test_job_that_keeps_losing_workers_fails(self, sf: Starflow,
                                                       clock: FakeClock) -> None:
        h = await sf.run(render_workflow(), 5)  # type: ignore[arg-type]
        for i in range(sf.config.max_claim_attempts):
            now = clock.now()
            assert await sf.adapter.claim_jobs(f"dead-{i}", pool=POOL, now=now,
                                               lease_until=now + sf.config.lease_ttl)
            await clock.advance(sf.config.lease_ttl + timedelta(seconds=1))
        assert await sf.job_worker(POOL).work_once() == 1
        run = await sf.get_run(h.run_id)
        assert run.status == "error" and "WorkerLost" in (run.error or "")


    async def test_job_attempts_follow_the_workflows_max_claim_attempts(
            self, sf: Starflow, clock: FakeClock) -> None:
        """@workflow(max_claim_attempts=5): its job survives 4 lost workers, not 3."""
        assert sf.config.max_claim_attempts == 3

        @workflow(name=unique("render5"), max_claim_attempts=5)
        async def wf(x: int) -> int:
            return await render(x) + 1

        h = await sf.run(wf, 5)
        (job,) = await sf.adapter.list_jobs(run_id=h.run_id)
        assert job.max_attempts == 5 == (await sf.get_run(h.run_id)).max_claim_attempts
        for i in range(4):
            now = clock.now()
            assert await sf.adapter.claim_jobs(f"dead-{i}", pool=POOL, now=now,
                                               lease_until=now + sf.config.lease_ttl)
            await clock.advance(sf.config.lease_ttl + timedelta(seconds=1))
        assert await sf.job_worker(POOL).work_once() == 1  # the 5th claim runs it
        assert await sf.result(h.run_id) == 11

    async def test_job_attempts_default_to_the_config(self, db_url: str, workspace_id: str,
                                                      clock: FakeClock,
                                                      config: StarflowConfig) -> None:
        """Without a workflow setting, a job's max_attempts is config.max_claim_attempts."""
        config = msgspec.structs.replace(config, max_claim_attempts=7)
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock,
                                 config=config) as sf:
            h = await sf.run(render_workflow(), 1)  # type: ignore[arg-type]
            (job,) = await sf.adapter.list_jobs(run_id=h.run_id)
            assert job.max_attempts == 7


gate_started = anyio.Event()
gate_finished: list[int] = []


@step(name="jobs_slow", pool=POOL)
async def slow(x: int) -> int:
    gate_started.set()
    await anyio.sleep_forever()
    gate_finished.append(x)  # pragma: no cover - the step is cancelled before
    return x


class TestCancel:
    """Cancelling a run waiting on a job fails the job: its step never runs afterwards."""

    async def test_queued_job_of_a_cancelled_run_is_never_run(self, sf: Starflow) -> None:
        seen_keys.clear()
        h = await sf.run(render_workflow(), 3)  # type: ignore[arg-type]
        assert h.status == "paused"
        await sf.cancel(h.run_id, force=True)
        (job,) = await sf.adapter.list_jobs(run_id=h.run_id)
        assert (job.status, job.error["type"]) == ("failed", "starflow.errors.RunCancelled")
        assert job.leased_by is None and job.completed_at is not None
        assert await sf.job_worker(POOL).work_once() == 0  # nothing claimable
        assert seen_keys == []  # the step never ran
        run = await sf.get_run(h.run_id)
        assert run.status == "cancelled"

    async def test_claimed_job_stops_at_its_next_heartbeat(self, sf: Starflow,
                                                           clock: FakeClock) -> None:
        global gate_started
        gate_started = anyio.Event()

        @workflow(name=unique("slow"))
        async def wf(x: int) -> int:
            return await slow(x)

        h = await sf.run(wf, 4)
        worker = sf.job_worker(POOL)
        async with anyio.create_task_group() as tg:
            tg.start_soon(worker.work_once)
            await gate_started.wait()
            await sf.cancel(h.run_id, force=True)
            await clock.advance(sf.config.heartbeat_interval)  # the heartbeat finds it gone

            async def stopped() -> bool:
                return worker.active == 0

            await eventually(stopped, sf.adapter)
        (job,) = await sf.adapter.list_jobs(run_id=h.run_id)
        assert (job.status, job.error["type"]) == ("failed", "starflow.errors.RunCancelled")
        assert gate_finished == []
        assert (await sf.get_run(h.run_id)).status == "cancelled"
        assert [e.event_type for e in await sf.events(h.run_id)] == [
            "node_start", "run_paused", "run_cancelled"]
