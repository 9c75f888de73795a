-- The state model's initial tables (SQLite types: uuid and timestamps as text,
-- jsonb as JSON text).
CREATE TABLE workflow_runs (
    id              TEXT PRIMARY KEY,
    template_id     TEXT NULL,
    status          TEXT,
    started_at      TEXT,
    completed_at    TEXT NULL,
    duration_ms     INTEGER NULL,
    checkpoint_json TEXT NULL,
    error           TEXT NULL
);

CREATE TABLE workflow_run_events (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT REFERENCES workflow_runs(id),
    event_type   TEXT,
    node_id      TEXT NULL,
    payload_json TEXT NULL,
    created_at   TEXT DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
);
CREATE INDEX idx_workflow_run_events_run ON workflow_run_events (run_id, id);

CREATE TABLE workflow_session_vars (
    session_id TEXT,
    key        TEXT,
    value_json TEXT
);
CREATE UNIQUE INDEX idx_workflow_session_vars_key ON workflow_session_vars (session_id, key);
