-- Several `voxline serve` nodes on one database (issue 20). Each node keeps a
-- row alive with a heartbeat; a peer whose heartbeat is older than the lease
-- is dead, and a survivor ends its live calls and requeues its queued ones.
CREATE TABLE nodes (
    id TEXT PRIMARY KEY,
    public_url TEXT NOT NULL,
    started_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL,
    draining BOOLEAN NOT NULL DEFAULT FALSE,
    live_calls BIGINT NOT NULL DEFAULT 0,
    -- CPU use of the process over the last heartbeat period, per mille of one core.
    cpu_permille BIGINT NOT NULL DEFAULT 0,
    -- Whether the node is above its load threshold and takes no new calls.
    overloaded BOOLEAN NOT NULL DEFAULT FALSE,
    -- Set by the survivor that recovered the node's work after its lease ran out.
    lost_at BIGINT
);

-- The node that dialed the call: it owns the carrier leg and the media socket.
-- A call holds one of its workspace's slots from the moment a node claims it
-- until it ends, unless it is an announcement outside the slots.
ALTER TABLE calls ADD COLUMN node_id TEXT;
ALTER TABLE calls ADD COLUMN holds_slot BOOLEAN NOT NULL DEFAULT TRUE;
CREATE INDEX calls_live_by_org ON calls (org_id)
    WHERE node_id IS NOT NULL AND status IN ('queued', 'ringing', 'in-progress');
CREATE INDEX calls_live_by_node ON calls (node_id)
    WHERE status IN ('queued', 'ringing', 'in-progress');

-- One node drives a running batch (pacing, schedule) under a renewable lease.
ALTER TABLE batches ADD COLUMN lease_node TEXT;
ALTER TABLE batches ADD COLUMN lease_until BIGINT;

-- The signing secret every node shares when none is configured, so media
-- tokens and recording links signed by one node verify on the others.
CREATE TABLE cluster_secret (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    secret TEXT NOT NULL
);

-- Dispatchers on every node wake when a call is queued or ends (a slot frees),
-- whichever path wrote it: placement, retries, batch items, cancels, reapers.
CREATE FUNCTION voxline_wake_dispatch() RETURNS trigger AS $$
BEGIN
    PERFORM pg_notify('voxline_dispatch', NEW.org_id);
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER calls_wake_on_queue AFTER INSERT ON calls
    FOR EACH ROW WHEN (NEW.status = 'queued' AND NOT NEW.dispatched)
    EXECUTE FUNCTION voxline_wake_dispatch();
CREATE TRIGGER calls_wake_on_change AFTER UPDATE OF status, dispatched ON calls
    FOR EACH ROW WHEN (
        (NEW.status IN ('completed', 'failed', 'no-answer', 'busy', 'canceled')
            AND OLD.status IN ('queued', 'ringing', 'in-progress'))
        OR (NEW.status = 'queued' AND NOT NEW.dispatched AND OLD.dispatched))
    EXECUTE FUNCTION voxline_wake_dispatch();
