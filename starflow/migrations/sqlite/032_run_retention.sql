-- Retention (issue #24): a prune selects ended runs of a workspace by the time
-- they ended, oldest first, and pages on (completed_at, id). Without this index
-- that is a scan of the workspace's runs per batch. Partial: only ended runs
-- (completed_at set) are in it, so an active run's writes never touch it; a
-- run's end adds one entry.
CREATE INDEX IF NOT EXISTS idx_workflow_runs_ended
    ON workflow_runs (workspace_id, env, completed_at, id) WHERE completed_at IS NOT NULL;

-- A prune deletes a batch's outbox rows by run id; without an index that is a
-- scan of mirror_outbox per batch. Costs one index entry per outbox row (rows
-- live until applied and then outbox_retention, 1 h by default).
CREATE INDEX IF NOT EXISTS idx_mirror_outbox_run ON mirror_outbox (run_id)
    WHERE run_id IS NOT NULL;
