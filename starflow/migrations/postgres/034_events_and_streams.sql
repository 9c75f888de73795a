-- Durable events and streams (#17): starflow.set_event(key, value) keeps one
-- value per (run, key), last write wins; starflow.write_stream(key, value)
-- appends one item per call, numbered from 1 per (run, key), and
-- starflow.close_stream(key) appends a closing item. Each write is recorded as
-- a node of the run's history and written in the unit of the run's next
-- boundary; the item's (run_id, key, seq) key makes a replayed write a no-op.
-- Readers (Starflow.get_event, Starflow.read_stream) read by that key and are
-- woken by a NOTIFY on the workspace's events channel.
CREATE TABLE workflow_event_values (
    run_id       uuid NOT NULL REFERENCES workflow_runs(id),
    workspace_id text NOT NULL,
    env          text NOT NULL,
    key          text NOT NULL,
    value_json   jsonb,
    node_id      text,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (run_id, key)
);

CREATE TABLE workflow_stream_items (
    run_id       uuid NOT NULL REFERENCES workflow_runs(id),
    workspace_id text NOT NULL,
    env          text NOT NULL,
    key          text NOT NULL,
    seq          integer NOT NULL,
    value_json   jsonb,
    closed       boolean NOT NULL DEFAULT false,
    node_id      text,
    created_at   timestamptz NOT NULL,
    PRIMARY KEY (run_id, key, seq)
);

-- continue_as_new: the run this one continued as (its successor in the chain).
ALTER TABLE workflow_runs ADD COLUMN continued_as uuid;

-- Tenant walls as on every table with workspace_id/env (021, 025).
ALTER TABLE workflow_event_values ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_event_values
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));
CREATE POLICY starflow_role_pin ON workflow_event_values AS RESTRICTIVE USING (
    workspace_id = COALESCE((SELECT p.workspace_id FROM starflow_role_workspaces p
                             WHERE p.role_name = current_user), workspace_id)
    AND env = COALESCE((SELECT p.env FROM starflow_role_workspaces p
                        WHERE p.role_name = current_user), env));
ALTER TABLE workflow_stream_items ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_stream_items
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));
CREATE POLICY starflow_role_pin ON workflow_stream_items AS RESTRICTIVE USING (
    workspace_id = COALESCE((SELECT p.workspace_id FROM starflow_role_workspaces p
                             WHERE p.role_name = current_user), workspace_id)
    AND env = COALESCE((SELECT p.env FROM starflow_role_workspaces p
                        WHERE p.role_name = current_user), env));
