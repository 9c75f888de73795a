-- Tenant scope (#224).
ALTER TABLE workflow_runs ADD COLUMN workspace_id text NOT NULL DEFAULT 'celestial';
ALTER TABLE workflow_runs ADD COLUMN env text NOT NULL DEFAULT 'prod';
CREATE INDEX idx_workflow_runs_workspace_started
    ON workflow_runs (workspace_id, env, started_at DESC);
