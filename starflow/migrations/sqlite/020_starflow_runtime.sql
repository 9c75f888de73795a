-- starflow's additions: definitions (#241), run input/result, waits, signal
-- inbox, session-var scope and lifetime, the mirror outbox and the job table.
CREATE TABLE workflow_definitions (
    id           TEXT PRIMARY KEY,
    workspace_id TEXT NOT NULL DEFAULT 'celestial',
    env          TEXT NOT NULL DEFAULT 'prod',
    name         TEXT NOT NULL,
    version      INTEGER NOT NULL,
    code_hash    TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    UNIQUE (workspace_id, env, name, version)
);

ALTER TABLE workflow_runs ADD COLUMN input_json TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN result_json TEXT NULL;
ALTER TABLE workflow_runs ADD COLUMN start_mode TEXT NOT NULL DEFAULT 'inline';
ALTER TABLE workflow_runs ADD COLUMN max_claim_attempts INTEGER NOT NULL DEFAULT 3;
ALTER TABLE workflow_runs ADD COLUMN workflow_version INTEGER NULL;

CREATE TABLE workflow_waits (
    run_id       TEXT NOT NULL REFERENCES workflow_runs(id),
    node_id      TEXT NOT NULL,
    workspace_id TEXT NOT NULL DEFAULT 'celestial',
    env          TEXT NOT NULL DEFAULT 'prod',
    event        TEXT NULL,
    deadline     TEXT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (run_id, node_id)
);
CREATE INDEX idx_workflow_waits_deadline
    ON workflow_waits (workspace_id, env, deadline) WHERE deadline IS NOT NULL;

CREATE TABLE workflow_signals (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id       TEXT NOT NULL REFERENCES workflow_runs(id),
    workspace_id TEXT NOT NULL DEFAULT 'celestial',
    env          TEXT NOT NULL DEFAULT 'prod',
    event        TEXT NOT NULL,
    payload_json TEXT NULL,
    created_at   TEXT NOT NULL
);
CREATE INDEX idx_workflow_signals_run_event ON workflow_signals (run_id, event, id);

ALTER TABLE workflow_session_vars ADD COLUMN workspace_id TEXT NOT NULL DEFAULT 'celestial';
ALTER TABLE workflow_session_vars ADD COLUMN env TEXT NOT NULL DEFAULT 'prod';
ALTER TABLE workflow_session_vars ADD COLUMN run_id TEXT NULL;
ALTER TABLE workflow_session_vars ADD COLUMN keep_until TEXT NULL;
ALTER TABLE workflow_session_vars ADD COLUMN updated_at TEXT NULL;
DROP INDEX idx_workflow_session_vars_key;
CREATE UNIQUE INDEX idx_workflow_session_vars_scope
    ON workflow_session_vars (workspace_id, env, session_id, key);
CREATE INDEX idx_workflow_session_vars_run ON workflow_session_vars (run_id)
    WHERE run_id IS NOT NULL;

CREATE TABLE mirror_outbox (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id     TEXT,
    kind       TEXT,
    payload    TEXT,
    created_at TEXT DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    applied_at TEXT NULL,
    workspace_id TEXT NOT NULL DEFAULT 'celestial',
    env        TEXT NOT NULL DEFAULT 'prod'
);
CREATE INDEX idx_mirror_outbox_pending
    ON mirror_outbox (workspace_id, env, id) WHERE applied_at IS NULL;

CREATE TABLE starflow_keys (
    workspace_id TEXT NOT NULL,
    env          TEXT NOT NULL,
    key_id       TEXT NOT NULL,
    secret       TEXT NOT NULL,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (workspace_id, env, key_id)
);
