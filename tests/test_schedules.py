"""Cron schedules (#18): one run per tick under racing loops, catch-up, overlap, DST."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import starflow
from starflow import ConfigError, InvalidArgument, ScheduleNotFound, Starflow, StarflowConfig
from starflow.adapters import adapter_from_url
from starflow.runtime.schedules import ScheduleLoop, next_tick, tick_run_id
from starflow_testing import FakeClock, FaultInjectingAdapter, WorkflowEnvironment
from starflow_testing._quiesce import quiesce

START = datetime(2030, 1, 1, tzinfo=UTC)
#: Long polls: loops wake for the ticks they sleep until, not on a timer.
CONFIG = msgspec.structs.replace(StarflowConfig(), poll_interval=timedelta(hours=6))


@starflow.workflow(name="sched-report")
async def report(label: str) -> str:
    return f"report {label}"


@starflow.workflow(name="sched-wait")
async def waits_for_go(label: str) -> str:
    await starflow.wait_for("go")
    return label


@asynccontextmanager
async def two_apps(db_url: str, workspace_id: str
                   ) -> AsyncIterator[tuple[FakeClock, Starflow, Starflow]]:
    """Two apps on one database (one shared adapter for a private memory database)."""
    apps: list[Starflow] = []

    async def settle() -> None:
        async def idle() -> None:
            for app in apps:
                await app.adapter.idle()

        await quiesce(idle)

    clock = FakeClock(START, settle=settle)
    first = Starflow.open(db_url, workspace_id=workspace_id, clock=clock, config=CONFIG,
                          maintenance=False)
    async with first:
        apps.append(first)
        if db_url == "memory://":
            yield clock, first, first
            return
        async with Starflow.open(db_url, workspace_id=workspace_id, clock=clock,
                                 config=CONFIG, maintenance=False) as second:
            apps.append(second)
            yield clock, first, second


@asynccontextmanager
async def racing_loops(a: Starflow, b: Starflow
                       ) -> AsyncIterator[tuple[ScheduleLoop, ScheduleLoop]]:
    """Two schedule loops (two processes' maintenance) running on the database."""
    loops = (ScheduleLoop(a.runner, poll=True), ScheduleLoop(b.runner, poll=True))
    async with anyio.create_task_group() as tg:
        for loop in loops:
            tg.start_soon(loop.run)
        yield loops
        tg.cancel_scope.cancel()


async def queued_ids(app: Starflow) -> list[str]:
    return [r.id for r in await app.list_runs(template_id="sched-report", limit=100_000)]


class TestExactlyOncePerTick:
    """However many loops race, each tick starts exactly one run."""

    async def test_a_day_of_five_minute_ticks_with_two_loops(
            self, db_url: str, workspace_id: str) -> None:
        async with two_apps(db_url, workspace_id) as (clock, a, b):
            await a.schedule("every-5", report, "x", cron="*/5 * * * *", overlap="allow")
            began = time.perf_counter()
            async with racing_loops(a, b) as loops:
                tick = START
                for _ in range(288):
                    tick += timedelta(minutes=5)
                    await clock.jump_to(tick)
                elapsed = time.perf_counter() - began
            ids = await queued_ids(a)
            rec = await a.get_schedule("every-5")
        assert len(ids) == 288 == len(set(ids))
        expected = {tick_run_id(workspace_id, "prod", "every-5", START + timedelta(minutes=5 * i))
                    for i in range(1, 289)}
        assert set(ids) == expected
        assert rec.started == 288 and rec.skipped_missed == 0 == rec.skipped_overlap
        assert sum(loop.started for loop in loops) == 288
        assert rec.next_fire_at == START + timedelta(days=1, minutes=5)
        print(f"{db_url.split(':')[0]}: 288 ticks in {elapsed:.3f} s")

    async def test_outage_catches_up_within_the_window_oldest_first(
            self, db_url: str, workspace_id: str) -> None:
        async with two_apps(db_url, workspace_id) as (clock, a, b):
            await a.schedule("hourly", report, "h", cron="0 * * * *", overlap="allow",
                             catchup=timedelta(hours=2))
            # Nothing runs for ten hours (both processes down), then both come back.
            await clock.jump_to(START + timedelta(hours=10, minutes=20))
            async with racing_loops(a, b):
                await clock.jump_to(START + timedelta(hours=10, minutes=20, seconds=1))
            runs = await a.list_runs(template_id="sched-report", limit=100)
            rec = await a.get_schedule("hourly")
        ticks = [START + timedelta(hours=h) for h in (9, 10)]  # 08:20..10:20 holds 09 and 10
        assert {r.id for r in runs} == {tick_run_id(workspace_id, "prod", "hourly", t)
                                        for t in ticks}
        # Oldest first: the last tick decided is the newest.
        assert rec.last_tick == ticks[-1]
        assert rec.skipped_missed == 8  # 01:00 .. 08:00
        assert rec.started == 2
        assert rec.next_fire_at == START + timedelta(hours=11)

    async def test_a_decided_tick_survives_a_crash_before_its_start(
            self, db_url: str, workspace_id: str) -> None:
        """The decision (pending_tick) is written first; the next pass starts the run."""
        async with two_apps(db_url, workspace_id) as (clock, a, _):
            rec = await a.schedule("crashy", report, "c", cron="*/5 * * * *", overlap="allow")
            await clock.jump_to(START + timedelta(minutes=5))
            loop = ScheduleLoop(a.runner)
            tick = START + timedelta(minutes=5)
            # A loop that wrote its decision and died before starting the run:
            assert await a.adapter.update_schedule(rec.id, rec.revision, {
                "pending_tick": tick, "last_tick": tick, "due_at": clock.now(),
                "last_run_id": tick_run_id(workspace_id, "prod", "crashy", tick),
                "next_fire_at": tick + timedelta(minutes=5)}, now=clock.now())
            assert await queued_ids(a) == []
            await loop.fire_due()
            await loop.fire_due()  # a second pass adds nothing
            ids = await queued_ids(a)
            after = await a.get_schedule("crashy")
        assert ids == [tick_run_id(workspace_id, "prod", "crashy", tick)]
        assert after.pending_tick is None and after.started == 1


    async def test_a_failed_start_leaves_the_decided_tick_for_the_next_pass(
            self, db_url: str, workspace_id: str) -> None:
        """The run's insert fails at the write seam: logged, retried, started once."""
        faults = FaultInjectingAdapter(adapter_from_url(db_url, workspace_id=workspace_id),
                                       fail={"on_run_start": 1})
        clock = FakeClock(START)
        async with Starflow.open(adapter=faults, clock=clock, config=CONFIG,
                                 maintenance=False) as sf:
            await sf.schedule("flaky", report, "f", cron="*/5 * * * *")
            await clock.jump_to(START + timedelta(minutes=5))
            loop = ScheduleLoop(sf.runner)
            await loop.fire_due()
            assert faults.failures == ["on_run_start"] and loop.failures == 1
            decided = await sf.get_schedule("flaky")
            assert decided.pending_tick == START + timedelta(minutes=5)
            assert await queued_ids(sf) == []
            await loop.fire_due()
            after = await sf.get_schedule("flaky")
            assert await queued_ids(sf) == [
                tick_run_id(workspace_id, "prod", "flaky", START + timedelta(minutes=5))]
            assert after.pending_tick is None and after.started == 1


class TestOverlap:
    """``overlap`` decides what a tick does while the previous run is still active."""

    async def _ticks(self, overlap: str, n: int) -> tuple[Any, list[datetime]]:
        # Polls every minute: a buffered tick looks for the end of the active run.
        async with WorkflowEnvironment("memory", config=CONFIG, pools=(),
                                       poll_interval=timedelta(minutes=1)) as env:
            sf = env.app
            await sf.schedule("o", waits_for_go, "w", cron="0 * * * *", overlap=overlap)
            for h in range(1, n + 1):
                await env.clock.jump_to(START + timedelta(hours=h))
            runs = await sf.list_runs(template_id="sched-wait", limit=100)
            rec = await sf.get_schedule("o")
            tick_of = {tick_run_id(env.adapter.workspace_id, "prod", "o",
                                   START + timedelta(hours=h)): START + timedelta(hours=h)
                       for h in range(1, n + 2)}
            first = [r.id for r in runs]
            # The active run ends: a buffered tick starts at the next pass.
            for run in runs:
                await sf.cancel(run.id)
            await env.clock.jump_to(START + timedelta(hours=n, minutes=1))
            after = await sf.list_runs(template_id="sched-wait", limit=100)
            rec = await sf.get_schedule("o")
        started = sorted(tick_of[r.id] for r in after)
        assert set(first) <= {r.id for r in after}
        return rec, started

    async def test_skip(self) -> None:
        rec, started = await self._ticks("skip", 3)
        assert started == [START + timedelta(hours=1)]
        assert rec.skipped_overlap == 2

    async def test_buffer_one(self) -> None:
        rec, started = await self._ticks("buffer_one", 3)
        # 01:00 runs; 02:00 waits for it; 03:00 is skipped; 02:00 starts once 01:00 ends.
        assert started == [START + timedelta(hours=1), START + timedelta(hours=2)]
        assert rec.skipped_overlap == 1
        assert rec.buffered_tick is None

    async def test_allow(self) -> None:
        rec, started = await self._ticks("allow", 3)
        assert started == [START + timedelta(hours=h) for h in (1, 2, 3)]
        assert rec.skipped_overlap == 0


class TestEndToEnd:
    """The app's own maintenance fires ticks; workers run them."""

    async def test_hourly_runs_complete(self) -> None:
        async with WorkflowEnvironment("memory", config=CONFIG) as env:
            sf = env.app
            await sf.schedule("hourly", report, "e2e", cron="0 * * * *")
            await env.clock.advance(timedelta(hours=3))
            runs = await sf.list_runs(template_id="sched-report", limit=10)
            assert sorted(r.status for r in runs) == ["success"] * 3
            assert {await sf.result(r.id) for r in runs} == {"report e2e"}


class TestDst:
    """Ticks follow the zone's rules (cronsim, Debian cron semantics)."""

    def test_spring_forward_fires_a_skipped_time_once_after_the_gap(self) -> None:
        # Europe/Berlin jumps from 02:00 to 03:00 on 2030-03-31.
        after = datetime(2030, 3, 30, 12, tzinfo=UTC)
        first = next_tick("30 2 * * *", "Europe/Berlin", after)
        second = next_tick("30 2 * * *", "Europe/Berlin", first or after)
        assert first == datetime(2030, 3, 31, 1, 0, tzinfo=UTC)  # 03:00 CEST
        assert second == datetime(2030, 4, 1, 0, 30, tzinfo=UTC)  # 02:30 CEST

    def test_fall_back_fires_a_fixed_hour_once(self) -> None:
        # 2030-10-27: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
        after = datetime(2030, 10, 26, 12, tzinfo=UTC)
        first = next_tick("30 2 * * *", "Europe/Berlin", after)
        second = next_tick("30 2 * * *", "Europe/Berlin", first or after)
        assert first == datetime(2030, 10, 27, 0, 30, tzinfo=UTC)  # 02:30 CEST
        assert second == datetime(2030, 10, 28, 1, 30, tzinfo=UTC)  # next day, 02:30 CET

    def test_a_daily_time_keeps_its_local_hour_across_the_change(self) -> None:
        # New York moves to EDT on 2030-03-10: 09:00 is 14:00 UTC before, 13:00 after.
        before = next_tick("0 9 * * *", "America/New_York", datetime(2030, 3, 9, tzinfo=UTC))
        after = next_tick("0 9 * * *", "America/New_York", before or START)
        assert before == datetime(2030, 3, 9, 14, tzinfo=UTC)
        assert after == datetime(2030, 3, 10, 13, tzinfo=UTC)


class TestManagement:
    """Create-or-update, list, pause, resume, delete, trigger; bad input writes nothing."""

    async def test_create_update_keeps_cursor_and_counters(
            self, db_url: str, workspace_id: str) -> None:
        async with two_apps(db_url, workspace_id) as (clock, a, _):
            first = await a.schedule("s", report, "v1", cron="0 * * * *",
                                     timezone="Europe/Berlin")
            assert first.next_fire_at == START + timedelta(hours=1)
            assert first.revision == 1 and not first.paused
            await clock.jump_to(START + timedelta(minutes=30))
            again = await a.schedule("s", report, "v2", cron="0 * * * *",
                                     timezone="Europe/Berlin", overlap="allow")
            assert again.next_fire_at == START + timedelta(hours=1)  # cursor kept
            assert again.input == {"args": ["v2"], "kwargs": {}}
            assert again.overlap == "allow" and again.revision == 2
            changed = await a.schedule("s", report, "v2", cron="15 * * * *")
            assert changed.next_fire_at == START + timedelta(hours=1, minutes=15)
            assert [s.id for s in await a.schedules()] == ["s"]

    async def test_pause_resume_delete_trigger(self, db_url: str, workspace_id: str) -> None:
        async with two_apps(db_url, workspace_id) as (clock, a, b):
            await a.schedule("p", report, "p", cron="0 * * * *", overlap="allow")
            paused = await a.pause_schedule("p")
            assert paused.paused
            async with racing_loops(a, b) as loops:
                await clock.jump_to(START + timedelta(hours=2, minutes=30))
                assert await queued_ids(a) == []  # paused ticks never start
                resumed = await a.resume_schedule("p")
                for loop in loops:  # other processes' loops see it at their next poll
                    loop.notify()
                assert not resumed.paused
                assert resumed.next_fire_at == START + timedelta(hours=3)
                await clock.jump_to(START + timedelta(hours=3))
                assert len(await queued_ids(a)) == 1
                handle = await a.trigger_schedule("p")
                assert handle.status == "queued"
                assert (await a.get_schedule("p")).last_run_id == handle.run_id
                assert len(await queued_ids(a)) == 2
            await a.delete_schedule("p")
            assert await a.schedules() == []
            assert len(await queued_ids(a)) == 2  # its runs are kept
            for call in (a.get_schedule, a.pause_schedule, a.resume_schedule,
                         a.delete_schedule, a.trigger_schedule):
                with pytest.raises(ScheduleNotFound, match="'p' not found"):
                    await call("p")

    async def test_a_tick_due_before_the_pause_starts(self, db_url: str,
                                                        workspace_id: str) -> None:
        """A pause just after a tick fell due (no loop has run yet) starts that tick,
        as the loop would have: it was due while the schedule was active."""
        async with two_apps(db_url, workspace_id) as (clock, a, _):
            await a.schedule("p", report, "p", cron="0 * * * *")
            await clock.jump_to(START + timedelta(hours=1, seconds=5))  # no loop runs
            paused = await a.pause_schedule("p")
            assert paused.paused
            assert await queued_ids(a) == [
                tick_run_id(workspace_id, "prod", "p", START + timedelta(hours=1))]
            assert paused.started == 1 and paused.skipped_missed == 0
            assert paused.last_tick == START + timedelta(hours=1)
            assert paused.next_fire_at == START + timedelta(hours=2)
            assert paused.pending_tick is None

    async def test_ticks_due_before_the_pause_past_catchup_are_counted(
            self, db_url: str, workspace_id: str) -> None:
        """Ticks due before the pause but older than the catch-up window are counted
        in ``skipped_missed``, not dropped; ticks while paused are neither."""
        async with two_apps(db_url, workspace_id) as (clock, a, _):
            await a.schedule("p", report, "p", cron="0 * * * *",
                             catchup=timedelta(minutes=30))
            await clock.jump_to(START + timedelta(hours=3, minutes=10))  # 01, 02, 03 due
            paused = await a.pause_schedule("p")
            assert paused.skipped_missed == 2  # 01:00 and 02:00, older than 30 min
            assert await queued_ids(a) == [
                tick_run_id(workspace_id, "prod", "p", START + timedelta(hours=3))]
            await clock.jump_to(START + timedelta(hours=6, minutes=10))
            resumed = await a.resume_schedule("p")
            assert resumed.skipped_missed == 2 and resumed.started == 1
            assert resumed.next_fire_at == START + timedelta(hours=7)

    async def test_a_buffered_tick_dropped_at_resume_is_counted(
            self, db_url: str, workspace_id: str) -> None:
        async with two_apps(db_url, workspace_id) as (clock, a, _):
            await a.schedule("p", report, "p", cron="0 * * * *", overlap="buffer_one")
            await a.trigger_schedule("p")  # queued, no worker: active throughout
            await clock.jump_to(START + timedelta(hours=1, seconds=5))
            paused = await a.pause_schedule("p")
            assert paused.buffered_tick == START + timedelta(hours=1)  # waits for the run
            resumed = await a.resume_schedule("p")
            assert resumed.buffered_tick is None and resumed.skipped_overlap == 1
            assert len(await queued_ids(a)) == 1  # only the triggered run

    async def test_pausing_twice_decides_nothing_again(self, db_url: str,
                                                       workspace_id: str) -> None:
        async with two_apps(db_url, workspace_id) as (clock, a, _):
            await a.schedule("p", report, "p", cron="0 * * * *")
            first = await a.pause_schedule("p")
            await clock.jump_to(START + timedelta(hours=1, seconds=5))
            again = await a.pause_schedule("p")
            assert again.revision == first.revision  # nothing written
            assert await queued_ids(a) == []  # a tick due while paused never starts

    @pytest.mark.parametrize(("kwargs", "message"), [
        ({"cron": "61 * * * *"}, "cron: bad expression '61 * * * *'"),
        ({"cron": "* * *"}, "cron: bad expression"),
        ({"cron": "0 3 * * *", "timezone": "Mars/Olympus"},
         "timezone: unknown time zone 'Mars/Olympus'"),
        ({"cron": "0 3 * * *", "overlap": "queue"}, "overlap must be one of"),
        ({"cron": "0 3 * * *", "catchup": timedelta(seconds=-1)}, "catchup must be"),
    ])
    async def test_bad_input_is_a_config_error_and_writes_nothing(
            self, db_url: str, workspace_id: str, kwargs: dict[str, Any], message: str) -> None:
        async with two_apps(db_url, workspace_id) as (_, a, _b):
            with pytest.raises(ConfigError, match=message.replace("*", r"\*")):
                await a.schedule("bad", report, "x", **kwargs)
            assert await a.schedules() == []

    @pytest.mark.parametrize(("kwargs", "message"), [
        ({"schedule_id": ""}, "schedule_id must be a non-empty string"),
        ({"schedule_id": "s" * 201}, "schedule_id is 201 characters long"),
        ({"schedule_id": "a\x00b"}, "schedule_id contains a NUL"),
        ({"pool": ""}, "pool must be a non-empty string"),
    ])
    async def test_bad_names_are_invalid_arguments_and_write_nothing(
            self, db_url: str, workspace_id: str, kwargs: dict[str, Any], message: str) -> None:
        async with two_apps(db_url, workspace_id) as (_, a, _b):
            options = dict(kwargs)
            schedule_id = options.pop("schedule_id", "ok")
            with pytest.raises(InvalidArgument, match=message):
                await a.schedule(schedule_id, report, "x", cron="0 3 * * *", **options)
            assert await a.schedules() == []

    async def test_every_problem_is_named_at_once(self) -> None:
        async with Starflow.open("memory://", clock=FakeClock(START)) as sf:
            with pytest.raises(ConfigError) as err:
                await sf.schedule("s", report, "x", cron="nope", timezone="Nowhere/None",
                                  overlap="x")
            text = str(err.value)
            for part in ("cron: bad expression 'nope'",
                         "unknown time zone 'Nowhere/None'", "overlap"):
                assert part in text
            assert await sf.schedules() == []


def test_import_does_not_need_cronsim_and_a_missing_install_says_what_to_install() -> None:
    code = """
import sys
sys.modules["cronsim"] = None  # as if not installed
import anyio, starflow
from starflow import ConfigError, Starflow

@starflow.workflow(name="nocron")
async def wf() -> None: ...

async def main() -> None:
    async with Starflow.open("memory://") as sf:
        try:
            await sf.schedule("s", wf, cron="* * * * *")
        except ConfigError as exc:
            print(exc)
        print(await sf.schedules())

anyio.run(main)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "pip install 'starflow-durable[schedules]'" in out
    assert out.strip().endswith("[]")


async def test_sqlite_due_queries_search_the_partial_index(tmp_path: Path) -> None:
    """The loop's two reads repeat the partial index's WHERE term, so SQLite uses it."""
    import sqlite3

    from starflow.adapters.sql.queries import SQLITE_QUERIES as Q
    from starflow.adapters.sqlite import LocalWorkflowStateAdapter

    adapter = LocalWorkflowStateAdapter(str(tmp_path / "due.db"), workspace_id="plans")
    async with adapter:
        for sql, args in ((Q.due_schedules, ("plans", "prod", "2030", 5)),
                          (Q.next_schedule_due, ("plans", "prod"))):
            def explain(conn: sqlite3.Connection, sql: str = sql,
                        args: tuple[Any, ...] = args) -> str:
                rows = conn.execute("EXPLAIN QUERY PLAN " + sql, args).fetchall()
                return " ".join(str(r[3]) for r in rows)

            plan = await adapter._call(explain)
            assert "idx_starflow_schedules_due" in plan, plan
