-- Nodes and call ownership (issue 20). SQLite is one node: the columns exist
-- so the code and the reads are the same on both databases.
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    public_url TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    draining BOOLEAN NOT NULL DEFAULT FALSE,
    live_calls BIGINT NOT NULL DEFAULT 0,
    cpu_permille BIGINT NOT NULL DEFAULT 0,
    overloaded BOOLEAN NOT NULL DEFAULT FALSE,
    lost_at BIGINT
);

ALTER TABLE calls ADD COLUMN node_id TEXT;
ALTER TABLE calls ADD COLUMN holds_slot BOOLEAN NOT NULL DEFAULT TRUE;

ALTER TABLE batches ADD COLUMN lease_node TEXT;
ALTER TABLE batches ADD COLUMN lease_until BIGINT;

CREATE TABLE cluster_secret (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    secret TEXT NOT NULL
);
