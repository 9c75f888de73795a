-- Worker job table (ADR-047 §8): a @step(pool=...) call becomes a job that a
-- job worker of that pool claims with a lease, runs and completes; the run
-- waits durably on it. One job per (run, node): idempotency_key = run_id:node_id.
CREATE TABLE worker_jobs (
    id              TEXT PRIMARY KEY,
    workspace_id    TEXT NOT NULL DEFAULT 'celestial',
    env             TEXT NOT NULL DEFAULT 'prod',
    run_id          TEXT NOT NULL REFERENCES workflow_runs(id),
    node_id         TEXT NOT NULL,
    pool            TEXT NOT NULL,
    step_name       TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    input_json      TEXT NULL,
    status          TEXT NOT NULL DEFAULT 'queued',
    attempts        INTEGER NOT NULL DEFAULT 0,
    max_attempts    INTEGER NOT NULL DEFAULT 3,
    leased_by       TEXT NULL,
    lease_until     TEXT NULL,
    last_heartbeat  TEXT NULL,
    result_json     TEXT NULL,
    error_json      TEXT NULL,
    created_at      TEXT NOT NULL,
    completed_at    TEXT NULL,
    UNIQUE (workspace_id, env, idempotency_key)
);
CREATE INDEX idx_worker_jobs_claim
    ON worker_jobs (workspace_id, env, pool, status, created_at)
    WHERE status IN ('queued', 'claimed');
CREATE INDEX idx_worker_jobs_run ON worker_jobs (run_id);
