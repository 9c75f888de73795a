-- Queue metrics (#30 item 9): per pool, the queued runs claimable now and the
-- oldest one's queued-since (starflow_queue_depth,
-- starflow_queue_oldest_age_seconds), read by every worker with metrics on,
-- once per interval. A third of the runs may be queued in a backlog; this
-- index answers the read from its own pages (an index-only scan where the
-- visibility map allows) instead of reading every queued row of the table.
CREATE INDEX IF NOT EXISTS idx_workflow_runs_queue_stats
    ON workflow_runs (workspace_id, env, runner_pool)
    INCLUDE (started_at, not_before, last_heartbeat)
    WHERE claim_state = 'queued';
