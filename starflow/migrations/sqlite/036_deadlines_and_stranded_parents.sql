-- Queued runs past their deadline, and paused parents whose child has ended
-- (#17): see the PostgreSQL migration of the same number. (SQLite uses a
-- partial index only when the query repeats its WHERE terms: the queries do.)
CREATE INDEX IF NOT EXISTS idx_workflow_runs_queued_deadline
    ON workflow_runs (workspace_id, env, deadline_at)
    WHERE status = 'queued' AND deadline_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_workflow_waits_child
    ON workflow_waits (workspace_id, env, run_id)
    WHERE substr(event, 1, 17) = '__starflow.child:';
