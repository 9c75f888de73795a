-- Durable events and streams (#17): see the PostgreSQL migration of the same number.
CREATE TABLE workflow_event_values (
    run_id       TEXT NOT NULL REFERENCES workflow_runs(id),
    workspace_id TEXT NOT NULL,
    env          TEXT NOT NULL,
    key          TEXT NOT NULL,
    value_json   TEXT,
    node_id      TEXT,
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
);

CREATE TABLE workflow_stream_items (
    run_id       TEXT NOT NULL REFERENCES workflow_runs(id),
    workspace_id TEXT NOT NULL,
    env          TEXT NOT NULL,
    key          TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    value_json   TEXT,
    closed       INTEGER NOT NULL DEFAULT 0,
    node_id      TEXT,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, key, seq)
);

-- continue_as_new: the run this one continued as (its successor in the chain).
ALTER TABLE workflow_runs ADD COLUMN continued_as TEXT;
