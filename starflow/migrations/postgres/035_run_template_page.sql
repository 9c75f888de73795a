-- The first page of runs of one workflow (list_runs(template_id=...),
-- list_runs_page(template_id=...), the UI's workflow filter), newest first:
-- one index range scan however many runs the workspace holds (issue #24).
-- Without it the newest-first walk of idx_workflow_runs_page filtered on
-- template_id, which reads more rows the rarer the workflow is among recent
-- runs (1.8x slower at 1,000,000 ended runs than at 10,000 on PostgreSQL).
-- Cost: one more index entry per run row written (insert, and each update
-- PostgreSQL cannot make HOT); docs/performance.md has the measured cost.
CREATE INDEX IF NOT EXISTS idx_workflow_runs_template_page
    ON workflow_runs (workspace_id, env, template_id, started_at DESC, id DESC);
