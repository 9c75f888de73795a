-- Keyset pages of runs for `starflow ui` and list_runs_page (newest first, then
-- by id): the first page and each next page are one index range scan, with or
-- without a status filter, however many runs a workspace has accumulated.
CREATE INDEX idx_workflow_runs_page
    ON workflow_runs (workspace_id, env, started_at DESC, id DESC);
CREATE INDEX idx_workflow_runs_status_page
    ON workflow_runs (workspace_id, env, status, started_at DESC, id DESC);
