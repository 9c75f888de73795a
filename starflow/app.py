"""``Starflow``: the application object users open, run workflows with and query."""

from __future__ import annotations

import math
import os
import secrets
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar, overload

import anyio
import anyio.lowlevel

from .adapters import adapter_from_url
from .adapters.base import WorkflowStateAdapter
from .attributes import encode_attributes
from .clock import Clock, SystemClock
from .config import StarflowConfig, check_concurrency, int_problem
from .decorators import WorkflowDefinition, definition_of, registry, timeout_problem
from .errors import (
    ConfigError,
    InvalidArgument,
    ResultTimeout,
    RunCancelled,
    RunFinished,
    RunNotFound,
    ScheduleNotFound,
    StarflowError,
    StorageError,
    UpdateRejected,
    WorkflowDefinitionError,
)
from .events import DataReader
from .forks import fork_run
from .jobs import JobWorker
from .limits import check_name, name_problem, normalize_run_id
from .logs import get_logger
from .maintenance import Maintenance
from .records import RUN_STATUSES, PoolLimits, PoolUsage, RunEvent, RunInfo, ScheduleRecord
from .retention import DEFAULT_BATCH_SIZE, PruneReport, prune_runs
from .runner import RunHandle, Runner
from .schedules import check_schedule, next_tick, start_scheduled_run, tick_run_id
from .tokens import Keyring
from .urls import scheme_of
from .warm.base import LiveRun, WarmTier, live_run
from .warm.drainer import OutboxStatus, outbox_status
from .warm.mirror import find_mirror
from .worker import Worker

__all__ = ["Starflow"]

P = ParamSpec("P")
R = TypeVar("R")

log = get_logger("starflow")

DEFAULT_URL = "sqlite:///starflow.db"
DEFAULT_WORKSPACE = "celestial"
DEFAULT_ENV = "prod"


class Starflow:
    """A connection to one workflow database, scoped to (``workspace_id``, ``env``).

    Open it with ``async with Starflow.open(url) as sf:``. While open, it
    fires the durable timers of the inline runs it paused and drains its own
    warm-tier outbox; with ``maintenance=True`` it also runs the lease sweep,
    every run's timers and session-var GC (see :meth:`open`).
    """

    def __init__(self, adapter: WorkflowStateAdapter, *, config: StarflowConfig | None = None,
                 clock: Clock | None = None, maintenance: bool | None = True,
                 runner_id: str | None = None) -> None:
        self.adapter = adapter
        self.config = config or StarflowConfig()
        self.clock: Clock = clock or SystemClock()
        self._maintenance_enabled = maintenance
        self._runner_id = runner_id
        self._runner: Runner | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._maintenance: Maintenance | None = None

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        workspace_id: str | None = None,
        env: str | None = None,
        config: StarflowConfig | None = None,
        clock: Clock | None = None,
        warm: str | None = None,
        maintenance: bool | None = None,
        adapter: WorkflowStateAdapter | None = None,
    ) -> Starflow:
        """Describe an application; use the result as an async context manager.

        Args:
            url: ``sqlite:///path.db``, ``postgresql://…``, ``memory://`` or
                ``null://`` (schemes in any case, as RFC 3986 says). Default:
                ``$STARFLOW_URL``, then ``$STARFLOW_DATABASE_URL``, then
                ``sqlite:///starflow.db``.
            workspace_id: Tenant scope of every read and write. Default:
                ``$STARFLOW_WORKSPACE``, then ``"celestial"`` (the state model's
                default workspace name).
            env: Environment scope of every read and write. Default:
                ``$STARFLOW_ENV``, then ``"prod"``.
            config: Timing and behaviour (:class:`StarflowConfig`).
            clock: Time source (``starflow_testing.FakeClock`` in tests).
            warm: ``"memory://"`` or ``"redis://…"``: mirror state to a warm tier.
            maintenance: ``True``: also run the server's background loops in this
                process (the lease sweep, every run's durable timers, session-var
                GC). ``None`` (the default, which fits a client: a script, a web
                worker): only the timers of the inline runs this app paused, while
                it is open, and the drainer of its own warm-tier mirror.
                ``False``: no background task at all. ``starflow server``,
                ``starflow worker --maintenance`` and ``sf.worker(maintenance=True)``
                run the full set.
            adapter: A ready state adapter instead of ``url``.
        """
        config = config or StarflowConfig()
        if not isinstance(config, StarflowConfig):
            raise ConfigError(f"config must be a StarflowConfig, got {type(config).__name__}")
        workspace_id = workspace_id or os.environ.get("STARFLOW_WORKSPACE") or DEFAULT_WORKSPACE
        env = env or os.environ.get("STARFLOW_ENV") or DEFAULT_ENV
        if adapter is None:
            url = (url or os.environ.get("STARFLOW_URL") or os.environ.get("STARFLOW_DATABASE_URL")
                   or DEFAULT_URL)
            options: dict[str, Any] = {}
            scheme = scheme_of(url)
            if scheme in ("sqlite", "memory"):
                options["inline_commits"] = config.sqlite_inline_commits
            if scheme in ("sqlite",):
                options["synchronous"] = config.sqlite_synchronous
            elif scheme in ("postgresql", "postgres"):
                options["synchronous_commit"] = config.postgres_synchronous_commit
            adapter = adapter_from_url(url, workspace_id=workspace_id, env=env, **options)
        if warm is not None:
            from .warm.mirror import mirror

            adapter = mirror(adapter, warm, clock=clock,
                             finished_ttl=config.warm_finished_ttl)
        return cls(adapter, config=config, clock=clock, maintenance=maintenance)

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Starflow:
        await self.adapter.open()
        try:
            keyring = await self._keyring()
            self._runner = Runner(self.adapter, clock=self.clock, config=self.config,
                                  keyring=keyring, runner_id=self._runner_id)
            self._tg = await anyio.create_task_group().__aenter__()
            await self._tg.start(self._runner.heartbeats.run)
            # None: a client's share, its inline runs' timers and the outbox drainer
            # of its own warm-tier mirror (Starflow.open(warm=...)).
            if self._maintenance_enabled is not False:
                self._maintenance = Maintenance(self._runner, poll=self._shared_database,
                                                full=self._maintenance_enabled is True)
                self._tg.start_soon(self._maintenance.run)
        except BaseException:
            await self.adapter.close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            if self._tg is not None:
                self._tg.cancel_scope.cancel()
                await self._tg.__aexit__(None, None, None)
        finally:
            self._tg = None
            self._runner = None
            self._maintenance = None
            await self.adapter.close()

    @property
    def _shared_database(self) -> bool:
        return self.adapter.shared

    async def _keyring(self) -> Keyring:
        if self.config.wake_keys:
            return Keyring(self.config.wake_keys)
        secret = await self.adapter.get_secret("default", now=self.clock.now())
        return Keyring({"default": secret or secrets.token_hex(32)})

    @property
    def runner(self) -> Runner:
        """This process's runner (open the app first)."""
        if self._runner is None:
            raise ConfigError("this Starflow is not open: use `async with Starflow.open(...)`")
        return self._runner

    @property
    def runner_id(self) -> str:
        return self.runner.runner_id

    # -- starting runs -------------------------------------------------------------

    @overload
    async def run(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
                  ) -> RunHandle[R]: ...

    @overload
    async def run(self, wf: str, /, *args: Any, **kwargs: Any) -> RunHandle[Any]: ...

    async def run(self, wf: Callable[..., Awaitable[Any]] | str, /, *args: Any, **kwargs: Any
                  ) -> RunHandle[Any]:
        """Start a run and drive it here until it succeeds, fails or pauses.

        ``wf`` is a ``@workflow`` function, whose own version the run takes
        (``order_v1`` runs version 1 even when version 2 is registered too),
        or a workflow name, which takes the newest version registered in this
        process.

        ``sf.options(run_id=i).run(wf, ...)`` (``i`` a UUID string) makes the
        start idempotent: a second call with the same id and workflow returns
        the existing run (its new arguments are ignored, with a warning if they
        differ). ``sf.run(wf, x, run_id=i)`` works too, untyped.

        Raises:
            RunIdConflict: ``run_id`` names a run of another workflow (nothing written).
            WorkflowDefinitionError: the arguments do not bind to the signature.
            SerializationError: an argument cannot be stored (nothing written).
        """
        run_id = kwargs.pop("run_id", None)
        return await self.options(run_id=run_id).run(wf, *args, **kwargs)

    @overload
    async def start(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
                    ) -> RunHandle[R]: ...

    @overload
    async def start(self, wf: str, /, *args: Any, **kwargs: Any) -> RunHandle[Any]: ...

    async def start(self, wf: Callable[..., Awaitable[Any]] | str, /, *args: Any,
                    **kwargs: Any) -> RunHandle[Any]:
        """Queue a run for workers (``claim_state`` queued); returns at once.

        ``wf`` is a ``@workflow`` function (its version) or a name (the newest
        registered version), as for :meth:`run`.

        Options through :meth:`options`: ``sf.options(run_id=i, pool="gpu").start(wf, x)``
        (an idempotent start, as for :meth:`run`; only workers of that pool claim
        it). ``run_id=`` / ``pool=`` as keywords here work too, untyped.

        Raises:
            RunIdConflict: ``run_id`` names a run of another workflow (nothing written).
        """
        run_id = kwargs.pop("run_id", None)
        pool = kwargs.pop("pool", None)
        return await self.options(run_id=run_id, pool=pool).start(wf, *args, **kwargs)

    def options(self, *, run_id: str | None = None, pool: str | None = None,
                priority: int = 0, concurrency_key: str | None = None,
                dedup_key: str | None = None, debounce: timedelta | None = None,
                debounce_key: str | None = None, timeout: timedelta | None = None
                ) -> RunOptions:
        """Start options that type checkers see: ``sf.options(run_id=i).run(wf, x)``.

        ``sf.run(wf, x, run_id=i)`` works too, but a type checker cannot check
        ``run_id=`` / ``pool=`` there (they share the call with the workflow's
        own keyword arguments), and a workflow parameter with one of those names
        needs ``options``.

        Flow control (queued starts, ``.start()``, only; see the schedules and
        queues guide):

        Args:
            priority: Claimed before runs of lower priority (FIFO within one).
            concurrency_key: Counted against the pool's ``key_concurrency``.
            dedup_key: Refuse the start while a run with this key is active in
                the pool (:class:`~starflow.DuplicateRun` names it).
            debounce: Delay the start by this much; a later start with the same
                ``debounce_key`` (same workflow and pool) before it is claimed
                replaces its arguments and restarts the delay.
            debounce_key: The key debounced starts share (with ``debounce``).
            timeout: The run's deadline from its start (overrides the workflow's
                ``@workflow(timeout=)``): past it the run ends in ``error`` with
                ``WorkflowFailed.error_type == "WorkflowTimeout"`` (``.run()`` and
                ``.start()``).

        Raises:
            InvalidArgument: a key is not a storable name (nothing written).
            ConfigError: another option is invalid (named with its value).
        """
        for name, key in (("concurrency_key", concurrency_key), ("dedup_key", dedup_key),
                          ("debounce_key", debounce_key)):
            check_name(name, key, optional=True)
        problems = []
        if (problem := int_problem("priority", priority, -(2**31))) is not None or \
                priority >= 2**31:
            problems.append(problem or f"priority must be an int below 2**31: {priority!r}")
        if debounce is not None and (not isinstance(debounce, timedelta)
                                     or debounce <= timedelta(0)):
            problems.append(f"debounce must be a positive timedelta: {debounce!r}")
        if (debounce is None) != (debounce_key is None):
            problems.append("debounce and debounce_key go together: "
                            f"debounce={debounce!r}, debounce_key={debounce_key!r}")
        if debounce is not None and run_id is not None:
            problems.append("debounce replaces a pending run's arguments, so it takes no "
                            f"run_id: {run_id!r}")
        if (problem := timeout_problem("timeout", timeout)) is not None:
            problems.append(problem)
        if problems:
            raise ConfigError("options: " + "; ".join(problems))
        return RunOptions(self, run_id=run_id, pool=pool, priority=priority,
                          concurrency_key=concurrency_key, dedup_key=dedup_key,
                          debounce=debounce, debounce_key=debounce_key, timeout=timeout)

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
        """Stop firing ticks until :meth:`resume_schedule` (ticks meanwhile never start)."""
        return await self._update_schedule(schedule_id, lambda rec, now: {"paused": True})

    async def resume_schedule(self, schedule_id: str) -> ScheduleRecord:
        """Fire ticks again, from the next one after now (paused ticks do not catch up)."""
        def values(rec: ScheduleRecord, now: datetime) -> dict[str, Any]:
            nxt = next_tick(rec.cron, rec.timezone, now)
            return {"paused": False, "next_fire_at": nxt, "buffered_tick": None,
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
                              key_concurrency: int | None = None) -> PoolLimits | None:
        """Store limits every worker of every host obeys when claiming runs of ``pool``.

        Enforced inside the claim's transaction (PostgreSQL: with the pool's
        limits row locked; SQLite: in the writer's transaction), never by a
        check before the claim. Replaces the pool's limits; all ``None``
        removes them. Runs queued for any pool (no ``pool=``) are not limited.

        Args:
            pool: The pool.
            concurrency: Runs of the pool executing at once, across all workers.
            rate_limit: ``(n, period)``: at most ``n`` claims of the pool's runs
                within any ``period``.
            key_concurrency: Runs with one ``concurrency_key`` executing at once.

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
        rate: int | None = None
        period: timedelta | None = None
        if rate_limit is not None:
            if (not isinstance(rate_limit, tuple) or len(rate_limit) != 2
                    or int_problem("n", rate_limit[0], 1) is not None
                    or not isinstance(rate_limit[1], timedelta)
                    or rate_limit[1] < timedelta(milliseconds=1)):
                problems.append("rate_limit must be (n, period): an int n >= 1 and a "
                                f"timedelta period >= 1 ms: {rate_limit!r}")
            else:
                rate, period = rate_limit
        if problems:
            raise ConfigError("set_pool_limits: " + "; ".join(problems))
        limits = PoolLimits(pool=pool, concurrency=concurrency, rate_limit=rate,
                            rate_period=period, key_concurrency=key_concurrency)
        await self.adapter.set_pool_limits(limits, now=self.clock.now())
        return await self.adapter.get_pool_limits(pool)

    async def pools(self) -> list[PoolUsage]:
        """Every pool with limits or with queued or executing runs: limits and current use."""
        return await self.adapter.pool_usage(self.clock.now())

    # -- waking runs ---------------------------------------------------------------

    async def signal(self, run_id: str, event: str, payload: Any = None) -> RunHandle[Any]:
        """Deliver a signal. A run paused on ``event`` wakes: inline runs are driven
        here until they pause again or end, worker runs go back to the queue. A
        signal for a run not yet waiting is kept until it waits.

        Raises:
            RunNotFound: no such run.
            RunFinished: the run has ended.
            SerializationError: the payload is not JSON-encodable (nothing written).
        """
        return self._track(await self.runner.signal(normalize_run_id(run_id), event, payload))

    async def update(self, run_id: str, name: str, payload: Any = None, *,
                     timeout: timedelta | float | None = None,
                     update_id: str | None = None) -> Any:
        """Send a request to a running workflow and return its answer.

        The workflow receives it with ``req = await starflow.receive(name)`` and
        answers with ``await req.reply(value)`` (returned here) or ``await
        req.reject(reason)`` (raised here as :class:`UpdateRejected`). Request
        and answer are recorded in the run's history. An inline run paused in
        ``receive`` is driven here; this call returns as soon as the answer is
        recorded (from another process: on PostgreSQL at once, by ``NOTIFY``;
        on SQLite, or behind a transaction pooler without ``listen_url``,
        within ``poll_interval``).

        Retrying with the same ``update_id`` never executes the update twice:
        the request is queued once per id, and every call with that id gets
        the one recorded answer (also after a timeout here).

        Args:
            timeout: Give up waiting after this long (:class:`ResultTimeout`);
                the request stays queued.
            update_id: Your id for this update, to retry it safely (default:
                a new UUID).

        Raises:
            UpdateRejected: the workflow rejected the request.
            ResultTimeout: no answer within ``timeout``.
            RunFinished: the run ended without answering.
            RunNotFound: no such run.
            InvalidArgument / SerializationError: bad name, id or payload
                (nothing written).
        """
        run_id = normalize_run_id(run_id)
        uid = update_id if update_id is not None else str(uuid.uuid4())
        limit = _result_timeout(timeout)
        runner = self.runner
        deadline = None if limit is None else self.clock.now() + timedelta(seconds=limit)
        answer = await runner.update_answer(run_id, uid) if update_id is not None else None
        if answer is None:
            handle = await runner.request_update(run_id, name, payload, uid)
            if handle is not None:
                self._track(handle)
        poll = self.config.poll_interval.total_seconds()
        async with self.adapter.watch_run(run_id) as watch:
            while answer is None:
                # Taken before the read: a change after it (in this process, or
                # announced by another) wakes us; poll_interval is the fallback.
                settled = runner.settled
                changed = () if watch is None else (watch.arm(),)
                answer = await runner.update_answer(run_id, uid)
                if answer is not None:
                    break
                run = await self.get_run(run_id)
                if run.is_terminal:
                    answer = await runner.update_answer(run_id, uid)  # answered, then ended
                    if answer is None:
                        raise RunFinished(run_id, run.status, "update")
                    break
                now = self.clock.now()
                if deadline is not None and now >= deadline:
                    raise ResultTimeout(
                        f"run {run_id} did not answer update {name!r} (id {uid}) within "
                        f"{limit:g} s; the request stays queued: call update again with "
                        f"update_id={uid!r} to wait for its answer", run_id=run_id)
                wait = poll if deadline is None else min(poll, (deadline - now).total_seconds())
                await runner.wait_settled(wait, settled, *changed)
        node_id, output = answer
        if "rejected" in output:
            raise UpdateRejected(run_id, name, uid, str(output["rejected"]), node_id=node_id)
        return output.get("reply")

    async def resume(self, wake_token: str, payload: Any = None) -> RunHandle[Any]:
        """Wake the wait a token was issued for, with ``payload``.

        Raises:
            InvalidWakeToken: forged, expired, used, or for another wait (nothing written).
        """
        return self._track(await self.runner.resume(wake_token, payload))

    async def cancel(self, run_id: str, *, force: bool = False) -> RunHandle[Any]:
        """Cancel a run, letting its code clean up.

        The run is woken (paused) or interrupted (running): the workflow code
        gets :class:`~starflow.RunCancelled` at its current await (a step in
        flight is cancelled at its next await), and ``except RunCancelled:`` /
        ``finally:`` may run steps (compensations) within
        ``StarflowConfig.cancel_cleanup_timeout``. The run then ends
        ``cancelled`` (``error`` with its cause if the cleanup raised something
        else or passed the deadline). A run still queued that never ran ends
        at once. Cancelling twice changes nothing.

        Args:
            force: End the run now without running any of its code (its
                current execution is stopped, nothing more is written).

        Returns:
            The run's handle: ``cancelled`` when the cleanup ran here (an inline
            run that was paused) or for a forced cancel; else the run's current
            status (the cancel reaches it where it runs).

        Raises:
            RunNotFound: no such run.
            RunFinished: the run had already ended.
        """
        return self._track(await self.runner.cancel(normalize_run_id(run_id), force=force))

    async def retry(self, run_id: str) -> RunHandle[Any]:
        """Run a run that ended in ``error`` again from its recorded history.

        Use it after deploying a fix for what failed it (a ``NonDeterminismError``
        after an incompatible deploy, a bug in the workflow body, a runner lost
        too often): recorded steps are not run again. Inline runs are driven
        here until they pause or end; worker runs go back to the queue.
        """
        return self._track(await self.runner.retry(normalize_run_id(run_id)))

    def _track(self, handle: RunHandle[R]) -> RunHandle[R]:
        """Have this process fire the timers of an inline run it paused (no maintenance)."""
        if self._maintenance is not None and self._maintenance.inline_timers is not None:
            self._maintenance.inline_timers.track(handle.run_id, handle.status)
        return handle

    # -- queries -------------------------------------------------------------------

    async def get_run(self, run_id: str) -> RunInfo:
        """The ``workflow_runs`` row (read cold)."""
        run_id = normalize_run_id(run_id)
        run = await self.adapter.get_run(run_id)
        if run is None:
            raise RunNotFound(run_id)
        return run

    async def list_runs(self, status: str | None = None, template_id: str | None = None,
                        limit: int = 50, since: datetime | None = None,
                        attributes: Mapping[str, str | int | bool] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        """Runs newest first, optionally filtered.

        Args:
            status: Only runs in this status (``queued``, ``running``, ``paused``,
                ``success``, ``error`` or ``cancelled``).
            template_id: Only runs of this workflow name.
            limit: At most this many runs (an int from 1 to 2**31 - 1).
            since: Only runs started at or after this timezone-aware time.
            attributes: Only runs whose workflow set every one of these
                (``starflow.set_attributes``), each an index lookup. Values
                match exactly, type included (``"42"`` is not ``42``).
            parent_run_id: Only the child runs of this run (``starflow.start_child``,
                or a ``@workflow`` awaited inside a workflow), detached ones included.

        Raises:
            StarflowError: a filter is invalid (named with its value).
        """
        problems = []
        if status is not None and status not in RUN_STATUSES:
            problems.append(f"status must be one of {', '.join(RUN_STATUSES)}: {status!r}")
        if (problem := int_problem("limit", limit, 1)) is not None:
            problems.append(problem)
        elif limit > MAX_LIST_LIMIT:
            problems.append(f"limit must be at most {MAX_LIST_LIMIT}: {limit!r}")
        if (problem := name_problem("template_id", template_id, optional=True)) is not None:
            problems.append(problem)
        if since is not None and (not isinstance(since, datetime) or since.tzinfo is None):
            problems.append(f"since must be timezone-aware: {since!r}")
        encoded: dict[str, str] | None = None
        if attributes is not None:
            try:
                encoded = encode_attributes(attributes, what="attributes")
            except InvalidArgument as exc:
                problems.append(str(exc))
        if parent_run_id is not None:
            try:
                parent_run_id = normalize_run_id(parent_run_id)
            except StarflowError as exc:
                problems.append(f"parent_run_id: {exc}")
        if problems:
            raise InvalidArgument("list_runs: " + "; ".join(problems))
        return await self.adapter.list_runs(status=status, template_id=template_id,
                                            parent_run_id=parent_run_id,
                                            since=since, limit=limit, attributes=encoded)

    async def events(self, run_id: str) -> list[RunEvent]:
        """The run's ``workflow_run_events`` rows in order."""
        run_id = normalize_run_id(run_id)
        if await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        return await self.adapter.list_events(run_id)

    @overload
    async def result(self, run_id: RunHandle[R], timeout: timedelta | float | None = None
                     ) -> R: ...

    @overload
    async def result(self, run_id: str, timeout: timedelta | float | None = None) -> Any: ...

    async def result(self, run_id: RunHandle[Any] | str,
                     timeout: timedelta | float | None = None) -> Any:
        """Wait until the run ends and return its value, decoded to the annotated type.

        Given the :class:`RunHandle` that ``run`` or ``start`` returned, a type
        checker knows the value's type (the workflow's return annotation); given
        a run id, it is ``Any``.

        A run that ended with ``starflow.continue_as_new`` is followed to the run
        it continued as, and so on: the value is the chain's last run's.

        Raises:
            WorkflowFailed: the run ended with ``error``; it carries the cause:
                ``node_id`` of the failing step (if a step failure ended the run),
                ``error_type``, ``error_message`` and ``attempts``.
            RunCancelled: the run was cancelled (a ``WorkflowFailed``).
            ResultTimeout: ``timeout`` passed first (the run goes on).
        """
        if isinstance(run_id, RunHandle):
            run_id = run_id.run_id
        runner = self.runner
        run_id = normalize_run_id(run_id)
        limit = _result_timeout(timeout)
        deadline = None if limit is None else self.clock.now() + timedelta(seconds=limit)
        while True:  # once per run of a continue_as_new chain
            run = await self._await_end(run_id, deadline, limit)
            if run.continued_as is None:
                return runner.decode_result(run)
            run_id = run.continued_as

    async def _await_end(self, run_id: str, deadline: datetime | None,
                         limit: float | None) -> RunInfo:
        """The run's row once it ended with ``success`` (else its error, raised)."""
        runner = self.runner
        poll = self.config.poll_interval.total_seconds()
        async with self.adapter.watch_run(run_id) as watch:
            while True:
                # Taken before the read: a change after it (in this process, or
                # announced by another) wakes us; poll_interval is the fallback.
                settled = runner.settled
                changed = () if watch is None else (watch.arm(),)
                run = await self.get_run(run_id)
                if run.status == "success":
                    return run
                if run.status == "cancelled":
                    raise RunCancelled(run_id, run.error)
                if run.status == "error":
                    raise runner.failure(run)
                now = self.clock.now()
                if deadline is not None and now >= deadline:
                    raise ResultTimeout(
                        f"run {run_id} is still {run.status} after {limit:g} s; it goes on",
                        run_id=run_id)
                wait = poll if deadline is None else min(poll, (deadline - now).total_seconds())
                await runner.wait_settled(wait, settled, *changed)

    # -- events and streams (#17) -------------------------------------------------------

    def _data(self) -> DataReader:
        runner = self.runner
        return DataReader(self.adapter, self.clock, lambda: runner.settled,
                          self.config.poll_interval.total_seconds())

    async def get_event(self, run_id: str, key: str, *,
                        timeout: timedelta | float | None = None) -> Any:
        """The value the run published under ``key`` (``starflow.set_event``), as
        soon as it is set: at once if it is, else when the unit that writes it
        commits (woken in this process, and on PostgreSQL by ``NOTIFY`` from any
        process). The latest value if it was set more than once.

        Raises:
            ResultTimeout: not set within ``timeout`` (the run goes on).
            RunFinished: the run ended without setting it.
            RunNotFound: no such run.
            InvalidArgument: a bad key.
        """
        return await self._data().get_event(normalize_run_id(run_id), key,
                                            _result_timeout(timeout))

    async def read_stream(self, run_id: str, key: str) -> AsyncIterator[Any]:
        """Every value the run wrote to stream ``key`` (``starflow.write_stream``),
        in order, from the first; live values as they are written. Ends when
        the run closes the stream (``starflow.close_stream``) or ends.

        ::

            async for token in sf.read_stream(run.run_id, "tokens"):
                print(token)

        Raises:
            RunNotFound: no such run.
            InvalidArgument: a bad key.
        """
        async for value in self._data().read_stream(normalize_run_id(run_id), key):
            yield value

    async def fork(self, run_id: str, *, from_node: str) -> RunHandle[Any]:
        """A new run of an ended run's workflow, version and arguments whose history
        is the source's up to, not including, ``from_node``; it runs from there.

        For redoing a run after a bug fix from the step that went wrong::

            handle = await sf.fork(run_id, from_node="step:charge#1")

        The recorded outcomes before ``from_node`` are replayed, not re-run; the
        events and stream items they published are copied. The source is not
        changed. A fork of an inline run is driven here (until it pauses or
        ends), of a queued run goes to the queue of the same pool.

        Raises:
            RunNotEnded: the run is still queued, running or paused.
            NodeNotInHistory: ``from_node`` is not in its history (the error lists
                the nodes it has).
            RunNotFound: no such run.
        """
        handle = await fork_run(self.runner, normalize_run_id(run_id), from_node)
        return self._track(handle)

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
        async for state in warm.subscribe(run_id):
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
               maintenance: bool = False, grace: float = 30.0) -> Worker:
        """A worker that claims runs queued for ``pool``; ``await worker.run()``.

        Args:
            pool: Claim runs queued for this pool (and runs queued for any pool).
            concurrency: Most runs driven at once.
            maintenance: Also run the lease sweep, every run's durable timers and
                session-var GC (unless this app already runs them,
                ``Starflow.open(maintenance=True)``).
            grace: Seconds ``worker.stop()`` waits for active runs to finish or
                reach a step boundary before cancelling and releasing them.
        """
        check_concurrency(concurrency)  # before the maintenance loops are built
        check_name("pool", pool, optional=True)
        mt = None
        if maintenance and (self._maintenance is None or not self._maintenance.full):
            client = self._maintenance
            mt = Maintenance(self.runner, poll=self._shared_database, drain=client is None,
                             firing=client.firing if client is not None else None)
        return Worker(self.runner, pool=pool, concurrency=concurrency, maintenance=mt,
                      grace=grace)


#: The largest ``list_runs(limit=)``: a 32-bit count, which both databases'
#: LIMIT takes (past 2**63 SQLite raised a raw OverflowError).
MAX_LIST_LIMIT = 2**31 - 1


def check_session_names(session_id: object, key: object) -> None:
    """A session variable's id and key: storable names (both indexed)."""
    check_name("session_id", session_id)
    check_name("key", key)


def _result_timeout(timeout: object) -> float | None:
    """``Starflow.result``'s timeout in seconds: None, or a finite number >= 0 (a
    timedelta or seconds) no longer than :data:`~datetime.timedelta.max`."""
    if timeout is None:
        return None
    if isinstance(timeout, timedelta):
        seconds = timeout.total_seconds()
    elif isinstance(timeout, int | float) and not isinstance(timeout, bool):
        seconds = float(timeout)
    else:
        raise InvalidArgument(f"result timeout must be a timedelta or seconds: {timeout!r}")
    if not math.isfinite(seconds) or seconds < 0 or seconds > _MAX_TIMEOUT_S:
        raise InvalidArgument(
            f"result timeout must be between 0 and {_MAX_TIMEOUT_S:.0f} seconds (100 years): "
            f"{timeout!r}")
    return seconds


_MAX_TIMEOUT_S = 100 * 365 * 86400.0


class RunOptions:
    """Options for one start; made by :meth:`Starflow.options`."""

    def __init__(self, app: Starflow, *, run_id: str | None, pool: str | None,
                 priority: int = 0, concurrency_key: str | None = None,
                 dedup_key: str | None = None, debounce: timedelta | None = None,
                 debounce_key: str | None = None, timeout: timedelta | None = None) -> None:
        self._app = app
        self.timeout = timeout
        self.run_id = run_id
        self.pool = pool
        self.priority = priority
        self.concurrency_key = concurrency_key
        self.dedup_key = dedup_key
        self.debounce = debounce
        self.debounce_key = debounce_key

    def _flow(self) -> dict[str, Any]:
        return {"priority": self.priority, "concurrency_key": self.concurrency_key,
                "dedup_key": self.dedup_key}

    @overload
    async def run(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
                  ) -> RunHandle[R]: ...

    @overload
    async def run(self, wf: str, /, *args: Any, **kwargs: Any) -> RunHandle[Any]: ...

    async def run(self, wf: Callable[..., Awaitable[Any]] | str, /, *args: Any, **kwargs: Any
                  ) -> RunHandle[Any]:
        """Like :meth:`Starflow.run`, with these options."""
        if self.pool is not None:
            raise ConfigError("pool= applies to queued runs: use .start(), not .run()")
        flow = [name for name, value in (*self._flow().items(), ("debounce", self.debounce))
                if value]
        if flow:
            raise ConfigError(f"{', '.join(flow)} apply to queued runs: use .start(), "
                              "not .run()")
        return self._app._track(await self._app.runner.start(
            workflow_definition(wf), args, kwargs, run_id=self.run_id, inline=True,
            timeout=self.timeout))

    @overload
    async def start(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
                    ) -> RunHandle[R]: ...

    @overload
    async def start(self, wf: str, /, *args: Any, **kwargs: Any) -> RunHandle[Any]: ...

    async def start(self, wf: Callable[..., Awaitable[Any]] | str, /, *args: Any,
                    **kwargs: Any) -> RunHandle[Any]:
        """Like :meth:`Starflow.start`, with these options.

        Raises:
            DuplicateRun: ``dedup_key`` names an active run of the pool (nothing written).
        """
        check_name("pool", self.pool, optional=True)
        runner = self._app.runner
        definition = workflow_definition(wf)
        if self.debounce is None:
            return await runner.start(definition, args, kwargs, run_id=self.run_id,
                                      inline=False, pool=self.pool, flow=self._flow(),
                                      timeout=self.timeout)
        assert self.debounce_key is not None
        encoded = runner.encode_input(definition, args, kwargs)
        runner.decode_input(definition, encoded)
        pool = self.pool if self.pool is not None else definition.pool
        flow = {**self._flow(), "debounce_key": self.debounce_key}
        # Replace the pending run's arguments, or start one; a unique index lets one
        # of several concurrent first callers insert, and the others then replace.
        for _ in range(5):
            not_before = self._app.clock.now() + self.debounce
            rearmed = await runner.adapter.rearm_debounced(
                definition.name, pool, self.debounce_key, encoded, not_before)
            if rearmed is not None:
                return RunHandle(run_id=rearmed, status="queued")
            try:
                return await runner.start(definition, args, kwargs, run_id=None, inline=False,
                                          pool=pool, flow={**flow, "not_before": not_before},
                                          timeout=self.timeout)
            except StorageError as exc:
                if exc.transient:
                    raise
                continue  # another caller inserted the pending run first: replace it
        raise StarflowError(f"debounce_key {self.debounce_key!r}: the pending run changed "
                            "under 5 attempts to replace it; try again")


def workflow_definition(wf: object) -> WorkflowDefinition:
    """The definition a start uses: a function's own version, a name's newest one.

    Raises:
        WorkflowDefinitionError: ``wf`` is not a workflow, or no workflow of that
            name is registered in this process (nothing written).
    """
    if isinstance(wf, str):
        definition = registry.get(wf)
        if definition is None:
            known = ", ".join(repr(n) for n in registry.names()) or "none"
            raise WorkflowDefinitionError(
                f"no workflow named {wf!r} is registered in this process (registered: "
                f"{known}): import the module that defines it before starting it by name")
        return definition
    definition = definition_of(wf)
    # Its (name, version) as registered now: the code a replay of the run will use.
    return registry.get(definition.name, definition.version) or definition
