-- Schedules and flow control (#18).
--
-- starflow_schedules: one row per cron schedule. next_fire_at is the cursor
-- (the earliest tick not yet handled); due_at is when a maintenance loop must
-- look at the row again (the cursor, or sooner while a decided tick still has
-- to start or a buffered tick waits for the active run). revision grows with
-- every write: loops advance a schedule with a compare-and-set on it, so of
-- several racing loops exactly one decides each tick.
CREATE TABLE starflow_schedules (
    workspace_id       text NOT NULL,
    env                text NOT NULL,
    id                 text NOT NULL,
    workflow           text NOT NULL,
    workflow_version   int NOT NULL,
    definition_id      uuid NULL REFERENCES workflow_definitions(id),
    input_json         jsonb NULL,
    cron               text NOT NULL,
    timezone           text NOT NULL,
    overlap            text NOT NULL,
    catchup_seconds    double precision NOT NULL,
    pool               text NULL,
    paused             boolean NOT NULL DEFAULT false,
    next_fire_at       timestamptz NULL,
    due_at             timestamptz NULL,
    pending_tick       timestamptz NULL,
    buffered_tick      timestamptz NULL,
    last_tick          timestamptz NULL,
    last_run_id        uuid NULL,
    started            bigint NOT NULL DEFAULT 0,
    skipped_missed     bigint NOT NULL DEFAULT 0,
    skipped_overlap    bigint NOT NULL DEFAULT 0,
    revision           bigint NOT NULL DEFAULT 1,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, env, id)
);
CREATE INDEX idx_starflow_schedules_due
    ON starflow_schedules (workspace_id, env, due_at) WHERE NOT paused;

ALTER TABLE starflow_schedules ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON starflow_schedules
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));

-- Pool limits every worker of every host obeys (enforced in the claim).
CREATE TABLE starflow_pool_limits (
    workspace_id     text NOT NULL,
    env              text NOT NULL,
    pool             text NOT NULL,
    concurrency      int NULL,
    rate_limit       int NULL,
    rate_period_ms   bigint NULL,
    key_concurrency  int NULL,
    updated_at       timestamptz NOT NULL,
    PRIMARY KEY (workspace_id, env, pool)
);

ALTER TABLE starflow_pool_limits ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON starflow_pool_limits
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));

-- Per-run flow-control options.
ALTER TABLE workflow_runs ADD COLUMN priority int NOT NULL DEFAULT 0;
ALTER TABLE workflow_runs ADD COLUMN concurrency_key text NULL;
ALTER TABLE workflow_runs ADD COLUMN dedup_key text NULL;
ALTER TABLE workflow_runs ADD COLUMN debounce_key text NULL;
ALTER TABLE workflow_runs ADD COLUMN not_before timestamptz NULL;
ALTER TABLE workflow_runs ADD COLUMN claimed_at timestamptz NULL;

-- The claim takes the highest priority first, FIFO within one.
CREATE INDEX idx_workflow_runs_claim_priority
    ON workflow_runs (workspace_id, env, priority DESC, started_at) WHERE claim_state = 'queued';
-- Runs of a pool executing now (global and per-key concurrency).
CREATE INDEX idx_workflow_runs_pool_active
    ON workflow_runs (workspace_id, env, runner_pool, concurrency_key)
    WHERE status = 'running' AND claim_state IN ('claimed', 'running');
-- Claims of a pool in the rate limit's window.
CREATE INDEX idx_workflow_runs_pool_claimed
    ON workflow_runs (workspace_id, env, runner_pool, claimed_at) WHERE claimed_at IS NOT NULL;
-- At most one active run per (pool, dedup key).
CREATE UNIQUE INDEX idx_workflow_runs_dedup
    ON workflow_runs (workspace_id, env, COALESCE(runner_pool, ''), dedup_key)
    WHERE dedup_key IS NOT NULL AND status IN ('queued', 'running', 'paused');
-- At most one pending (never claimed) debounced run per (pool, workflow, key).
CREATE UNIQUE INDEX idx_workflow_runs_debounce
    ON workflow_runs (workspace_id, env, COALESCE(runner_pool, ''), template_id, debounce_key)
    WHERE debounce_key IS NOT NULL AND claim_state = 'queued' AND claim_attempts = 0;

-- Role pins (025) on the new tenant tables: a pinned role sees only its workspace.
CREATE POLICY starflow_role_pin ON starflow_schedules AS RESTRICTIVE USING (
    workspace_id = COALESCE((SELECT p.workspace_id FROM starflow_role_workspaces p
                             WHERE p.role_name = current_user), workspace_id)
    AND env = COALESCE((SELECT p.env FROM starflow_role_workspaces p
                        WHERE p.role_name = current_user), env));
CREATE POLICY starflow_role_pin ON starflow_pool_limits AS RESTRICTIVE USING (
    workspace_id = COALESCE((SELECT p.workspace_id FROM starflow_role_workspaces p
                             WHERE p.role_name = current_user), workspace_id)
    AND env = COALESCE((SELECT p.env FROM starflow_role_workspaces p
                        WHERE p.role_name = current_user), env));
