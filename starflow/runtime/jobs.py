"""Worker jobs (ADR-047 §8): steps that run on an external pool of job workers.

A ``@step(pool="gpu")`` call inside a workflow does not run in the workflow's
process. The engine pauses the run on the step's node and, in the same unit as
the pause (after the wait registration, like every wake source), inserts a
``worker_jobs`` row whose idempotency key is ``run_id:node_id`` (also kept
under ``__celestialIdempotency`` in the run's context variables).

A :class:`JobWorker` serving that pool — in this process, another process or
another machine, on the same database — claims the job with a lease, keeps
the lease fresh with heartbeats while the step function runs, then records the
outcome and wakes the run in one unit: the step's ``node_complete`` (or
``node_error``, which the workflow sees as :class:`~starflow.StepFailed`) is
written exactly once, because the wake consumes the run's wait registration.
A job whose worker died is claimed again once its lease has expired; past
``max_attempts`` claims it fails with ``WorkerLost``.

The step function must be importable (decorated) in the job worker's process;
the workflow need not be, unless the worker should also drive inline runs.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

import anyio
import anyio.abc

from .. import serde
from ..config import check_concurrency
from ..engine.execution import timed_attempt
from ..errors import ConfigError, StarflowError
from ..failure import error_info
from ..logs import get_logger
from ..records import JobRecord
from ..workflow.decorators import StepDefinition, registry
from .runner import Runner

__all__ = ["JobWorker", "current_job"]

log = get_logger("starflow.jobs")

_current_job: ContextVar[JobRecord | None] = ContextVar("starflow_job", default=None)


def current_job() -> JobRecord | None:
    """The job a job worker is running in this task (``None`` elsewhere).

    ``current_job().idempotency_key`` (``run_id:node_id``) is stable across
    re-runs of the job: pass it to external systems.
    """
    return _current_job.get()


class _LeaseLost(Exception):
    pass


def _decode_args(sdef: StepDefinition, data: Any) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Rebuild the step's call arguments, each converted to its annotated type."""
    return serde.convert_call(sdef.signature, sdef.hints, data, what=f"step {sdef.name}")


class JobWorker:
    """Claims the jobs of one pool and runs up to ``concurrency`` of them at once.

    Get one with ``sf.job_worker(pool="gpu")`` and ``await worker.run()``
    (``worker.stop()`` drains it), or call :meth:`work_once` to run what is
    claimable now.

    Args:
        runner: The application's runner (its adapter, clock, config).
        pool: The pool served (the ``pool=`` of the steps).
        concurrency: Jobs run at once.
        worker_id: Identity written to ``worker_jobs.leased_by`` (default: the
            runner id and a suffix).
    """

    def __init__(self, runner: Runner, *, pool: str, concurrency: int = 4,
                 worker_id: str | None = None) -> None:
        check_concurrency(concurrency)
        if not isinstance(pool, str) or not pool:
            raise ConfigError(f"pool must be a non-empty string: {pool!r}")
        self.runner = runner
        self.pool = pool
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{runner.runner_id}/jobs:{pool}"
        self.active = 0
        self.completed = 0
        self._stopping = anyio.Event()
        self._log = log.bind(worker_id=self.worker_id, pool=pool)

    def stop(self) -> None:
        """Stop claiming; :meth:`run` returns once the jobs it runs have finished."""
        self._stopping.set()

    async def claim_once(self, tg: anyio.abc.TaskGroup) -> int:
        """Claim what free slots allow and start each job in ``tg``; return how many."""
        free = self.concurrency - self.active
        if free <= 0:
            return 0
        runner = self.runner
        now = runner.clock.now()
        jobs = await runner.adapter.claim_jobs(self.worker_id, pool=self.pool, now=now,
                                               lease_until=now + runner.config.lease_ttl,
                                               limit=free)
        for job in jobs:
            self.active += 1
            tg.start_soon(self._run_job, job)
        return len(jobs)

    async def work_once(self) -> int:
        """Claim the jobs claimable now, run them to the end; return how many."""
        n = 0
        async with anyio.create_task_group() as tg:
            n = await self.claim_once(tg)
        return n

    async def run(self) -> None:
        """Claim and run jobs until :meth:`stop`."""
        self._log.info("job worker started", concurrency=self.concurrency)
        async with anyio.create_task_group() as tg:
            while not self._stopping.is_set():
                settled = self.runner.settled  # before the claim: see Worker.run
                try:
                    n = await self.claim_once(tg)
                except StarflowError as exc:
                    self._log.error("job claim failed", error=str(exc))
                    n = 0
                if n == 0:
                    await self._idle(settled)
        self._log.info("job worker stopped", completed=self.completed)

    async def _idle(self, settled: anyio.Event) -> None:
        await self.runner.wait_for_work(self._stopping, settled)

    # -- one job -----------------------------------------------------------------

    async def _run_job(self, job: JobRecord) -> None:
        log_ = self._log.bind(job_id=job.id, run_id=job.run_id, node_id=job.node_id)
        try:
            if job.attempts > job.max_attempts:
                await self._post(job, error={
                    "type": "starflow.jobs.WorkerLost",
                    "message": f"job {job.id} lost its worker {job.attempts - 1} time(s) "
                               f"(max_attempts={job.max_attempts}): its lease expired",
                    "attempts": job.attempts - 1})
                return
            sdef = registry.get_step(job.step_name)
            if sdef is None:
                await self._post(job, error={
                    "type": "starflow.errors.WorkflowDefinitionError",
                    "message": f"step {job.step_name!r} is not registered in job worker "
                               f"{self.worker_id}: import the module that defines it",
                    "attempts": 1})
                return
            try:
                result = await self._execute(sdef, job)
            except _LeaseLost:
                log_.warning("job lease lost: another worker took the job, or its run was "
                             "cancelled; result dropped")
                return
            except Exception as exc:
                attempts = getattr(exc, "_starflow_attempts", 1)
                await self._post(job, error=error_info(exc, attempts))
                return
            await self._post(job, result=result)
        except StarflowError as exc:
            if self.runner.stopped(exc):
                # The job's outcome was recorded and the run woken; then the process's
                # owner stopped the execution of the woken run here (Runner.stop).
                log_.info("execution stopped by its owner", reason=str(exc))
            else:
                log_.error("job outcome could not be recorded; the lease will expire and "
                           "the job be claimed again", error=str(exc))
        finally:
            self.active -= 1
            self.completed += 1

    async def _execute(self, sdef: StepDefinition, job: JobRecord) -> Any:
        """Run the step with its retry policy while a heartbeat keeps the lease."""
        runner = self.runner
        clock = runner.clock
        args, kwargs = _decode_args(sdef, job.input)
        lost = False
        outcome: dict[str, Any] = {}

        async with anyio.create_task_group() as tg:
            async def heartbeat() -> None:
                nonlocal lost
                cfg = runner.config
                while True:
                    await clock.sleep(cfg.heartbeat_interval.total_seconds())
                    now = clock.now()
                    try:
                        held = await runner.adapter.heartbeat_job(
                            job.id, self.worker_id, now=now, lease_until=now + cfg.lease_ttl)
                    except StarflowError as exc:
                        self._log.warning("job heartbeat failed", job_id=job.id, error=str(exc))
                        continue
                    if not held:
                        lost = True
                        tg.cancel_scope.cancel()
                        return

            async def body() -> None:
                token = _current_job.set(job)
                try:
                    attempt = 0
                    while True:
                        attempt += 1
                        try:
                            outcome["result"] = await timed_attempt(
                                clock, sdef, sdef.fn, args, kwargs, run_id=job.run_id,
                                node_id=job.node_id, threads=runner.runtime.step_threads())
                        except Exception as exc:
                            if attempt < sdef.retry.max_attempts and sdef.retry.retryable(exc):
                                await clock.sleep(sdef.retry.delay(attempt))
                                continue
                            exc._starflow_attempts = attempt  # type: ignore[attr-defined]
                            outcome["error"] = exc
                        break
                finally:
                    _current_job.reset(token)
                tg.cancel_scope.cancel()

            tg.start_soon(heartbeat)
            tg.start_soon(body)
        if lost:
            raise _LeaseLost()
        if "error" in outcome:
            raise outcome["error"]
        return outcome.get("result")

    async def _post(self, job: JobRecord, *, result: Any = None,
                    error: dict[str, Any] | None = None) -> None:
        """Record the job's outcome and wake the run waiting on it, in one unit."""
        runner = self.runner
        adapter = runner.adapter
        output = None
        if error is None:
            try:
                output = serde.to_builtins(result, what=f"return value of step {job.step_name}",
                                           run_id=job.run_id, node_id=job.node_id)
            except StarflowError as exc:
                error = error_info(exc, 1)
        else:
            try:  # a message no database can hold must not fail the write (and re-run)
                serde.check_storable(error, what=f"the error raised by step {job.step_name}",
                                     run_id=job.run_id, node_id=job.node_id)
            except StarflowError as exc:
                error = error_info(exc, int(error.get("attempts", 1)))
        status = "complete" if error is None else "failed"

        async def finish(ts: Any) -> None:
            await adapter.finish_job(job.id, status=status, result=output, error=error, now=ts)

        run = await adapter.get_run(job.run_id)
        woke = None
        if run is not None and run.status == "paused":
            # Inline runs are driven here if this process has their workflow;
            # otherwise they go back to the queue for a run worker.
            can_drive = registry.get(run.template_id or "", run.workflow_version) is not None
            woke = await runner.wake(run, job.node_id, via="job", output=output, error=error,
                                     also=finish, drive=can_drive)
        if woke is None:
            # The run no longer waits on this job (cancelled, ended, or another
            # worker's outcome won): keep the outcome on the job row all the same.
            async with adapter.unit():
                await finish(runner.clock.now())
            self._log.info("job finished; its run was not waiting on it", job_id=job.id,
                           run_id=job.run_id, status=status)
        else:
            self._log.debug("job finished", job_id=job.id, run_id=job.run_id, status=status)
