-- Searchable run attributes (#25): starflow.set_attributes(customer="c-42") in
-- workflow code writes one row per key, in the unit that records the call;
-- Starflow.list_runs(attributes={...}) finds runs by them through the lookup
-- index (an index scan however many runs there are). Values are stored as
-- their JSON text, so "42" and 42 are different values.
CREATE TABLE workflow_run_attributes (
    run_id       uuid NOT NULL REFERENCES workflow_runs(id),
    workspace_id text NOT NULL,
    env          text NOT NULL,
    key          text NOT NULL,
    value        text NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (run_id, key)
);
CREATE INDEX idx_workflow_run_attributes_lookup
    ON workflow_run_attributes (workspace_id, env, key, value, run_id);

-- Tenant walls as on every table with workspace_id/env (021, 025).
ALTER TABLE workflow_run_attributes ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_workspace ON workflow_run_attributes
    USING (workspace_id = current_setting('starflow.workspace_id', true)
           AND env = current_setting('starflow.env', true));
CREATE POLICY starflow_role_pin ON workflow_run_attributes AS RESTRICTIVE USING (
    workspace_id = COALESCE((SELECT p.workspace_id FROM starflow_role_workspaces p
                             WHERE p.role_name = current_user), workspace_id)
    AND env = COALESCE((SELECT p.env FROM starflow_role_workspaces p
                        WHERE p.role_name = current_user), env));
