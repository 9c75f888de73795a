-- Stream items written from inside a step (#30 item 6): starflow.write_stream
-- in a step is written at once, not with the run's next boundary, so a reader
-- sees LLM tokens while the step runs. Such an item takes the seq of the
-- workflow's last write to that key before the step started (0 if none) and a
-- sub-number from 1, one past the highest of that (run, key, seq) at its
-- insert: items are read in (seq, sub) order, so a step's items come after
-- the workflow's writes before it and before its writes after it, and a step
-- that runs again (a retry, or after a crash) appends after its earlier
-- items. A workflow-level write keeps sub 0.
ALTER TABLE workflow_stream_items ADD COLUMN sub integer NOT NULL DEFAULT 0;
ALTER TABLE workflow_stream_items DROP CONSTRAINT workflow_stream_items_pkey;
ALTER TABLE workflow_stream_items ADD PRIMARY KEY (run_id, key, seq, sub);
