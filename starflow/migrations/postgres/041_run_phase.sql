-- The run's current phase (starflow.context().phase), as JSON, on the run row
-- (#29): written in the unit that records the phase event, so RunInfo.phase,
-- `starflow runs show` and the run page read it without scanning the events.
ALTER TABLE workflow_runs ADD COLUMN phase jsonb NULL;
