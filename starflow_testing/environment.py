"""``WorkflowEnvironment``: a Starflow application on fake time, for tests."""

from __future__ import annotations

import os
import shutil
import tempfile
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, Literal, ParamSpec, TypeVar, overload

import anyio
import msgspec

from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.coding import CodecAdapter
from starflow.app import Starflow
from starflow.codec import PayloadCodec, Payloads
from starflow.config import StarflowConfig
from starflow.errors import ConfigError, ResultTimeout, RunnerKilled, StarflowError
from starflow.logs import get_logger
from starflow.records import RunEvent, RunInfo
from starflow.runtime.runner import RunHandle, Runner
from starflow.runtime.worker import Worker

from ._quiesce import quiesce
from ._tracking import InflightTracker
from .clock import FakeClock

__all__ = ["DEFAULT_POSTGRES_URL", "WorkflowEnvironment"]

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

log = get_logger("starflow.testing")

#: Used for ``adapter="postgres"`` unless ``$STARFLOW_TEST_POSTGRES_URL`` is set.
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"

_Move = Literal["moved", "wait", "idle"]


def _track(adapter: WorkflowStateAdapter) -> WorkflowStateAdapter:
    """Wrap adapters that cannot say when their queries are done."""
    if type(adapter).idle is WorkflowStateAdapter.idle:
        return InflightTracker(adapter)
    return adapter


#: Modules that keep real time while an environment patches it. pytest measures each
#: phase of a test (``--durations``, junitxml's times) through ``_pytest.timing``: an
#: environment opened in a fixture would otherwise make a setup start on real time and
#: end on fake time (2030), and report a duration of decades, or a negative one.
#: pytest-timeout's ``--session-timeout`` compares ``time.time()`` with a real deadline.
#: freezegun neither patches these modules' imports nor fakes calls made from them.
REAL_TIME_MODULES = ("_pytest.timing", "pytest_timeout")


class WorkflowEnvironment:
    """A Starflow application with a :class:`FakeClock`, a worker and maintenance.

    Use it as an async context manager. It exposes the application API
    (:meth:`run`, :meth:`start`, :meth:`signal`, :meth:`resume`,
    :meth:`cancel`, :meth:`result`, :meth:`events`, :meth:`get_run`,
    :meth:`list_runs`, :meth:`sweep`), an embedded worker so queued runs
    progress, and the lease sweep and durable timers running on fake time.

    With ``time_skipping`` (the default), while a test awaits :meth:`result`,
    :meth:`run_until_idle`, :meth:`run`, :meth:`signal` or :meth:`resume` and
    every run is blocked on a durable timer (no engine executing, every task
    blocked, no query in flight), time jumps straight to the next durable
    deadline: a 30-day ``sleep`` takes milliseconds. While a run executes, time
    only moves for its retry delays. Nothing moves while nobody awaits.

    While the environment is open, ``datetime.now()``, ``time.time()`` and
    friends return the fake time (through freezegun), so step code sees it too.
    freezegun's patching is process-wide: with two environments open at once,
    those functions follow the one opened last (each environment's own clock
    stays separate). Pass ``patch_time=False`` to leave them alone.

    Args:
        adapter: ``"memory"`` (private in-memory SQLite), ``"sqlite"`` (a file in a
            temporary directory), ``"postgres"`` (``$STARFLOW_TEST_POSTGRES_URL``,
            in a fresh random workspace), any database URL, or an adapter
            instance (not opened yet).
        time_skipping: Jump over durable waits automatically (see above).
        config: Runtime configuration (the state model's defaults otherwise).
        start: Initial fake time (default 2030-01-01 UTC).
        wrap: Wraps the adapter before the application sees it, e.g.
            ``lambda a: FaultInjectingAdapter(a, fail={"save_checkpoint": 1})``.
        workspace_id: Tenant scope (random for PostgreSQL when not given).
        env: Environment scope.
        pools: Pools the embedded worker claims for (``None``: runs without a pool).
        patch_time: Make ``datetime.now()`` / ``time.time()`` return fake time.
        clock: Use this clock instead of a new one.
        poll_interval: Replaces ``config.poll_interval``. Polling finds work other
            processes queued; in one process, notifications wake the worker and
            timers anyway, and rare polls keep :meth:`advance` cheap (it wakes
            every sleeper in order). None keeps the config's value.
        codec: A :class:`~starflow.PayloadCodec`, as ``Starflow.open(codec=...)``:
            every stored user value is encoded (above ``wrap``, so a wrapper sees
            the stored form).

    Example::

        async with WorkflowEnvironment() as env:
            handle = await env.run(order, "o-1")
            await env.signal(handle.run_id, "approval", {"ok": True})
            assert (await env.result(handle.run_id))["ok"]
    """

    def __init__(
        self,
        adapter: str | WorkflowStateAdapter = "memory",
        *,
        time_skipping: bool = True,
        config: StarflowConfig | None = None,
        start: datetime | None = None,
        wrap: Callable[[WorkflowStateAdapter], WorkflowStateAdapter] | None = None,
        workspace_id: str | None = None,
        env: str = "prod",
        pools: Sequence[str | None] = (None,),
        concurrency: int = 16,
        patch_time: bool = True,
        clock: FakeClock | None = None,
        poll_interval: timedelta | None = timedelta(hours=1),
        codec: PayloadCodec | None = None,
    ) -> None:
        self.time_skipping = time_skipping
        self._payloads = Payloads(codec) if codec is not None else None
        self.codec = codec
        config = config or StarflowConfig()
        if poll_interval is not None:
            config = msgspec.structs.replace(config, poll_interval=poll_interval)
        self.config = config
        self.clock = clock or FakeClock(start)
        self.clock.settle = self.quiesce
        self._spec = adapter
        self._wrap = wrap
        self._workspace_id = workspace_id
        self._env = env
        self._pools = tuple(pools)
        self._concurrency = concurrency
        self._patch_time = patch_time
        self._tmpdir: str | None = None
        self._app: Starflow | None = None
        self._adapter: WorkflowStateAdapter | None = None
        self._tg: anyio.abc.TaskGroup | None = None
        self._workers: list[Worker] = []
        self._freezer: Any = None
        self._unsubscribe: Callable[[], None] | None = None

    # -- lifecycle -------------------------------------------------------------------

    def _build_adapter(self) -> WorkflowStateAdapter:
        spec = self._spec
        if isinstance(spec, WorkflowStateAdapter):
            return spec
        workspace = self._workspace_id
        if spec == "memory":
            url = "memory://"
        elif spec == "sqlite":
            self._tmpdir = tempfile.mkdtemp(prefix="starflow-test-")
            url = f"sqlite:///{os.path.join(self._tmpdir, 'starflow.db')}"
        elif spec == "postgres":
            url = os.environ.get("STARFLOW_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
        else:
            url = spec
        if workspace is None:
            is_pg = url.split(":", 1)[0].lower() in ("postgresql", "postgres")
            workspace = f"test-{uuid.uuid4().hex[:12]}" if is_pg else "celestial"
        return adapter_from_url(url, workspace_id=workspace, env=self._env)

    async def __aenter__(self) -> WorkflowEnvironment:
        adapter = _track(self._build_adapter())
        if self._wrap is not None:
            adapter = self._wrap(adapter)
        if self._payloads is not None:
            adapter = CodecAdapter(adapter, self._payloads)
        self._adapter = adapter
        self._app = Starflow(adapter, config=self.config, clock=self.clock)
        self._app.codec = self.codec
        try:
            await self._app.__aenter__()
            if self._patch_time:
                # After open: database drivers imported while datetime is patched
                # (asyncpg's C extension) refuse freezegun's classes.
                self._start_patching()
            self._tg = await anyio.create_task_group().__aenter__()
            self._workers = []
            for pool in self._pools:
                worker = self._app.worker(pool=pool, concurrency=self._concurrency)
                self._workers.append(worker)
                self._tg.start_soon(worker.run)
            await self.quiesce()
        except BaseException:
            await self._close()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._close()

    async def _close(self) -> None:
        try:
            if self._tg is not None:
                tg, self._tg = self._tg, None
                tg.cancel_scope.cancel()
                await tg.__aexit__(None, None, None)
            if self._app is not None and self._app._runner is not None:
                await self._app.__aexit__(None, None, None)
        finally:
            self._stop_patching()
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None

    def _start_patching(self) -> None:
        try:
            from freezegun import freeze_time
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ConfigError(
                "WorkflowEnvironment(patch_time=True) needs freezegun: install it with "
                "pip install 'starflow-durable[testing]', or pass patch_time=False") from exc
        self._freezer = freeze_time(self.clock.now(), real_asyncio=True,
                                    ignore=list(REAL_TIME_MODULES))
        factory = self._freezer.start()
        self._unsubscribe = self.clock.on_change(factory.move_to)

    def _stop_patching(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        if self._freezer is not None:
            freezer, self._freezer = self._freezer, None
            freezer.stop()

    # -- parts -----------------------------------------------------------------------

    @property
    def app(self) -> Starflow:
        """The :class:`~starflow.Starflow` application (open while the environment is)."""
        if self._app is None:
            raise ConfigError("the WorkflowEnvironment is not open: use `async with`")
        return self._app

    @property
    def adapter(self) -> WorkflowStateAdapter:
        """The state adapter the application uses (after ``wrap``)."""
        return self.app.adapter

    @property
    def runner(self) -> Runner:
        """The application's runner."""
        return self.app.runner

    def now(self) -> datetime:
        """The environment's current (fake) time."""
        return self.clock.now()

    # -- settling ------------------------------------------------------------------

    async def quiesce(self) -> None:
        """Return once every other task is blocked and no database call is in flight."""
        adapter = self._adapter
        await quiesce(adapter.idle if adapter is not None else None)

    async def advance(self, delta: timedelta | float) -> None:
        """Move fake time forward, waking sleepers in order (``clock.advance``)."""
        await self.clock.advance(delta)

    async def _next_move(self, *, stop_at_timeouts: bool = False) -> _Move:
        """After quiescence: move time if waiting on it is all that is left.

        ``stop_at_timeouts``: do not jump to a ``wait_for`` timeout (only to
        sleeps and other timers): the run stays at its wait (run_until_idle).
        """
        runner = self.runner
        clock = self.clock
        if not self.time_skipping:
            return "wait" if runner.busy > 0 else "idle"
        if clock.has_backoff_sleeper():
            # A run waits for a retry delay: let it pass, in order with heartbeats.
            await clock.step()
            return "moved"
        if runner.busy > 0:
            return "wait"
        target = await self.adapter.next_deadline()
        # A run started for later (#30): the embedded workers know the next start time.
        for start in (w.next_start for w in self._workers if w.next_start is not None):
            target = start if target is None else min(target, start)
        orphaned = await self._orphaned_leases()
        if runner.busy > 0:
            # The worker claimed a run during those queries (a NOTIFY from another
            # connection woke it): its lease is not orphaned. Settle again first.
            return "moved"
        if orphaned:
            # A run's runner is gone: time passes as usual until the sweep finds it.
            nxt = clock.next_deadline()
            if nxt is not None and (target is None or nxt < target):
                await clock.step()
                return "moved"
        if target is not None and target > clock.now() and stop_at_timeouts:
            timeouts = [w for w in await self.adapter.due_waits(target, limit=1000)
                        if w.event is not None]
            if timeouts:
                wait = timeouts[0]
                log.info("run_until_idle stopped at a wait_for with a timeout instead of "
                         "skipping to it: signal the run, or advance the clock past the "
                         "timeout (await env.advance(...)) to make it fire",
                         run_id=wait.run_id, node_id=wait.node_id,
                         timeout_at=target.isoformat())
                return "idle"
        if target is not None and target > clock.now():
            log.debug("time skipping", to=target.isoformat())
            await clock.jump_to(target)
            return "moved"
        return "idle"

    async def _orphaned_leases(self) -> bool:
        runs = await self.adapter.list_runs(status="running", limit=1000)
        return any(r.lease_until is not None for r in runs)

    def _changes(self) -> list[anyio.Event]:
        runner = self.runner
        return [runner.settled, runner.timers_changed, self.clock.changed()]

    @staticmethod
    async def _wait_any(events: list[anyio.Event]) -> None:
        async with anyio.create_task_group() as tg:
            async def waiter(event: anyio.Event) -> None:
                await event.wait()
                tg.cancel_scope.cancel()

            for event in events:
                tg.start_soon(waiter, event)

    async def _drive(self, done: Callable[[], bool],
                     on_idle: Callable[[], Awaitable[None]] | None, *,
                     stop_at_timeouts: bool = False) -> None:
        while not done():
            changes = self._changes()
            await self.quiesce()
            if done():
                return
            move = await self._next_move(stop_at_timeouts=stop_at_timeouts)
            if move == "moved":
                continue
            if move == "idle" and on_idle is not None:
                await on_idle()
            if move == "idle" and on_idle is None:
                return
            await self._wait_any(changes)

    async def _skipping(self, op: Callable[[], Awaitable[T]],
                        on_idle: Callable[[], Awaitable[None]] | None = None) -> T:
        if not self.time_skipping:
            return await self._watched(op)
        results: list[T] = []
        errors: list[BaseException] = []
        async with anyio.create_task_group() as tg:
            async def run_op() -> None:
                try:
                    results.append(await op())
                except Exception as exc:
                    errors.append(exc)
                finally:
                    tg.cancel_scope.cancel()

            tg.start_soon(run_op)

            async def stuck() -> None:
                if on_idle is not None:
                    try:
                        await on_idle()
                    except Exception as exc:
                        errors.append(exc)
                        tg.cancel_scope.cancel()

            await self._drive(lambda: bool(results or errors), stuck)
        if errors:
            raise errors[0]
        return results[0]

    async def _watched(self, op: Callable[[], Awaitable[T]]) -> T:
        """``op`` without time skipping, failing instead of hanging on a retry delay.

        Nothing moves fake time here but :meth:`advance`: a step waiting for its
        retry backoff while every task is blocked (twice in a row, with the
        clock unchanged, so an ``advance`` from another task gets its turn)
        would wait for ever.
        """
        results: list[T] = []
        errors: list[BaseException] = []
        async with anyio.create_task_group() as tg:
            async def run_op() -> None:
                try:
                    results.append(await op())
                except Exception as exc:
                    errors.append(exc)
                finally:
                    tg.cancel_scope.cancel()

            tg.start_soon(run_op)
            clock = self.clock
            while not (results or errors):
                changes = self._changes()
                await self.quiesce()
                due = clock.next_backoff()
                if results or errors or due is None:
                    await self._wait_any(changes)
                    continue
                before = clock.now()
                await self.quiesce()
                if results or errors or clock.now() != before or clock.next_backoff() != due:
                    continue
                runs = ", ".join(sorted(self.runner.engines)) or "?"
                errors.append(StarflowError(
                    f"run {runs} waits for a step's retry delay until {due.isoformat()} (fake "
                    f"time, now {before.isoformat()}), and with time_skipping=False nothing "
                    "moves fake time: advance it from another task (await env.advance(...)) "
                    "or use WorkflowEnvironment(time_skipping=True)"))
                tg.cancel_scope.cancel()
        if errors:
            raise errors[0]
        return results[0]

    async def run_until_idle(self) -> None:
        """Drive queued runs, timers and (with time skipping) fake time until nothing
        is runnable or due: every run has ended or waits for a signal.

        Time skips to sleeps and retry delays, but not to a ``wait_for``
        timeout: a run waiting on ``wait_for(..., timeout=...)`` stays at its
        wait (an info line on the ``starflow.testing`` logger says so). Signal
        it, or ``await env.advance(...)`` past the timeout to make it fire;
        :meth:`result` skips to timeouts too, since it waits for the end. A
        run's deadline is a timer: a queued run no worker here claims is ended
        at its deadline (``WorkflowTimeout``) once nothing else is left.
        """
        await self._drive(lambda: False, None, stop_at_timeouts=True)

    # -- the application API -------------------------------------------------------

    async def run(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
                  ) -> RunHandle[R]:
        """``Starflow.run``: start a run and drive it here until it ends or pauses."""
        return await self._skipping(lambda: self.app.run(wf, *args, **kwargs))

    async def start(self, wf: Callable[P, Awaitable[R]], /, *args: P.args, **kwargs: P.kwargs
                    ) -> RunHandle[R]:
        """``Starflow.start``: queue a run for the embedded worker."""
        return await self.app.start(wf, *args, **kwargs)

    async def signal(self, run_id: str, event: str, payload: Any = None) -> RunHandle[Any]:
        """``Starflow.signal``: deliver a signal (an inline run is driven here)."""
        return await self._skipping(lambda: self.app.signal(run_id, event, payload))

    async def resume(self, wake_token: str, payload: Any = None) -> RunHandle[Any]:
        """``Starflow.resume``: wake a wait through its token."""
        return await self._skipping(lambda: self.app.resume(wake_token, payload))

    async def cancel(self, run_id: str, *, force: bool = False) -> RunHandle[Any]:
        """``Starflow.cancel``: the cleanup of a paused inline run runs in this call."""
        return await self._skipping(lambda: self.app.cancel(run_id, force=force))

    @overload
    async def result(self, run_id: RunHandle[R], timeout: timedelta | float | None = None
                     ) -> R: ...

    @overload
    async def result(self, run_id: str, timeout: timedelta | float | None = None) -> Any: ...

    async def result(self, run_id: RunHandle[Any] | str,
                     timeout: timedelta | float | None = None) -> Any:
        """``Starflow.result``, skipping time while the run waits on timers.

        Given the handle ``run`` or ``start`` returned, the value is typed.

        Raises:
            WorkflowFailed: the run ended with ``error`` or ``cancelled``.
            ResultTimeout: ``timeout`` (fake time) passed, or nothing in the
                environment can make the run progress (it waits for a signal
                nobody sends, or for a pool no worker serves).
        """
        if isinstance(run_id, RunHandle):
            run_id = run_id.run_id
        rid = self.adapter.normalize_run_id(run_id)  # a run id or a run key

        async def stuck() -> None:
            run = await self.adapter.get_run(rid)
            if run is None or run.is_terminal:
                # It ended after result() last looked: wake result() to see it.
                self.runner.notify_settled()
                return
            raise ResultTimeout(
                f"run {rid} cannot make progress in this environment: no engine runs, "
                "no timer is due and no lease awaits the sweep; it probably waits for a "
                "signal (send it first) or is queued for a pool the environment's worker "
                "does not serve (pass pools=...)", run_id=rid)

        return await self._skipping(lambda: self.app.result(rid, timeout=timeout), stuck)

    async def get_run(self, run_id: str) -> RunInfo:
        """``Starflow.get_run``."""
        return await self.app.get_run(run_id)

    async def list_runs(self, status: str | None = None, template_id: str | None = None,
                        limit: int = 50,
                        attributes: Mapping[str, str | int | bool] | None = None,
                        parent_run_id: str | None = None) -> list[RunInfo]:
        """``Starflow.list_runs``."""
        return await self.app.list_runs(status=status, template_id=template_id, limit=limit,
                                        attributes=attributes, parent_run_id=parent_run_id)

    async def events(self, run_id: str) -> list[RunEvent]:
        """``Starflow.events``."""
        return await self.app.events(run_id)

    async def sweep(self) -> int:
        """``Starflow.sweep``: one lease-sweep pass at the current fake time."""
        return await self.app.sweep()

    async def kill_runner(self, run_id: str) -> None:
        """Kill the runner driving ``run_id``, as with SIGKILL.

        Its engine stops where it is and writes nothing more: the lease is not
        cleared and the run is not released, so it stays ``running`` until the
        lease expires and the sweep recovers it (``runner_lost``). Other runs
        are unaffected (as if they ran in other processes).

        The call that was driving the run in this environment (:meth:`run`,
        :meth:`signal` or :meth:`resume`) raises
        :class:`~starflow.errors.RunnerKilled`; the embedded worker logs it as
        stopped, at info level. Neither reports a takeover
        (:class:`~starflow.LeaseLostError`): no other runner took the run.
        The kill itself is logged as ``runner killed (simulated SIGKILL)``.

        It goes through the runtime's one seam for it, ``Runner.stop``: the
        product has no other kill-simulation path.

        Raises:
            StarflowError: no engine of this environment is executing the run.
        """
        run_id = self.adapter.normalize_run_id(run_id)  # a run id or a run key
        if not self.runner.stop(run_id, RunnerKilled(run_id)):
            raise StarflowError(
                f"run {run_id} is not executing in this environment, so there is no runner "
                "to kill: kill it while a step is in progress", run_id=run_id)
        log.info("runner killed (simulated SIGKILL)", run_id=run_id)
        await self.quiesce()
