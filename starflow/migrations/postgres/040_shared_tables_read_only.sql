-- starflow_migrations is shared by every workspace on the database: a tenant
-- role that deleted or changed one of its rows made every app re-run that
-- migration at its next open, and fail. The tenant-role recipe of
-- docs/guides/postgres.md grants DML on every table in the schema, this one
-- included. With row security on and a read-only policy, a role that is not
-- the owner reads the table (an app checks it at open) but its UPDATE and
-- DELETE match no row and its INSERT fails, whatever it was granted. The
-- owner (the role that migrates) is not forced through the policy.
ALTER TABLE starflow_migrations ENABLE ROW LEVEL SECURITY;
CREATE POLICY starflow_read_only ON starflow_migrations FOR SELECT USING (true);
