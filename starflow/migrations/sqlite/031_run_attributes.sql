-- Searchable run attributes (#25): see the PostgreSQL migration of the same number.
CREATE TABLE workflow_run_attributes (
    run_id       TEXT NOT NULL REFERENCES workflow_runs(id),
    workspace_id TEXT NOT NULL,
    env          TEXT NOT NULL,
    key          TEXT NOT NULL,
    value        TEXT NOT NULL,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX idx_workflow_run_attributes_lookup
    ON workflow_run_attributes (workspace_id, env, key, value, run_id);
