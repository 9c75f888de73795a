"""The SQL of a prune: which ended runs a batch deletes, and the deletes, run rows last.

Written once for both dialects; :mod:`starflow.admin.retention` drives the batches and
the adapters run them (see :class:`~starflow.adapters.units.PruneRuns`).
"""

from __future__ import annotations

import functools
from typing import Any

from .dialect import Dialect

__all__ = [
    "ENDED_STATUSES",
    "PRUNED_TABLES",
    "prune_delete_sql",
    "prune_select_args",
    "prune_select_sql",
]

#: The statuses a prune may delete: a run in any other status is active.
ENDED_STATUSES = ("cancelled", "error", "success")
#: Every table whose rows belong to a run (a ``run_id`` column), deleted before
#: the run row itself (foreign keys point at ``workflow_runs``). The prune tests
#: enumerate the tables with a ``run_id`` column from the schema and fail if
#: one is missing here.
PRUNED_TABLES = ("workflow_run_events", "workflow_waits", "workflow_signals", "worker_jobs",
                 "mirror_outbox", "workflow_session_vars", "workflow_run_attributes",
                 "workflow_event_values", "workflow_stream_items")


@functools.cache
def prune_select_sql(d: Dialect, statuses: int, workflow: bool, ids: int | None, cursor: bool,
                     lock: bool) -> str:
    """The runs a :class:`~starflow.adapters.units.PruneRuns` batch deletes:
    ``(id, completed_at)`` rows, oldest end first. Arguments:
    :func:`prune_select_args`. A run whose parent or a child (``parent_run_id``,
    migration 033) is active is left out, and so is a link of a
    ``continue_as_new`` chain while any later link (``continued_as`` followed,
    migration 034) is active or ended at or after the cutoff: ``sf.result`` of
    the first run follows the chain, so it goes only as a whole. A successor no
    longer stored was pruned already (it had ended). ``lock``: lock the rows
    (skipping rows another pruner holds, where the dialect can)."""
    p = d.p
    ended = ", ".join(f"'{s}'" for s in ENDED_STATUSES)
    where = [d.tenant(1, "r."), d.one_of("r.status", 3, statuses),
             "r.completed_at IS NOT NULL"]
    n = 3 + d.width(statuses)
    where.append(f"r.completed_at < {p(n, 'timestamptz')}")
    n += 1
    if workflow:
        where.append(f"r.template_id = {p(n)}")
        n += 1
    if ids is not None:
        where.append(d.one_of("r.id", n, ids, "uuid"))
        n += d.width(ids)
    if cursor:
        where.append(f"(r.completed_at, r.id) > ({p(n, 'timestamptz')}, {p(n + 1, 'uuid')})")
        n += 2
    where.append("NOT EXISTS (SELECT 1 FROM workflow_runs k WHERE k.parent_run_id = r.id "
                 f"AND COALESCE(k.status, '') NOT IN ({ended}))")
    where.append("NOT EXISTS (SELECT 1 FROM workflow_runs k WHERE k.id = r.parent_run_id "
                 f"AND COALESCE(k.status, '') NOT IN ({ended}))")
    # Each later link read by a scalar lookup by primary key, from the candidate's
    # own successor on (as joins, PostgreSQL scanned the runs table: it cannot
    # tell how few rows the walk yields; see child_waits in sql/queries.py).
    where.append(
        "(r.continued_as IS NULL OR NOT EXISTS (WITH RECURSIVE later(id) AS ("
        "SELECT r.continued_as UNION SELECT (SELECT n.continued_as FROM workflow_runs n "
        "WHERE n.id = later.id) FROM later WHERE later.id IS NOT NULL) "
        "SELECT 1 FROM later WHERE (SELECT 1 FROM workflow_runs e WHERE e.id = later.id "
        f"AND (COALESCE(e.status, '') NOT IN ({ended}) OR e.completed_at IS NULL "
        f"OR e.completed_at >= {p(n, 'timestamptz')})) = 1))")
    n += 1
    return (f"SELECT r.id, r.completed_at FROM workflow_runs r WHERE {' AND '.join(where)} "
            f"ORDER BY r.completed_at, r.id LIMIT {p(n)}{d.skip_locked if lock else ''}")


def prune_select_args(d: Dialect, command: Any, ws: str, env: str) -> tuple[Any, ...]:
    """The arguments of :func:`prune_select_sql` for a ``PruneRuns`` command."""
    args: tuple[Any, ...] = (ws, env, *d.many(command.statuses), d.ts(command.ended_before))
    if command.workflow is not None:
        args += (command.workflow,)
    if command.run_ids is not None:
        args += d.many([d.key(i, "run id") for i in command.run_ids])
    if command.cursor is not None:
        args += (d.ts(command.cursor[0]), d.key(command.cursor[1], "run id"))
    return (*args, d.ts(command.ended_before), int(command.limit))


@functools.lru_cache(maxsize=64)
def prune_delete_sql(d: Dialect, count: int) -> tuple[tuple[str, str], ...]:
    """``(table, statement)`` deleting the rows of ``count`` runs, the run rows
    last. Arguments: ``(*d.many(ids), now)`` for ``workflow_session_vars``
    (vars kept past ``now`` stay: they belong to their session until they
    expire), ``(*d.many(ids), ws, env)`` for ``workflow_runs``,
    ``d.many(ids)`` for the others."""
    ids = d.one_of("run_id", 1, count, "uuid")
    n = 1 + d.width(count)
    out = []
    for table in PRUNED_TABLES:
        sql = f"DELETE FROM {table} WHERE {ids}"
        if table == "workflow_session_vars":
            sql += f" AND (keep_until IS NULL OR keep_until <= {d.p(n, 'timestamptz')})"
        out.append((table, sql))
    out.append(("workflow_runs", f"DELETE FROM workflow_runs WHERE "
                f"{d.one_of('id', 1, count, 'uuid')} AND {d.key_tenant(n)}"))
    return tuple(out)
