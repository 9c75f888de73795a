-- A paused pool (sf.pause_pool, #30): workers claim none of its queued runs
-- until sf.resume_pool; its running runs go on. Stored with the pool's limits
-- (a paused pool without limits has a row too), read by every limited claim.
ALTER TABLE starflow_pool_limits ADD COLUMN paused boolean NOT NULL DEFAULT false;
