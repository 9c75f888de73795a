"""The core of :class:`~starflow.Starflow`: opening, closing and starting runs.

:class:`StarflowCore` owns the adapter, the runner and the background tasks
of an open app, and starts runs (also through :class:`RunOptions`).
:mod:`starflow.app_ops` adds operating it (schedules, pool limits, the warm
tier, session variables, jobs), :mod:`starflow.app` talking to runs.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, ParamSpec, Self, TypeVar, overload

import anyio
import anyio.lowlevel

from .adapters import adapter_from_url
from .adapters.base import WorkflowStateAdapter
from .adapters.coding import CodecAdapter
from .clock import Clock, SystemClock
from .codec import PayloadCodec, Payloads
from .config import StarflowConfig, database_url_from_env, int_problem
from .errors import (
    ConfigError,
    StarflowError,
    StorageError,
    TransactionalStartUnsupported,
    WorkflowDefinitionError,
)
from .limits import MAX_DURATION, check_name, duration_problem
from .logs import get_logger
from .runtime.maintenance import Maintenance
from .runtime.runner import RunHandle, Runner
from .tokens import Keyring
from .urls import scheme_of
from .workflow.attributes import encode_attributes
from .workflow.decorators import WorkflowDefinition, definition_of, registry, timeout_problem

__all__ = ["DEFAULT_ENV", "DEFAULT_URL", "DEFAULT_WORKSPACE", "RunOptions",
           "StarflowCore", "start_problems", "workflow_definition"]


P = ParamSpec("P")
R = TypeVar("R")

log = get_logger("starflow")

DEFAULT_URL = "sqlite:///starflow.db"
DEFAULT_WORKSPACE = "celestial"
DEFAULT_ENV = "prod"


class StarflowCore:
    """Opening, closing and starting runs: see :class:`~starflow.Starflow`."""

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
        if not isinstance(config, StarflowConfig):
            raise ConfigError(f"config must be a StarflowConfig, got {type(config).__name__}")
        payloads = Payloads(codec) if codec is not None else None
        workspace_id = workspace_id or os.environ.get("STARFLOW_WORKSPACE") or DEFAULT_WORKSPACE
        env = env or os.environ.get("STARFLOW_ENV") or DEFAULT_ENV
        if adapter is None:
            url = url or database_url_from_env() or DEFAULT_URL
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
        if payloads is not None:
            # Above the mirror: the outbox and the warm tier get envelopes too.
            adapter = CodecAdapter(adapter, payloads)
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
        for name, key in (("concurrency_key", concurrency_key), ("dedup_key", dedup_key),
                          ("debounce_key", debounce_key)):
            check_name(name, key, optional=True)
        encoded = None if attributes is None else encode_attributes(
            attributes, what="options(attributes=)", run_id=run_id)
        problems = []
        if (problem := int_problem("priority", priority, -(2**31))) is not None or \
                priority >= 2**31:
            problems.append(problem or f"priority must be an int below 2**31: {priority!r}")
        if debounce is not None and (not isinstance(debounce, timedelta)
                                     or debounce <= timedelta(0)):
            problems.append(f"debounce must be a positive timedelta: {debounce!r}")
        elif debounce is not None and (problem := duration_problem("debounce", debounce)):
            problems.append(problem)
        if (debounce is None) != (debounce_key is None):
            problems.append("debounce and debounce_key go together: "
                            f"debounce={debounce!r}, debounce_key={debounce_key!r}")
        if debounce is not None and run_id is not None:
            problems.append("debounce replaces a pending run's arguments, so it takes no "
                            f"run_id: {run_id!r}")
        if (problem := timeout_problem("timeout", timeout)) is not None:
            problems.append(problem)
        problems += start_problems(start_at, start_after, self.clock.now())
        if debounce is not None and (start_at, start_after) != (None, None):
            problems.append("debounce sets its own start time: pass start_at/start_after "
                            "without it")
        if problems:
            raise ConfigError("options: " + "; ".join(problems), run_id=run_id)
        if connection is not None and debounce is not None:
            raise TransactionalStartUnsupported(
                "debounce cannot start a run in your transaction (connection=): it replaces "
                "a pending run's arguments, a write of its own outside your transaction. "
                "Start without debounce, or after your commit. Nothing was written")
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



class RunOptions:
    """Options for one start; made by :meth:`Starflow.options`."""

    def __init__(self, app: StarflowCore, *, run_id: str | None, pool: str | None,
                 priority: int = 0, concurrency_key: str | None = None,
                 dedup_key: str | None = None, debounce: timedelta | None = None,
                 debounce_key: str | None = None, timeout: timedelta | None = None,
                 start_at: datetime | None = None, start_after: timedelta | None = None,
                 attributes: Mapping[str, str] | None = None,
                 connection: object | None = None) -> None:
        self._app = app
        #: The caller's connection a ``.start()`` writes through (#30), or None.
        self.connection = connection
        #: Checked and encoded (key -> JSON text) by :meth:`StarflowCore.options`.
        self.attributes = attributes
        self.timeout = timeout
        self.start_at = start_at
        self.start_after = start_after
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
        if self.connection is not None:
            raise TransactionalStartUnsupported(
                ".run() cannot start a run in your transaction (connection=): it drives the "
                "run here and waits for its result, which no one can see before you "
                "commit. Use .start() (workers run it after your commit). Nothing was "
                "written", run_id=self.run_id)
        if self.pool is not None:
            raise ConfigError("pool= applies to queued runs: use .start(), not .run()")
        flow = [name for name, value in (*self._flow().items(), ("debounce", self.debounce),
                                         ("start_at", self.start_at),
                                         ("start_after", self.start_after))
                if value is not None and value != 0]
        if flow:
            raise ConfigError(f"{', '.join(flow)} apply to queued runs: use .start(), "
                              "not .run() (a run started for later is claimed by a "
                              "worker when its time comes). Nothing was written",
                              run_id=self.run_id)
        return self._app._track(await self._app.runner.start(
            workflow_definition(wf), args, kwargs, run_id=self.run_id, inline=True,
            timeout=self.timeout, attributes=self.attributes))

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
            CallerTransactionError: ``connection`` cannot take the start (nothing
                written; the caller's transaction is as it was).
        """
        check_name("pool", self.pool, optional=True)
        runner = self._app.runner
        definition = workflow_definition(wf)
        if self.debounce is None:
            start_at = self.start_at
            if self.start_after is not None:
                start_at = self._app.clock.now() + self.start_after
            caller = None if self.connection is None else \
                await runner.adapter.caller_transaction(self.connection)
            return await runner.start(definition, args, kwargs, run_id=self.run_id,
                                      inline=False, pool=self.pool, flow=self._flow(),
                                      timeout=self.timeout, start_at=start_at,
                                      attributes=self.attributes, caller=caller)
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
                                          timeout=self.timeout, attributes=self.attributes)
            except StorageError as exc:
                if exc.transient:
                    raise
                continue  # another caller inserted the pending run first: replace it
        raise StarflowError(f"debounce_key {self.debounce_key!r}: the pending run changed "
                            "under 5 attempts to replace it; try again")



def start_problems(start_at: object, start_after: object, now: datetime) -> list[str]:
    """What is wrong with a start time for later (``start_at`` / ``start_after``,
    #30), each problem named with its value; ``now`` is the clock's time."""
    problems = []
    if start_at is not None and start_after is not None:
        problems.append(f"start_at and start_after are one start time: pass one of them "
                        f"(start_at={start_at!r}, start_after={start_after!r})")
    if start_at is not None:
        if not isinstance(start_at, datetime) or start_at.tzinfo is None \
                or start_at.utcoffset() is None:
            problems.append("start_at must be a timezone-aware datetime (for example "
                            f"datetime(..., tzinfo=UTC)): {start_at!r}")
        elif start_at - now > MAX_DURATION:
            problems.append(f"start_at must be at most {MAX_DURATION.days} days (100 years) "
                            f"from now: {start_at.isoformat()}")
    if start_after is not None:
        if not isinstance(start_after, timedelta) or start_after < timedelta(0):
            problems.append(f"start_after must be a timedelta of zero or more: {start_after!r}")
        elif (problem := duration_problem("start_after", start_after)) is not None:
            problems.append(problem)
    return problems


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
