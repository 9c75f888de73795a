"""Claims: the claim path, exactly-once claiming, pools, unregistered workflows, requeues."""

from __future__ import annotations

from contextlib import AsyncExitStack
from datetime import timedelta

import anyio
import msgspec
import pytest

import starflow
from starflow import WorkflowContext
from starflow.adapters.base import WorkflowStateAdapter
from starflow.records import StartOptions
from starflow.runtime.worker import Worker
from starflow_testing import FakeClock, FaultInjectingAdapter, WorkflowEnvironment, capture_logs
from starflow_testing._quiesce import quiesce
from starflow_testing.faults import FaultSpec

from . import flows
from .conftest import CONFIG, OpenApp
from .support import Probe


async def claim_all(worker: Worker) -> None:
    """Claim and drive until the queue is empty and this worker is idle (no polling)."""
    async with anyio.create_task_group() as tg:
        while True:
            settled = worker.runner.settled
            n = await worker.claim_once(tg)
            if n == 0:
                if worker.active == 0:
                    return
                await settled.wait()


async def queue_raw(probe: Probe, workflow: str, version: int, clock: FakeClock,
                    args: list[object] | None = None, start_mode: str = "queued") -> str:
    """Queue a run row directly, as another deployment would."""
    import uuid

    run_id = str(uuid.uuid4())
    ctx = WorkflowContext(run_id=run_id, workflow=workflow, version=version,
                          workspace_id=probe.workspace_id, env=probe.env)
    await probe.on_run_start(run_id, ctx, StartOptions(
        input={"args": ["x"] if args is None else args, "kwargs": {}}, status="queued",
        claim_state="queued", start_mode=start_mode), now=clock.now())
    return run_id


class TestClaimPath:
    """queued -> claimed -> running -> complete, one claim attempt."""

    async def test_states_along_the_claim_path(self, open_app: OpenApp) -> None:
        """The claim marks the run claimed; the engine's guarded write_lease makes it running."""
        async with open_app() as (sf, probe):
            handle = await sf.start(flows.one_step, "a")
            assert handle.status == "queued"
            run = await sf.get_run(handle.run_id)
            assert (run.status, run.claim_state, run.claim_attempts) == ("queued", "queued", 0)
            now = sf.clock.now()
            [claimed] = await sf.adapter.claim_runs(sf.runner_id, pool=None, now=now,
                                                    lease_until=now + timedelta(seconds=30))
            assert (claimed.status, claimed.claim_state, claimed.claim_attempts) == (
                "running", "claimed", 1)
            assert claimed.leased_by == sf.runner_id
            done = await sf.runner.drive(claimed)
            assert done.status == "success" and done.result == "a"
            run = await sf.get_run(handle.run_id)
            assert (run.status, run.claim_state, run.claim_attempts) == ("success", "complete", 1)
            assert (run.leased_by, run.lease_until) == (None, None)
            # claimed -> running rides on the first boundary unit, guarded by the lease
            first = next(methods for methods, _ in probe.units if "on_node_start" in methods)
            assert first == ["write_lease", "on_node_start"]

    async def test_cancelled_between_claim_and_start(self, open_app: OpenApp) -> None:
        """A run cancelled after its claim but before its engine started never starts."""
        async with open_app() as (sf, _):
            handle = await sf.start(flows.one_step, "b")
            now = sf.clock.now()
            [claimed] = await sf.adapter.claim_runs(sf.runner_id, pool=None, now=now,
                                                    lease_until=now + timedelta(seconds=30))
            await sf.cancel(handle.run_id)
            out = await sf.runner.drive(claimed)
            assert out.status == "cancelled"
            assert flows.EXECUTED == []


class TestExactlyOnce:
    """Several workers (own runner, own connection) claim each queued run exactly once."""

    async def test_n_workers_m_runs(self, open_app: OpenApp) -> None:
        async with AsyncExitStack() as stack:
            apps = [await stack.enter_async_context(open_app()) for _ in range(5)]
            starter = apps[0][0]
            run_ids = [(await starter.start(flows.one_step, f"r{i}")).run_id for i in range(40)]
            workers = [sf.worker(concurrency=3) for sf, _ in apps]
            async with anyio.create_task_group() as tg:
                for w in workers:
                    tg.start_soon(claim_all, w)
            claims = [(sf.runner_id, rid) for sf, probe in apps for _, ids in probe.claims
                      for rid in ids]
            assert sorted(rid for _, rid in claims) == sorted(run_ids)  # once each
            for sf, _ in apps[:1]:
                for run_id in run_ids:
                    run = await sf.get_run(run_id)
                    assert (run.status, run.claim_state, run.claim_attempts) == (
                        "success", "complete", 1)
            assert len(flows.EXECUTED) == len(set(flows.EXECUTED)) == 40

    async def test_pool_affinity(self, open_app: OpenApp) -> None:
        """A pool's worker takes its pool's runs and unpooled ones, never another pool's."""
        async with open_app() as (sf, _):
            anyone = (await sf.start(flows.one_step, "any")).run_id
            # pool= is a keyword option of start(), outside the workflow's signature.
            gpu = (await sf.start(flows.one_step, "gpu", pool="gpu")).run_id  # type: ignore[call-arg]
            cpu = (await sf.start(flows.one_step, "cpu", pool="cpu")).run_id  # type: ignore[call-arg]
            await claim_all(sf.worker(pool="gpu"))
            assert {r: (await sf.get_run(r)).status for r in (anyone, gpu, cpu)} == {
                anyone: "success", gpu: "success", cpu: "queued"}
            await claim_all(sf.worker(pool=None))
            assert (await sf.get_run(cpu)).status == "queued"
            await claim_all(sf.worker(pool="cpu"))
            assert (await sf.get_run(cpu)).status == "success"


class TestUnregistered:
    """Runs of workflows this process does not have are left for a worker that has them."""

    async def test_unknown_workflow_is_never_claimed(self, open_app: OpenApp,
                                                     clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = await queue_raw(probe, "wt-lives-elsewhere", 1, clock)
            await claim_all(sf.worker())
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.claim_attempts, run.leased_by) == (
                "queued", "queued", 0, None)

    async def test_unknown_version_is_released_and_logged(self, open_app: OpenApp,
                                                         clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            run_id = await queue_raw(probe, "wt-one-step", 7, clock)
            worker = sf.worker()
            with capture_logs() as logs:
                async with anyio.create_task_group() as tg:
                    assert await worker.claim_once(tg) == 1
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.leased_by, run.lease_until) == (
                "queued", "queued", None, None)
            assert run.claim_attempts == 1  # it counts claims
            assert worker.released == 1
            assert flows.EXECUTED == []
            assert any(e["event"].startswith("claimed a run this process cannot execute")
                       and e["run_id"] == run_id for e in logs)


class TestUndecodableInput:
    """A run whose recorded input no longer fits the workflow's signature fails with why."""

    async def test_claimed_run_fails_at_once_with_the_decoding_error(
            self, open_app: OpenApp, clock: FakeClock) -> None:
        async with open_app() as (sf, probe):
            # Recorded by code whose `tag` was not a str (the annotation changed since).
            run_id = await queue_raw(probe, "wt-one-step", 1, clock, args=[{"n": 1}])
            await claim_all(sf.worker())
            run = await sf.get_run(run_id)
            assert (run.status, run.claim_state, run.leased_by, run.lease_until) == (
                "error", "failed", None, None)
            assert run.claim_attempts == 1
            assert run.error is not None and run.error.startswith("SerializationError: ")
            assert "argument 'tag'" in run.error and run_id in run.error
            assert flows.EXECUTED == []
            # Nothing left for the sweep: it is not retried as a lost runner.
            await clock.advance(CONFIG.lease_ttl + timedelta(seconds=1))
            assert await sf.sweep() == 0
            assert "runner_lost" not in [e.event_type for e in await sf.events(run_id)]


class TestRequeue:
    """Wakes of worker-served runs go back to the queue, and a worker finishes them."""

    async def test_signal_requeues_for_workers(self, open_app: OpenApp) -> None:
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.signal_flow, "s")).run_id
            worker = sf.worker()
            await claim_all(worker)
            assert (await sf.get_run(run_id)).status == "paused"
            handle = await sf.signal(run_id, "go", {"by": "ada"})
            assert handle.status == "queued"  # not driven in the caller
            run = await sf.get_run(run_id)
            assert (run.claim_state, run.leased_by) == ("queued", None)
            await claim_all(worker)
            assert await sf.result(run_id) == "s-ada"
            assert sum(len(ids) for _, ids in probe.claims) == 2
            assert flows.EXECUTED.count(f"{run_id}:step:note#1") == 1

    async def test_durable_timer_fires_in_a_worker_deployment(
            self, open_app: OpenApp, clock: FakeClock) -> None:
        """A worker with maintenance fires the sleep; the run is requeued and finished."""
        config = msgspec.structs.replace(CONFIG, poll_interval=timedelta(minutes=10))
        async with open_app(config) as (starter, _), open_app(config) as (host, probe):
            run_id = (await starter.start(flows.sleep_flow, "t")).run_id
            worker = host.worker(maintenance=True)
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await probe.until_run(run_id, lambda r: r.status == "paused")
                for _ in range(30):
                    await clock.advance(timedelta(minutes=10))
                    # This clock's settle sees a task waiting on the database thread
                    # as blocked: let the timer loop's reads finish and it re-arm
                    # before time moves again.
                    await quiesce(probe.inner.idle)
                    run = await probe.inner.get_run(run_id)
                    if run is not None and run.status != "paused":
                        break
                await probe.until_run(run_id, lambda r: r.status == "success")
                await worker.drain()
            assert await starter.result(run_id) == "t-woke"
            events = await starter.events(run_id)
            paused, resumed = (next(e.created_at for e in events if e.event_type == kind)
                               for kind in ("run_paused", "run_resumed"))
            assert resumed - paused >= timedelta(hours=1)

    async def test_boot_sweep_runs_before_the_first_claim(
            self, open_app: OpenApp, clock: FakeClock) -> None:
        """A worker starting up requeues orphans of a dead runner first, then takes them."""
        async with open_app() as (sf, probe):
            run_id = (await sf.start(flows.one_step, "orphan")).run_id
            past = clock.now() - timedelta(seconds=60)
            await sf.adapter.claim_runs("dead-runner", pool=None, now=past,
                                        lease_until=past + timedelta(seconds=30))
            worker = sf.worker()
            async with anyio.create_task_group() as tg:
                tg.start_soon(worker.run)
                await probe.until_run(run_id, lambda r: r.status == "success")
                await worker.drain()
            assert probe.sweeps and probe.sweeps[0][1][0].run_id == run_id
            events = [e.event_type for e in await sf.events(run_id)]
            assert events[0] == "runner_lost"
            assert (await sf.get_run(run_id)).claim_attempts == 2


@starflow.step
async def w_claims_double(n: int) -> int:
    return 2 * n


@starflow.workflow(name="w_claims_read_fails", max_claim_attempts=2)
async def read_fails_flow(n: int) -> int:
    return await w_claims_double(n)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def env_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "postgres":
        from conftest import require_postgres  # the suite's root conftest

        require_postgres()
    return str(request.param)


class TestStartReadFailure:
    """A read failing between the claim and the engine start hands the run straight back."""

    POLL = timedelta(seconds=1)

    def env(self, kind: str, fail: dict[str, FaultSpec]) -> tuple[WorkflowEnvironment,
                                                                  list[FaultInjectingAdapter]]:
        faults: list[FaultInjectingAdapter] = []

        def wrap(adapter: WorkflowStateAdapter) -> WorkflowStateAdapter:
            faults.append(FaultInjectingAdapter(adapter, fail=fail))
            return faults[0]

        # Time skipping moves no time here (no durable timer): what a claim leaves
        # behind is checked before advance() lets the worker's backoff (one poll
        # interval) end and it claims again.
        return WorkflowEnvironment(adapter=kind, config=CONFIG, wrap=wrap,
                                   poll_interval=self.POLL), faults

    @staticmethod
    async def handed_back(env: WorkflowEnvironment, run_id: str, claims: int) -> None:
        """Wait (no clock time) until the worker's claim number ``claims`` has ended."""
        with anyio.fail_after(5):
            while True:
                settled = env.runner.settled
                await env.run_until_idle()
                run = await env.get_run(run_id)
                if run.claim_attempts == claims and run.leased_by is None:
                    await env.quiesce()
                    return
                await settled.wait()  # PostgreSQL: the claim may follow a NOTIFY

    @pytest.mark.parametrize("method", ["list_events", "get_definition"])
    async def test_transient_failure_requeues_at_once(self, env_kind: str, method: str) -> None:
        """Requeued with the lease cleared, logged once; the next claim completes the run."""
        env, faults = self.env(env_kind, {method: 1})
        async with env:
            with capture_logs() as logs:
                handle = await env.start(read_fails_flow, 4)
                await self.handed_back(env, handle.run_id, 1)
                assert faults[0].failures == [method], str(faults[0].calls)
                run = await env.get_run(handle.run_id)
                assert (run.status, run.claim_state, run.leased_by, run.lease_until,
                        run.claim_attempts) == ("queued", "queued", None, None, 1)
                assert await env.events(handle.run_id) == []
                mine = [e for e in logs if e.get("run_id") == handle.run_id
                        and e["log_level"] in ("warning", "error")]
                assert [e["event"] for e in mine] == [
                    "could not start a claimed run; handed it back to the queue"], mine
                assert method in mine[0]["error"]
                # The worker backs off one poll interval, then claims it again.
                await env.advance(self.POLL)
                assert await env.result(handle.run_id) == 8
            run = await env.get_run(handle.run_id)
            assert (run.status, run.claim_attempts) == ("success", 2)
            types = [e.event_type for e in await env.events(handle.run_id)]
            assert types == ["node_start", "node_complete"]  # no runner_lost: no sweep needed

    async def test_persistent_failure_is_abandoned_after_its_claims(self, env_kind: str
                                                                    ) -> None:
        """A read that always fails uses one claim per attempt, then the run is abandoned."""
        env, faults = self.env(env_kind, {"list_events": range(1, 1000)})
        async with env:
            handle = await env.start(read_fails_flow, 4)
            await self.handed_back(env, handle.run_id, 1)
            await env.advance(self.POLL)  # claim 2 of max_claim_attempts=2
            await self.handed_back(env, handle.run_id, 2)
            run = await env.get_run(handle.run_id)
            assert (run.status, run.claim_state, run.claim_attempts, run.leased_by,
                    run.lease_until) == ("error", "abandoned", 2, None, None)
            assert run.error is not None and "list_events" in run.error
            assert "2 claim" in run.error
            for _ in range(3):  # nothing claims it again: no loop
                await env.advance(self.POLL)
            assert faults[0].calls_of("list_events") == 2
            assert (await env.get_run(handle.run_id)).claim_attempts == 2
            assert await faults[0].inner.list_events(handle.run_id) == []  # no runner_lost
            with pytest.raises(starflow.WorkflowFailed):
                await env.result(handle.run_id)


class TestConcurrencyValidation:
    """Worker and JobWorker reject a bad concurrency the same way, before anything starts."""

    BAD: list[object] = [0, -3, 2.5, "4", None, True]

    @pytest.mark.parametrize("value", BAD, ids=repr)
    @pytest.mark.parametrize("kind", ["worker", "job_worker"])
    async def test_bad_concurrency_is_a_config_error(self, kind: str, value: object) -> None:
        """A ConfigError naming the value, raised when the worker is made."""
        async with WorkflowEnvironment() as env:
            make = ((lambda: env.app.worker(concurrency=value))  # type: ignore[arg-type]
                    if kind == "worker" else
                    (lambda: env.app.job_worker("gpu", concurrency=value)))  # type: ignore[arg-type]
            with pytest.raises(starflow.ConfigError) as info:
                make()
            assert f"concurrency must be an int >= 1: {value!r}" in str(info.value)
            assert await env.list_runs() == []

    @pytest.mark.parametrize("pool", ["", None, 3], ids=repr)
    async def test_bad_job_pool_is_a_config_error(self, pool: object) -> None:
        """A job worker's pool must be a non-empty string: ConfigError naming it."""
        async with WorkflowEnvironment() as env:
            with pytest.raises(starflow.ConfigError, match=f"pool must be a non-empty string: "
                                                           f"{pool!r}"):
                env.app.job_worker(pool)  # type: ignore[arg-type]
