"""The statements of fair pools, key rate limits and kept slots (#30), for both dialects.

Written with numbered placeholders (``$n`` on PostgreSQL, ``?n`` on SQLite)
because most repeat an argument. The claim statements of a pool take the
same leading arguments, :func:`scope_args`: ``(ws, env, pool, now, names)``
(``names``: the workflows a worker claims, one array on PostgreSQL, one
argument each on SQLite); the statement's own arguments follow.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from .dialect import Dialect

__all__ = ["SLOT_KEPT", "PoolCounts", "PoolSql", "pool_counts", "pool_sql", "scope_args"]

#: A run that keeps its pool slot while not executing (``keep_slot``): claimed
#: once, paused now or queued again (``idx_workflow_runs_slot_kept``, 049).
SLOT_KEPT = "claimed_at IS NOT NULL AND status IN ('paused', 'queued')"


def scope_args(d: Dialect, ws: str, env: str, pool: str, now: Any,
               names: Sequence[str] | None) -> tuple[Any, ...]:
    """The leading arguments of every :class:`PoolSql` claim statement."""
    if d.name == "postgres":
        return (ws, env, pool, now, list(names) if names is not None else None)
    return (ws, env, pool, d.ts(now), *(names or ()))


class PoolSql:
    """The statements of one dialect for a worker claiming ``names`` workflows."""

    def __init__(self, d: Dialect, names: int | None, keep_slot: bool) -> None:
        pg = d.name == "postgres"

        def n(i: int) -> str:
            return f"${i}" if pg else f"?{i}"

        if pg:
            only = " AND ($5::text[] IS NULL OR template_id || '' = ANY($5::text[]))"
            nxt = 6
        else:
            only = (f" AND +template_id IN ({', '.join(n(5 + i) for i in range(names))})"
                    if names else "")
            nxt = 5 + (names or 0)
        #: The index of the first argument after :func:`scope_args`.
        self.next = nxt
        queued = (f"claim_state = 'queued' AND workspace_id = {n(1)} AND env = {n(2)} "
                  f"AND (not_before IS NULL OR not_before <= {n(4)}){only}")
        own = f"{queued} AND runner_pool = {n(3)}"
        # A kept slot's run is claimed apart (holders), never by the fair walk.
        walk = own + (" AND claimed_at IS NULL" if keep_slot else "")
        order = "ORDER BY priority DESC, started_at"
        # One key's runs: led by the (constant) key so that the planner walks
        # idx_workflow_runs_queued_key, not the pool-wide claim index.
        key_order = "ORDER BY concurrency_key, priority DESC, started_at"
        null = "CAST(NULL AS text)" if pg else "NULL"
        #: Every key with a claimable run of the pool and its first run's place
        #: (key NULL: the runs without a key): a walk of idx_workflow_runs_queued_key
        #: (049) that probes each key once, however many runs it has queued.
        self.heads = (
            "WITH RECURSIVE k(key) AS ("
            f"SELECT (SELECT min(concurrency_key) FROM workflow_runs WHERE {walk}) "
            "UNION ALL "
            f"SELECT (SELECT min(concurrency_key) FROM workflow_runs WHERE {walk} "
            "AND concurrency_key > k.key) FROM k WHERE k.key IS NOT NULL"
            "), h(key, id) AS ("
            f"SELECT key, (SELECT id FROM workflow_runs WHERE {walk} "
            f"AND concurrency_key = k.key {key_order} LIMIT 1) FROM k WHERE key IS NOT NULL "
            "UNION ALL "
            f"SELECT {null}, (SELECT id FROM workflow_runs WHERE {walk} "
            f"AND concurrency_key IS NULL {key_order} LIMIT 1)"
            ") SELECT h.key, r.priority, r.started_at FROM h JOIN workflow_runs r ON r.id = h.id")
        #: (+ key, limit): a key's first claimable runs.
        self.key_runs = (f"SELECT id, priority, started_at FROM workflow_runs WHERE {walk} "
                         f"AND concurrency_key = {n(nxt)} {key_order} LIMIT {n(nxt + 1)}")
        #: (+ limit): the first claimable runs without a key.
        self.null_runs = (f"SELECT id, priority, started_at FROM workflow_runs WHERE {walk} "
                          f"AND concurrency_key IS NULL {key_order} LIMIT {n(nxt)}")
        #: (+ keys[], limits[]) PostgreSQL: several keys' first runs at once.
        self.keys_runs = (
            "SELECT p.k, r.id, r.priority, r.started_at "
            f"FROM unnest({n(nxt)}::text[], {n(nxt + 1)}::int[]) AS p(k, m) "
            "CROSS JOIN LATERAL (SELECT id, priority, started_at FROM workflow_runs "
            f"WHERE {walk} AND concurrency_key = p.k {key_order} LIMIT p.m) r") if pg else ""
        #: (+ limit): runs queued for any pool, in claim order. (The pool argument
        #: is unused here; PostgreSQL must still be told its type.)
        self.any_pool = (f"SELECT id, priority, started_at FROM workflow_runs WHERE {queued} "
                         f"AND runner_pool IS NULL AND CAST({n(3)} AS text) IS NOT NULL "
                         f"{order} LIMIT {n(nxt)}")
        #: (+ limit): runs of the pool queued again that keep their slot.
        self.holders = (f"SELECT id, priority, started_at, concurrency_key FROM workflow_runs "
                        f"WHERE {own} AND {SLOT_KEPT} {order} LIMIT {n(nxt)}")


@functools.lru_cache(maxsize=64)
def pool_sql(d: Dialect, names: int | None, keep_slot: bool) -> PoolSql:
    """The cached :class:`PoolSql` of ``d`` (``names``: how many workflows the
    worker claims, None: all; PostgreSQL passes them as one array)."""
    return PoolSql(d, None if d.name == "postgres" else names, keep_slot)


class PoolCounts:
    """The count statements of the pool limits (#30), arguments after (ws, env, pool)."""

    def __init__(self, d: Dialect) -> None:
        pg = d.name == "postgres"

        def n(i: int) -> str:
            return f"${i}" if pg else f"?{i}"

        scope = f"workspace_id = {n(1)} AND env = {n(2)} AND runner_pool = {n(3)}"
        tscope = f"workspace_id = {n(1)} AND env = {n(2)} AND pool = {n(3)}"
        #: Runs of the pool keeping their slot while not executing.
        self.pool_kept = f"SELECT count(*) FROM workflow_runs WHERE {scope} AND {SLOT_KEPT}"
        #: Per key, runs keeping their slot while not executing.
        self.key_kept = (f"SELECT concurrency_key, count(*) FROM workflow_runs WHERE {scope} "
                         f"AND {SLOT_KEPT} AND concurrency_key IS NOT NULL "
                         "GROUP BY concurrency_key")
        #: (+ since): per key, the claims in the key rate window.
        self.key_window = (f"SELECT concurrency_key, count(*) FROM workflow_runs WHERE {scope} "
                           f"AND claimed_at > {n(4)} AND concurrency_key IS NOT NULL "
                           "GROUP BY concurrency_key")
        #: The pool's virtual time and the stored passes (one row per key; a row
        #: of NULLs when none is stored).
        self.fair_state = (
            "SELECT l.fair_vtime, k.key, k.pass FROM starflow_pool_limits l "
            "LEFT JOIN starflow_pool_keys k ON k.workspace_id = l.workspace_id "
            "AND k.env = l.env AND k.pool = l.pool "
            f"WHERE l.workspace_id = {n(1)} AND l.env = {n(2)} AND l.pool = {n(3)}")
        #: (+ key, pass)
        self.set_pass = (
            "INSERT INTO starflow_pool_keys (workspace_id, env, pool, key, pass) "
            f"VALUES ({n(1)}, {n(2)}, {n(3)}, {n(4)}, {n(5)}) "
            "ON CONFLICT (workspace_id, env, pool, key) DO UPDATE SET pass = excluded.pass")
        #: (+ vtime): move the virtual time and forget the keys it caught up with.
        self.set_vtime = f"UPDATE starflow_pool_limits SET fair_vtime = {n(4)} WHERE {tscope}"
        self.trim = f"DELETE FROM starflow_pool_keys WHERE {tscope} AND pass <= {n(4)}"
        #: Forget the pool's fairness state (fair turned off, or limits removed).
        self.clear = f"DELETE FROM starflow_pool_keys WHERE {tscope}"


@functools.lru_cache(maxsize=4)
def pool_counts(d: Dialect) -> PoolCounts:
    """The cached :class:`PoolCounts` of ``d``."""
    return PoolCounts(d)
