-- Lease columns + heartbeat (#240), claim state machine (ADR-047 §3).
ALTER TABLE workflow_runs ADD COLUMN claim_state TEXT NOT NULL DEFAULT 'running';
ALTER TABLE workflow_runs ADD COLUMN runner_pool TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN leased_by TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN lease_until TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN last_heartbeat TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN claim_attempts INTEGER NOT NULL DEFAULT 0;
ALTER TABLE workflow_runs ADD COLUMN definition_id TEXT NULL REFERENCES workflow_definitions(id);
CREATE INDEX idx_workflow_runs_lease_until
    ON workflow_runs (lease_until) WHERE lease_until IS NOT NULL;
CREATE INDEX idx_workflow_runs_claim_pool
    ON workflow_runs (claim_state, runner_pool, started_at) WHERE claim_state = 'queued';
