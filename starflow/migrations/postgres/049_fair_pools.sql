-- Fair pools (#30): a rate limit per concurrency key, weighted round robin
-- across keys, and paused runs that keep their pool slot.
ALTER TABLE starflow_pool_limits ADD COLUMN key_rate_limit int NULL;
ALTER TABLE starflow_pool_limits ADD COLUMN key_rate_period_ms bigint NULL;
ALTER TABLE starflow_pool_limits ADD COLUMN fair boolean NOT NULL DEFAULT false;
ALTER TABLE starflow_pool_limits ADD COLUMN key_weights jsonb NULL;
ALTER TABLE starflow_pool_limits ADD COLUMN keep_slot boolean NOT NULL DEFAULT false;
-- The pool's virtual time: the service level of its least-served keys.
ALTER TABLE starflow_pool_limits ADD COLUMN fair_vtime double precision NOT NULL DEFAULT 0;

-- The weighted service of the keys served ahead of the pool's virtual time. A
-- key without a row stands at the virtual time; rows that fall behind it are
-- deleted by the claim, so the table holds only the keys served recently.
CREATE TABLE starflow_pool_keys (
    workspace_id  text NOT NULL,
    env           text NOT NULL,
    pool          text NOT NULL,
    key           text NOT NULL,
    pass          double precision NOT NULL,
    PRIMARY KEY (workspace_id, env, pool, key)
);
ALTER TABLE starflow_pool_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON starflow_pool_keys
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));
CREATE POLICY starflow_role_pin ON starflow_pool_keys AS RESTRICTIVE USING (
    workspace_id = COALESCE((SELECT p.workspace_id FROM starflow_role_workspaces p
                             WHERE p.role_name = current_user), workspace_id)
    AND env = COALESCE((SELECT p.env FROM starflow_role_workspaces p
                        WHERE p.role_name = current_user), env));

-- A fair claim walks a pool's queued runs key by key (one probe per key).
CREATE INDEX idx_workflow_runs_queued_key
    ON workflow_runs (workspace_id, env, runner_pool, concurrency_key, priority DESC, started_at)
    WHERE claim_state = 'queued';
-- Runs that keep their slot (keep_slot): claimed once, paused or queued again.
CREATE INDEX idx_workflow_runs_slot_kept
    ON workflow_runs (workspace_id, env, runner_pool, concurrency_key)
    WHERE claimed_at IS NOT NULL AND status IN ('paused', 'queued');
