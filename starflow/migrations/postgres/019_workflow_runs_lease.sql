-- Lease columns + heartbeat (#240), claim state machine (ADR-047 §3).
-- definition_id references workflow_definitions(id); that table (#241) and the
-- foreign key are created in 020.
ALTER TABLE workflow_runs ADD COLUMN claim_state text NOT NULL DEFAULT 'running';
ALTER TABLE workflow_runs ADD COLUMN runner_pool text NULL;
ALTER TABLE workflow_runs ADD COLUMN leased_by text NULL;
ALTER TABLE workflow_runs ADD COLUMN lease_until timestamptz NULL;
ALTER TABLE workflow_runs ADD COLUMN last_heartbeat timestamptz NULL;
ALTER TABLE workflow_runs ADD COLUMN claim_attempts int NOT NULL DEFAULT 0;
ALTER TABLE workflow_runs ADD COLUMN definition_id uuid NULL;
CREATE INDEX idx_workflow_runs_lease_until
    ON workflow_runs (lease_until) WHERE lease_until IS NOT NULL;
CREATE INDEX idx_workflow_runs_claim_pool
    ON workflow_runs (claim_state, runner_pool, started_at) WHERE claim_state = 'queued';
