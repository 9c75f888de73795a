-- Schedules and flow control (#18).
--
-- starflow_schedules: one row per cron schedule. next_fire_at is the cursor
-- (the earliest tick not yet handled); due_at is when a maintenance loop must
-- look at the row again (the cursor, or sooner while a decided tick still has
-- to start or a buffered tick waits for the active run). revision grows with
-- every write: loops advance a schedule with a compare-and-set on it, so of
-- several racing loops exactly one decides each tick.
CREATE TABLE starflow_schedules (
    workspace_id       TEXT NOT NULL,
    env                TEXT NOT NULL,
    id                 TEXT NOT NULL,
    workflow           TEXT NOT NULL,
    workflow_version   INTEGER NOT NULL,
    definition_id      TEXT NULL REFERENCES workflow_definitions(id),
    input_json         TEXT NULL,
    cron               TEXT NOT NULL,
    timezone           TEXT NOT NULL,
    overlap            TEXT NOT NULL,
    catchup_seconds    REAL NOT NULL,
    pool               TEXT NULL,
    paused             INTEGER NOT NULL DEFAULT 0,
    next_fire_at       TEXT NULL,
    due_at             TEXT NULL,
    pending_tick       TEXT NULL,
    buffered_tick      TEXT NULL,
    last_tick          TEXT NULL,
    last_run_id        TEXT NULL,
    started            INTEGER NOT NULL DEFAULT 0,
    skipped_missed     INTEGER NOT NULL DEFAULT 0,
    skipped_overlap    INTEGER NOT NULL DEFAULT 0,
    revision           INTEGER NOT NULL DEFAULT 1,
    created_at         TEXT NOT NULL,
    updated_at         TEXT NOT NULL,
    PRIMARY KEY (workspace_id, env, id)
);
CREATE INDEX idx_starflow_schedules_due
    ON starflow_schedules (workspace_id, env, due_at) WHERE paused = 0;

-- Pool limits every worker of every host obeys (enforced in the claim).
CREATE TABLE starflow_pool_limits (
    workspace_id     TEXT NOT NULL,
    env              TEXT NOT NULL,
    pool             TEXT NOT NULL,
    concurrency      INTEGER NULL,
    rate_limit       INTEGER NULL,
    rate_period_ms   INTEGER NULL,
    key_concurrency  INTEGER NULL,
    updated_at       TEXT NOT NULL,
    PRIMARY KEY (workspace_id, env, pool)
);

-- Per-run flow-control options.
ALTER TABLE workflow_runs ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflow_runs ADD COLUMN concurrency_key TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN dedup_key TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN debounce_key TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN not_before TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN claimed_at TEXT NULL;

-- The claim takes the highest priority first, FIFO within one. (Not led by the
-- workspace: the SQLite claim keeps the planner off workspace-led indexes, and
-- searched like idx_workflow_runs_claim_pool, by claim_state, so the planner
-- takes this one, which also yields the claim's order.)
CREATE INDEX idx_workflow_runs_claim_priority
    ON workflow_runs (claim_state, priority DESC, started_at) WHERE claim_state = 'queued';
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
