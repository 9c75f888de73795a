-- Pause by an operator (#30). A paused pool (sf.pause_pool): workers claim none of its queued runs
-- until sf.resume_pool; its running runs go on. Stored with the pool's limits
-- (a paused pool without limits has a row too), read by every limited claim.
ALTER TABLE starflow_pool_limits ADD COLUMN paused boolean NOT NULL DEFAULT false;

-- Runs paused by an operator (sf.pause, #30: claim_state 'held'): few at any
-- time. The timer loop's reads pass over their waits (a held run's timer does
-- not fire) by probing this small index, not every run of the table.
CREATE INDEX idx_workflow_runs_held ON workflow_runs (id) WHERE claim_state = 'held';
