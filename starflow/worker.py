"""Workers: claim queued runs for a pool, drive them, drain on shutdown."""

from __future__ import annotations

import anyio
from .logs import get_logger

from .adapters.base import RunInfo
from .errors import StarflowError
from .maintenance import Maintenance
from .runner import Runner

__all__ = ["Worker"]

log = get_logger("starflow.worker")


class Worker:
    """Claims runs queued for ``pool`` and drives up to ``concurrency`` at once.

    Use ``await worker.run()``; ``worker.stop()`` (or SIGTERM in the CLI)
    drains it.
    """

    def __init__(self, runner: Runner, *, pool: str | None = None, concurrency: int = 16,
                 maintenance: Maintenance | None = None) -> None:
        if concurrency < 1:
            raise StarflowError(f"concurrency must be >= 1: {concurrency}")
        self.runner = runner
        self.pool = pool
        self.concurrency = concurrency
        self.maintenance = maintenance
        self.active = 0
        self.completed = 0
        self._stopping = anyio.Event()
        self._log = log.bind(runner_id=runner.runner_id, pool=pool)

    def stop(self) -> None:
        """Stop claiming; ``run()`` returns once active runs reached their next boundary."""
        self._stopping.set()

    async def claim_once(self, tg: anyio.abc.TaskGroup) -> int:
        free = self.concurrency - self.active
        if free <= 0:
            return 0
        runner = self.runner
        now = runner.clock.now()
        claimed = await runner.adapter.claim_runs(
            runner.runner_id, pool=self.pool, now=now,
            lease_until=now + runner.config.lease_ttl, limit=free)
        for run in claimed:
            self.active += 1
            runner.busy += 1
            tg.start_soon(self._drive, run)
        return len(claimed)

    async def _drive(self, run: RunInfo) -> None:
        try:
            await self.runner.drive(run)
        except StarflowError as exc:
            self._log.error("run failed to drive", run_id=run.id, error=str(exc))
        finally:
            self.active -= 1
            self.runner.busy -= 1
            self.completed += 1

    async def run(self) -> None:
        """Claim and drive runs until :meth:`stop`."""
        self._log.info("worker started", concurrency=self.concurrency)
        async with anyio.create_task_group() as tg:
            if self.maintenance is not None:
                tg.start_soon(self.maintenance.run)
            async with anyio.create_task_group() as runs:
                while not self._stopping.is_set():
                    try:
                        n = await self.claim_once(runs)
                    except StarflowError as exc:
                        self._log.error("claim failed", error=str(exc))
                        n = 0
                    if n == 0:
                        await self._idle()
            tg.cancel_scope.cancel()
        self._log.info("worker stopped", completed=self.completed)

    async def _idle(self) -> None:
        runner = self.runner
        settled = runner.settled
        async with anyio.create_task_group() as tg:
            async def poll() -> None:
                await runner.adapter.wait_for_work(
                    runner.clock, runner.config.poll_interval.total_seconds())
                tg.cancel_scope.cancel()

            async def stopped() -> None:
                await self._stopping.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(poll)
            tg.start_soon(stopped)
            await settled.wait()
            tg.cancel_scope.cancel()
