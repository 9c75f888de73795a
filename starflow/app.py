"""``Starflow``: the application object users open, run workflows with and query.

One class, every method defined on it (its MRO is ``Starflow, object``). Where
a body is large the method calls a helper it holds or a function of
:mod:`starflow.app_start` (opening, start options), :mod:`starflow.app_ops`
(schedules, workers, pool limits), :mod:`starflow.app_runs` (updates, results,
resume, query checks) or :mod:`starflow.app_bulk` (bulk actions).
"""

from __future__ import annotations

import os
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Mapping
from datetime import datetime, timedelta
from typing import Any, ParamSpec, Self, TypeVar, overload

import anyio

from . import serde
from .adapters.base import WorkflowStateAdapter
from .adapters.pages import RunPage, RunPageQuery
from .admin.history import export_run
from .admin.retention import DEFAULT_BATCH_SIZE, PruneReport, prune_runs
from .app_bulk import DEFAULT_BULK_LIMIT, run_bulk
from .app_ops import Operations, check_session_names, pool_limits
from .app_runs import Runs, check_due_timers, check_list_runs, names_run_key, result_timeout
from .app_start import RunOptions, check_options, open_adapter
from .clock import Clock, SystemClock
from .codec import PayloadCodec
from .config import StarflowConfig, int_problem
from .errors import ConfigError, InvalidArgument, RunNotFound, ScheduleNotFound
from .limits import check_name
from .records import (
    BulkResult,
    PoolLimits,
    PoolUsage,
    RunEvent,
    RunFilter,
    RunInfo,
    ScheduleRecord,
    WaitRecord,
)
from .runtime.forks import fork_run
from .runtime.jobs import JobWorker
from .runtime.maintenance import Maintenance
from .runtime.runner import RunHandle, Runner
from .runtime.worker import Worker
from .tokens import Keyring
from .warm.base import LiveRun, WarmTier, live_run
from .warm.drainer import OutboxStatus, outbox_status
from .warm.mirror import find_mirror
from .workflow.events import DataReader

__all__ = ["RunOptions", "Starflow"]


P = ParamSpec("P")
R = TypeVar("R")


class Starflow:
    """A connection to one workflow database, scoped to (``workspace_id``, ``env``).

    Open it with ``async with Starflow.open(url) as sf:``. While open, it
    fires the durable timers of the inline runs it paused and drains its own
    warm-tier outbox; with ``maintenance=True`` it also runs the lease sweep,
    every run's timers and session-var GC (see :meth:`open`).

    Every method that takes a ``run_id`` takes the run's *run key* too (the
    string it was started with, ``sf.options(run_id="order-123")``): any
    string that is not a UUID is read as a key (see
    :func:`starflow.limits.run_ref`), and an invalid one raises
    :class:`~starflow.InvalidArgument` before anything is written.
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
        #: The codec given to :meth:`open` (None: values are stored as plain JSON).
        self.codec: PayloadCodec | None = None
        # The bodies of the larger methods, by composition (the methods stay here).
        self._runs = Runs(self)
        self._ops = Operations(self)

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
        codec: PayloadCodec | None = None,
    ) -> Self:
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
            codec: A :class:`~starflow.PayloadCodec` (``ZlibCodec``,
                ``AesGcmCodec``, a ``CodecChain`` of both) applied to every
                stored user value: arguments, results, signal and update
                payloads, events, streams, session values (see the codecs guide).
                Every process that runs or reads these runs needs the same codec.

        Raises:
            ConfigError: ``config`` or ``codec`` is not valid (nothing opened).
        """
        config = config or StarflowConfig()
        adapter = open_adapter(url, workspace_id=workspace_id, env=env, config=config,
                               clock=clock, warm=warm, adapter=adapter, codec=codec)
        app = cls(adapter, config=config, clock=clock, maintenance=maintenance)
        app.codec = codec
        return app

    # -- lifecycle -----------------------------------------------------------------

    async def __aenter__(self) -> Self:
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

    def _run_id(self, run_id: Any) -> str:
        """The run id (canonical UUID text) ``run_id`` names: a UUID or a run key
        (read in this app's workspace/env by :func:`starflow.limits.run_ref`).

        Raises:
            InvalidArgument: neither a UUID nor a valid run key (nothing written).
        """
        return self.adapter.normalize_run_id(run_id)

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

        ``sf.options(run_id=i).run(wf, ...)`` makes the start idempotent: a
        second call with the same id and workflow returns the existing run (its
        new arguments are ignored, with a warning if they differ). ``i`` is a
        UUID, or a run key of your own (``"order-123"``: the run's id is derived
        from it, ``RunInfo.run_key`` keeps it, and every call that takes a run
        id takes the key). ``sf.run(wf, x, run_id=i)`` works too, untyped.

        A start for later (``start_at=`` / ``start_after=``) is refused here:
        a worker claims such a run when its time comes, so use :meth:`start`.

        Raises:
            RunIdConflict: ``run_id`` names a run of another workflow (nothing written).
            InvalidArgument: ``run_id`` is neither a UUID nor a valid run key
                (nothing written).
            WorkflowDefinitionError: the arguments do not bind to the signature.
            SerializationError: an argument cannot be stored (nothing written).
            ConfigError: ``start_at`` / ``start_after`` given (nothing written).
        """
        run_id = kwargs.pop("run_id", None)
        start_at = kwargs.pop("start_at", None)
        start_after = kwargs.pop("start_after", None)
        attributes = kwargs.pop("attributes", None)
        connection = kwargs.pop("connection", None)
        return await self.options(run_id=run_id, start_at=start_at, start_after=start_after,
                                  attributes=attributes, connection=connection
                                  ).run(wf, *args, **kwargs)

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

        A start for later: ``sf.start(wf, x, start_after=timedelta(hours=1))`` or
        ``start_at=<aware datetime>`` (or through :meth:`options`). The run is
        written now (status ``queued``, ``RunInfo.not_before`` its start time)
        and no worker claims it before then; ``sf.cancel`` ends it before it
        runs.

        In your own database transaction: ``sf.start(wf, x, connection=conn)``
        (``conn`` an asyncpg connection for PostgreSQL, an aiosqlite one to the
        app's file for SQLite, with a transaction open) writes the run with your
        rows: it is queued when you commit, and gone if you roll back (see
        :meth:`options` and the transactional start guide).

        Raises:
            RunIdConflict: ``run_id`` names a run of another workflow (nothing written).
            ConfigError: a bad ``start_at`` / ``start_after`` (nothing written).
            CallerTransactionError: ``connection=`` cannot take the start (nothing written).
        """
        run_id = kwargs.pop("run_id", None)
        pool = kwargs.pop("pool", None)
        start_at = kwargs.pop("start_at", None)
        start_after = kwargs.pop("start_after", None)
        attributes = kwargs.pop("attributes", None)
        connection = kwargs.pop("connection", None)
        return await self.options(run_id=run_id, pool=pool, start_at=start_at,
                                  start_after=start_after, attributes=attributes,
                                  connection=connection).start(wf, *args, **kwargs)

    def options(self, *, run_id: str | None = None, pool: str | None = None,
                priority: int = 0, concurrency_key: str | None = None,
                dedup_key: str | None = None, debounce: timedelta | None = None,
                debounce_key: str | None = None, timeout: timedelta | None = None,
                start_at: datetime | None = None, start_after: timedelta | None = None,
                attributes: Mapping[str, str | int | bool] | None = None,
                connection: object | None = None) -> RunOptions:
        """Start options that type checkers see: ``sf.options(run_id=i).run(wf, x)``.

        ``sf.run(wf, x, run_id=i)`` works too, but a type checker cannot check
        ``run_id=`` / ``pool=`` there (they share the call with the workflow's
        own keyword arguments), and a workflow parameter with one of those names
        needs ``options``.

        Flow control (queued starts, ``.start()``, only; see the schedules and
        queues guide):

        Args:
            run_id: The run's id (a UUID) or run key (any other string, such as
                ``"order-123"``: 1-200 printable characters, no leading or
                trailing whitespace, not starting with ``sfw1.``): an
                idempotent start (``.run()`` and ``.start()``).
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
                ``.start()``). For a start for later, from its start time.
            start_at: Start the run no earlier than this timezone-aware time
                (``.start()`` only): written now, claimed by a worker then. A
                time already past starts it at once.
            start_after: Start the run no earlier than this long after the
                ``.start()`` call (a timedelta of zero or more). One of
                ``start_at`` and ``start_after``, at most 100 years ahead.
            attributes: Searchable attributes of the run, written with its
                start (``.run()`` and ``.start()``): the same as the workflow
                calling ``starflow.set_attributes(**attributes)`` first, so
                ``list_runs(attributes=)`` finds it and ``get_attributes``
                reads them back. A later ``set_attributes`` of a key replaces
                its value. An idempotent start that finds its run writes none.
            connection: Your own database connection, with a transaction open
                (``.start()`` only): an asyncpg connection (or a pool's) to the
                app's PostgreSQL database, or an aiosqlite connection to the app's
                SQLite file. The run's rows are written in that transaction, so
                they commit with yours, or roll back with them; workers see the
                run once you commit. Not with ``debounce``, a warm tier, a
                ``memory://`` or ``null://`` app, or ``.run()``.

        Raises:
            InvalidArgument: a key is not a storable name, or a bad attribute
                (nothing written).
            ConfigError: another option is invalid (named with its value).
            TransactionalStartUnsupported: ``connection`` with ``debounce``.
        """
        if run_id is not None:
            self._run_id(run_id)  # a UUID or a valid run key, else InvalidArgument now
        encoded = check_options(self.clock, run_id=run_id, priority=priority,
                                concurrency_key=concurrency_key, dedup_key=dedup_key,
                                debounce=debounce, debounce_key=debounce_key, timeout=timeout,
                                start_at=start_at, start_after=start_after, attributes=attributes,
                                connection=connection)
        return RunOptions(self, run_id=run_id, pool=pool, priority=priority,
                          concurrency_key=concurrency_key, dedup_key=dedup_key,
                          debounce=debounce, debounce_key=debounce_key, timeout=timeout,
                          start_at=start_at, start_after=start_after, attributes=encoded,
                          connection=connection)

    def _track(self, handle: RunHandle[R]) -> RunHandle[R]:
        """Have this process fire the timers of an inline run it paused (no maintenance)."""
        if self._maintenance is not None and self._maintenance.inline_timers is not None:
            self._maintenance.inline_timers.track(handle.run_id, handle.status)
        return handle

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
        return await self._ops.schedule(schedule_id, wf, args, kwargs, cron=cron,
                                        timezone=timezone, overlap=overlap, catchup=catchup,
                                        pool=pool)

    async def schedules(self) -> list[ScheduleRecord]:
        """Every schedule of this workspace, by id."""
        return await self.adapter.list_schedules()

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord:
        """One schedule.

        Raises:
            ScheduleNotFound: there is none with this id.
        """
        return await self._ops.get_schedule(schedule_id)

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
        return await self._ops.pause_schedule(schedule_id)

    async def resume_schedule(self, schedule_id: str) -> ScheduleRecord:
        """Fire ticks again, from the next one after now (paused ticks do not catch up).

        A tick that waited for the previous run (``overlap="buffer_one"``) when the
        schedule was paused does not start: it is counted in ``skipped_overlap``.
        """
        return await self._ops.resume_schedule(schedule_id)

    async def delete_schedule(self, schedule_id: str) -> None:
        """Delete a schedule; runs it started are kept.

        Raises:
            ScheduleNotFound: there is none with this id.
        """
        check_name("schedule_id", schedule_id)
        if not await self.adapter.delete_schedule(schedule_id):
            raise ScheduleNotFound(schedule_id)
        self._ops.schedules_changed()

    async def trigger_schedule(self, schedule_id: str) -> RunHandle[Any]:
        """Queue a run of the schedule now, outside its cron (overlap is not consulted).

        The run becomes the schedule's last run, which later ticks' ``overlap`` sees.
        """
        return await self._ops.trigger_schedule(schedule_id)

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
        limits = pool_limits(pool, concurrency=concurrency, rate_limit=rate_limit,
                             key_concurrency=key_concurrency, key_rate_limit=key_rate_limit,
                             fair=fair, key_weights=key_weights, keep_slot=keep_slot)
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
        return self._ops.worker(pool, concurrency, maintenance, grace, timers, metrics_interval)

    # -- waking runs ---------------------------------------------------------------

    @names_run_key
    async def signal(self, run_id: str, event: str, payload: Any = None) -> RunHandle[Any]:
        """Deliver a signal. A run paused on ``event`` wakes: inline runs are driven
        here until they pause again or end, worker runs go back to the queue. A
        signal for a run not yet waiting is kept until it waits.

        A run that continued as new (``starflow.continue_as_new``) passes the
        signal on: it goes to the chain's current (last) run, whose handle is
        returned.

        Raises:
            RunNotFound: no such run.
            RunFinished: the run (the chain's last run) has ended.
            SerializationError: the payload is not JSON-encodable (nothing written).
        """
        return self._track(await self.runner.signal(self._run_id(run_id), event, payload))

    @overload
    async def update(self, run_id: str, name: str, payload: Any = None, *,
                     timeout: timedelta | float | None = None,
                     update_id: str | None = None, type: type[R]) -> R: ...

    @overload
    async def update(self, run_id: str, name: str, payload: Any = None, *,
                     timeout: timedelta | float | None = None,
                     update_id: str | None = None) -> Any: ...

    @names_run_key
    async def update(self, run_id: str, name: str, payload: Any = None, *,
                     timeout: timedelta | float | None = None,
                     update_id: str | None = None, type: Any = Any) -> Any:
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

        A run that continued as new (``starflow.continue_as_new``) passes the
        update on to the chain's current (last) run; a retry with the same
        ``update_id`` finds the answer on whichever run of the chain gave it.

        Args:
            timeout: Give up waiting after this long (:class:`ResultTimeout`);
                the request stays queued.
            update_id: Your id for this update, to retry it safely (default:
                a new UUID).
            type: Convert the answer to this type (a dataclass, Struct, Pydantic
                model…); as stored (JSON builtins) by default.

        Raises:
            UpdateRejected: the workflow rejected the request.
            ResultTimeout: no answer within ``timeout``.
            RunFinished: the run ended without answering.
            RunNotFound: no such run.
            InvalidArgument / SerializationError: bad name, id or payload
                (nothing written).
        """
        return await self._runs.update(run_id, name, payload, timeout, update_id, type)

    async def resume(self, wake_token: str, payload: Any = None) -> RunHandle[Any]:
        """Wake the wait a token was issued for, with ``payload``; or, given a run id,
        resume a run an operator paused (:meth:`pause`).

        The three never clash: a run id is a UUID, a wake token starts with
        ``sfw1.`` and a run key (``sf.options(run_id="order-123")``) never
        does. A run id or key takes no ``payload``.

        Resuming a run puts it back where it was: at its wait (a signal that came
        while it was paused is delivered now, a timer past due fires), in the queue
        for workers (a run started with ``sf.start``), or, for an inline run parked
        between steps, driven on in this call until it pauses again or ends (like
        ``sf.signal``). A run that is not paused is left as it is (nothing written);
        a pause still pending (the run has not reached its next step) is withdrawn.

        Raises:
            InvalidWakeToken: forged, expired, used, or for another wait; or text
                that is neither a token nor the key of a run here (nothing written).
            RunNotFound: no run has that id.
            RunFinished: the run has ended (nothing written).
            InvalidArgument: a run id or key with a ``payload``.
        """
        run_id = await self._runs.resumable_run(wake_token)
        if run_id is None:
            return self._track(await self.runner.resume(wake_token, payload))
        if payload is not None:
            raise InvalidArgument(
                f"resume({wake_token!r}, payload=...): a run id resumes a run an operator "
                "paused and takes no payload; send data with sf.signal(run_id, event, "
                "payload), or pass the wait's wake token", run_id=run_id)
        return self._track(await self.runner.resume_run(run_id))

    @names_run_key
    async def pause(self, run_id: str) -> RunHandle[Any]:
        """Pause a run: it stops at its next boundary and keeps its state until
        :meth:`resume` (``sf.resume(run_id)``).

        A queued run is held (no worker claims it) and a run paused at a wait is
        held there: a signal sent meanwhile is recorded but does not wake it, its
        timer does not fire. An executing run parks before its next step (a step
        in flight finishes and is recorded first): this call returns at once
        with the run still ``running``, and the run's events show
        ``run_pause_requested`` then ``run_paused_by_operator``. A held run has
        status ``paused`` and ``claim_state`` ``held``. Pausing a paused run (or
        one whose pause is pending) writes nothing. ``sf.cancel`` still cancels
        a paused run.

        Returns:
            The run's handle as it is now.

        Raises:
            RunNotFound: no run has that id.
            RunFinished: the run has ended (nothing written).
        """
        return await self.runner.pause(self._run_id(run_id))

    @names_run_key
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
        return self._track(await self.runner.cancel(self._run_id(run_id), force=force))

    @names_run_key
    async def retry(self, run_id: str) -> RunHandle[Any]:
        """Run a run that ended in ``error`` again from its recorded history.

        Use it after deploying a fix for what failed it. The step whose failure
        ended the run runs again with the code deployed now, and what follows
        it (a wait that timed out waits again; a failed child run is retried
        too); the steps that succeeded before it are kept, not run again. A
        failure of the workflow body itself (a bug, a ``NonDeterminismError``
        after an incompatible deploy, a runner lost too often) replays the
        whole history and runs the body again. A run past its deadline gets a
        new one as long as the first. Inline runs are driven here until they
        pause or end; worker runs go back to the queue.

        Raises:
            RunNotFound: no such run.
            RunFinished: the run succeeded or was cancelled.
            StarflowError: the run has not ended.
        """
        return self._track(await self.runner.retry(self._run_id(run_id)))
    # -- queries -------------------------------------------------------------------

    @names_run_key
    async def get_run(self, run_id: str) -> RunInfo:
        """The ``workflow_runs`` row (read cold)."""
        return await self._runs.get(self._run_id(run_id))

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
        encoded, parent = check_list_runs(self.adapter, status, template_id, limit, since,
                                          attributes, parent_run_id)
        return await self.adapter.list_runs(status=status, template_id=template_id,
                                            parent_run_id=parent, since=since, limit=limit,
                                            attributes=encoded)

    @names_run_key
    async def get_attributes(self, run_id: str) -> dict[str, str | int | bool]:
        """The searchable attributes of one run, key -> value (empty: none set).

        Those set at its start (``sf.options(attributes=...)``) and by its
        workflow (``starflow.set_attributes``) once written (with the run's
        next boundary), the latest value of each key.

        Raises:
            RunNotFound: no such run.
        """
        run_id = self._run_id(run_id)
        if await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        stored = await self.adapter.get_run_attributes(run_id)
        return {key: serde.decode(text.encode()) for key, text in stored.items()}

    @names_run_key
    async def events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        """The run's ``workflow_run_events`` rows in order.

        Args:
            after_id: Only the events after this one (a :attr:`RunEvent.id`):
                what a reader that polls has not seen yet.

        Raises:
            RunNotFound: no such run.
            InvalidArgument: ``after_id`` is not an int >= 0.
        """
        run_id = self._run_id(run_id)
        if (problem := int_problem("after_id", after_id, 0)) is not None:
            raise InvalidArgument(f"events: {problem}")
        events = await self.adapter.list_events(run_id, after_id=after_id)
        if not events and await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        return events

    @names_run_key
    async def waits(self, run_id: str) -> list[WaitRecord]:
        """What the run is registered to wake on: one :class:`~starflow.records.WaitRecord`
        per open wait (the node, its event, its timer's deadline); empty
        unless the run is paused or about to pause.

        Raises:
            RunNotFound: no such run.
        """
        run_id = self._run_id(run_id)
        waits = await self.adapter.list_waits(run_id)
        if not waits and await self.adapter.get_run(run_id) is None:
            raise RunNotFound(run_id)
        return waits

    async def list_runs_page(self, query: RunPageQuery) -> RunPage:
        """One page of runs, newest first, with the filters, counts and keyset cursor
        of :class:`~starflow.adapters.pages.RunPageQuery` (what ``starflow ui``'s runs
        table reads): pass ``page.next`` as ``after=`` for the next page.

        Unlike :meth:`list_runs`, it filters by time range, lease expiry and run-id
        prefix too, and counts the matching runs by status (``counts=True``).

        Raises:
            StarflowError: the query is invalid (every problem named; nothing read).
        """
        return await self.adapter.list_runs_page(query)

    async def count_due_timers(self, before: datetime, *, limit: int = 100) -> int:
        """How many durable timers fell due at or before ``before`` and have not
        fired: wait deadlines (``sleep``, ``wait_for`` timeouts) and deadlines of
        queued runs, counted up to ``limit``.

        A maintenance loop fires a timer within a poll of its deadline: many
        timers well past due mean none runs (``starflow ui``'s operations page
        asks with ``before`` a little in the past).

        Raises:
            InvalidArgument: ``before`` is naive, or ``limit`` is not an int >= 1.
        """
        check_due_timers(before, limit)
        waits = await self.adapter.due_waits(before, limit=limit)
        queued = await self.adapter.due_run_deadlines(before, limit=limit)
        return min(len(waits) + len(queued), limit)

    @names_run_key
    async def export_run(self, run_id: str) -> dict[str, Any]:
        """The run's history as JSON-ready builtins, wake tokens redacted: one
        object of the file ``starflow runs export`` writes and ``starflow replay``
        (:func:`starflow.admin.history.load_history`) reads.

        Raises:
            RunNotFound: no such run.
        """
        return await export_run(self.adapter, self._run_id(run_id))

    @property
    def workspace_id(self) -> str:
        """The workspace every read and write of this app is scoped to."""
        return self.adapter.workspace_id

    @property
    def env(self) -> str:
        """The environment every read and write of this app is scoped to."""
        return self.adapter.env

    @overload
    async def result(self, run_id: RunHandle[R], timeout: timedelta | float | None = None
                     ) -> R: ...

    @overload
    async def result(self, run_id: str, timeout: timedelta | float | None = None) -> Any: ...

    @names_run_key
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
        return await self._runs.result(run_id, timeout)

    # -- events and streams (#17) -------------------------------------------------------

    def _data(self) -> DataReader:
        runner = self.runner
        return DataReader(self.adapter, self.clock, lambda: runner.settled,
                          self.config.poll_interval.total_seconds())

    @overload
    async def get_event(self, run_id: str, key: str, *,
                        timeout: timedelta | float | None = None, type: type[R]) -> R: ...

    @overload
    async def get_event(self, run_id: str, key: str, *,
                        timeout: timedelta | float | None = None) -> Any: ...

    @names_run_key
    async def get_event(self, run_id: str, key: str, *,
                        timeout: timedelta | float | None = None, type: Any = Any) -> Any:
        """The value the run published under ``key`` (``starflow.set_event``), as
        soon as it is set: at once if it is, else when the unit that writes it
        commits (woken in this process, and on PostgreSQL by ``NOTIFY`` from any
        process). The latest value if it was set more than once.

        Args:
            type: Convert the value to this type (a dataclass, Struct, Pydantic
                model…); as stored (JSON builtins) by default.

        Raises:
            ResultTimeout: not set within ``timeout`` (the run goes on).
            RunFinished: the run ended without setting it.
            RunNotFound: no such run.
            InvalidArgument: a bad key.
            SerializationError: the value does not fit ``type``.
        """
        run_id = self._run_id(run_id)
        value = await self._data().get_event(run_id, key, result_timeout(timeout))
        return serde.convert(value, type, what=f"event {key!r} of run {run_id}",
                             run_id=run_id)

    @overload
    def read_stream(self, run_id: str, key: str, *, type: type[R]) -> AsyncIterator[R]: ...

    @overload
    def read_stream(self, run_id: str, key: str) -> AsyncIterator[Any]: ...

    def read_stream(self, run_id: str, key: str, *, type: Any = Any) -> AsyncIterator[Any]:
        """Every value the run wrote to stream ``key`` (``starflow.write_stream``),
        in order, from the first; live values as they are written. Ends when
        the run closes the stream (``starflow.close_stream``) or ends.

        ::

            async for token in sf.read_stream(run.run_id, "tokens"):
                print(token)

        Args:
            type: Convert each value to this type (a dataclass, Struct, Pydantic
                model…); as stored (JSON builtins) by default.

        Raises:
            RunNotFound: no such run.
            InvalidArgument: a bad key.
            SerializationError: a value does not fit ``type``.
        """
        return self._read_stream(run_id, key, type)

    async def _read_stream(self, run_id: str, key: str, type_: Any) -> AsyncIterator[Any]:
        run_id = self._run_id(run_id)
        async for value in self._data().read_stream(run_id, key):
            yield serde.convert(value, type_, what=f"stream {key!r} value of run {run_id}",
                                run_id=run_id)

    @names_run_key
    async def fork(self, run_id: str, *, from_node: str) -> RunHandle[Any]:
        """A new run of an ended run's workflow, version and arguments whose history
        is the source's without ``from_node`` and what followed it; it runs from there.

        For redoing a run after a bug fix from the step that went wrong::

            handle = await sf.fork(run_id, from_node="step:charge#1")

        The recorded outcomes before ``from_node``, and of the nodes that ran
        beside it (started before it ended: the other steps of a ``gather``),
        are replayed, not re-run; ``from_node`` and every node that started after
        it ended run again. The events and stream items the kept nodes published
        are copied. The source is not
        changed. A fork of an inline run is driven here (until it pauses or
        ends), of a queued run goes to the queue of the same pool.

        Raises:
            RunNotEnded: the run is still queued, running or paused.
            NodeNotInHistory: ``from_node`` is not in its history (the error lists
                the nodes it has).
            RunNotFound: no such run.
        """
        handle = await fork_run(self.runner, self._run_id(run_id), from_node)
        return self._track(handle)


    # -- bulk actions (#30) ---------------------------------------------------------

    async def cancel_runs(self, filter: RunFilter, *, dry_run: bool = False,
                          limit: int | None = DEFAULT_BULK_LIMIT,
                          force: bool = False) -> BulkResult:
        """Cancel every queued, running or paused run the filter matches, each with
        :meth:`cancel` (the cancel cascades to its attached children).

        ::

            result = await sf.cancel_runs(RunFilter(template_id="order", since=day_ago))

        The matches are read page by page (newest first, by keyset), never all
        at once. They are counted first: more than ``limit`` raises
        :class:`~starflow.TooManyRuns` before any is cancelled. A run that ended
        between the match and its cancel is skipped (``BulkResult.skipped``
        says why), not an error.

        Args:
            filter: Which runs (at least one criterion, or ``all=True``).
            dry_run: Only count the matching runs; write nothing.
            limit: Refuse when more runs than this match (``None``: no cap).
            force: As :meth:`cancel`'s ``force``: end each run now, no cleanup.

        Raises:
            InvalidArgument: the filter is empty or invalid, or names a status
                a cancel does not apply to (nothing written).
            TooManyRuns: more than ``limit`` runs match (nothing written).
        """
        async def act(run: RunInfo) -> str | None:
            await self.cancel(run.id, force=force)
            return None
        return await run_bulk(self.adapter, "cancel", filter, dry_run, limit, act)

    async def retry_runs(self, filter: RunFilter, *, dry_run: bool = False,
                         limit: int | None = DEFAULT_BULK_LIMIT) -> BulkResult:
        """Retry every run in ``error`` the filter matches, each with :meth:`retry`
        (the step that failed runs again with the code deployed now; recorded
        successes are kept). Inline runs are driven here, one after another.

        Paged, counted and capped as :meth:`cancel_runs`; a run retried or
        ended otherwise between the match and its retry is skipped.

        Raises:
            InvalidArgument: the filter is empty or invalid, or names a status
                other than ``error`` (nothing written).
            TooManyRuns: more than ``limit`` runs match (nothing written).
        """
        async def act(run: RunInfo) -> str | None:
            await self.retry(run.id)
            return None
        return await run_bulk(self.adapter, "retry", filter, dry_run, limit, act)

    async def fork_runs(self, filter: RunFilter, *, from_node: str, dry_run: bool = False,
                        limit: int | None = DEFAULT_BULK_LIMIT) -> BulkResult:
        """Fork every ended run the filter matches from ``from_node``, each with
        :meth:`fork`: for redoing a batch of runs after a fix from the step they
        share. A matched run whose history lacks ``from_node`` is skipped (and
        listed with the reason), not an error. ``BulkResult.forks`` maps each
        source run to its new run.

        Paged, counted and capped as :meth:`cancel_runs`; the new runs are never
        matched themselves.

        Raises:
            InvalidArgument: the filter is empty or invalid, names a status that
                has not ended, or ``from_node`` is blank (nothing written).
            TooManyRuns: more than ``limit`` runs match (nothing written).
        """
        if not isinstance(from_node, str) or not from_node.strip():
            raise InvalidArgument(f"fork_runs: from_node must be a node id such as "
                                  f"'step:charge#1': {from_node!r}")
        made: set[str] = set()  # the forks are ended runs too: never fork a fork made here

        async def act(run: RunInfo) -> str | None:
            if run.id in made:
                return "a run forked by this call"
            handle = await self.fork(run.id, from_node=from_node)
            made.add(handle.run_id)
            return handle.run_id
        return await run_bulk(self.adapter, "fork", filter, dry_run, limit, act, skip_ids=made)

