"""``starflow.sync.Starflow``: the application object, blocking, for code without an event loop.

A cron script, a Django view, a Flask route or a management command can
start, signal and wait on runs without ``asyncio.run`` plumbing::

    from starflow.sync import Starflow

    with Starflow.open("postgresql://…") as sf:
        handle = sf.start(order, "o-1")          # queued for workers
        sf.signal(handle.run_id, "approval", {"ok": True})
        print(sf.result(handle, timeout=60))

Workflows and steps may be ``async def`` or plain ``def`` (plain ones run in
worker threads). The facade runs an ordinary
:class:`starflow.Starflow` on a private event loop in a thread of its own
(anyio's blocking portal), and every method hands its call to that loop and
waits for the answer. One facade can be shared by many threads (a web
server's request threads): their calls run concurrently on the loop.

A facade nobody entered opens itself on its first call, so a web application
can keep one at module level (``sf = Starflow.open(url)`` at import time, no
``with``): it opens in the process that first uses it (a worker forked by
gunicorn, not its master) and is closed at interpreter exit if still open.

Closing it (leaving the ``with`` block, or :meth:`Starflow.close`) cancels
the calls other threads still wait on (they raise :class:`~starflow.StarflowError`
saying so), closes the database and stops the loop's thread.

Do not call it from async code or from inside a workflow: there, use
:class:`starflow.Starflow` itself.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterator,
    Mapping,
)
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar, overload

from anyio.from_thread import BlockingPortal, start_blocking_portal

from .adapters.base import WorkflowStateAdapter
from .adapters.pages import RunPage, RunPageQuery
from .admin.retention import DEFAULT_BATCH_SIZE, PruneReport
from .app import RunOptions as AsyncRunOptions
from .app import Starflow as AsyncStarflow
from .app_bulk import DEFAULT_BULK_LIMIT
from .clock import Clock
from .codec import PayloadCodec
from .config import StarflowConfig
from .errors import ConfigError, StarflowError, TransactionalStartUnsupported
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
from .runtime.runner import RunHandle
from .runtime.worker import Worker
from .warm.base import LiveRun
from .warm.drainer import OutboxStatus

__all__ = ["RunOptions", "Starflow", "SyncWorker"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


class Starflow:
    """A blocking :class:`starflow.Starflow`: the same methods, without ``await``.

    Open it with ``with Starflow.open(url) as sf:``, or keep ``Starflow.open(url)``
    at module level: it opens on its first call and closes at interpreter exit
    (or at :meth:`close`). See :mod:`starflow.sync`.
    """

    def __init__(self, app: AsyncStarflow) -> None:
        self._app = app
        self._lock = threading.Lock()
        self._stack: contextlib.ExitStack | None = None
        self._portal: BlockingPortal | None = None
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._closing = False
        self._opened = False  # ever: the first call opens a facade nobody entered
        self._first_open = threading.Lock()

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
    ) -> Starflow:
        """Describe an application; use the result as a context manager.

        The arguments are those of :meth:`starflow.Starflow.open` (the same
        defaults and environment variables).
        """
        return cls(AsyncStarflow.open(url, workspace_id=workspace_id, env=env, config=config,
                                      clock=clock, warm=warm, maintenance=maintenance,
                                      adapter=adapter, codec=codec))

    # -- lifecycle -----------------------------------------------------------------

    def __enter__(self) -> Starflow:
        with self._lock:
            if self._stack is not None:
                raise ConfigError("this sync Starflow is open already")
            stack = contextlib.ExitStack()
            try:
                portal = stack.enter_context(start_blocking_portal())
                stack.enter_context(portal.wrap_async_context_manager(self._app))
            except BaseException:
                stack.close()
                raise
            self._stack, self._portal, self._closing = stack, portal, False
            self._opened = True
        # An open facade left to the interpreter's finalizer would hang the exit
        # (its loop's thread is stopped before the portal is): close it first.
        atexit.register(self.close)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the calls still in flight, close the database and stop the loop's thread.

        Safe to call twice; the facade cannot be reopened while closing.
        """
        with self._lock:
            stack, self._closing = self._stack, True
            pending = list(self._pending)
        if stack is None:
            return
        atexit.unregister(self.close)
        for future in pending:
            future.cancel()
        try:
            stack.close()
        finally:
            with self._lock:
                self._stack = self._portal = None

    @property
    def aio(self) -> AsyncStarflow:
        """The :class:`starflow.Starflow` this facade drives (use it only on its loop)."""
        return self._app

    @property
    def config(self) -> StarflowConfig:
        return self._app.config

    @property
    def runner_id(self) -> str:
        return self._app.runner_id

    @property
    def workspace_id(self) -> str:
        """:attr:`starflow.Starflow.workspace_id`."""
        return self._app.workspace_id

    @property
    def env(self) -> str:
        """:attr:`starflow.Starflow.env`."""
        return self._app.env

    def _open_on_first_call(self) -> None:
        """Open a facade nobody entered (a module-level global) on its first call."""
        with self._first_open:
            if not self._opened:
                self.__enter__()

    def _call(self, fn: Callable[[], Awaitable[T]]) -> T:
        if not self._opened:
            self._open_on_first_call()
        with self._lock:
            portal = self._portal
            if portal is None or self._closing:
                raise ConfigError(
                    "this sync Starflow is not open: use `with Starflow.open(...) as sf:`")
            future = portal.start_task_soon(fn)
            self._pending.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise StarflowError(
                "the sync Starflow was closed while this call was waiting; "
                "the run itself goes on (its state is in the database)") from None
        except BaseException:
            future.cancel()  # KeyboardInterrupt in the calling thread: stop the task too
            raise
        finally:
            with self._lock:
                self._pending.discard(future)

    # -- starting runs -------------------------------------------------------------

    @overload
    def run(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
            ) -> RunHandle[R]: ...

    @overload
    def run(self, wf: str, /, *args: Any, **kwargs: Any) -> RunHandle[Any]: ...

    def run(self, wf: Callable[..., Awaitable[Any]] | str, /, *args: Any, **kwargs: Any
            ) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.run`: drive a run on the facade's loop until it
        ends or pauses, and return its handle."""
        _refuse_connection(kwargs.get("connection"))
        return self._call(lambda: self._app.run(wf, *args, **kwargs))

    @overload
    def start(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
              ) -> RunHandle[R]: ...

    @overload
    def start(self, wf: str, /, *args: Any, **kwargs: Any) -> RunHandle[Any]: ...

    def start(self, wf: Callable[..., Awaitable[Any]] | str, /, *args: Any, **kwargs: Any
              ) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.start`: queue a run for workers (``start_at=`` /
        ``start_after=``: for later).

        Raises:
            TransactionalStartUnsupported: ``connection=`` (your async driver's
                connection lives on your event loop, not the facade's).
        """
        _refuse_connection(kwargs.get("connection"))
        return self._call(lambda: self._app.start(wf, *args, **kwargs))

    def options(self, *, run_id: str | None = None, pool: str | None = None,
                priority: int = 0, concurrency_key: str | None = None,
                dedup_key: str | None = None, debounce: timedelta | None = None,
                debounce_key: str | None = None, timeout: timedelta | None = None,
                start_at: datetime | None = None, start_after: timedelta | None = None,
                attributes: Mapping[str, str | int | bool] | None = None,
                connection: object | None = None) -> RunOptions:
        """:meth:`starflow.Starflow.options`: ``sf.options(run_id=i).start(wf, x)``.

        Raises:
            TransactionalStartUnsupported: ``connection`` given: a start in your
                own transaction needs the async API (``starflow.Starflow``).
        """
        _refuse_connection(connection)
        return RunOptions(self, self._app.options(
            run_id=run_id, pool=pool, priority=priority, concurrency_key=concurrency_key,
            dedup_key=dedup_key, debounce=debounce, debounce_key=debounce_key,
            timeout=timeout, start_at=start_at, start_after=start_after,
            attributes=attributes))

    # -- schedules and pool limits ---------------------------------------------------

    def schedule(self, schedule_id: str, wf: Callable[..., Awaitable[Any]] | str, /,
                 *args: Any, cron: str, timezone: str = "UTC", overlap: str = "skip",
                 catchup: timedelta = timedelta(0), pool: str | None = None,
                 **kwargs: Any) -> ScheduleRecord:
        """:meth:`starflow.Starflow.schedule`: create or update a cron schedule."""
        return self._call(lambda: self._app.schedule(
            schedule_id, wf, *args, cron=cron, timezone=timezone, overlap=overlap,
            catchup=catchup, pool=pool, **kwargs))

    def schedules(self) -> list[ScheduleRecord]:
        """:meth:`starflow.Starflow.schedules`."""
        return self._call(self._app.schedules)

    def get_schedule(self, schedule_id: str) -> ScheduleRecord:
        """:meth:`starflow.Starflow.get_schedule`."""
        return self._call(lambda: self._app.get_schedule(schedule_id))

    def pause_schedule(self, schedule_id: str) -> ScheduleRecord:
        """:meth:`starflow.Starflow.pause_schedule`."""
        return self._call(lambda: self._app.pause_schedule(schedule_id))

    def resume_schedule(self, schedule_id: str) -> ScheduleRecord:
        """:meth:`starflow.Starflow.resume_schedule`."""
        return self._call(lambda: self._app.resume_schedule(schedule_id))

    def delete_schedule(self, schedule_id: str) -> None:
        """:meth:`starflow.Starflow.delete_schedule`."""
        self._call(lambda: self._app.delete_schedule(schedule_id))

    def trigger_schedule(self, schedule_id: str) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.trigger_schedule`."""
        return self._call(lambda: self._app.trigger_schedule(schedule_id))

    def set_pool_limits(self, pool: str, *, concurrency: int | None = None,
                        rate_limit: tuple[int, timedelta] | None = None,
                        key_concurrency: int | None = None,
                        key_rate_limit: tuple[int, timedelta] | None = None,
                        fair: bool = False, key_weights: Mapping[str, int] | None = None,
                        keep_slot: bool = False) -> PoolLimits | None:
        """:meth:`starflow.Starflow.set_pool_limits`."""
        return self._call(lambda: self._app.set_pool_limits(
            pool, concurrency=concurrency, rate_limit=rate_limit,
            key_concurrency=key_concurrency, key_rate_limit=key_rate_limit, fair=fair,
            key_weights=key_weights, keep_slot=keep_slot))

    def pools(self) -> list[PoolUsage]:
        """:meth:`starflow.Starflow.pools`."""
        return self._call(self._app.pools)

    def pause_pool(self, pool: str) -> PoolLimits:
        """:meth:`starflow.Starflow.pause_pool`."""
        return self._call(lambda: self._app.pause_pool(pool))

    def resume_pool(self, pool: str) -> PoolLimits | None:
        """:meth:`starflow.Starflow.resume_pool`."""
        return self._call(lambda: self._app.resume_pool(pool))

    # -- waking runs ---------------------------------------------------------------

    def signal(self, run_id: str, event: str, payload: Any = None) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.signal`. An inline run (started with :meth:`run`)
        continues here, in this call, until it pauses again or ends."""
        return self._call(lambda: self._app.signal(run_id, event, payload))

    def resume(self, wake_token: str, payload: Any = None) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.resume`: a wake token, or a run id to resume a run
        an operator paused (an inline run then continues here, in this call)."""
        return self._call(lambda: self._app.resume(wake_token, payload))

    def pause(self, run_id: str) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.pause`."""
        return self._call(lambda: self._app.pause(run_id))

    @overload
    def update(self, run_id: str, name: str, payload: Any = None, *,
               timeout: timedelta | float | None = None, update_id: str | None = None,
               type: type[R]) -> R: ...

    @overload
    def update(self, run_id: str, name: str, payload: Any = None, *,
               timeout: timedelta | float | None = None,
               update_id: str | None = None) -> Any: ...

    def update(self, run_id: str, name: str, payload: Any = None, *,
               timeout: timedelta | float | None = None, update_id: str | None = None,
               type: Any = Any) -> Any:
        """:meth:`starflow.Starflow.update`."""
        return self._call(lambda: self._app.update(run_id, name, payload, timeout=timeout,
                                                   update_id=update_id, type=type))

    def cancel(self, run_id: str, *, force: bool = False) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.cancel`."""
        return self._call(lambda: self._app.cancel(run_id, force=force))

    def retry(self, run_id: str) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.retry`."""
        return self._call(lambda: self._app.retry(run_id))

    # -- queries -------------------------------------------------------------------

    def get_run(self, run_id: str) -> RunInfo:
        """:meth:`starflow.Starflow.get_run`."""
        return self._call(lambda: self._app.get_run(run_id))

    def list_runs(self, status: str | None = None, template_id: str | None = None,
                  limit: int = 50, since: datetime | None = None,
                  attributes: Mapping[str, str | int | bool] | None = None,
                  parent_run_id: str | None = None) -> list[RunInfo]:
        """:meth:`starflow.Starflow.list_runs`."""
        return self._call(lambda: self._app.list_runs(status=status, template_id=template_id,
                                                      limit=limit, since=since,
                                                      attributes=attributes,
                                                      parent_run_id=parent_run_id))

    def get_attributes(self, run_id: str) -> dict[str, str | int | bool]:
        """:meth:`starflow.Starflow.get_attributes`."""
        return self._call(lambda: self._app.get_attributes(run_id))

    def stuck_runs(self, limit: int = 1000) -> list[RunInfo]:
        """:meth:`starflow.Starflow.stuck_runs`."""
        return self._call(lambda: self._app.stuck_runs(limit))

    def events(self, run_id: str, *, after_id: int = 0) -> list[RunEvent]:
        """:meth:`starflow.Starflow.events`."""
        return self._call(lambda: self._app.events(run_id, after_id=after_id))

    def waits(self, run_id: str) -> list[WaitRecord]:
        """:meth:`starflow.Starflow.waits`."""
        return self._call(lambda: self._app.waits(run_id))

    def list_runs_page(self, query: RunPageQuery) -> RunPage:
        """:meth:`starflow.Starflow.list_runs_page`."""
        return self._call(lambda: self._app.list_runs_page(query))

    def count_due_timers(self, before: datetime, *, limit: int = 100) -> int:
        """:meth:`starflow.Starflow.count_due_timers`."""
        return self._call(lambda: self._app.count_due_timers(before, limit=limit))

    def export_run(self, run_id: str) -> dict[str, Any]:
        """:meth:`starflow.Starflow.export_run`."""
        return self._call(lambda: self._app.export_run(run_id))

    @overload
    def result(self, run_id: RunHandle[R], timeout: timedelta | float | None = None) -> R: ...

    @overload
    def result(self, run_id: str, timeout: timedelta | float | None = None) -> Any: ...

    def result(self, run_id: RunHandle[Any] | str,
               timeout: timedelta | float | None = None) -> Any:
        """:meth:`starflow.Starflow.result`: block until the run ends (or ``timeout``)."""
        return self._call(lambda: self._app.result(run_id, timeout))

    # -- events and streams --------------------------------------------------------

    @overload
    def get_event(self, run_id: str, key: str, *,
                  timeout: timedelta | float | None = None, type: type[R]) -> R: ...

    @overload
    def get_event(self, run_id: str, key: str, *,
                  timeout: timedelta | float | None = None) -> Any: ...

    def get_event(self, run_id: str, key: str, *,
                  timeout: timedelta | float | None = None, type: Any = Any) -> Any:
        """:meth:`starflow.Starflow.get_event`: block until the run sets ``key``."""
        return self._call(lambda: self._app.get_event(run_id, key, timeout=timeout, type=type))

    def _blocking(self, agen: AsyncIterator[T]) -> Iterator[T]:
        """An async generator of the app, iterated from this thread (closed with it)."""
        assert isinstance(agen, AsyncGenerator)
        try:
            while True:
                try:
                    yield self._call(agen.__anext__)
                except StopAsyncIteration:
                    return
        finally:
            with contextlib.suppress(ConfigError):
                self._call(agen.aclose)

    @overload
    def read_stream(self, run_id: str, key: str, *, type: type[R]) -> Iterator[R]: ...

    @overload
    def read_stream(self, run_id: str, key: str) -> Iterator[Any]: ...

    def read_stream(self, run_id: str, key: str, *, type: Any = Any) -> Iterator[Any]:
        """:meth:`starflow.Starflow.read_stream`, as a blocking iterator."""
        return self._blocking(self._app.read_stream(run_id, key, type=type))

    def fork(self, run_id: str, *, from_node: str) -> RunHandle[Any]:
        """:meth:`starflow.Starflow.fork`."""
        return self._call(lambda: self._app.fork(run_id, from_node=from_node))

    def cancel_runs(self, filter: RunFilter, *, dry_run: bool = False,
                    limit: int | None = DEFAULT_BULK_LIMIT,
                    force: bool = False) -> BulkResult:
        """:meth:`starflow.Starflow.cancel_runs`."""
        return self._call(lambda: self._app.cancel_runs(filter, dry_run=dry_run, limit=limit,
                                                        force=force))

    def retry_runs(self, filter: RunFilter, *, dry_run: bool = False,
                   limit: int | None = DEFAULT_BULK_LIMIT) -> BulkResult:
        """:meth:`starflow.Starflow.retry_runs`."""
        return self._call(lambda: self._app.retry_runs(filter, dry_run=dry_run, limit=limit))

    def fork_runs(self, filter: RunFilter, *, from_node: str, dry_run: bool = False,
                  limit: int | None = DEFAULT_BULK_LIMIT) -> BulkResult:
        """:meth:`starflow.Starflow.fork_runs`."""
        return self._call(lambda: self._app.fork_runs(filter, from_node=from_node,
                                                      dry_run=dry_run, limit=limit))

    def sweep(self) -> int:
        """:meth:`starflow.Starflow.sweep`."""
        return self._call(self._app.sweep)

    def prune(self, older_than: timedelta | None = None, *,
              statuses: Collection[str] | None = None, workflow: str | None = None,
              export_dir: str | os.PathLike[str] | None = None, dry_run: bool = False,
              batch_size: int = DEFAULT_BATCH_SIZE) -> PruneReport:
        """:meth:`starflow.Starflow.prune`."""
        return self._call(lambda: self._app.prune(
            older_than, statuses=statuses, workflow=workflow, export_dir=export_dir,
            dry_run=dry_run, batch_size=batch_size))

    # -- session variables ---------------------------------------------------------

    def session_get(self, session_id: str, key: str) -> Any:
        """:meth:`starflow.Starflow.session_get`."""
        return self._call(lambda: self._app.session_get(session_id, key))

    def session_set(self, session_id: str, key: str, value: Any, *,
                    keep_until: datetime | None = None) -> None:
        """:meth:`starflow.Starflow.session_set`."""
        self._call(lambda: self._app.session_set(session_id, key, value,
                                                 keep_until=keep_until))

    # -- the warm tier -------------------------------------------------------------

    def live_runs(self) -> list[LiveRun]:
        """:meth:`starflow.Starflow.live_runs`."""
        return self._call(self._app.live_runs)

    def outbox_status(self) -> OutboxStatus:
        """:meth:`starflow.Starflow.outbox_status`."""
        return self._call(self._app.outbox_status)

    def watch(self, run_id: str) -> Iterator[LiveRun]:
        """:meth:`starflow.Starflow.watch`, as a blocking iterator."""
        return self._blocking(self._app.watch(run_id))

    # -- workers -------------------------------------------------------------------

    def worker(self, pool: str | None = None, concurrency: int = 16,
               maintenance: bool = False, grace: float = 30.0,
               timers: bool = True, metrics_interval: float = 15.0) -> SyncWorker:
        """:meth:`starflow.Starflow.worker`, run from a thread: ``sf.worker().run()``
        blocks; ``with sf.worker():`` runs it in the background for the block."""
        return SyncWorker(self, self._call(lambda: self._worker(
            pool, concurrency, maintenance, grace, timers, metrics_interval)))

    async def _worker(self, pool: str | None, concurrency: int, maintenance: bool,
                      grace: float, timers: bool, metrics_interval: float) -> Worker:
        return self._app.worker(pool=pool, concurrency=concurrency, maintenance=maintenance,
                                grace=grace, timers=timers, metrics_interval=metrics_interval)


def _refuse_connection(connection: object) -> None:
    if connection is not None:
        raise TransactionalStartUnsupported(
            "starflow.sync cannot start a run in your transaction (connection=): the "
            "facade runs on its own event loop, and your async driver's connection "
            "(asyncpg, aiosqlite) belongs to yours. Use the async starflow.Starflow "
            "there, or start the run after your commit. Nothing was written")


class RunOptions:
    """Start options of the sync facade; made by :meth:`Starflow.options`."""

    def __init__(self, sf: Starflow, options: AsyncRunOptions) -> None:
        self._sf = sf
        self._options = options
        self.run_id = options.run_id
        self.pool = options.pool

    @overload
    def run(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
            ) -> RunHandle[R]: ...

    @overload
    def run(self, wf: str, /, *args: Any, **kwargs: Any) -> RunHandle[Any]: ...

    def run(self, wf: Callable[..., Awaitable[Any]] | str, /, *args: Any, **kwargs: Any
            ) -> RunHandle[Any]:
        """Like :meth:`Starflow.run`, with these options."""
        return self._sf._call(lambda: self._options.run(wf, *args, **kwargs))

    @overload
    def start(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
              ) -> RunHandle[R]: ...

    @overload
    def start(self, wf: str, /, *args: Any, **kwargs: Any) -> RunHandle[Any]: ...

    def start(self, wf: Callable[..., Awaitable[Any]] | str, /, *args: Any, **kwargs: Any
              ) -> RunHandle[Any]:
        """Like :meth:`Starflow.start`, with these options."""
        return self._sf._call(lambda: self._options.start(wf, *args, **kwargs))


class SyncWorker:
    """A :class:`starflow.runtime.worker.Worker` driven from a thread.

    Made by :meth:`Starflow.worker`.
    """

    def __init__(self, sf: Starflow, worker: Worker) -> None:
        self._sf = sf
        self.worker = worker
        self._future: concurrent.futures.Future[None] | None = None

    def run(self) -> None:
        """Claim and drive runs until :meth:`stop` (from another thread) or the app closes."""
        self._sf._call(self.worker.run)

    def stop(self, grace: float | None = None) -> None:
        """Ask the worker to stop (thread-safe): it drains, then :meth:`run` returns."""
        self._sf._call(lambda: self._stop(grace))

    async def _stop(self, grace: float | None) -> None:
        self.worker.stop(grace)

    def __enter__(self) -> SyncWorker:
        """Run the worker in the background (on the facade's loop) for the block."""
        if not self._sf._opened:
            self._sf._open_on_first_call()
        portal = self._sf._portal
        if portal is None:
            raise ConfigError("this sync Starflow is not open")
        self._future = portal.start_task_soon(self.worker.run)
        return self

    def __exit__(self, *exc: object) -> None:
        future, self._future = self._future, None
        if future is None or future.done():
            if future is not None:
                future.result()
            return
        self.stop()
        future.result()
