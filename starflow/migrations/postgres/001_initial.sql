-- The state model's initial tables, exactly as the state model specifies them.
CREATE TABLE workflow_runs (
    id              uuid PRIMARY KEY,
    template_id     text NULL,
    status          text,
    started_at      timestamptz,
    completed_at    timestamptz NULL,
    duration_ms     int NULL,
    checkpoint_json jsonb NULL,
    error           text NULL
);

CREATE TABLE workflow_run_events (
    id           bigserial PRIMARY KEY,
    run_id       uuid REFERENCES workflow_runs(id),
    event_type   text,
    node_id      text NULL,
    payload_json jsonb NULL,
    created_at   timestamptz DEFAULT now()
);
CREATE INDEX idx_workflow_run_events_run ON workflow_run_events (run_id, id);

CREATE TABLE workflow_session_vars (
    session_id text,
    key        text,
    value_json jsonb
);
CREATE UNIQUE INDEX idx_workflow_session_vars_key ON workflow_session_vars (session_id, key);
