-- Why a run failed, as data (docs/architecture.md, "Failures are data"): the
-- exception's type and message, the node whose recorded failure ended the
-- run, its attempts and a bounded traceback. workflow_runs.error keeps the
-- seed's readable text; nothing parses it back.
ALTER TABLE workflow_runs ADD COLUMN failure_json TEXT NULL;
