-- Child runs and deadlines (#17): see the PostgreSQL migration of the same number.
ALTER TABLE workflow_runs ADD COLUMN parent_run_id TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN detached INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflow_runs ADD COLUMN deadline_at TEXT NULL;
CREATE INDEX IF NOT EXISTS idx_workflow_runs_parent
    ON workflow_runs (parent_run_id, started_at) WHERE parent_run_id IS NOT NULL;
