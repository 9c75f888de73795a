-- starflow's additions: definitions (#241), run input/result, waits, signal
-- inbox, session-var scope and lifetime, the mirror outbox and wake-token keys.
CREATE TABLE workflow_definitions (
    id           uuid PRIMARY KEY,
    workspace_id text NOT NULL DEFAULT 'celestial',
    env          text NOT NULL DEFAULT 'prod',
    name         text NOT NULL,
    version      int NOT NULL,
    code_hash    text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (workspace_id, env, name, version)
);
ALTER TABLE workflow_runs ADD CONSTRAINT workflow_runs_definition_id_fkey
    FOREIGN KEY (definition_id) REFERENCES workflow_definitions(id);

ALTER TABLE workflow_runs ADD COLUMN input_json jsonb NULL;
ALTER TABLE workflow_runs ADD COLUMN result_json jsonb NULL;
ALTER TABLE workflow_runs ADD COLUMN start_mode text NOT NULL DEFAULT 'inline';
ALTER TABLE workflow_runs ADD COLUMN max_claim_attempts int NOT NULL DEFAULT 3;
ALTER TABLE workflow_runs ADD COLUMN workflow_version int NULL;

CREATE TABLE workflow_waits (
    run_id       uuid NOT NULL REFERENCES workflow_runs(id),
    node_id      text NOT NULL,
    workspace_id text NOT NULL DEFAULT 'celestial',
    env          text NOT NULL DEFAULT 'prod',
    event        text NULL,
    deadline     timestamptz NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (run_id, node_id)
);
CREATE INDEX idx_workflow_waits_deadline
    ON workflow_waits (workspace_id, env, deadline) WHERE deadline IS NOT NULL;

CREATE TABLE workflow_signals (
    id           bigserial PRIMARY KEY,
    run_id       uuid NOT NULL REFERENCES workflow_runs(id),
    workspace_id text NOT NULL DEFAULT 'celestial',
    env          text NOT NULL DEFAULT 'prod',
    event        text NOT NULL,
    payload_json jsonb NULL,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX idx_workflow_signals_run_event ON workflow_signals (run_id, event, id);

ALTER TABLE workflow_session_vars ADD COLUMN workspace_id text NOT NULL DEFAULT 'celestial';
ALTER TABLE workflow_session_vars ADD COLUMN env text NOT NULL DEFAULT 'prod';
ALTER TABLE workflow_session_vars ADD COLUMN run_id uuid NULL;
ALTER TABLE workflow_session_vars ADD COLUMN keep_until timestamptz NULL;
ALTER TABLE workflow_session_vars ADD COLUMN updated_at timestamptz NULL;
DROP INDEX idx_workflow_session_vars_key;
CREATE UNIQUE INDEX idx_workflow_session_vars_scope
    ON workflow_session_vars (workspace_id, env, session_id, key);
CREATE INDEX idx_workflow_session_vars_run ON workflow_session_vars (run_id)
    WHERE run_id IS NOT NULL;

CREATE TABLE mirror_outbox (
    id           bigserial PRIMARY KEY,
    run_id       uuid,
    kind         text,
    payload      jsonb,
    created_at   timestamptz DEFAULT now(),
    applied_at   timestamptz NULL,
    workspace_id text NOT NULL DEFAULT 'celestial',
    env          text NOT NULL DEFAULT 'prod'
);
CREATE INDEX idx_mirror_outbox_pending
    ON mirror_outbox (workspace_id, env, id) WHERE applied_at IS NULL;

CREATE TABLE starflow_keys (
    workspace_id text NOT NULL,
    env          text NOT NULL,
    key_id       text NOT NULL,
    secret       text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workspace_id, env, key_id)
);
