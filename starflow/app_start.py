"""Opening and starting runs for :class:`~starflow.Starflow`: the adapter
``open`` builds and its defaults, the checks of ``options``, and the start
options it returns (:class:`RunOptions`).

Also :class:`AppParts`, what the helpers of ``Starflow`` (here,
:mod:`starflow.app_ops`, :mod:`starflow.app_runs`) see of the app they serve.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any, ParamSpec, Protocol, TypeVar, overload

from .adapters import adapter_from_url
from .adapters.base import WorkflowStateAdapter
from .adapters.coding import CodecAdapter
from .clock import Clock
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
from .runtime.maintenance import Maintenance
from .runtime.runner import RunHandle, Runner
from .urls import scheme_of
from .workflow.attributes import encode_attributes
from .workflow.decorators import WorkflowDefinition, definition_of, registry, timeout_problem

__all__ = ["DEFAULT_ENV", "DEFAULT_URL", "DEFAULT_WORKSPACE", "AppParts", "RunOptions",
           "check_options", "open_adapter", "start_problems", "workflow_definition"]


P = ParamSpec("P")
R = TypeVar("R")

DEFAULT_URL = "sqlite:///starflow.db"
DEFAULT_WORKSPACE = "celestial"
DEFAULT_ENV = "prod"


class AppParts(Protocol):
    """What the helpers of :class:`~starflow.Starflow` use of it (its modules
    below ``starflow.app`` cannot import the class itself: a cycle)."""

    adapter: WorkflowStateAdapter
    config: StarflowConfig
    clock: Clock
    _maintenance: Maintenance | None

    @property
    def runner(self) -> Runner: ...

    def _track(self, handle: RunHandle[R]) -> RunHandle[R]: ...


class RunOptions:
    """Options for one start; made by :meth:`Starflow.options`."""

    def __init__(self, app: AppParts, *, run_id: str | None, pool: str | None,
                 priority: int = 0, concurrency_key: str | None = None,
                 dedup_key: str | None = None, debounce: timedelta | None = None,
                 debounce_key: str | None = None, timeout: timedelta | None = None,
                 start_at: datetime | None = None, start_after: timedelta | None = None,
                 attributes: Mapping[str, str] | None = None,
                 connection: object | None = None) -> None:
        self._app = app
        #: The caller's connection a ``.start()`` writes through (#30), or None.
        self.connection = connection
        #: Checked and encoded (key -> JSON text) by :meth:`Starflow.options`.
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


def open_adapter(url: str | None, *, workspace_id: str | None, env: str | None,
                 config: StarflowConfig, clock: Clock | None, warm: str | None,
                 adapter: WorkflowStateAdapter | None,
                 codec: PayloadCodec | None) -> WorkflowStateAdapter:
    """The adapter :meth:`Starflow.open <starflow.Starflow.open>` gives the app: the
    given one or one for ``url`` (or the environment's), under the warm-tier mirror
    and the codec when asked for.

    Raises:
        ConfigError: ``config`` or ``codec`` is not valid (nothing opened).
    """
    if not isinstance(config, StarflowConfig):
        raise ConfigError(f"config must be a StarflowConfig, got {type(config).__name__}")
    payloads = Payloads(codec) if codec is not None else None
    workspace_id = workspace_id or os.environ.get("STARFLOW_WORKSPACE") or DEFAULT_WORKSPACE
    env = env or os.environ.get("STARFLOW_ENV") or DEFAULT_ENV
    if adapter is None:
        url = url or database_url_from_env() or DEFAULT_URL
        adapter = adapter_from_url(url, workspace_id=workspace_id, env=env,
                                   **_url_options(url, config))
    if warm is not None:
        from .warm.mirror import mirror

        adapter = mirror(adapter, warm, clock=clock,
                         finished_ttl=config.warm_finished_ttl)
    if payloads is not None:
        # Above the mirror: the outbox and the warm tier get envelopes too.
        adapter = CodecAdapter(adapter, payloads)
    return adapter


def _url_options(url: str, config: StarflowConfig) -> dict[str, Any]:
    """The adapter options ``config`` sets for the database ``url`` names."""
    options: dict[str, Any] = {}
    scheme = scheme_of(url)
    if scheme in ("sqlite", "memory"):
        options["inline_commits"] = config.sqlite_inline_commits
    if scheme in ("sqlite",):
        options["synchronous"] = config.sqlite_synchronous
    elif scheme in ("postgresql", "postgres"):
        options["synchronous_commit"] = config.postgres_synchronous_commit
    return options


def check_options(clock: Clock, *, run_id: str | None, priority: int,
                  concurrency_key: str | None, dedup_key: str | None,
                  debounce: timedelta | None, debounce_key: str | None,
                  timeout: timedelta | None, start_at: datetime | None,
                  start_after: timedelta | None,
                  attributes: Mapping[str, str | int | bool] | None,
                  connection: object | None) -> dict[str, str] | None:
    """:meth:`Starflow.options <starflow.Starflow.options>`' checks (``run_id``
    itself is checked first, by the app); returns the attributes encoded.

    Raises:
        InvalidArgument: a key is not a storable name, or a bad attribute.
        ConfigError: every other invalid option, named with its value.
        TransactionalStartUnsupported: ``connection`` with ``debounce``.
    """
    for name, key in (("concurrency_key", concurrency_key), ("dedup_key", dedup_key),
                      ("debounce_key", debounce_key)):
        check_name(name, key, optional=True)
    encoded = None if attributes is None else encode_attributes(
        attributes, what="options(attributes=)", run_id=run_id)
    problems = []
    if (problem := int_problem("priority", priority, -(2**31))) is not None or \
            priority >= 2**31:
        problems.append(problem or f"priority must be an int below 2**31: {priority!r}")
    problems += _debounce_problems(debounce, debounce_key, run_id)
    if (problem := timeout_problem("timeout", timeout)) is not None:
        problems.append(problem)
    problems += start_problems(start_at, start_after, clock.now())
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
    return encoded


def _debounce_problems(debounce: object, debounce_key: object, run_id: object) -> list[str]:
    """What is wrong with ``debounce`` / ``debounce_key``, each named with its value."""
    problems = []
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
    return problems


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
