"""Searchable run attributes on PostgreSQL: a lookup by attribute is an index scan
(``list_runs(attributes=...)``, migration 031).

The test seeds 200,000 runs to keep the suite fast; the same test with 1,000,000
runs (``RUNS`` below) passed with the same plan (about 100 s on a loaded 2-core
machine)."""

from __future__ import annotations

import json

import pytest

from starflow.adapters.postgres import PostgresWorkflowStateAdapter
from starflow.adapters.sql.queries import POSTGRES_QUERIES

from .test_postgres import _plan_nodes, scratch_database

#: EXPLAIN on a table filled to make the planner choose.
pytestmark = pytest.mark.slow


#: Runs seeded (see the module docstring).
RUNS = 200_000

async def test_lookup_by_attribute_is_an_index_scan() -> None:
    """Over RUNS runs (and their attribute rows), the lookup is an index scan on
    idx_workflow_run_attributes_lookup, and no table is scanned whole."""
    async with scratch_database("starflow_attrs") as (url, conn):
        await conn.execute(f"""
            INSERT INTO workflow_runs (id, workspace_id, env, status, started_at, claim_state)
            SELECT gen_random_uuid(), 'ws0', 'prod', 'success',
                   now() - g * interval '1 second', 'complete'
            FROM generate_series(1, {RUNS}) g;
            INSERT INTO workflow_run_attributes (run_id, workspace_id, env, key, value,
                                                 updated_at)
            SELECT id, 'ws0', 'prod', 'customer', '"c-' || (random() * 100000)::int || '"',
                   now()
            FROM workflow_runs;
            ANALYZE workflow_runs;
            ANALYZE workflow_run_attributes;
        """)
        sql = POSTGRES_QUERIES.list_runs(False, False, False, 1)
        adapter = PostgresWorkflowStateAdapter(url, workspace_id="ws0")
        await adapter.open()
        try:
            async with adapter._connection("explain") as explain:
                raw = await explain.fetchval(f"EXPLAIN (FORMAT JSON) {sql}", "ws0", "prod",
                                             "ws0", "prod", "customer", '"c-42"', 50)
        finally:
            await adapter.close()
        plan = raw if isinstance(raw, list) else json.loads(raw)
        nodes = list(_plan_nodes(plan))
        scans = [(n.get("Node Type"), n.get("Relation Name"), n.get("Index Name"))
                 for n in nodes if str(n.get("Node Type", "")).endswith("Scan")]
        assert not [s for s in scans if s[0] == "Seq Scan"], scans
        assert any(s[1] == "workflow_run_attributes"
                   and s[2] == "idx_workflow_run_attributes_lookup" for s in scans), scans
