-- Delayed starts (#30): sf.start(..., start_at= / start_after=).
--
-- A run started for later is written at once with status 'queued' and
-- claim_state 'scheduled', its start time in not_before. It is outside the
-- partial claim indexes (claim_state = 'queued'), so however many runs wait
-- for their time, a claim never reads past them. Workers move the due ones to
-- claim_state 'queued' (queue_due_starts) and ask this index for the earliest
-- start still ahead, which is when they wake up next. Only scheduled runs are
-- in it, so other runs' writes never touch it.
CREATE INDEX IF NOT EXISTS idx_workflow_runs_scheduled
    ON workflow_runs (workspace_id, env, not_before)
    WHERE claim_state = 'scheduled';
