-- Stream items written from inside a step (#30 item 6): see the PostgreSQL
-- migration of the same number. SQLite cannot change a primary key: the
-- table is rebuilt with the sub column in its key.
CREATE TABLE workflow_stream_items_047 (
    run_id       TEXT NOT NULL REFERENCES workflow_runs(id),
    workspace_id TEXT NOT NULL,
    env          TEXT NOT NULL,
    key          TEXT NOT NULL,
    seq          INTEGER NOT NULL,
    value_json   TEXT,
    closed       INTEGER NOT NULL DEFAULT 0,
    node_id      TEXT,
    created_at   TEXT NOT NULL,
    sub          INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (run_id, key, seq, sub)
);
INSERT INTO workflow_stream_items_047 (run_id, workspace_id, env, key, seq, value_json,
                                       closed, node_id, created_at, sub)
    SELECT run_id, workspace_id, env, key, seq, value_json, closed, node_id, created_at, 0
    FROM workflow_stream_items;
DROP TABLE workflow_stream_items;
ALTER TABLE workflow_stream_items_047 RENAME TO workflow_stream_items;
