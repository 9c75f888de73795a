"""Operating :class:`~starflow.Starflow`: the bodies of its schedule and worker
calls (:class:`Operations`) and the checks of pool limits and session names.

``Starflow``'s methods (signatures, docstrings) call these, so the class stays
one place to read what it offers.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from datetime import datetime, timedelta
from typing import Any

import anyio
import anyio.lowlevel

from .app_start import AppParts, workflow_definition
from .config import check_concurrency, int_problem
from .errors import ConfigError, ScheduleNotFound, StarflowError
from .limits import check_name, duration_problem, name_problem
from .records import PoolLimits, ScheduleRecord
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

__all__ = ["MAX_KEY_WEIGHT", "MAX_KEY_WEIGHTS", "Operations", "check_session_names",
           "pool_limits"]


class Operations:
    """The bodies of ``Starflow``'s larger operating calls: schedules and workers."""

    def __init__(self, app: AppParts) -> None:
        self._app = app

    # -- schedules (#18) ----------------------------------------------------------

    async def schedule(self, schedule_id: str, wf: Callable[..., Awaitable[Any]] | str,
                       args: tuple[Any, ...], kwargs: dict[str, Any], *, cron: str,
                       timezone: str, overlap: str, catchup: timedelta,
                       pool: str | None) -> ScheduleRecord:
        """:meth:`Starflow.schedule <starflow.Starflow.schedule>`: check, then upsert."""
        app = self._app
        now = app.clock.now()
        check_schedule(schedule_id, cron, timezone, overlap, catchup, pool, now=now)
        definition = workflow_definition(wf)
        encoded = Runner.encode_input(definition, args, kwargs)
        Runner.decode_input(definition, encoded)  # arguments that fit their annotations
        first = next_tick(cron, timezone, now)
        record = ScheduleRecord(
            id=schedule_id, workflow=definition.name, workflow_version=definition.version,
            definition_id=await app.runner.definition_id(definition), input=encoded,
            cron=cron, timezone=timezone, overlap=overlap, catchup=catchup, pool=pool,
            next_fire_at=first, due_at=first)
        stored = await app.adapter.upsert_schedule(record, now=now)
        self.schedules_changed()
        return stored

    async def get_schedule(self, schedule_id: str) -> ScheduleRecord:
        """One schedule (:class:`~starflow.ScheduleNotFound` if none has this id)."""
        app = self._app
        check_name("schedule_id", schedule_id)
        record = await app.adapter.get_schedule(schedule_id)
        if record is None:
            raise ScheduleNotFound(schedule_id)
        return record

    async def pause_schedule(self, schedule_id: str) -> ScheduleRecord:
        """:meth:`Starflow.pause_schedule <starflow.Starflow.pause_schedule>`: decide
        the ticks already due, then compare-and-set ``paused``."""
        app = self._app
        loop = ScheduleLoop(app.runner, poll=False)
        for _ in range(100):
            record = await self.get_schedule(schedule_id)
            if record.paused:
                return record
            now = app.clock.now()
            if record.pending_tick is not None or (
                    record.next_fire_at is not None and record.next_fire_at <= now):
                # Due before the pause: decide it (of a loop racing us, one decides
                # each tick, by the row's revision), then read the row again.
                await loop.advance(record)
                continue
            if await app.adapter.update_schedule(record.id, record.revision,
                                                  {"paused": True}, now=now):
                self.schedules_changed()
                return await self.get_schedule(schedule_id)
            await anyio.lowlevel.checkpoint()
        raise StarflowError(f"schedule {schedule_id!r} changed under 100 attempts to pause "
                            "it; try again")

    async def resume_schedule(self, schedule_id: str) -> ScheduleRecord:
        """:meth:`Starflow.resume_schedule <starflow.Starflow.resume_schedule>`:
        from the next tick after now."""
        def values(rec: ScheduleRecord, now: datetime) -> dict[str, Any]:
            nxt = next_tick(rec.cron, rec.timezone, now)
            dropped = 1 if rec.buffered_tick is not None else 0
            return {"paused": False, "next_fire_at": nxt, "buffered_tick": None,
                    "skipped_overlap": rec.skipped_overlap + dropped,
                    "due_at": now if rec.pending_tick is not None else nxt}

        return await self.update_schedule(schedule_id, values)

    async def trigger_schedule(self, schedule_id: str) -> RunHandle[Any]:
        """:meth:`Starflow.trigger_schedule <starflow.Starflow.trigger_schedule>`:
        queue a run now and make it the schedule's last run."""
        app = self._app
        now = app.clock.now()
        record = await self.get_schedule(schedule_id)
        adapter = app.adapter
        run_id = tick_run_id(adapter.workspace_id, adapter.env, record.id, now, kind="trigger")
        await start_scheduled_run(app.runner, record, run_id)
        await self.update_schedule(schedule_id, lambda rec, now: {"last_run_id": run_id})
        return await app.runner.handle(run_id)

    async def update_schedule(
            self, schedule_id: str,
            values: Callable[[ScheduleRecord, datetime], dict[str, Any]]) -> ScheduleRecord:
        """Read, change and compare-and-set a schedule, again if a loop wrote it meanwhile."""
        app = self._app
        for _ in range(100):
            record = await self.get_schedule(schedule_id)
            now = app.clock.now()
            change = values(record, now)
            if await app.adapter.update_schedule(record.id, record.revision, change, now=now):
                self.schedules_changed()
                return await self.get_schedule(schedule_id)
            await anyio.lowlevel.checkpoint()
        raise StarflowError(f"schedule {schedule_id!r} changed under 100 attempts to update "
                            "it; try again")

    def schedules_changed(self) -> None:
        """Wake this process's schedule loop, if it runs one, to read the schedules again."""
        maintenance = self._app._maintenance
        if maintenance is not None and maintenance.schedules is not None:
            maintenance.schedules.notify()

    # -- workers ---------------------------------------------------------------------

    def worker(self, pool: str | None, concurrency: int, maintenance: bool, grace: float,
               timers: bool, metrics_interval: float) -> Worker:
        """:meth:`Starflow.worker <starflow.Starflow.worker>`: the worker, with the
        maintenance loops this app does not run already."""
        app = self._app
        check_concurrency(concurrency)  # before the maintenance loops are built
        check_name("pool", pool, optional=True)
        mt = None
        if (maintenance or timers) and (app._maintenance is None
                                        or not app._maintenance.full):
            client = app._maintenance
            mt = Maintenance(app.runner, poll=app.adapter.shared, drain=client is None,
                             firing=client.firing if client is not None else None,
                             timers_only=not maintenance)
        fires = mt is not None or (app._maintenance is not None and app._maintenance.full)
        return Worker(app.runner, pool=pool, concurrency=concurrency, maintenance=mt,
                      grace=grace, fires_timers=fires, metrics_interval=metrics_interval)


def check_session_names(session_id: object, key: object) -> None:
    """A session variable's id and key: storable names (both indexed)."""
    check_name("session_id", session_id)
    check_name("key", key)


def pool_limits(pool: str, *, concurrency: int | None,
                rate_limit: tuple[int, timedelta] | None, key_concurrency: int | None,
                key_rate_limit: tuple[int, timedelta] | None, fair: bool,
                key_weights: Mapping[str, int] | None, keep_slot: bool) -> PoolLimits:
    """The limits :meth:`Starflow.set_pool_limits <starflow.Starflow.set_pool_limits>`
    stores, checked.

    Raises:
        InvalidArgument: ``pool`` is not a storable name.
        ConfigError: every invalid limit, named with its value.
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
    return PoolLimits(pool=pool, concurrency=concurrency, rate_limit=rate,
                      rate_period=period, key_concurrency=key_concurrency,
                      key_rate_limit=key_rate, key_rate_period=key_period,
                      fair=fair, key_weights=weights, keep_slot=keep_slot)


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
