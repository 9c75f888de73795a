-- Fair pools (#30): a rate limit per concurrency key, weighted round robin
-- across keys, and paused runs that keep their pool slot.
ALTER TABLE starflow_pool_limits ADD COLUMN key_rate_limit INTEGER NULL;
ALTER TABLE starflow_pool_limits ADD COLUMN key_rate_period_ms INTEGER NULL;
ALTER TABLE starflow_pool_limits ADD COLUMN fair INTEGER NOT NULL DEFAULT 0;
ALTER TABLE starflow_pool_limits ADD COLUMN key_weights TEXT NULL;
ALTER TABLE starflow_pool_limits ADD COLUMN keep_slot INTEGER NOT NULL DEFAULT 0;
-- The pool's virtual time: the service level of its least-served keys.
ALTER TABLE starflow_pool_limits ADD COLUMN fair_vtime REAL NOT NULL DEFAULT 0;

-- The weighted service of the keys served ahead of the pool's virtual time. A
-- key without a row stands at the virtual time; rows that fall behind it are
-- deleted by the claim, so the table holds only the keys served recently.
CREATE TABLE starflow_pool_keys (
    workspace_id  TEXT NOT NULL,
    env           TEXT NOT NULL,
    pool          TEXT NOT NULL,
    key           TEXT NOT NULL,
    pass          REAL NOT NULL,
    PRIMARY KEY (workspace_id, env, pool, key)
);

-- A fair claim walks a pool's queued runs key by key (one probe per key).
CREATE INDEX idx_workflow_runs_queued_key
    ON workflow_runs (workspace_id, env, runner_pool, concurrency_key, priority DESC, started_at)
    WHERE claim_state = 'queued';
-- Runs that keep their slot (keep_slot): claimed once, paused or queued again.
CREATE INDEX idx_workflow_runs_slot_kept
    ON workflow_runs (workspace_id, env, runner_pool, concurrency_key)
    WHERE claimed_at IS NOT NULL AND status IN ('paused', 'queued');
