"""``list_runs_page``: keyset pages of runs, on every adapter, and their plans.

The contract part walks pages and compares them with the whole ordered list;
the plan part seeds 100,000 runs and checks that the first page and a next
page are index range scans (no full scan, no sort of the table) on PostgreSQL
(``EXPLAIN``) and SQLite (``EXPLAIN QUERY PLAN``).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from starflow.adapters.base import WorkflowStateAdapter
from starflow.adapters.pages import (
    MAX_PAGE,
    RunCursor,
    RunPageQuery,
    page_sql,
    uuid_bounds,
)
from starflow.adapters.sql.queries import POSTGRES_QUERIES, SQLITE_QUERIES
from starflow.adapters.sql.shared import POSTGRES, SQLITE
from starflow.adapters.sqlite import LocalWorkflowStateAdapter
from starflow.clock import format_ts
from starflow.errors import StarflowError
from starflow.records import StartOptions
from starflow.workflow.context import WorkflowContext
from tests.adapters.test_postgres import _plan_nodes, scratch_database

T0 = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
SEEDED = 100_000


async def start(adapter: WorkflowStateAdapter, seconds: float, *, workflow: str = "orders",
                status: str = "running", pool: str | None = None) -> str:
    run_id = str(uuid.uuid4())
    ctx = WorkflowContext(run_id=run_id, workflow=workflow, version=1, variables={})
    await adapter.on_run_start(
        run_id, ctx, StartOptions(status=status, runner_pool=pool,
                                  claim_state="queued" if status == "queued" else "running"),
        now=T0 + timedelta(seconds=seconds))
    return run_id


async def walk(adapter: WorkflowStateAdapter, query: RunPageQuery) -> list[str]:
    ids: list[str] = []
    cursor = None
    for _ in range(100):
        page = await adapter.list_runs_page(msgspec_replace(query, after=cursor))
        assert len(page.runs) <= query.limit
        ids += [r.id for r in page.runs]
        if page.next is None:
            return ids
        cursor = page.next
    raise AssertionError("pages never ended")


def msgspec_replace(query: RunPageQuery, **changes: Any) -> RunPageQuery:
    import msgspec

    return msgspec.structs.replace(query, **changes)


@pytest.fixture(params=["memory", "sqlite", "postgres", "pgbouncer"])
def adapter_kind(request: pytest.FixtureRequest) -> str:
    """Every durable adapter kind, and PostgreSQL through a transaction pooler."""
    return str(request.param)


class TestPages:
    """Pages follow one another without gaps or repeats, newest first, with filters."""

    async def test_pages_cover_every_run_in_order(self, adapter: WorkflowStateAdapter) -> None:
        """Ties on started_at are broken by id, so no run is skipped between pages."""
        runs = []
        for i in range(11):
            # three runs share each second: the cursor must break the tie by id
            runs.append((i // 3, await start(adapter, i // 3)))
        expected = [rid for _, rid in sorted(runs, key=lambda r: (r[0], r[1]), reverse=True)]
        assert await walk(adapter, RunPageQuery(limit=4)) == expected
        assert await walk(adapter, RunPageQuery(limit=1)) == expected
        page = await adapter.list_runs_page(RunPageQuery(limit=11))
        assert [r.id for r in page.runs] == expected and page.next is None

    async def test_filters_and_counts(self, adapter: WorkflowStateAdapter) -> None:
        """Status, workflow, pool, time range and id prefix narrow the page;
        counts apply every filter but the status."""
        a = await start(adapter, 1, status="queued", pool="gpu")
        b = await start(adapter, 2, status="queued", pool="cpu")
        c = await start(adapter, 3, workflow="billing")
        d = await start(adapter, 4, status="paused")
        e = await start(adapter, 5, status="queued", pool="gpu")

        async def ids(**filters: Any) -> list[str]:
            return [r.id for r in (await adapter.list_runs_page(RunPageQuery(**filters))).runs]

        assert await ids(status="queued") == [e, b, a]
        assert await ids(pool="gpu") == [e, a]
        assert await ids(template_id="billing") == [c]
        assert await ids(started_from=T0 + timedelta(seconds=2),
                         started_before=T0 + timedelta(seconds=4)) == [c, b]
        assert await ids(id_prefix=d[:6].upper()) == [d]
        assert await ids(id_prefix=d) == [d]
        assert await ids(id_prefix="not-a-uuid-prefix") == []
        page = await adapter.list_runs_page(RunPageQuery(status="queued", counts=True))
        assert page.counts == {"queued": 3, "running": 1, "paused": 1, "success": 0,
                               "error": 0, "cancelled": 0}
        page = await adapter.list_runs_page(RunPageQuery(pool="gpu", counts=True, limit=1))
        assert [r.id for r in page.runs] == [e] and page.next is not None
        assert page.counts is not None and page.counts["queued"] == 2
        assert sum(page.counts.values()) == 2

    async def test_statuses(self, adapter: WorkflowStateAdapter) -> None:
        """statuses keeps the runs in any of them (a bulk action's statuses, #30), also
        across pages and together with status."""
        a = await start(adapter, 1, status="queued")
        await start(adapter, 2, status="running")
        c = await start(adapter, 3, status="paused")
        d = await start(adapter, 4, status="queued")
        query = RunPageQuery(statuses=("queued", "paused"), limit=1)
        assert await walk(adapter, query) == [d, c, a]
        assert await walk(adapter, msgspec_replace(query, status="queued")) == [d, a]
        assert await walk(adapter, msgspec_replace(query, status="running")) == []
        with pytest.raises(StarflowError, match="statuses must be some of"):
            await adapter.list_runs_page(RunPageQuery(statuses=("queued", "bogus")))
        with pytest.raises(StarflowError, match="statuses must be some of"):
            await adapter.list_runs_page(RunPageQuery(statuses=()))

    async def test_counts_are_capped(self, adapter: WorkflowStateAdapter,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
        """Past COUNT_CAP a count reads COUNT_CAP + 1: its cost stays bounded."""
        from starflow.adapters import pages

        monkeypatch.setattr(pages, "COUNT_CAP", 2)
        for i in range(4):
            await start(adapter, i)
        await start(adapter, 9, status="paused")
        page = await adapter.list_runs_page(RunPageQuery(counts=True))
        assert page.counts is not None
        assert page.counts["running"] == 3 and page.counts["paused"] == 1

    async def test_expired_leases(self, adapter: WorkflowStateAdapter) -> None:
        """``lease_expired_at`` lists running/paused runs whose lease ended before it."""
        stale = await start(adapter, 1)
        fresh = await start(adapter, 2)
        await adapter.write_lease(stale, "r1", T0 + timedelta(seconds=30), now=T0)
        await adapter.write_lease(fresh, "r2", T0 + timedelta(seconds=90), now=T0)
        page = await adapter.list_runs_page(
            RunPageQuery(lease_expired_at=T0 + timedelta(seconds=60)))
        assert [r.id for r in page.runs] == [stale]

    async def test_bad_queries_are_named(self, adapter: WorkflowStateAdapter) -> None:
        """Every problem is reported at once, before anything is read."""
        with pytest.raises(StarflowError) as info:
            await adapter.list_runs_page(RunPageQuery(
                status="stuck", limit=0, started_from=datetime(2026, 1, 1)))
        text = str(info.value)
        assert "status must be one of" in text and "'stuck'" in text
        assert "limit must be an int from 1 to 500: 0" in text
        assert "started_from must be timezone-aware" in text
        with pytest.raises(StarflowError, match="limit"):
            await adapter.list_runs_page(RunPageQuery(limit=MAX_PAGE + 1))


class TestCursor:
    """The cursor travels in URLs: it round-trips, and junk is refused clearly."""

    def test_round_trip(self) -> None:
        cursor = RunCursor(started_at=T0, id=str(uuid.uuid4()))
        assert RunCursor.decode(cursor.encode()) == cursor

    @pytest.mark.parametrize("text", ["", "abc", "W10", "WyJ4IiwgInkiXQ"])
    def test_junk(self, text: str) -> None:
        with pytest.raises(StarflowError, match="not a page cursor"):
            RunCursor.decode(text)

    def test_uuid_bounds(self) -> None:
        assert uuid_bounds("AB") == ("ab000000-0000-0000-0000-000000000000",
                                     "abffffff-ffff-ffff-ffff-ffffffffffff")
        assert uuid_bounds("abcdef01-2") == ("abcdef01-2000-0000-0000-000000000000",
                                             "abcdef01-2fff-ffff-ffff-ffffffffffff")
        assert uuid_bounds("abc-") is None  # a dash where a uuid has a digit
        assert uuid_bounds("xyz") is None


# ---------------------------------------------------------------------------
# Plans on 100,000 runs
# ---------------------------------------------------------------------------

STATUSES = ("success", "success", "success", "error", "paused", "running", "cancelled")


#: Workflows of the seeded runs: one run in 20 is of each.
WORKFLOWS = 20


def plan_queries() -> list[RunPageQuery]:
    """First and next page, unfiltered, by status and by workflow (the runs
    table's main views)."""
    cursor = RunCursor(started_at=T0 + timedelta(seconds=SEEDED - 120),
                       id="80000000-0000-0000-0000-000000000000")
    return [RunPageQuery(), RunPageQuery(after=cursor),
            RunPageQuery(status="error"), RunPageQuery(status="error", after=cursor),
            RunPageQuery(template_id="wf7"), RunPageQuery(template_id="wf7", after=cursor)]


def wanted_index(query: RunPageQuery) -> str:
    if query.status:
        return "idx_workflow_runs_status_page"
    if query.template_id:
        return "idx_workflow_runs_template_page"  # migration 035
    return "idx_workflow_runs_page"


#: ``list_runs`` (the adapter's first page, ``sf.list_runs``): (status, workflow)
#: filters, the arguments after the tenant, and the index that serves it.
LIST_RUNS = [((False, False), (), "idx_workflow_runs_page"),
             ((True, False), ("error",), "idx_workflow_runs_status_page"),
             ((False, True), ("wf7",), "idx_workflow_runs_template_page")]


@pytest.mark.slow  # EXPLAIN on filled tables
class TestPlans:
    """With 100,000 runs, a page is an index range scan, not a table scan and sort."""

    async def test_postgres(self) -> None:
        async with scratch_database("starflow_pages") as (_, conn):
            await conn.execute(f"""
                INSERT INTO workflow_runs (id, workspace_id, env, template_id, status,
                                           started_at, claim_state)
                SELECT gen_random_uuid(), 'ws' || (g % 2), 'prod', 'wf' || (g / 2 % {WORKFLOWS}),
                       (ARRAY{list(STATUSES)!r})[1 + g % {len(STATUSES)}],
                       $1::timestamptz + g * interval '1 second', 'complete'
                FROM generate_series(1, {SEEDED}) g""", T0)
            await conn.execute("ANALYZE workflow_runs")
            for query in plan_queries():
                built = page_sql(POSTGRES, query, workspace_id="ws0", env="prod", columns="id")
                assert built is not None
                raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {built.select}",
                                          *built.select_args)
                plan = raw if isinstance(raw, list) else json.loads(raw)
                nodes = list(_plan_nodes(plan))
                kinds = {n.get("Node Type") for n in nodes}
                indexes = {n["Index Name"] for n in nodes if "Index Name" in n}
                wanted = wanted_index(query)
                assert wanted in indexes, (query, json.dumps(plan, indent=1))
                assert not kinds & {"Seq Scan", "Sort", "Incremental Sort", "Bitmap Heap Scan"}, \
                    (query, json.dumps(plan, indent=1))
                # The plan's estimate for the scan is a page, not the workspace.
                assert plan[0]["Plan"]["Plan Rows"] <= 51
                if query.after is not None:  # the cursor bounds the index range itself
                    conds = " ".join(n.get("Index Cond", "") for n in nodes)
                    assert "ROW(started_at, id) <" in conds, json.dumps(plan, indent=1)
            for (status, workflow), args, wanted in LIST_RUNS:
                sql = POSTGRES_QUERIES.list_runs(status, workflow, False)
                raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", "ws0", "prod",
                                          *args, 50)
                plan = raw if isinstance(raw, list) else json.loads(raw)
                nodes = list(_plan_nodes(plan))
                assert wanted in {n["Index Name"] for n in nodes if "Index Name" in n}, \
                    (args, json.dumps(plan, indent=1))
                assert not {n.get("Node Type") for n in nodes} & {
                    "Seq Scan", "Sort", "Incremental Sort", "Bitmap Heap Scan"}, \
                    (args, json.dumps(plan, indent=1))
                assert plan[0]["Plan"]["Plan Rows"] <= 50
            # The counts per status: capped index-only ranges, never a scan of the table.
            built = page_sql(POSTGRES, RunPageQuery(counts=True), workspace_id="ws0",
                             env="prod", columns="id")
            assert built is not None and built.count is not None
            raw = await conn.fetchval(f"EXPLAIN (FORMAT JSON) {built.count}", *built.count_args)
            plan = raw if isinstance(raw, list) else json.loads(raw)
            nodes = list(_plan_nodes(plan))
            assert "Seq Scan" not in {n.get("Node Type") for n in nodes}, plan
            assert {n.get("Index Name") for n in nodes if "Index Name" in n} == \
                {"idx_workflow_runs_status_page"}, json.dumps(plan, indent=1)

    async def test_sqlite(self, tmp_path: Path) -> None:
        path = tmp_path / "pages.db"
        adapter = LocalWorkflowStateAdapter.from_url(f"sqlite:///{path}", workspace_id="ws0")
        await adapter.open()
        await adapter.close()
        conn = sqlite3.connect(path)
        try:
            conn.executemany(
                "INSERT INTO workflow_runs (id, workspace_id, env, template_id, status, "
                "started_at, claim_state) VALUES (?, ?, 'prod', ?, ?, ?, 'complete')",
                ((str(uuid.UUID(int=g * 7919 % 2**128)), f"ws{g % 2}", f"wf{g // 2 % WORKFLOWS}",
                  STATUSES[g % len(STATUSES)], format_ts(T0 + timedelta(seconds=g)))
                 for g in range(1, SEEDED + 1)))
            conn.commit()
            conn.execute("ANALYZE")
            for query in plan_queries():
                built = page_sql(SQLITE, query, workspace_id="ws0", env="prod")
                assert built is not None
                plan = " | ".join(row[3] for row in conn.execute(
                    f"EXPLAIN QUERY PLAN {built.select}", built.select_args))
                wanted = wanted_index(query)
                assert f"SEARCH workflow_runs USING INDEX {wanted}" in plan, (query, plan)
                assert "TEMP B-TREE" not in plan and "SCAN" not in plan, (query, plan)
                if query.after is not None:  # the cursor bounds the index range itself
                    assert "(started_at,id)<(?,?))" in plan, plan
            for (status, workflow), args, wanted in LIST_RUNS:
                sql = SQLITE_QUERIES.list_runs(status, workflow, False)
                plan = " | ".join(row[3] for row in conn.execute(
                    f"EXPLAIN QUERY PLAN {sql}", ("ws0", "prod", *args, 50)))
                assert f"SEARCH workflow_runs USING INDEX {wanted}" in plan, (args, plan)
                assert "TEMP B-TREE" not in plan and "SCAN" not in plan, (args, plan)
            built = page_sql(SQLITE, RunPageQuery(counts=True), workspace_id="ws0", env="prod")
            assert built is not None and built.count is not None
            plan = " | ".join(row[3] for row in conn.execute(
                f"EXPLAIN QUERY PLAN {built.count}", built.count_args))
            assert "SCAN workflow_runs" not in plan, plan
            assert plan.count("USING COVERING INDEX idx_workflow_runs_status_page") == 6, plan
            # and the rows: a next page continues exactly below the first
            count = conn.execute("SELECT count(*) FROM workflow_runs WHERE workspace_id='ws0'"
                                 ).fetchone()[0]
            assert count == SEEDED // 2
        finally:
            conn.close()
