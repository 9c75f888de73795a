"""Retention (issue #24): ``sf.prune`` deletes ended runs with every row that
belongs to them and touches nothing else, on every adapter.

Row counts are taken per table, the tables enumerated from the live schema
(every table with a ``run_id`` column, and every table with a ``workspace_id``),
not from a hand-written list, so a table added later that holds a run's rows
fails these tests until the prune deletes it too.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

import starflow
from starflow import (
    InvalidArgument,
    RunNotFound,
    Starflow,
    StarflowConfig,
    step,
    wait_for,
    workflow,
)
from starflow.adapters import adapter_from_url
from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.postgres import PostgresWorkflowStateAdapter
from starflow.adapters.sql.shared import PRUNED_TABLES
from starflow.adapters.sqlite import LocalWorkflowStateAdapter
from starflow.adapters.units import (
    InsertEvent,
    InsertJob,
    InsertOutbox,
    InsertRun,
    InsertSignal,
    InsertStreamItem,
    InsertWait,
    Unit,
    UpsertAttribute,
    UpsertEventValue,
    UpsertSessionVar,
)
from starflow.admin.replayer import Replayer
from starflow.records import JobSpec
from starflow_testing import FakeClock

START = datetime.fromisoformat("2026-01-01T00:00:00+00:00")
NOW = START + timedelta(days=100)


@step()
async def ret_double(n: int) -> int:
    return n * 2


@workflow(name="ret-flow", version=1)
async def ret_flow(n: int) -> int:
    return await ret_double(n) + 1


# ---------------------------------------------------------------------------
# Rows, seeded and counted
# ---------------------------------------------------------------------------


async def seed_run(adapter: WorkflowStateAdapter, *, status: str, ended: datetime | None,
                   workflow: str = "ret-seeded", parent: str | None = None,
                   kept_var_until: datetime | None = None) -> str:
    """A run with a row in every table that holds a run's rows."""
    run_id = str(uuid.uuid4())
    values: dict[str, Any] = {"template_id": workflow, "status": status, "started_at": START,
                              "completed_at": ended,
                              "claim_state": "complete" if ended else "running"}
    if parent is not None:
        values["parent_run_id"] = parent
    ops: list[Any] = [InsertRun(method="t", run_id=run_id, values=values)]
    for i in range(3):
        ops.append(InsertEvent(method="t", run_id=run_id, event_type="node_complete",
                               node_id=f"n{i}", payload={"i": i}, created_at=START))
    ops += [
        InsertWait(method="t", run_id=run_id, node_id="w", event="go", deadline=START,
                   created_at=START),
        InsertSignal(method="t", run_id=run_id, event="go", payload=1, created_at=START),
        InsertOutbox(method="t", run_id=run_id, kind="run", payload={"x": 1}, created_at=START),
        InsertJob(method="t", job=JobSpec(id=str(uuid.uuid4()), run_id=run_id, node_id="j",
                                          pool="p", step_name="s",
                                          idempotency_key=f"{run_id}:j", input={}),
                  created_at=START),
        UpsertAttribute(method="t", run_id=run_id, key="customer", value='"c-1"',
                        updated_at=START),
        UpsertEventValue(method="t", run_id=run_id, key="status", value={"s": 1},
                         node_id="event:status#1", updated_at=START),
        InsertStreamItem(method="t", run_id=run_id, key="log", seq=1, value="line",
                         closed=False, node_id="stream:log#1", created_at=START),
        UpsertSessionVar(method="t", session_id=f"s-{run_id}", key="a", value=1,
                         run_id=run_id, keep_until=None, updated_at=START),
        UpsertSessionVar(method="t", session_id=f"s-{run_id}", key="b", value=2,
                         run_id=run_id, keep_until=kept_var_until or START, updated_at=START),
    ]
    await adapter.execute(Unit(ops=ops))
    return run_id


async def _sql(adapter: WorkflowStateAdapter, sql: str, *args: Any) -> list[Any]:
    """A raw statement on the adapter's own database (``?`` placeholders)."""
    if isinstance(adapter, LocalWorkflowStateAdapter):
        def run(conn: Any) -> list[Any]:
            rows = conn.execute(sql, args).fetchall()
            conn.commit()
            return list(rows)
        return await adapter._call(run)
    assert isinstance(adapter, PostgresWorkflowStateAdapter)
    n = 0

    def number(_: Any) -> str:
        nonlocal n
        n += 1
        return f"${n}"

    import re
    pg = re.sub(r"\?", number, sql)
    async with adapter._connection("test") as conn:
        return list(await conn.fetch(pg, *args))


async def schema(adapter: WorkflowStateAdapter) -> dict[str, set[str]]:
    """Every table of the database and its columns."""
    if isinstance(adapter, LocalWorkflowStateAdapter):
        tables = [r[0] for r in await _sql(
            adapter, "SELECT name FROM sqlite_master WHERE type = 'table' "
                     "AND name NOT LIKE 'sqlite_%'")]
        return {t: {r[1] for r in await _sql(adapter, f"PRAGMA table_info({t})")}
                for t in tables}
    rows = await _sql(adapter, "SELECT table_name, column_name FROM information_schema.columns "
                               "WHERE table_schema = current_schema()")
    out: dict[str, set[str]] = {}
    for table, column in rows:
        out.setdefault(table, set()).add(column)
    return out


async def counts(adapter: WorkflowStateAdapter, run_ids: list[str]) -> dict[tuple[str, str], int]:
    """Rows per (table, run) for every table with a ``run_id`` column (the run
    rows under ``workflow_runs``), and per (table, workspace) for every table with
    a ``workspace_id``."""
    out: dict[tuple[str, str], int] = {}
    for table, columns in sorted((await schema(adapter)).items()):
        key = "id" if table == "workflow_runs" else "run_id"
        if key in columns:
            for run_id in run_ids:
                out[(table, run_id)] = (await _sql(
                    adapter, f"SELECT count(*) FROM {table} WHERE {key} = ?",
                    _key(adapter, run_id)))[0][0]
        if "workspace_id" in columns:
            out[(table, "ws")] = (await _sql(
                adapter, f"SELECT count(*) FROM {table} WHERE workspace_id = ?",
                adapter.workspace_id))[0][0]
    return out


def _key(adapter: WorkflowStateAdapter, run_id: str) -> Any:
    return uuid.UUID(run_id) if isinstance(adapter, PostgresWorkflowStateAdapter) else run_id


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(NOW)


@pytest.fixture
async def sf(db_url: str, workspace_id: str, clock: FakeClock) -> AsyncIterator[Starflow]:
    adapter = adapter_from_url(db_url, workspace_id=workspace_id)
    async with Starflow(adapter, clock=clock, maintenance=False) as app:
        yield app


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------


class TestPrune:
    """What a prune deletes, and what it leaves."""

    async def test_pruned_run_is_gone_with_its_rows_and_nothing_else_is_touched(
            self, sf: Starflow, db_url: str) -> None:
        """Only old ended runs go, with every row of theirs; others keep every row."""
        a = sf.adapter
        old = NOW - timedelta(days=40)
        gone_ok = await seed_run(a, status="success", ended=old)
        gone_err = await seed_run(a, status="error", ended=old,
                                  kept_var_until=NOW + timedelta(days=1))
        gone_cancel = await seed_run(a, status="cancelled", ended=old)
        recent = await seed_run(a, status="success", ended=NOW - timedelta(days=1))
        paused = await seed_run(a, status="paused", ended=None)
        # An active run with a stale completed_at (a bug elsewhere) is still active.
        running = await seed_run(a, status="running", ended=old)
        queued = await seed_run(a, status="queued", ended=old)
        other_ws = adapter_from_url(db_url, workspace_id=a.workspace_id + "-b")
        if isinstance(a, LocalWorkflowStateAdapter) and not a.shared:
            other_ws = a  # a private in-memory database: one workspace to see
            foreign = None
        else:
            await other_ws.open()
            foreign = await seed_run(other_ws, status="success", ended=old)
        ids = [gone_ok, gone_err, gone_cancel, recent, paused, running, queued]
        run_tables = {t for t, cols in (await schema(a)).items() if "run_id" in cols}
        assert run_tables == set(PRUNED_TABLES), \
            "a table holds run rows the prune does not delete (or the list names a missing one)"
        before = await counts(a, ids)
        for table in run_tables:  # the seed reaches every table a run's rows live in
            assert before[(table, gone_ok)] >= 1, table

        report = await sf.prune(timedelta(days=30))

        assert report.runs == 3 and not report.dry_run
        after = await counts(a, ids)
        gone = {gone_ok, gone_err, gone_cancel}
        expected = dict(before)
        for table, who in before:
            if who in gone:
                kept = 1 if (table == "workflow_session_vars" and who == gone_err) else 0
                expected[(table, who)] = kept  # the var kept past now stays with its session
        for table in {t for t, _ in before}:
            if (table, "ws") in before:
                expected[(table, "ws")] = before[(table, "ws")] - sum(
                    before.get((table, g), 0) - expected.get((table, g), 0) for g in gone)
        assert after == expected
        assert report.rows["workflow_runs"] == 3
        assert report.rows["workflow_run_events"] == 9
        if foreign is not None:
            assert (await other_ws.get_run(foreign)) is not None
            assert len(await other_ws.list_events(foreign)) == 3
            await other_ws.close()

    async def test_active_runs_survive_any_prune(self, sf: Starflow) -> None:
        """Queued, running and paused runs stay whatever the age and filters."""
        a = sf.adapter
        active = [await seed_run(a, status=s, ended=START) for s in ("queued", "running",
                                                                      "paused")]
        report = await sf.prune(timedelta(0), workflow="ret-seeded")
        assert report.runs == 0
        for run_id in active:
            assert (await sf.get_run(run_id)).status in ("queued", "running", "paused")

    async def test_filters_status_and_workflow(self, sf: Starflow) -> None:
        """--status and --workflow narrow what goes."""
        a = sf.adapter
        old = NOW - timedelta(days=40)
        ok = await seed_run(a, status="success", ended=old)
        err = await seed_run(a, status="error", ended=old)
        other = await seed_run(a, status="error", ended=old, workflow="ret-other")
        assert (await sf.prune(timedelta(days=30), statuses=["error"],
                               workflow="ret-seeded")).runs == 1
        assert await a.get_run(err) is None
        assert await a.get_run(ok) is not None and await a.get_run(other) is not None

    async def test_dry_run_deletes_nothing(self, sf: Starflow) -> None:
        """A dry run counts and lists the runs; every row stays."""
        a = sf.adapter
        old = NOW - timedelta(days=40)
        ids = [await seed_run(a, status="success", ended=old) for _ in range(5)]
        before = await counts(a, ids)
        report = await sf.prune(timedelta(days=30), dry_run=True, batch_size=2)
        assert report.dry_run and report.runs == 5 and sorted(report.run_ids) == sorted(ids)
        assert report.rows == {}
        assert await counts(a, ids) == before

    async def test_batches(self, sf: Starflow) -> None:
        """Small batches prune everything, each batch its own transaction."""
        a = sf.adapter
        old = NOW - timedelta(days=40)
        ids = [await seed_run(a, status="success", ended=old + timedelta(seconds=i))
               for i in range(7)]
        report = await sf.prune(timedelta(days=30), batch_size=3)
        assert report.runs == 7 and report.rows["workflow_runs"] == 7
        for run_id in ids:
            assert await a.get_run(run_id) is None

    async def test_concurrent_pruners(self, sf: Starflow, db_url: str) -> None:
        """Two pruners at once delete each run once, without errors."""
        a = sf.adapter
        old = NOW - timedelta(days=40)
        ids = [await seed_run(a, status="success", ended=old) for _ in range(30)]
        if isinstance(a, LocalWorkflowStateAdapter) and not a.shared:
            second: WorkflowStateAdapter = a
        else:
            second = adapter_from_url(db_url, workspace_id=a.workspace_id)
            await second.open()
        from starflow.admin.retention import prune_runs

        results: list[int] = []

        async def one(adapter: WorkflowStateAdapter) -> None:
            report = await prune_runs(adapter, now=NOW, older_than=timedelta(days=30),
                                      batch_size=4)
            results.append(report.runs)

        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(one, a)
                tg.start_soon(one, second)
        finally:
            if second is not a:
                await second.close()
        assert sum(results) == 30
        for run_id in ids:
            assert await a.get_run(run_id) is None

    async def test_bad_input_is_refused_and_nothing_deleted(self, sf: Starflow,
                                                            tmp_path: Path) -> None:
        """Every problem is named at once; nothing is deleted."""
        a = sf.adapter
        run_id = await seed_run(a, status="success", ended=START)
        with pytest.raises(InvalidArgument) as info:
            await sf.prune(timedelta(days=-1), statuses=["paused", "success"], workflow="",
                           batch_size=0)
        message = str(info.value)
        for part in ("older_than", "paused", "workflow", "batch_size"):
            assert part in message
        with pytest.raises(InvalidArgument, match=r"older_than= .* or StarflowConfig"):
            await sf.prune()
        with pytest.raises(InvalidArgument, match="statuses"):
            await sf.prune(timedelta(0), statuses="success")
        blocker = tmp_path / "file"
        await anyio.Path(blocker).write_text("x")
        with pytest.raises(InvalidArgument, match="export_dir"):
            await sf.prune(timedelta(0), export_dir=blocker / "sub")
        assert await a.get_run(run_id) is not None

    async def test_export_then_delete_and_the_export_replays(
            self, sf: Starflow, clock: FakeClock, tmp_path: Path) -> None:
        """Each pruned run's history is on disk, in the export format, and replays."""
        handles = [await sf.run(ret_flow, i) for i in range(3)]
        assert all(h.status == "success" for h in handles)
        await clock.advance(timedelta(days=31))
        out = tmp_path / "exports"
        report = await sf.prune(timedelta(days=30), export_dir=out, batch_size=2)
        assert report.runs == 3 and len(report.files) == 2
        names = [p.name async for p in anyio.Path(out).iterdir()]
        assert sorted(names) == sorted(Path(f).name for f in report.files)
        histories = [msgspec.json.decode(line) for f in report.files
                     for line in (await anyio.Path(f).read_bytes()).splitlines()]
        assert sorted(h["run"]["id"] for h in histories) == sorted(h.run_id for h in handles)
        replayer = Replayer()
        for history in histories:
            result = await replayer.replay_history(history)
            assert result.ok, result
        for h in handles:
            with pytest.raises(RunNotFound):
                await sf.get_run(h.run_id)

    async def test_retention_config_drives_maintenance(self, db_url: str, workspace_id: str,
                                                       clock: FakeClock) -> None:
        """With ``retention`` set, maintenance prunes old ended runs by itself."""
        adapter = adapter_from_url(db_url, workspace_id=workspace_id)
        config = StarflowConfig(retention=timedelta(days=30))
        async with Starflow(adapter, clock=clock, config=config, maintenance=True) as app:
            old = await seed_run(app.adapter, status="success", ended=NOW - timedelta(days=31))
            young = await seed_run(app.adapter, status="success", ended=NOW)
            await clock.advance(config.prune_interval)
            with anyio.fail_after(10):  # real-time safety net
                while await app.adapter.get_run(old) is not None:
                    await clock.advance(config.prune_interval)
            assert await app.adapter.get_run(young) is not None

    def test_retention_must_be_positive(self) -> None:
        """A zero or negative retention is a configuration error."""
        from starflow import ConfigError

        with pytest.raises(ConfigError, match="retention"):
            StarflowConfig(retention=timedelta(0))
        assert StarflowConfig().retention is None


class TestFamily:
    """A run whose parent or child is active is kept (``parent_run_id``, migration 033)."""

    async def test_parent_and_child_rule(self, sf: Starflow, db_url: str) -> None:
        a = sf.adapter
        old = NOW - timedelta(days=40)
        parent = await seed_run(a, status="success", ended=old)
        child = await seed_run(a, status="paused", ended=None, parent=parent)
        orphan_parent = await seed_run(a, status="running", ended=None)
        ended_child = await seed_run(a, status="success", ended=old, parent=orphan_parent)
        assert (await sf.prune(timedelta(days=30))).runs == 0
        for run_id in (parent, child, orphan_parent, ended_child):
            assert await a.get_run(run_id) is not None
        async with a.unit() as unit:
            await a.update_run(child, "t", status="success", completed_at=old)
        assert unit.held
        assert (await sf.prune(timedelta(days=30))).runs == 2
        assert await a.get_run(parent) is None and await a.get_run(child) is None
        assert await a.get_run(ended_child) is not None

    async def test_a_chain_is_kept_until_its_last_run_ended_before_the_cutoff(
            self, sf: Starflow, clock: FakeClock) -> None:
        """continue_as_new: the ended links of a chain whose last run still runs are kept
        (sf.result of the first run follows them), and then while its last run ended
        after the cutoff; once that one is older than the cutoff the whole chain goes."""
        name = f"ret-chain-{uuid.uuid4().hex[:8]}"

        @workflow(name=name)
        async def chain(i: int) -> int:
            if i < 2:
                starflow.continue_as_new(i + 1)
            return i + int(await wait_for("go"))

        last = await sf.run(chain, 0)
        assert last.status == "paused"
        runs = await sf.list_runs(template_id=name)
        first = next(r.id for r in runs if r.id not in {x.continued_as for x in runs})
        assert len(runs) == 3 and first != last.run_id
        await clock.advance(timedelta(days=40))
        report = await sf.prune(timedelta(days=30))
        assert report.runs == 0 and len(await sf.list_runs(template_id=name)) == 3
        await sf.signal(last.run_id, "go", 5)
        assert await sf.result(first) == 7
        await clock.advance(timedelta(days=20))  # the last run ended 20 days ago
        assert (await sf.prune(timedelta(days=30))).runs == 0
        assert await sf.result(first) == 7
        await clock.advance(timedelta(days=20))
        assert (await sf.prune(timedelta(days=30))).runs == 3
        with pytest.raises(RunNotFound):
            await sf.get_run(first)

    async def test_seeded_chain_with_a_missing_or_active_link(self, sf: Starflow) -> None:
        """A link whose successor was pruned already is free to go; one whose chain
        reaches an active run two links on is kept."""
        a = sf.adapter
        old = NOW - timedelta(days=40)
        one = await seed_run(a, status="success", ended=old)
        two = await seed_run(a, status="success", ended=old)
        three = await seed_run(a, status="paused", ended=None)
        lone = await seed_run(a, status="success", ended=old)
        async with a.unit() as unit:
            await a.update_run(one, "t", continued_as=two)
            await a.update_run(two, "t", continued_as=three)
            await a.update_run(lone, "t", continued_as=str(uuid.uuid4()))  # pruned before
        assert unit.held
        assert (await sf.prune(timedelta(days=30))).runs == 1
        assert await a.get_run(lone) is None
        assert all([await a.get_run(r) for r in (one, two, three)])


# ---------------------------------------------------------------------------
# Plans at scale
# ---------------------------------------------------------------------------

PLAN_RUNS = 60_000
#: PostgreSQL: enough runs that deleting a batch of 500 by id is cheaper through
#: the primary key than by a scan (at 60,000 the planner may rightly scan).
PLAN_RUNS_PG = 200_000


def _prune_statements(d: Any, ids: list[str]) -> list[tuple[str, str, tuple[Any, ...]]]:
    """Every statement of a prune batch as (what, SQL, arguments), in dialect ``d``."""
    from starflow.adapters.sql.shared import prune_delete_sql, prune_select_args, prune_select_sql
    from starflow.adapters.units import PruneRuns

    out: list[tuple[str, str, tuple[Any, ...]]] = []
    for workflow_ in (None, "wf-7"):
        for cursor in (None, (START + timedelta(days=1), ids[0])):
            command = PruneRuns(ended_before=NOW, now=NOW, workflow=workflow_, cursor=cursor)
            # Locked, as a real batch; with the parent/child checks (033).
            sql = prune_select_sql(d, 3, workflow_ is not None, None, cursor is not None,
                                   d.name == "postgres")
            out.append((f"select workflow={workflow_} cursor={cursor is not None}", sql,
                        prune_select_args(d, command, "ws0", "prod")))
    for table, sql in prune_delete_sql(d, len(ids)):
        extra: tuple[Any, ...] = ()
        if table == "workflow_session_vars":
            extra = (d.ts(NOW),)
        elif table == "workflow_runs":
            extra = ("ws0", "prod")
        out.append((f"delete {table}", sql, (*d.many(ids), *extra)))
    return out


@pytest.mark.slow  # EXPLAIN on filled tables
class TestPlans:
    """Every statement of a prune batch is an index search with many ended runs
    (and their events) in the table, on both databases: the batch from
    ``idx_workflow_runs_ended`` (or, by workflow, an index that holds the
    workflow's runs), each delete on its table's ``run_id`` index."""

    async def test_postgres(self) -> None:
        import json

        from starflow.adapters.sql.dialect import POSTGRES
        from tests.adapters.test_postgres import explain_nodes, scratch_database, seq_scanned

        async with scratch_database("starflow_prune_plan") as (_, conn):
            await conn.execute(f"""
                WITH runs AS (
                    INSERT INTO workflow_runs (id, workspace_id, env, template_id, status,
                                               started_at, completed_at, claim_state)
                    SELECT gen_random_uuid(), 'ws' || (g % 2), 'prod', 'wf-' || (g / 2 % 20),
                           'success', $1::timestamptz + g * interval '1 minute',
                           $1::timestamptz + g * interval '1 minute', 'complete'
                    FROM generate_series(1, {PLAN_RUNS_PG}) g RETURNING id, started_at)
                INSERT INTO workflow_run_events (run_id, event_type, created_at)
                SELECT id, 'node_complete', started_at FROM runs, generate_series(1, 2)""",
                START)
            await conn.execute("ANALYZE")
            ids = [str(r[0]) for r in await conn.fetch(
                "SELECT id FROM workflow_runs WHERE workspace_id = 'ws0' LIMIT 500")]
            for what, sql, args in _prune_statements(POSTGRES, ids):
                if what.startswith("delete") and what not in (
                        "delete workflow_runs", "delete workflow_run_events"):
                    continue  # empty here: a scan is its best plan (the SQLite test checks them)
                nodes = await explain_nodes(conn, sql, *args)
                assert not seq_scanned(nodes), (what, json.dumps(nodes, indent=1))
                indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
                if what.startswith("select workflow=None"):
                    assert "idx_workflow_runs_ended" in indexes, (what, indexes)
                assert indexes, (what, json.dumps(nodes, indent=1))

    async def test_sqlite(self, tmp_path: Path) -> None:
        import sqlite3
        from contextlib import closing

        from starflow.adapters.sql.dialect import SQLITE
        from starflow.clock import format_ts

        path = tmp_path / "prune-plan.db"
        adapter = LocalWorkflowStateAdapter.from_url(f"sqlite:///{path}", workspace_id="ws0")
        await adapter.open()
        await adapter.close()
        with closing(sqlite3.connect(path)) as conn, conn:
            runs = [(str(uuid.uuid4()), f"ws{g % 2}", f"wf-{g // 2 % 20}",
                     format_ts(START + timedelta(minutes=g))) for g in range(PLAN_RUNS)]
            conn.executemany(
                "INSERT INTO workflow_runs (id, workspace_id, env, template_id, status, "
                "started_at, completed_at, claim_state) "
                "VALUES (?, ?, 'prod', ?, 'success', ?, ?, 'complete')",
                [(*r, r[3]) for r in runs])  # started_at = completed_at
            conn.executemany(
                "INSERT INTO workflow_run_events (run_id, event_type, created_at) "
                "VALUES (?, 'node_complete', ?)",
                [(r[0], r[3]) for r in runs for _ in range(4)])
            conn.execute("ANALYZE")
            ids = [r[0] for r in runs[:1000:2]]
            for what, sql, args in _prune_statements(SQLITE, ids):
                plan = " | ".join(row[3] for row in conn.execute(
                    f"EXPLAIN QUERY PLAN {sql}", args))
                # The continue_as_new walk reads its own few rows (one per later link).
                plan = plan.replace("SCAN CONSTANT ROW", "").replace("SCAN later", "")
                assert "SCAN" not in plan and "SEARCH" in plan, (what, plan)
                if what.startswith("select workflow=None"):
                    assert "USING INDEX idx_workflow_runs_ended" in plan, (what, plan)
