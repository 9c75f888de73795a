-- Child runs and deadlines (#17). A run started by starflow.start_child (or by
-- awaiting a @workflow inside a workflow) names its parent; a detached child
-- is not cancelled with its parent. sf.list_runs(parent_run_id=...), the
-- cancel cascade and `starflow runs show` find a run's children through the
-- partial index (only child runs are in it, so other runs' writes never touch
-- it). deadline_at is a run's @workflow(timeout=) / sf.options(timeout=)
-- deadline: its start plus the timeout, on the runtime's clock.
ALTER TABLE workflow_runs ADD COLUMN parent_run_id uuid NULL;
ALTER TABLE workflow_runs ADD COLUMN detached boolean NOT NULL DEFAULT false;
ALTER TABLE workflow_runs ADD COLUMN deadline_at timestamptz NULL;
CREATE INDEX IF NOT EXISTS idx_workflow_runs_parent
    ON workflow_runs (parent_run_id, started_at) WHERE parent_run_id IS NOT NULL;
