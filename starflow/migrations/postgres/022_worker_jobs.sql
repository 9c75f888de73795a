-- Worker job table (ADR-047 §8): a @step(pool=...) call becomes a job that a
-- job worker of that pool claims with a lease, runs and completes; the run
-- waits durably on it. One job per (run, node): idempotency_key = run_id:node_id.
CREATE TABLE worker_jobs (
    id              uuid PRIMARY KEY,
    workspace_id    text NOT NULL DEFAULT 'celestial',
    env             text NOT NULL DEFAULT 'prod',
    run_id          uuid NOT NULL REFERENCES workflow_runs(id),
    node_id         text NOT NULL,
    pool            text NOT NULL,
    step_name       text NOT NULL,
    idempotency_key text NOT NULL,
    input_json      jsonb NULL,
    status          text NOT NULL DEFAULT 'queued',
    attempts        int NOT NULL DEFAULT 0,
    max_attempts    int NOT NULL DEFAULT 3,
    leased_by       text NULL,
    lease_until     timestamptz NULL,
    last_heartbeat  timestamptz NULL,
    result_json     jsonb NULL,
    error_json      jsonb NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    completed_at    timestamptz NULL,
    UNIQUE (workspace_id, env, idempotency_key)
);
CREATE INDEX idx_worker_jobs_claim
    ON worker_jobs (workspace_id, env, pool, status, created_at)
    WHERE status IN ('queued', 'claimed');
CREATE INDEX idx_worker_jobs_run ON worker_jobs (run_id);

ALTER TABLE worker_jobs ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON worker_jobs
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));
