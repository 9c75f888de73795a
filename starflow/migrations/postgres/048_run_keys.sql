-- Run keys (#30 item 6): a run started with a caller-chosen string id,
-- sf.options(run_id="order-123"), keeps the seed's uuid id (derived from the
-- key: uuid5 of the workspace, env and key, see starflow.limits.run_ref) and
-- stores the key itself here, so RunInfo.run_key, `starflow runs list/show`
-- and the web page show it. NULL for a run started without a key (or with a
-- UUID). A key names one run per workspace and env. The index holds only the
-- runs that have one, so other runs' writes never touch it; the key leads it,
-- so `starflow copy --run KEY` and the CLI's "it is in another scope" hint,
-- which look a key up across scopes, use it too.
ALTER TABLE workflow_runs ADD COLUMN run_key text NULL;
CREATE UNIQUE INDEX IF NOT EXISTS idx_workflow_runs_run_key
    ON workflow_runs (run_key, workspace_id, env)
    WHERE run_key IS NOT NULL;
