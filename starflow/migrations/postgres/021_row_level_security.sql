-- Row Level Security: a role that is not the tables' owner (and not a
-- superuser) sees and writes only the rows of the workspace/env named by the
-- session settings starflow.workspace_id / starflow.env, which the adapter
-- sends when it connects. Unset settings match nothing (fail closed).
--
-- The owner is not FORCEd through the policies: the role that runs the
-- migrations (and a single-tenant deployment using it) keeps full access.
-- These policies stop bugs and ad-hoc SQL from crossing workspaces; they are
-- not a boundary against a client that can SET its own starflow.workspace_id
-- (see docs/guides/postgres.md for a role-pinned variant).

ALTER TABLE workflow_runs ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_runs
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));

-- Events carry no workspace of their own (the state model's columns): they
-- belong to the workspace of their run.
ALTER TABLE workflow_run_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_run_events
    USING (EXISTS (
        SELECT 1 FROM workflow_runs r
        WHERE r.id = workflow_run_events.run_id
          AND r.workspace_id = current_setting('starflow.workspace_id', true)
          AND r.env = current_setting('starflow.env', true)));

ALTER TABLE workflow_session_vars ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_session_vars
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));

ALTER TABLE workflow_waits ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_waits
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));

ALTER TABLE workflow_signals ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_signals
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));

ALTER TABLE mirror_outbox ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON mirror_outbox
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));

ALTER TABLE workflow_definitions ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_definitions
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));

-- Wake-token HMAC keys: a tenant that could read another workspace's key could
-- forge that workspace's wake tokens.
ALTER TABLE starflow_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON starflow_keys
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));
