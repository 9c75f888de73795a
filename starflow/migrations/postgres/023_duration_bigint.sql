-- The state model types duration_ms as int: 32 bits overflow after 24.8 days,
-- and a run that waits a month must still record its duration. Widening to
-- bigint keeps every existing reader working.
ALTER TABLE workflow_runs ALTER COLUMN duration_ms TYPE bigint;
