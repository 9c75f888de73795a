-- Queued runs past their deadline, and paused parents whose child has ended (#17).
--
-- idx_workflow_runs_queued_deadline: the timer loop ends a queued run past its
-- @workflow(timeout=) / sf.options(timeout=) deadline without waiting for a
-- worker to claim it (due_run_deadlines, and next_deadline's earliest one).
-- Only queued runs with a deadline are in it, so other runs' writes never
-- touch it.
--
-- idx_workflow_waits_child: the stranded-parent pass walks the waits on a
-- child run (event '__starflow.child:<child id>') in run id order, one keyset
-- batch per statement, instead of reading the newest paused runs and each
-- one's child. Only child waits are in it.
CREATE INDEX IF NOT EXISTS idx_workflow_runs_queued_deadline
    ON workflow_runs (workspace_id, env, deadline_at)
    WHERE status = 'queued' AND deadline_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_workflow_waits_child
    ON workflow_waits (workspace_id, env, run_id)
    WHERE substr(event, 1, 17) = '__starflow.child:';
