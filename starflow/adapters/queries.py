"""The data-access statements of one dialect, written once for both (:class:`Queries`).

Reads and the writes that are not :class:`~starflow.adapters.units.Op` values:
each attribute of :class:`Queries` is one statement, its arguments documented
in the order written. :data:`SQLITE_QUERIES` and :data:`POSTGRES_QUERIES` are
the two instances the adapters use.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from ..records import QueueStats
from ._sql import (
    ACTIVE_RUN,
    DEFINITION_COLUMNS,
    EVENT_COLUMNS,
    EVENT_VALUE_COLUMNS,
    JOB_COLUMNS,
    LIMIT_COLUMNS,
    OUTBOX_COLUMNS,
    RUN_COLUMNS,
    SCHEDULE_INSERT,
    SCHEDULE_SELECT,
    SCHEDULE_UPDATABLE,
    SIGNAL_COLUMNS,
    STREAM_ITEM_COLUMNS,
    WAIT_COLUMNS,
    claimable,
)
from .dialect import POSTGRES, SQLITE, Dialect

__all__ = ["CHILD_WAIT", "POSTGRES_QUERIES", "QUEUED_DEADLINE", "SCHEDULED", "SQLITE_QUERIES",
           "Queries", "queue_stats_of"]

#: The WHERE terms of ``idx_workflow_runs_queued_deadline`` (migration 036),
#: repeated as written (SQLite uses a partial index only then).
QUEUED_DEADLINE = "status = 'queued' AND deadline_at IS NOT NULL"
#: The WHERE term of ``idx_workflow_runs_scheduled`` (migration 042): runs started
#: for later whose time has not come yet (#30).
SCHEDULED = "claim_state = 'scheduled'"
#: The WHERE term of ``idx_workflow_waits_child`` (migration 036): a wait on a
#: child run (event ``__starflow.child:<child run id>``, see starflow.engine.child_nodes).
CHILD_WAIT = "substr(w.event, 1, 17) = '__starflow.child:'"
#: A wait of a run not paused by an operator (``Starflow.pause``): a held run's
#: timers neither fire nor count as the next deadline until it is resumed.
NOT_HELD = ("NOT EXISTS (SELECT 1 FROM workflow_runs h WHERE h.id = workflow_waits.run_id "
            "AND h.claim_state = 'held')")


class Queries:
    """The data-access statements of one dialect (arguments in the order written)."""

    def __init__(self, d: Dialect) -> None:
        p, kt, t = d.p, d.key_tenant, d.tenant
        self.d = d
        #: (run_id, ws, env)
        self.get_run = f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE id = {p(1)} AND {kt(2)}"
        #: (run_id, ws, env, after_id)
        self.list_events = (
            f"SELECT {', '.join('e.' + c for c in EVENT_COLUMNS.split(', '))} "
            "FROM workflow_run_events e JOIN workflow_runs r ON r.id = e.run_id "
            f"WHERE e.run_id = {p(1)} AND {kt(2, 'r.')} AND e.id > {p(4)} ORDER BY e.id")
        #: (ws, env, limit): the ``limit`` newest queued runs, each with the time of its
        #: newest event (one index probe of idx_workflow_run_events_run per run).
        self.queued_runs = (
            f"SELECT {RUN_COLUMNS}, (SELECT e.created_at FROM workflow_run_events e "
            "WHERE e.run_id = r.id ORDER BY e.id DESC LIMIT 1) "
            f"FROM (SELECT {RUN_COLUMNS} FROM workflow_runs WHERE {t(1)} "
            f"AND status = 'queued' ORDER BY started_at DESC, id DESC LIMIT {p(3)}) r "
            "ORDER BY started_at DESC, id DESC")
        #: (run_id, ws, env)
        self.list_waits = (f"SELECT {WAIT_COLUMNS} FROM workflow_waits WHERE run_id = {p(1)} "
                           f"AND {kt(2)} ORDER BY created_at")
        #: (ws, env, now, limit)
        self.due_waits = (f"SELECT {WAIT_COLUMNS} FROM workflow_waits WHERE {t(1)} "
                          f"AND deadline IS NOT NULL AND deadline <= {p(3)} AND {NOT_HELD} "
                          f"ORDER BY deadline LIMIT {p(4)}")
        #: (ws, env, ws, env): the earliest wait deadline or queued run's deadline
        #: (the queued part as ORDER BY … LIMIT 1: one entry of its partial index).
        self.next_deadline = (
            "SELECT min(d) FROM ("
            # The earliest wait of a run not held, as ORDER BY … LIMIT 1: a walk of
            # idx_workflow_waits_deadline that stops at the first one (a held run's
            # waits are probed by the run's primary key and passed over).
            f"SELECT d FROM (SELECT deadline AS d FROM workflow_waits WHERE {t(1)} "
            f"AND deadline IS NOT NULL AND {NOT_HELD} ORDER BY deadline LIMIT 1) nw "
            "UNION ALL "
            f"SELECT d FROM (SELECT deadline_at AS d FROM workflow_runs WHERE {t(3)} "
            f"AND {QUEUED_DEADLINE} ORDER BY deadline_at LIMIT 1) q) x")
        #: (ws, env, now, limit): queued runs past their deadline, earliest first
        #: (``idx_workflow_runs_queued_deadline``, migration 036).
        self.due_run_deadlines = (
            f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE {t(1)} AND {QUEUED_DEADLINE} "
            f"AND deadline_at <= {p(3)} ORDER BY deadline_at LIMIT {p(4)}")
        #: (ws, env, after, limit, ws, env, ws, env, ws, env): one keyset batch of
        #: the runs paused on a child (``idx_workflow_waits_child``, migration
        #: 036), each with the run that ends the chain of the child it waits on
        #: (``continued_as`` followed) if that run has ended: (parent id, awaited
        #: child id, ended run id or NULL). Each run of a chain is read by a scalar
        #: lookup by primary key: as joins, PostgreSQL scanned the runs table (it
        #: cannot tell how few rows the recursive part yields).
        child_id = "CAST(substr(w.event, 18) AS uuid)" if d.uuid_ids else "substr(w.event, 18)"

        def link(n: int) -> str:
            return (f"(SELECT r.continued_as FROM workflow_runs r WHERE r.id = c.run_id "
                    f"AND {kt(n, 'r.')})")

        self.child_waits = (
            "WITH RECURSIVE batch(parent_id, child_id) AS ("
            f"SELECT w.run_id, {child_id} FROM workflow_waits w WHERE {t(1, 'w.')} "
            f"AND {CHILD_WAIT} AND w.run_id > {p(3, 'uuid' if d.uuid_ids else '')} "
            f"ORDER BY w.run_id LIMIT {p(4)}), "
            "chain(parent_id, run_id) AS (SELECT parent_id, child_id FROM batch UNION ALL "
            f"SELECT c.parent_id, {link(5)} FROM chain c WHERE {link(7)} IS NOT NULL) "
            "SELECT b.parent_id, b.child_id, s.run_id FROM batch b LEFT JOIN ("
            "SELECT c.parent_id, c.run_id FROM chain c WHERE (SELECT 1 FROM workflow_runs e "
            f"WHERE e.id = c.run_id AND {kt(9, 'e.')} AND e.continued_as IS NULL "
            "AND e.status IN ('success', 'error', 'cancelled')) = 1) s "
            "ON s.parent_id = b.parent_id ORDER BY b.parent_id")
        #: (run_id, event, ws, env)
        self.find_signal = (f"SELECT {SIGNAL_COLUMNS} FROM workflow_signals WHERE "
                            f"run_id = {p(1)} AND event = {p(2)} AND {kt(3)} "
                            "ORDER BY id LIMIT 1")
        #: (run_id, ws, env, key)
        self.get_event_value = (f"SELECT {EVENT_VALUE_COLUMNS} FROM workflow_event_values "
                                f"WHERE run_id = {p(1)} AND {kt(2)} AND key = {p(4)}")
        #: (run_id, ws, env)
        self.get_run_attributes = ("SELECT key, value FROM workflow_run_attributes "
                                   f"WHERE run_id = {p(1)} AND {kt(2)} ORDER BY key")
        #: (run_id, ws, env)
        self.list_event_values = (f"SELECT {EVENT_VALUE_COLUMNS} FROM workflow_event_values "
                                  f"WHERE run_id = {p(1)} AND {kt(2)} ORDER BY key")
        #: (run_id, ws, env, key, after_seq, after_seq, after_sub, limit)
        self.read_stream = (f"SELECT {STREAM_ITEM_COLUMNS} FROM workflow_stream_items "
                            f"WHERE run_id = {p(1)} AND {kt(2)} AND key = {p(4)} "
                            f"AND (seq > {p(5)} OR (seq = {p(6)} AND sub > {p(7)})) "
                            f"ORDER BY seq, sub LIMIT {p(8)}")
        #: (run_id, ws, env)
        self.list_stream_items = (f"SELECT {STREAM_ITEM_COLUMNS} FROM workflow_stream_items "
                                  f"WHERE run_id = {p(1)} AND {kt(2)} ORDER BY key, seq, sub")
        #: (ws, env, session_id, key)
        self.session_get = ("SELECT value_json, keep_until FROM workflow_session_vars "
                            f"WHERE {t(1)} AND session_id = {p(3)} AND key = {p(4)}")
        #: (definition_id, ws, env)
        self.get_definition = (f"SELECT {DEFINITION_COLUMNS} FROM workflow_definitions "
                               f"WHERE id = {p(1)} AND {kt(2)}")
        #: (id, ws, env, name, version, code_hash, now)
        self.insert_definition = (
            "INSERT INTO workflow_definitions (id, workspace_id, env, name, version, "
            f"code_hash, created_at) VALUES ({', '.join(p(i) for i in range(1, 8))}) "
            "ON CONFLICT (workspace_id, env, name, version) DO NOTHING")
        #: (ws, env, name, version)
        self.definition_id = ("SELECT id FROM workflow_definitions WHERE "
                              f"{t(1)} AND name = {p(3)} AND version = {p(4)}")
        #: (ws, env, now)
        self.expire_session_vars = ("DELETE FROM workflow_session_vars WHERE "
                                    f"{t(1)} AND keep_until IS NOT NULL "
                                    f"AND keep_until <= {p(3)}")
        #: (ws, env, key_id)
        self.secret = f"SELECT secret FROM starflow_keys WHERE {t(1)} AND key_id = {p(3)}"
        #: (ws, env, key_id, secret, now)
        self.insert_secret = ("INSERT INTO starflow_keys (workspace_id, env, key_id, secret, "
                              f"created_at) VALUES ({', '.join(p(i) for i in range(1, 6))}) "
                              "ON CONFLICT DO NOTHING")
        #: (worker_id, lease_until, now, ws, env, pool, now, limit)
        self.claim_jobs = (
            f"UPDATE worker_jobs SET status = 'claimed', attempts = attempts + 1, "
            f"leased_by = {p(1)}, lease_until = {p(2)}, last_heartbeat = {p(3)} WHERE id IN ("
            f"  SELECT id FROM worker_jobs WHERE {t(4)} AND pool = {p(6)}"
            f"  AND (status = 'queued' OR (status = 'claimed' AND lease_until < {p(7)}))"
            f"  ORDER BY created_at, id LIMIT {p(8)}{d.skip_locked}"
            f") RETURNING {JOB_COLUMNS}")
        #: (lease_until, now, job_id, ws, env, worker_id)
        self.heartbeat_job = (
            f"UPDATE worker_jobs SET lease_until = {p(1)}, last_heartbeat = {p(2)} "
            f"WHERE id = {p(3)} AND {kt(4)} AND status = 'claimed' AND leased_by = {p(6)}")
        #: (job_id, ws, env)
        self.get_job = f"SELECT {JOB_COLUMNS} FROM worker_jobs WHERE id = {p(1)} AND {kt(2)}"
        #: (ws, env, limit)
        self.pending_outbox = (f"SELECT {OUTBOX_COLUMNS} FROM mirror_outbox WHERE {t(1)} "
                               f"AND applied_at IS NULL ORDER BY id LIMIT {p(3)}")
        #: (ws, env, applied_before)
        self.prune_outbox = ("DELETE FROM mirror_outbox WHERE "
                             f"{t(1)} AND applied_at IS NOT NULL AND applied_at < {p(3)}")

        # -- schedules (#18) ---------------------------------------------------
        sched = f"SELECT {SCHEDULE_SELECT} FROM starflow_schedules WHERE {t(1)}"
        #: (ws, env, id)
        self.get_schedule = f"{sched} AND id = {p(3)}"
        #: (ws, env)
        self.list_schedules = f"{sched} ORDER BY id"
        #: (ws, env, now, limit)
        self.due_schedules = (f"{sched} AND {d.unset('paused')} AND due_at <= {p(3)} "
                              f"ORDER BY due_at LIMIT {p(4)}")
        #: (ws, env). ORDER BY … LIMIT 1, not min(): one index entry, whatever the
        #: planner's statistics (PostgreSQL answered min() by a scan of every schedule).
        self.next_schedule_due = ("SELECT due_at FROM starflow_schedules WHERE "
                                  f"{t(1)} AND {d.unset('paused')} AND due_at IS NOT NULL "
                                  "ORDER BY due_at LIMIT 1")
        #: (ws, env, id)
        self.delete_schedule = f"DELETE FROM starflow_schedules WHERE {t(1)} AND id = {p(3)}"
        #: (ws, env, *schedule_insert_args, created_at, updated_at)
        cols = ("workspace_id", "env", *SCHEDULE_INSERT, "created_at", "updated_at")
        self.upsert_schedule = (
            f"INSERT INTO starflow_schedules ({', '.join(cols)}) "
            f"VALUES ({', '.join(p(i) for i in range(1, len(cols) + 1))}) "
            f"ON CONFLICT (workspace_id, env, id) DO UPDATE SET {_schedule_upsert_set()} "
            f"RETURNING {SCHEDULE_SELECT}")

        # -- pool limits and flow control (#18) --------------------------------
        #: (ws, env, pool)
        self.get_pool_limits = (f"SELECT {LIMIT_COLUMNS} FROM starflow_pool_limits "
                                f"WHERE {t(1)} AND pool = {p(3)}")
        #: (ws, env)
        self.list_pool_limits = (f"SELECT {LIMIT_COLUMNS} FROM starflow_pool_limits "
                                 f"WHERE {t(1)}")
        #: (ws, env, pool, concurrency, rate_limit, rate_period_ms, key_concurrency,
        #: key_rate_limit, key_rate_period_ms, fair, key_weights, keep_slot, now)
        self.set_pool_limits = (
            "INSERT INTO starflow_pool_limits (workspace_id, env, pool, concurrency, "
            "rate_limit, rate_period_ms, key_concurrency, key_rate_limit, key_rate_period_ms, "
            "fair, key_weights, keep_slot, updated_at) "
            f"VALUES ({', '.join(p(i) for i in range(1, 14))}) "
            "ON CONFLICT (workspace_id, env, pool) DO UPDATE SET "
            "concurrency = excluded.concurrency, rate_limit = excluded.rate_limit, "
            "rate_period_ms = excluded.rate_period_ms, "
            "key_concurrency = excluded.key_concurrency, "
            "key_rate_limit = excluded.key_rate_limit, "
            "key_rate_period_ms = excluded.key_rate_period_ms, fair = excluded.fair, "
            "key_weights = excluded.key_weights, keep_slot = excluded.keep_slot, "
            "updated_at = excluded.updated_at")
        #: (ws, env, pool, paused, now): pause or resume a pool, its limits kept.
        self.set_pool_paused = (
            "INSERT INTO starflow_pool_limits (workspace_id, env, pool, paused, updated_at) "
            f"VALUES ({', '.join(p(i) for i in range(1, 6))}) "
            "ON CONFLICT (workspace_id, env, pool) DO UPDATE SET "
            "paused = excluded.paused, updated_at = excluded.updated_at")
        #: (ws, env, pool): drop the pool's row once it has no limit and is not paused.
        self.delete_pool_limits = (f"DELETE FROM starflow_pool_limits WHERE {t(1)} "
                                   f"AND pool = {p(3)} AND concurrency IS NULL "
                                   "AND rate_limit IS NULL AND key_concurrency IS NULL "
                                   "AND key_rate_limit IS NULL AND NOT fair AND NOT keep_slot "
                                   "AND NOT paused")
        #: (ws, env): per pool, runs queued and runs active.
        self.pool_counts = (
            "SELECT runner_pool, "
            "sum(CASE WHEN claim_state = 'queued' THEN 1 ELSE 0 END), "
            f"sum(CASE WHEN {ACTIVE_RUN} THEN 1 ELSE 0 END) "
            f"FROM workflow_runs WHERE {t(1)} AND runner_pool IS NOT NULL "
            f"AND (claim_state = 'queued' OR ({ACTIVE_RUN})) GROUP BY runner_pool")
        # Per pool, one statement (the queue metrics): 'q' rows count the runs
        # claimable now and their oldest "queued since" (idx_workflow_runs_claim_priority,
        # 027), 'r' rows the runs executing (idx_workflow_runs_pool_active, 027).
        since = ("greatest(started_at, not_before, last_heartbeat)" if d.name == "postgres"
                 else "max(started_at, COALESCE(not_before, started_at), "
                      "COALESCE(last_heartbeat, started_at))")
        #: (ws, env, now, ws, env)
        self.queue_stats = (
            f"SELECT runner_pool, 'q', count(*), min({since}) FROM workflow_runs "
            f"WHERE {t(1)} AND claim_state = 'queued' AND {claimable(d, 3)} "
            "GROUP BY runner_pool UNION ALL "
            f"SELECT runner_pool, 'r', count(*), NULL FROM workflow_runs "
            f"WHERE {t(4)} AND {ACTIVE_RUN} GROUP BY runner_pool")
        #: (ws, env, pool)
        self.pool_active = (f"SELECT count(*) FROM workflow_runs WHERE {t(1)} "
                            f"AND runner_pool = {p(3)} AND {ACTIVE_RUN}")
        #: (ws, env, pool): active runs per concurrency key.
        self.key_active = (
            f"SELECT concurrency_key, count(*) FROM workflow_runs WHERE {t(1)} "
            f"AND runner_pool = {p(3)} AND {ACTIVE_RUN} AND concurrency_key IS NOT NULL "
            "GROUP BY concurrency_key")
        #: (ws, env, pool, since): the pool's claims in the rate window.
        self.pool_window = (f"SELECT count(*) FROM workflow_runs WHERE {t(1)} "
                            f"AND runner_pool = {p(3)} AND claimed_at > {p(4)}")
        #: (ws, env, pool or '', dedup_key)
        self.find_active_dedup = (
            f"SELECT id FROM workflow_runs WHERE {t(1)} "
            f"AND COALESCE(runner_pool, '') = {p(3)} AND dedup_key = {p(4)} "
            "AND status IN ('queued', 'running', 'paused')")
        #: (input, not_before, ws, env, pool or '', template_id, debounce_key)
        self.rearm_debounced = (
            f"UPDATE workflow_runs SET input_json = {p(1)}, not_before = {p(2)} "
            f"WHERE {t(3)} AND COALESCE(runner_pool, '') = {p(5)} "
            f"AND template_id = {p(6)} AND debounce_key = {p(7)} AND claim_state = 'queued' "
            "AND claim_attempts = 0 RETURNING id")
        # Delayed starts (#30), both from idx_workflow_runs_scheduled (migration 042).
        #: (ws, env, now): the earliest start still ahead of ``now``.
        self.next_start = (f"SELECT min(not_before) FROM workflow_runs WHERE {t(1)} "
                           f"AND {SCHEDULED} AND not_before > {p(3, 'timestamptz')}")
        #: (ws, env, now): queue the runs whose start time came.
        self.queue_due_starts = (
            f"UPDATE workflow_runs SET claim_state = 'queued' WHERE {t(1)} AND {SCHEDULED} "
            f"AND not_before <= {p(3, 'timestamptz')} RETURNING id")

    def list_runs(self, status: bool, template_id: bool, since: bool,
                  attributes: int = 0, parent: bool = False) -> str:
        """Arguments: (ws, env, [status], [template_id], [since], [parent_run_id],
        ``attributes`` x (ws, env, key, value), limit)."""
        return _list_runs_sql(self.d, status, template_id, since, attributes, parent)

    def list_jobs(self, run_id: bool, status: bool) -> str:
        """Arguments: (ws, env, [run_id], [status], limit)."""
        return _list_jobs_sql(self.d, run_id, status)

    def mark_outbox_applied(self, count: int) -> str:
        """Arguments: (now, *d.many(ids), ws, env)."""
        return _mark_outbox_sql(self.d, count)

    def update_schedule(self, columns: tuple[str, ...]) -> str:
        """Compare-and-set ``columns`` (of :data:`SCHEDULE_UPDATABLE`).

        Arguments: (*values, now, ws, env, id, revision).
        """
        bad = [c for c in columns if c not in SCHEDULE_UPDATABLE]
        if bad:
            raise ValueError(f"update_schedule: not updatable: {sorted(bad)}")
        return _update_schedule_sql(self.d, columns)


def _schedule_upsert_set() -> str:
    """The ``DO UPDATE SET`` of a schedule upsert.

    The cursor survives an update that keeps the cron and the zone (ticks
    missed while the process was down still catch up); a decided tick keeps
    its ``due_at`` so it still starts. ``paused`` and the counters are kept.
    """
    t = "starflow_schedules"
    same = f"{t}.cron = excluded.cron AND {t}.timezone = excluded.timezone"
    return (
        "workflow = excluded.workflow, workflow_version = excluded.workflow_version, "
        "definition_id = excluded.definition_id, input_json = excluded.input_json, "
        "overlap = excluded.overlap, catchup_seconds = excluded.catchup_seconds, "
        "pool = excluded.pool, "
        f"next_fire_at = CASE WHEN {same} THEN {t}.next_fire_at "
        "ELSE excluded.next_fire_at END, "
        f"due_at = CASE WHEN ({same}) OR {t}.pending_tick IS NOT NULL THEN {t}.due_at "
        "ELSE excluded.due_at END, "
        "cron = excluded.cron, timezone = excluded.timezone, "
        f"revision = {t}.revision + 1, updated_at = excluded.updated_at"
    )


@functools.lru_cache(maxsize=128)
def _update_schedule_sql(d: Dialect, columns: tuple[str, ...]) -> str:
    sets = "".join(f"{c} = {d.p(i)}, " for i, c in enumerate(columns, start=1))
    n = len(columns) + 1
    return (f"UPDATE starflow_schedules SET {sets}revision = revision + 1, "
            f"updated_at = {d.p(n)} WHERE {d.tenant(n + 1)} AND id = {d.p(n + 3)} "
            f"AND revision = {d.p(n + 4)}")


@functools.cache
def _list_runs_sql(d: Dialect, status: bool, template_id: bool, since: bool,
                   attributes: int = 0, parent: bool = False) -> str:
    where = [d.tenant(1)]
    n = 3
    for clause, present, cast in (("status = ", status, ""),
                                  ("template_id = ", template_id, ""),
                                  ("started_at >= ", since, ""),
                                  # (a child's run ids: idx_workflow_runs_parent)
                                  ("parent_run_id = ", parent, "uuid")):
        if present:
            where.append(f"{clause}{d.p(n, cast)}")
            n += 1
    for _ in range(attributes):
        # One lookup per attribute on idx_workflow_run_attributes_lookup.
        where.append(f"id IN (SELECT run_id FROM workflow_run_attributes WHERE "
                     f"{d.tenant(n)} AND key = {d.p(n + 2)} AND value = {d.p(n + 3)})")
        n += 4
    # The order of the keyset-page indexes (026, 035): unfiltered, by status or
    # by workflow, the first page is one index range scan, with no sort.
    return (f"SELECT {RUN_COLUMNS} FROM workflow_runs WHERE {' AND '.join(where)} "
            f"ORDER BY started_at DESC, id DESC LIMIT {d.p(n)}")


@functools.cache
def _list_jobs_sql(d: Dialect, run_id: bool, status: bool) -> str:
    where = [d.tenant(1)]
    n = 3
    for clause, present in (("run_id = ", run_id), ("status = ", status)):
        if present:
            where.append(f"{clause}{d.p(n)}")
            n += 1
    return (f"SELECT {JOB_COLUMNS} FROM worker_jobs WHERE {' AND '.join(where)} "
            f"ORDER BY created_at, id LIMIT {d.p(n)}")


@functools.lru_cache(maxsize=64)
def _mark_outbox_sql(d: Dialect, count: int) -> str:
    n = 2 + d.width(count)
    return (f"UPDATE mirror_outbox SET applied_at = {d.p(1)} WHERE "
            f"{d.one_of('id', 2, count, 'bigint')} AND {d.tenant(n)} AND applied_at IS NULL")


SQLITE_QUERIES = Queries(SQLITE)
POSTGRES_QUERIES = Queries(POSTGRES)


def queue_stats_of(rows: Iterable[Sequence[Any]], d: Dialect) -> list[QueueStats]:
    """Fold the rows of ``Queries.queue_stats`` into one :class:`QueueStats` per pool
    (ordered by pool, no pool first)."""
    queued: dict[str | None, tuple[int, datetime | None]] = {}
    running: dict[str | None, int] = {}
    for pool, kind, count, oldest in rows:
        if kind == "q":
            queued[pool] = (int(count), d.ts_out(oldest))
        else:
            running[pool] = int(count)
    return [QueueStats(pool=pool, queued=queued.get(pool, (0, None))[0],
                       oldest_queued_at=queued.get(pool, (0, None))[1],
                       running=running.get(pool, 0))
            for pool in sorted(set(queued) | set(running), key=lambda p: (p is not None, p))]
