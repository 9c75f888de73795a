-- Retention (issue #24): a prune selects ended runs of a workspace by the time
-- they ended, oldest first, and pages on (completed_at, id). Without this index
-- that is a scan of the workspace's runs per batch. Partial: only ended runs
-- (completed_at set) are in it, so an active run's writes never touch it; a
-- run's end adds one entry (measured in docs/performance.md).
CREATE INDEX IF NOT EXISTS idx_workflow_runs_ended
    ON workflow_runs (workspace_id, env, completed_at, id) WHERE completed_at IS NOT NULL;
