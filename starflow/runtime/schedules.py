"""Cron schedules: validation, tick arithmetic and the loop that starts due ticks.

A schedule is a ``starflow_schedules`` row. Every maintenance loop (in
``Starflow.open``, ``starflow server`` or a worker with ``maintenance=True``)
runs a :class:`ScheduleLoop`; any number may run against one database:

* Each tick's run id is derived from the workspace, the schedule and the tick
  time (:func:`tick_run_id`), and the start is idempotent on it.
* A loop decides what to do with a tick (start it, skip it, buffer it) with a
  compare-and-set on the row's ``revision``: of several loops exactly one
  decides each tick, and the decision is written *before* the run is started
  (``pending_tick``), so a crash between the two leaves a decided tick that
  the next pass of any loop starts.

Cron expressions are read by cronsim in the schedule's IANA time zone
(zoneinfo), with Debian cron's DST rules: a wall time skipped by a
spring-forward change (``30 2 * * *`` on the night clocks jump from 02:00 to
03:00) fires once, at the first valid time after the gap (03:00); a wall time
repeated by a fall-back change fires once, at its first occurrence, for a
fixed hour, while an expression with a wildcard or ranged hour field
(``*/30 * * * *``) fires in both passes of the repeated hour.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import anyio
import msgspec

from ..clock import wait_event
from ..errors import ConfigError, StarflowError, StorageError
from ..limits import MAX_NAME_LENGTH, check_name, duration_problem
from ..logs import get_logger
from ..records import ScheduleRecord, StartOptions
from ..workflow.context import WorkflowContext
from ..workflow.decorators import registry

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from .runner import Runner

__all__ = [
    "OVERLAPS",
    "ScheduleLoop",
    "check_schedule",
    "next_tick",
    "tick_run_id",
]

log = get_logger("starflow.schedules")

#: What a tick does while the schedule's previous run is still active.
OVERLAPS = ("skip", "buffer_one", "allow")
#: A tick the loop reaches less than this late is on time whatever ``catchup`` says
#: (a loop wakes a little after the tick it slept for; that is no outage).
ON_TIME = timedelta(seconds=30)
#: Most ticks counted one by one when skipping a long outage (then counted in bulk).
_COUNT_LIMIT = 100_000
#: Decisions one pass makes for one schedule before the next schedule gets a turn.
_STEPS_PER_PASS = 1_000
#: Schedules one pass reads (the pass repeats at once while it reads a full batch).
BATCH = 500
#: Schedules one pass advances at once (their writes share group commits).
PARALLEL = 16

_NAMESPACE = uuid.UUID("5f3c8a2e-6d1b-4f7e-9a0c-2b8d7e41c6a9")


def _cronsim() -> Any:
    try:
        import cronsim
    except ImportError:  # pragma: no cover - exercised by the import-guard test
        raise ConfigError(
            "schedules need the cron library cronsim: install it with: "
            "pip install 'starflow-durable[schedules]'") from None
    return cronsim


def _zone(name: str) -> ZoneInfo:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    # zoneinfo reads the name as a file path: a long one (or a directory such as
    # 'America') raises OSError, which says nothing about time zones.
    shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}… ({len(name)} characters)"
    try:
        if len(name) > MAX_NAME_LENGTH:
            raise ValueError(name)
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError, OSError):
        raise ConfigError(
            f"timezone: unknown time zone {shown}: use an IANA name such as "
            "'UTC' or 'Europe/Berlin'") from None


def check_schedule(schedule_id: object, cron: object, timezone: object, overlap: object,
                   catchup: object, pool: object, *, now: datetime) -> None:
    """Validate a schedule's settings, naming every bad one at once.

    Raises:
        InvalidArgument: ``schedule_id`` or ``pool`` is not a storable name.
        ConfigError: another setting is invalid (nothing has been written).
    """
    check_name("schedule_id", schedule_id)
    check_name("pool", pool, optional=True)
    problems: list[str] = []
    zone = None
    if not isinstance(timezone, str):
        problems.append(f"timezone must be an IANA name string: {timezone!r}")
    else:
        try:
            zone = _zone(timezone)
        except ConfigError as exc:
            problems.append(str(exc))
    if not isinstance(cron, str):
        problems.append(f"cron must be a string: {cron!r}")
    else:
        cronsim = _cronsim()
        try:
            cronsim.CronSim(cron, now.astimezone(zone or UTC))
        except cronsim.CronSimError as exc:
            problems.append(f"cron: bad expression {cron!r}: {exc}")
    if overlap not in OVERLAPS:
        problems.append(f"overlap must be one of {', '.join(OVERLAPS)}: {overlap!r}")
    if not isinstance(catchup, timedelta) or catchup < timedelta(0):
        problems.append(f"catchup must be a timedelta >= 0: {catchup!r}")
    elif (problem := duration_problem("catchup", catchup)) is not None:
        problems.append(problem)
    if problems:
        raise ConfigError("schedule: " + "; ".join(problems))


def ticks(cron: str, timezone: str, after: datetime) -> Iterator[datetime]:
    """The schedule's ticks strictly after ``after``, in UTC, in order."""
    cronsim = _cronsim()
    zone = _zone(timezone)
    it = cronsim.CronSim(cron, after.astimezone(zone))
    while True:
        try:
            local: datetime = next(it)
        except StopIteration:
            return
        yield local.astimezone(UTC)


def next_tick(cron: str, timezone: str, after: datetime) -> datetime | None:
    """The first tick strictly after ``after`` (UTC), or None if there is none."""
    return next(ticks(cron, timezone, after), None)


def tick_run_id(workspace_id: str, env: str, schedule_id: str, tick: datetime,
                kind: str = "tick") -> str:
    """The run id of one tick: the same in every process, so starting it is idempotent."""
    stamp = tick.astimezone(UTC).isoformat(timespec="microseconds")
    return str(uuid.uuid5(_NAMESPACE, f"{kind}\x1f{workspace_id}\x1f{env}\x1f{schedule_id}"
                                      f"\x1f{stamp}"))


class ScheduleLoop:
    """Starts the due ticks of every schedule in the runner's scope.

    Args:
        runner: The process's runner (its adapter, clock and config).
        poll: Whether to poll for schedules written by other processes.
    """

    def __init__(self, runner: Runner, *, poll: bool = True) -> None:
        self.runner = runner
        self.poll = poll
        self._changed = anyio.Event()
        #: Runs this loop inserted for ticks (a run another loop inserted first is not counted).
        self.started = 0
        #: Schedules whose advance raised (logged; retried at a later pass).
        self.failures = 0

    def notify(self) -> None:
        """A schedule was written in this process: look again now."""
        self._changed.set()
        self._changed = anyio.Event()

    async def run(self) -> None:
        """Fire due ticks until cancelled, sleeping on the clock until the next is due."""
        clock = self.runner.clock
        poll = self.runner.config.poll_interval.total_seconds()
        while True:
            changed = self._changed
            full = False
            nxt: datetime | None = None
            try:
                # A full batch: more may be due, so pass again at once (unless a tick
                # failed: then wait, rather than retry a failing start in a hot loop).
                failed = self.failures
                full = await self.fire_due() >= BATCH and self.failures == failed
                nxt = await self.runner.adapter.next_schedule_due()
            except StarflowError as exc:
                log.error("schedule pass failed", error=str(exc))
            if full:
                continue
            now = clock.now()
            delay = None if nxt is None else (nxt - now).total_seconds()
            if delay is not None and delay <= 0:
                # Still due after a pass: another loop holds it, or its start failed;
                # look again after a poll interval rather than spin.
                delay = poll
            if self.poll:
                delay = poll if delay is None else min(delay, poll)
            await wait_event(clock, changed, delay)

    async def fire_due(self) -> int:
        """One pass: advance every due schedule; returns how many were due."""
        due = await self.runner.adapter.due_schedules(self.runner.clock.now(), limit=BATCH)
        if not due:
            return 0
        limiter = anyio.CapacityLimiter(PARALLEL)

        async def advance(rec: ScheduleRecord) -> None:
            async with limiter:
                try:
                    await self.advance(rec)
                except StarflowError as exc:
                    self.failures += 1
                    log.error("schedule tick failed", schedule=rec.id, error=str(exc))

        with self.runner.busy_scope():
            async with anyio.create_task_group() as tg:
                for rec in due:
                    tg.start_soon(advance, rec)
        return len(due)

    async def advance(self, rec: ScheduleRecord) -> None:
        """Decide and start what is due for one schedule (stops where another loop won)."""
        now = self.runner.clock.now()
        for _ in range(_STEPS_PER_PASS):
            step = await self._step(rec, now)
            if step is None:
                return
            rec = step

    # -- one decision ----------------------------------------------------------

    async def _cas(self, rec: ScheduleRecord, values: dict[str, Any]) -> ScheduleRecord | None:
        """Write ``values`` if ``rec`` is still current; the new record, or None if not."""
        now = self.runner.clock.now()
        if not await self.runner.adapter.update_schedule(rec.id, rec.revision, values, now=now):
            return None
        return msgspec.structs.replace(rec, revision=rec.revision + 1, updated_at=now,
                                       **values)

    def _tick_id(self, rec: ScheduleRecord, tick: datetime) -> str:
        adapter = self.runner.adapter
        return tick_run_id(adapter.workspace_id, adapter.env, rec.id, tick)

    async def _active(self, run_id: str | None) -> bool:
        if run_id is None:
            return False
        run = await self.runner.adapter.get_run(run_id)
        return run is not None and not run.is_terminal

    def _recheck(self, now: datetime) -> datetime:
        return now + self.runner.config.poll_interval

    async def _step(self, rec: ScheduleRecord, now: datetime) -> ScheduleRecord | None:
        """Make one decision for ``rec``; the updated record to continue with, or None."""
        if rec.pending_tick is not None:
            # A decided tick: start it (idempotent: another loop may be doing the same).
            created = await start_scheduled_run(self.runner, rec,
                                                self._tick_id(rec, rec.pending_tick))
            due = rec.next_fire_at
            if rec.buffered_tick is not None:
                due = self._recheck(now) if due is None else min(due, self._recheck(now))
            if created:  # exactly one loop inserts each tick's run
                self.started += 1
            return await self._cas(rec, {"pending_tick": None, "started": rec.started + 1,
                                         "due_at": due})
        if rec.buffered_tick is not None:
            nxt, passed = self._count_until(rec, now)
            if await self._active(rec.last_run_id):
                # Ticks passing while one waits are skipped: buffer_one keeps one.
                recheck = self._recheck(now)
                await self._cas(rec, {"next_fire_at": nxt,
                                      "skipped_overlap": rec.skipped_overlap + passed,
                                      "due_at": recheck if nxt is None else min(nxt, recheck)})
                return None
            held = rec.buffered_tick
            return await self._cas(rec, {
                "buffered_tick": None, "pending_tick": held, "last_tick": held,
                "last_run_id": self._tick_id(rec, held), "next_fire_at": nxt,
                "skipped_overlap": rec.skipped_overlap + passed, "due_at": now})
        if rec.next_fire_at is None or rec.next_fire_at > now:
            if rec.due_at != rec.next_fire_at:
                await self._cas(rec, {"due_at": rec.next_fire_at})
            return None
        # Ticks due: those older than the catch-up window are skipped and counted.
        oldest = now - max(rec.catchup, ON_TIME)
        tick: datetime | None = rec.next_fire_at
        missed = 0
        if rec.next_fire_at < oldest:
            tick, missed = self._skip_before(rec, rec.next_fire_at, oldest)
        if tick is None or tick > now:
            return await self._cas(rec, {"next_fire_at": tick, "due_at": tick,
                                         "skipped_missed": rec.skipped_missed + missed})
        following = next_tick(rec.cron, rec.timezone, tick)
        if rec.overlap != "allow" and await self._active(rec.last_run_id):
            if rec.overlap == "skip":
                # Every tick due now finds the same run active: skip them all.
                nxt, passed = self._count_until(rec, now, start=tick)
                return await self._cas(rec, {
                    "next_fire_at": nxt, "due_at": nxt,
                    "skipped_missed": rec.skipped_missed + missed,
                    "skipped_overlap": rec.skipped_overlap + passed})
            return await self._cas(rec, {
                "buffered_tick": tick, "next_fire_at": following,
                "skipped_missed": rec.skipped_missed + missed, "due_at": now})
        return await self._cas(rec, {
            "pending_tick": tick, "last_tick": tick, "last_run_id": self._tick_id(rec, tick),
            "next_fire_at": following, "skipped_missed": rec.skipped_missed + missed,
            "due_at": now})

    def _skip_before(self, rec: ScheduleRecord, tick: datetime, oldest: datetime
                     ) -> tuple[datetime | None, int]:
        """The first tick at or after ``oldest`` (from ``tick``), and how many were passed."""
        missed = 0
        current: datetime | None = tick
        it = ticks(rec.cron, rec.timezone, tick)
        while current is not None and current < oldest:
            missed += 1
            if missed >= _COUNT_LIMIT:
                # A very long outage of a frequent schedule: stop counting one by one.
                current = next_tick(rec.cron, rec.timezone, oldest - timedelta(microseconds=1))
                break
            current = next(it, None)
        return current, missed

    def _count_until(self, rec: ScheduleRecord, now: datetime, start: datetime | None = None
                     ) -> tuple[datetime | None, int]:
        """From ``start`` (default the cursor): the first tick after ``now`` and how many
        ticks up to ``now`` were passed."""
        current = rec.next_fire_at if start is None else start
        if current is None or current > now:
            return current, 0
        nxt, passed = self._skip_before(rec, current, now + timedelta(microseconds=1))
        return nxt, passed


async def start_scheduled_run(runner: Runner, rec: ScheduleRecord, run_id: str) -> bool:
    """Queue the run of one tick under ``run_id``; False if it already existed.

    The newest version of the workflow registered in this process is started;
    a process without it registered starts the version the schedule was
    written with (its stored definition).
    """
    adapter = runner.adapter
    definition = registry.get(rec.workflow)
    if definition is not None:
        definition_id: str | None = await runner.definition_id(definition)
        version = definition.version
        pool = rec.pool if rec.pool is not None else definition.pool
        attempts = definition.max_claim_attempts or runner.config.max_claim_attempts
    else:
        definition_id, version, pool = rec.definition_id, rec.workflow_version, rec.pool
        attempts = runner.config.max_claim_attempts
    ctx = WorkflowContext(run_id=run_id, workflow=rec.workflow, version=version,
                          workspace_id=adapter.workspace_id, env=adapter.env)
    options = StartOptions(input=rec.input, status="queued", claim_state="queued",
                           runner_pool=pool, definition_id=definition_id, start_mode="queued",
                           max_claim_attempts=attempts)
    try:
        async with adapter.unit():
            await adapter.on_run_start(run_id, ctx, options, now=runner.clock.now())
    except StorageError:
        if await adapter.get_run(run_id) is not None:
            return False  # another loop (or a retry of this one) started it first
        raise
    runner.notify_settled()
    return True
