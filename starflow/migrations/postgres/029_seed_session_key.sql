-- The state model's engine writes session variables with
--   INSERT … ON CONFLICT (session_id, key) DO UPDATE …
-- and reads them by (session_id, key): it relies on the unique index
-- idx_workflow_session_vars_key of its migration 001, which 020 replaced by
-- the per-workspace idx_workflow_session_vars_scope. On a database adopted
-- from the state model (its 001 recorded as "(adopted)" in
-- starflow_migrations: its engine runs there) the index is put back, beside
-- starflow's, so both engines' upserts work. It cannot conflict there: the
-- index existed until 020 ran in this same transaction.
--
-- A database starflow created keeps per-workspace session keys (two
-- workspaces may use the same session id); to run the state model's engine
-- on one, create the index yourself (docs/guides/postgres.md, "Sharing a
-- database with the state model's engine"). Nothing here changes it.
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM starflow_migrations WHERE version = 1 AND name LIKE '%(adopted)')
       AND to_regclass('idx_workflow_session_vars_key') IS NULL THEN
        CREATE UNIQUE INDEX idx_workflow_session_vars_key
            ON workflow_session_vars (session_id, key);
    END IF;
END
$$;
