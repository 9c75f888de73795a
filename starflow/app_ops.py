"""Operating an open :class:`~starflow.Starflow`: schedules, pool limits, the
warm tier, session variables, worker jobs, sweeps and retention."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from datetime import datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel

from .admin.retention import DEFAULT_BATCH_SIZE, PruneReport, prune_runs
from .app_core import StarflowCore, workflow_definition
from .config import check_concurrency, int_problem
from .errors import (
    ConfigError,
    InvalidArgument,
    ScheduleNotFound,
    StarflowError,
)
from .limits import check_name, duration_problem, name_problem
from .records import PoolLimits, PoolUsage, RunInfo, ScheduleRecord
from .runtime.jobs import JobWorker
from .runtime.maintenance import Maintenance
from .runtime.runner import RunHandle, Runner
from .runtime.schedules import (
    ScheduleLoop,
    check_schedule,
    next_tick,
    start_scheduled_run,
    tick_run_id,
)
from .runtime.worker import Worker
from .warm.base import LiveRun, WarmTier, live_run
from .warm.drainer import OutboxStatus, outbox_status
from .warm.mirror import find_mirror

__all__ = ["StarflowOps", "check_session_names"]


class StarflowOps(StarflowCore):
    """Schedules, pool limits, the warm tier, session variables and jobs."""

    # -- schedules (#18) ----------------------------------------------------------

    async def schedule(self, schedule_id: str, wf: Callable[..., Awaitable[Any]] | str, /,
                       *args: Any, cron: str, timezone: str = "UTC", overlap: str = "skip",
                       catchup: timedelta = timedelta(0), pool: str | None = None,
                       **kwargs: Any) -> ScheduleRecord:
        """Create or update the cron schedule ``schedule_id``: each tick queues a run.

        Every server maintenance loop on the database (``starflow server``, a
        worker with ``maintenance=True``, ``Starflow.open(maintenance=True)``)
        fires due ticks; each tick starts exactly one run (its id derived from
        the schedule and the tick time) however many loops run. Writing a
        schedule again with the same cron and time zone keeps its cursor, so
        calling this at every process start still catches up on ticks missed
        while nothing ran.

        Args:
            schedule_id: The schedule's name in this workspace.
            wf: The workflow (or its name); ``args`` / ``kwargs`` its arguments
                for every run.
            cron: A five-field cron expression (``"*/5 * * * *"``), read in ``timezone``.
            timezone: An IANA zone; DST follows its rules (see the guide).
            overlap: While the previous run is active: ``"skip"`` the tick,
                ``"buffer_one"`` (start it once the run ends; later ticks skip),
                or ``"allow"`` (start anyway).
            catchup: After downtime, missed ticks this recent still start, oldest
                first; older ones are skipped and counted. A tick less than 30 s
                late is always on time.
            pool: The pool runs are queued for (default: the workflow's).

        Raises:
            InvalidArgument: ``schedule_id`` or ``pool`` is not a storable name.
            ConfigError: a bad cron, time zone or option (named; nothing written),
                or cronsim is not installed.
            WorkflowDefinitionError: ``wf`` is not a workflow, or the arguments do
                not bind to it.
            SerializationError: an argument cannot be stored (nothing written).
        """
        now = self.clock.now()
        check_schedule(schedule_id, cron, timezone, overlap, catchup, pool, now=now)
        definition = workflow_definition(wf)
        encoded = Runner.encode_input(definition, args, kwargs)
        Runner.decode_input(definition, encoded)  # arguments that fit their annotations
        first = next_tick(cron, timezone, now)
        record = ScheduleRecord(
            id=schedule_id, workflow=definition.name, workflow_version=definition.version,
            definition_id=await self.runner.definition_id(definition), input=encoded,
            cron=cron, timezone=timezone, overlap=overlap, catchup=catchup, pool=pool,
            next_fire_at=first, due_at=first)
        stored = await self.adapter.upsert_schedule(record, now=now)
        self._schedules_changed()
        return stored

    async def schedules(self) -> list[ScheduleRecord]:
        """Every schedule of this workspace, by id."""
        return await self.adapter.list_schedules()

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord:
        """One schedule.

        Raises:
            ScheduleNotFound: there is none with this id.
        """
        check_name("schedule_id", schedule_id)
        record = await self.adapter.get_schedule(schedule_id)
        if record is None:
            raise ScheduleNotFound(schedule_id)
        return record

    async def pause_schedule(self, schedule_id: str) -> ScheduleRecord:
        """Stop firing ticks until :meth:`resume_schedule` (ticks meanwhile never start).

        Ticks that fell due before the pause and no maintenance loop has handled
        yet are handled first, as a loop would have: started (queued) within the
        catch-up window, else counted in ``skipped_missed`` (or
        ``skipped_overlap``), so pausing never drops a due tick uncounted.

        Raises:
            ScheduleNotFound: there is none with this id.
            StorageError: a due tick's run could not be started (nothing paused).
        """
        loop = ScheduleLoop(self.runner, poll=False)
        for _ in range(100):
            record = await self.get_schedule(schedule_id)
            if record.paused:
                return record
            now = self.clock.now()
            if record.pending_tick is not None or (
                    record.next_fire_at is not None and record.next_fire_at <= now):
                # Due before the pause: decide it (of a loop racing us, one decides
                # each tick, by the row's revision), then read the row again.
                await loop.advance(record)
                continue
            if await self.adapter.update_schedule(record.id, record.revision,
                                                  {"paused": True}, now=now):
                self._schedules_changed()
                return await self.get_schedule(schedule_id)
            await anyio.lowlevel.checkpoint()
        raise StarflowError(f"schedule {schedule_id!r} changed under 100 attempts to pause "
                            "it; try again")

    async def resume_schedule(self, schedule_id: str) -> ScheduleRecord:
        """Fire ticks again, from the next one after now (paused ticks do not catch up).

        A tick that waited for the previous run (``overlap="buffer_one"``) when the
        schedule was paused does not start: it is counted in ``skipped_overlap``.
        """
        def values(rec: ScheduleRecord, now: datetime) -> dict[str, Any]:
            nxt = next_tick(rec.cron, rec.timezone, now)
            dropped = 1 if rec.buffered_tick is not None else 0
            return {"paused": False, "next_fire_at": nxt, "buffered_tick": None,
                    "skipped_overlap": rec.skipped_overlap + dropped,
                    "due_at": now if rec.pending_tick is not None else nxt}

        return await self._update_schedule(schedule_id, values)

    async def delete_schedule(self, schedule_id: str) -> None:
        """Delete a schedule; runs it started are kept.

        Raises:
            ScheduleNotFound: there is none with this id.
        """
        check_name("schedule_id", schedule_id)
        if not await self.adapter.delete_schedule(schedule_id):
            raise ScheduleNotFound(schedule_id)
        self._schedules_changed()

    async def trigger_schedule(self, schedule_id: str) -> RunHandle[Any]:
        """Queue a run of the schedule now, outside its cron (overlap is not consulted).

        The run becomes the schedule's last run, which later ticks' ``overlap`` sees.
        """
        now = self.clock.now()
        record = await self.get_schedule(schedule_id)
        adapter = self.adapter
        run_id = tick_run_id(adapter.workspace_id, adapter.env, record.id, now, kind="trigger")
        await start_scheduled_run(self.runner, record, run_id)
        await self._update_schedule(schedule_id, lambda rec, now: {"last_run_id": run_id})
        return await self.runner.handle(run_id)

    async def _update_schedule(
            self, schedule_id: str,
            values: Callable[[ScheduleRecord, datetime], dict[str, Any]]) -> ScheduleRecord:
        """Read, change and compare-and-set a schedule, again if a loop wrote it meanwhile."""
        for _ in range(100):
            record = await self.get_schedule(schedule_id)
            now = self.clock.now()
            change = values(record, now)
            if await self.adapter.update_schedule(record.id, record.revision, change, now=now):
                self._schedules_changed()
                return await self.get_schedule(schedule_id)
            await anyio.lowlevel.checkpoint()
        raise StarflowError(f"schedule {schedule_id!r} changed under 100 attempts to update "
                            "it; try again")

    def _schedules_changed(self) -> None:
        if self._maintenance is not None and self._maintenance.schedules is not None:
            self._maintenance.schedules.notify()

    # -- pool limits (#18) --------------------------------------------------------

    async def set_pool_limits(self, pool: str, *, concurrency: int | None = None,
                              rate_limit: tuple[int, timedelta] | None = None,
                              key_concurrency: int | None = None,
                              key_rate_limit: tuple[int, timedelta] | None = None,
                              fair: bool = False,
                              key_weights: Mapping[str, int] | None = None,
                              keep_slot: bool = False) -> PoolLimits | None:
        """Store limits every worker of every host obeys when claiming runs of ``pool``.

        Enforced inside the claim's transaction (PostgreSQL: with the pool's
        limits row locked; SQLite: in the writer's transaction), never by a
        check before the claim. Replaces the pool's limits; all ``None`` (and
        ``fair`` and ``keep_slot`` false) removes them. Runs queued for any
        pool (no ``pool=``) are not limited.

        Args:
            pool: The pool.
            concurrency: Runs of the pool executing at once, across all workers.
            rate_limit: ``(n, period)``: at most ``n`` claims of the pool's runs
                within any ``period``.
            key_concurrency: Runs with one ``concurrency_key`` executing at once.
            key_rate_limit: ``(n, period)``: at most ``n`` claims of runs with
                one ``concurrency_key`` within any ``period`` (runs without a
                key are not limited by it).
            fair: Claim round robin across concurrency keys instead of oldest
                first: within a priority level, the claim takes from the key
                served least (weighted), so a key with a large backlog cannot
                starve the others. Runs without a key share one turn.
            key_weights: With ``fair``: a key's share relative to the others
                (default 1): ``{"tenant-a": 3}`` serves ``tenant-a`` three
                times as often as a key of weight 1 while both have runs queued.
            keep_slot: A run of the pool keeps its concurrency slot (of
                ``concurrency`` and ``key_concurrency``) while it sleeps or
                waits, from its first claim until it ends; woken, it is
                claimed again without waiting for room. Default (false): a
                paused run releases its slot, and competes for one again when
                it wakes.

        Returns:
            The stored limits, or None when removed.

        Raises:
            InvalidArgument: ``pool`` is not a storable name (nothing written).
            ConfigError: a limit is invalid (named with its value; nothing written).
        """
        check_name("pool", pool)
        problems = []
        for name, value in (("concurrency", concurrency), ("key_concurrency", key_concurrency)):
            if value is not None and (problem := int_problem(name, value, 1)) is not None:
                problems.append(problem)
        rate, period = _rate_limit("rate_limit", rate_limit, problems)
        key_rate, key_period = _rate_limit("key_rate_limit", key_rate_limit, problems)
        for name, flag in (("fair", fair), ("keep_slot", keep_slot)):
            if not isinstance(flag, bool):
                problems.append(f"{name} must be True or False: {flag!r}")
        weights = _key_weights(key_weights, fair, problems)
        if problems:
            raise ConfigError("set_pool_limits: " + "; ".join(problems))
        limits = PoolLimits(pool=pool, concurrency=concurrency, rate_limit=rate,
                            rate_period=period, key_concurrency=key_concurrency,
                            key_rate_limit=key_rate, key_rate_period=key_period,
                            fair=fair, key_weights=weights, keep_slot=keep_slot)
        await self.adapter.set_pool_limits(limits, now=self.clock.now())
        self.runner.notify_settled()  # in-process workers look for work again
        return await self.adapter.get_pool_limits(pool)

    async def pause_pool(self, pool: str) -> PoolLimits:
        """Pause ``pool``: no worker claims its queued runs until :meth:`resume_pool`.

        Stored with the pool's limits (which are kept) and enforced inside every
        claim's transaction, like them. Runs of the pool already claimed or
        executing go on to their end; runs queued for any pool (no ``pool=``)
        are still claimed by the pool's workers. Pausing a paused pool changes
        nothing but its ``updated_at`` (idempotent).

        Returns:
            The pool's stored limits, ``paused`` set.

        Raises:
            InvalidArgument: ``pool`` is not a storable name (nothing written).
        """
        check_name("pool", pool)
        await self.adapter.set_pool_paused(pool, True, now=self.clock.now())
        limits = await self.adapter.get_pool_limits(pool)
        assert limits is not None
        return limits

    async def resume_pool(self, pool: str) -> PoolLimits | None:
        """Resume a pool paused by :meth:`pause_pool`: its queued runs are claimed again.

        Resuming a pool that is not paused writes nothing and returns its limits.

        Returns:
            The pool's stored limits (``paused`` false), or None if it has none.

        Raises:
            InvalidArgument: ``pool`` is not a storable name (nothing written).
        """
        check_name("pool", pool)
        current = await self.adapter.get_pool_limits(pool)
        if current is None or not current.paused:
            return current
        await self.adapter.set_pool_paused(pool, False, now=self.clock.now())
        self.runner.notify_settled()  # in-process workers look for work again
        return await self.adapter.get_pool_limits(pool)

    async def pools(self) -> list[PoolUsage]:
        """Every pool with limits or with queued or executing runs: limits and current use."""
        return await self.adapter.pool_usage(self.clock.now())

    # -- the warm tier (live views: a hint, never the authority) --------------------

    @property
    def warm(self) -> WarmTier | None:
        """The warm tier this app mirrors to (``Starflow.open(warm=...)``), if any."""
        mirror = find_mirror(self.adapter)
        return mirror.warm if mirror is not None else None

    def _require_warm(self, what: str) -> WarmTier:
        warm = self.warm
        if warm is None:
            raise ConfigError(
                f"{what} reads the warm tier, and this Starflow has none: open it with "
                "Starflow.open(..., warm='memory://') or warm='redis://localhost:6379/0'")
        return warm

    async def watch(self, run_id: str) -> AsyncIterator[LiveRun]:
        """Live status of a run, pushed from the warm tier, until it ends.

        Yields the current state, then a new :class:`~starflow.warm.LiveRun` after
        each change (changes may be coalesced; the last state is always seen), and
        stops after a terminal status. It may lag cold by a second or two: to act
        on a run's state (resume, bill, audit) read :meth:`get_run`.

        Raises:
            ConfigError: no warm tier is configured.
            WarmTierError: the warm tier failed while watching.
        """
        warm = self._require_warm("watch()")
        async for state in warm.subscribe(self._run_id(run_id)):
            live = live_run(state)
            if live is None:
                continue  # a damaged projection: the drift sweep will repair it
            yield live
            if live.is_terminal:
                return

    async def live_runs(self) -> list[LiveRun]:
        """Runs not yet ended, from the warm tier (newest first; up to ~2 s stale)."""
        warm = self._require_warm("live_runs()")
        runs = [r for r in map(live_run, await warm.live_runs()) if r is not None]
        return sorted(runs, key=lambda r: (r.started_at is not None, r.started_at, r.id),
                      reverse=True)

    async def outbox_status(self) -> OutboxStatus:
        """The mirror outbox's lag gauge (pending rows by age, ok / warn / page) and,
        when this process drains it, the drainer's counters."""
        drainer = self._maintenance.drainer if self._maintenance is not None else None
        warm = self.warm
        return await outbox_status(self.adapter, self.clock.now(), drainer,
                                   warm=warm.url if warm is not None else None)

    # -- session variables ---------------------------------------------------------

    async def session_get(self, session_id: str, key: str) -> Any:
        """Read a session variable from outside a workflow (``None`` if absent or expired).

        Inside a workflow use :func:`starflow.session_get`, which is recorded.
        """
        check_session_names(session_id, key)
        return await self.adapter.session_get(session_id, key, now=self.clock.now())

    async def session_set(self, session_id: str, key: str, value: Any, *,
                          keep_until: datetime | None = None) -> None:
        """Write a session variable from outside a workflow.

        Written here it belongs to no run: it lives until ``keep_until`` (then
        maintenance deletes it), or, without one, until overwritten.

        Raises:
            StarflowError: ``keep_until`` is naive.
            SerializationError: the value is not JSON-encodable (nothing written).
        """
        from . import serde

        check_session_names(session_id, key)
        if keep_until is not None and (not isinstance(keep_until, datetime)
                                       or keep_until.tzinfo is None):
            raise InvalidArgument(f"keep_until must be timezone-aware: {keep_until!r}")
        encoded = serde.to_builtins(value, what=f"session var {session_id}/{key}")
        async with self.adapter.unit():
            await self.adapter.session_set(session_id, key, encoded, now=self.clock.now(),
                                           keep_until=keep_until)

    # -- worker jobs -----------------------------------------------------------------

    def job_worker(self, pool: str, concurrency: int = 4, *,
                   worker_id: str | None = None) -> JobWorker:
        """A job worker for ``@step(pool=...)`` steps of ``pool``; ``await jw.run()``.

        Args:
            pool: The pool served.
            concurrency: Jobs run at once.
            worker_id: Identity recorded as the jobs' ``leased_by``.
        """
        if isinstance(pool, str) and pool:  # JobWorker names an empty or missing pool
            check_name("pool", pool)
        return JobWorker(self.runner, pool=pool, concurrency=concurrency, worker_id=worker_id)

    async def sweep(self) -> int:
        """Run one lease-sweep pass now; returns how many runs it requeued or abandoned."""
        return await self.runner.sweep()

    async def prune(self, older_than: timedelta | None = None, *,
                    statuses: Collection[str] | None = None, workflow: str | None = None,
                    export_dir: str | os.PathLike[str] | None = None, dry_run: bool = False,
                    batch_size: int = DEFAULT_BATCH_SIZE) -> PruneReport:
        """Delete ended runs (success, error, cancelled) that ended more than
        ``older_than`` ago, with their events, waits, signals, outbox rows,
        worker jobs and session vars (those not kept past now). Active runs, and
        runs whose parent or a child is still active, are never deleted.

        Args:
            older_than: Age since a run ended; default ``config.retention``.
            statuses: Only these ended statuses (default: all three).
            workflow: Only runs of this workflow.
            export_dir: First write each run's history there (JSON lines in the
                format of ``starflow runs export``; ``starflow replay`` reads
                it); a run is deleted only once its export is on disk.
            dry_run: Delete nothing; the report counts and lists the runs.
            batch_size: Runs per transaction.

        Raises:
            InvalidArgument: a bad argument, or neither ``older_than`` nor
                ``config.retention`` is set (nothing is deleted).
        """
        age = older_than if older_than is not None else self.config.retention
        if age is None:
            raise InvalidArgument("prune needs older_than= (e.g. timedelta(days=30)) or "
                              "StarflowConfig(retention=...)")
        return await prune_runs(self.adapter, now=self.clock.now(), older_than=age,
                                statuses=statuses, workflow=workflow, export_dir=export_dir,
                                dry_run=dry_run, batch_size=batch_size)

    async def stuck_runs(self, limit: int = 1000) -> list[RunInfo]:
        """Queued runs no worker has claimed for ``config.stuck_after``, oldest first:
        no worker serves their pool (or none runs at all). The lease sweep warns
        about them; ``starflow runs list --stuck`` lists them."""
        return await self.runner.stuck_runs(limit)

    def worker(self, pool: str | None = None, concurrency: int = 16,
               maintenance: bool = False, grace: float = 30.0, timers: bool = True,
               metrics_interval: float = 15.0) -> Worker:
        """A worker that claims runs queued for ``pool``; ``await worker.run()``.

        Args:
            pool: Claim runs queued for this pool (and runs queued for any pool).
            concurrency: Most runs driven at once.
            maintenance: Also run the lease sweep, every run's durable timers,
                cron schedules and session-var GC (unless this app already runs
                them, ``Starflow.open(maintenance=True)``).
            grace: Seconds ``worker.stop()`` waits for active runs to finish or
                reach a step boundary before cancelling and releasing them.
            timers: Fire every run's due timers (sleeps, ``wait_for`` timeouts,
                deadlines of queued runs) in this worker, as every worker does by
                default; each timer fires once however many workers run. False
                leaves them to another process (``starflow server``, a worker
                with ``maintenance=True``); the worker then warns at start.
            metrics_interval: With Prometheus metrics enabled, seconds between two
                reads of the queue per pool (one query) for the queue gauges
                (``starflow_queue_depth``, ``starflow_queue_oldest_age_seconds``,
                ``starflow_runs_running``).
        """
        check_concurrency(concurrency)  # before the maintenance loops are built
        check_name("pool", pool, optional=True)
        mt = None
        if (maintenance or timers) and (self._maintenance is None
                                        or not self._maintenance.full):
            client = self._maintenance
            mt = Maintenance(self.runner, poll=self._shared_database, drain=client is None,
                             firing=client.firing if client is not None else None,
                             timers_only=not maintenance)
        fires = mt is not None or (self._maintenance is not None and self._maintenance.full)
        return Worker(self.runner, pool=pool, concurrency=concurrency, maintenance=mt,
                      grace=grace, fires_timers=fires, metrics_interval=metrics_interval)


def check_session_names(session_id: object, key: object) -> None:
    """A session variable's id and key: storable names (both indexed)."""
    check_name("session_id", session_id)
    check_name("key", key)


#: The most weights one pool stores (``set_pool_limits(key_weights=)``).
MAX_KEY_WEIGHTS = 10_000
#: The largest weight of one key.
MAX_KEY_WEIGHT = 1_000


def _rate_limit(param: str, value: object, problems: list[str]
                ) -> tuple[int | None, timedelta | None]:
    """``(n, period)`` of a rate limit argument, or its problem appended."""
    if value is None:
        return None, None
    if (not isinstance(value, tuple) or len(value) != 2
            or int_problem("n", value[0], 1) is not None
            or not isinstance(value[1], timedelta)
            or value[1] < timedelta(milliseconds=1)):
        problems.append(f"{param} must be (n, period): an int n >= 1 and a "
                        f"timedelta period >= 1 ms: {value!r}")
        return None, None
    if (problem := duration_problem(f"{param} period", value[1])) is not None:
        problems.append(problem)
        return None, None
    return value[0], value[1]


def _key_weights(value: object, fair: object, problems: list[str]) -> dict[str, int] | None:
    """The ``key_weights`` to store (None: none), or their problems appended."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        problems.append(f"key_weights must be a mapping of concurrency key to weight: {value!r}")
        return None
    if fair is not True:
        problems.append("key_weights needs fair=True (weights share a fair pool's claims)")
    if len(value) > MAX_KEY_WEIGHTS:
        problems.append(f"key_weights has {len(value)} keys; the most is {MAX_KEY_WEIGHTS} "
                        "(keys without a weight weigh 1)")
        return None
    weights: dict[str, int] = {}
    for key, weight in value.items():
        problem = name_problem("key_weights key", key)
        if problem is None and (isinstance(weight, bool) or not isinstance(weight, int)
                                or not 1 <= weight <= MAX_KEY_WEIGHT):
            problem = (f"key_weights[{key!r}] must be an int from 1 to {MAX_KEY_WEIGHT}: "
                       f"{weight!r}")
        if problem is not None:
            problems.append(problem)
        else:
            weights[key] = weight
    return dict(sorted(weights.items())) or None
