-- Role pins: a boundary for tenants who hold their own database credentials.
--
-- The policies of 021/022 admit the rows of the workspace/env named by the
-- session settings starflow.workspace_id / starflow.env, and any client can SET
-- those for itself. A role listed in starflow_role_workspaces is pinned: on
-- every table that holds tenant data, a RESTRICTIVE policy admits only its
-- pinned workspace (and env, if pinned), whatever the session sets. Pin a role
-- with: SELECT starflow_pin_role('sf_acme', 'acme', 'prod');
-- A role that is not listed is not restricted further (the owner never is).

CREATE TABLE starflow_role_workspaces (
    role_name    name PRIMARY KEY,
    workspace_id text NOT NULL,
    env          text NULL
);
-- Each role may read its own pin (the policies below read it as that role);
-- nobody but the owner may write one: no INSERT/UPDATE/DELETE policy exists,
-- so table grants given to tenant roles cannot move a pin.
ALTER TABLE starflow_role_workspaces ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_own_pin ON starflow_role_workspaces FOR SELECT
    USING (role_name = current_user);
GRANT SELECT ON starflow_role_workspaces TO PUBLIC;

CREATE FUNCTION starflow_pin_role(role_name name, workspace_id text, env text DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO starflow_role_workspaces (role_name, workspace_id, env)
    VALUES ($1, $2, $3)
    ON CONFLICT ON CONSTRAINT starflow_role_workspaces_pkey
    DO UPDATE SET workspace_id = EXCLUDED.workspace_id, env = EXCLUDED.env
$$;
REVOKE EXECUTE ON FUNCTION starflow_pin_role(name, text, text) FROM PUBLIC;

-- Every table with workspace_id and env columns, found in the catalog so none
-- is missed: row security on, the session-setting policy if it lacks one, and
-- the pin. The subqueries do not depend on the row: evaluated once per query.
DO $$
DECLARE
    t regclass;
BEGIN
    FOR t IN
        SELECT c.oid::regclass
        FROM pg_class c
        WHERE c.relkind = 'r'
          AND c.relnamespace = current_schema()::regnamespace
          AND c.relname <> 'starflow_role_workspaces'
          AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
                      AND a.attname = 'workspace_id' AND NOT a.attisdropped)
          AND EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid
                      AND a.attname = 'env' AND NOT a.attisdropped)
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
        IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = t
                       AND polname = 'starflow_workspace') THEN
            EXECUTE format(
                'CREATE POLICY starflow_workspace ON %s '
                'USING (workspace_id = current_setting(''starflow.workspace_id'', true) '
                'AND env = current_setting(''starflow.env'', true))', t);
        END IF;
        EXECUTE format(
            'CREATE POLICY starflow_role_pin ON %s AS RESTRICTIVE USING ('
            'workspace_id = COALESCE((SELECT p.workspace_id FROM starflow_role_workspaces p '
            '                         WHERE p.role_name = current_user), workspace_id) '
            'AND env = COALESCE((SELECT p.env FROM starflow_role_workspaces p '
            '                    WHERE p.role_name = current_user), env))', t);
    END LOOP;
END
$$;

-- Events carry no workspace of their own: they follow their run's pin.
CREATE POLICY starflow_role_pin ON workflow_run_events AS RESTRICTIVE
    USING (EXISTS (
        SELECT 1 FROM workflow_runs r
        WHERE r.id = workflow_run_events.run_id
          AND r.workspace_id = COALESCE((SELECT p.workspace_id FROM starflow_role_workspaces p
                                         WHERE p.role_name = current_user), r.workspace_id)
          AND r.env = COALESCE((SELECT p.env FROM starflow_role_workspaces p
                                WHERE p.role_name = current_user), r.env)));
