-- Queue metrics (#30 item 9): per pool, the queued runs claimable now and the
-- oldest one's queued-since (starflow_queue_depth,
-- starflow_queue_oldest_age_seconds), read by every worker with metrics on,
-- once per interval. The read searches this partial index of queued runs by
-- workspace and env (the same index as PostgreSQL's, which INCLUDEs the times).
CREATE INDEX IF NOT EXISTS idx_workflow_runs_queue_stats
    ON workflow_runs (workspace_id, env, runner_pool, started_at, not_before, last_heartbeat)
    WHERE claim_state = 'queued';
