-- Batches and campaigns (one table; `kind` tells them apart) and their items.
-- An item's `status` mirrors its latest call's raw status through the triggers
-- below, so progress is a count over one index and never a join.

CREATE TABLE batches (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    agent_name TEXT NOT NULL,
    from_number TEXT,
    status TEXT NOT NULL,
    status_reason TEXT,
    scheduled_start_at INTEGER,
    started_at INTEGER,
    finished_at INTEGER,
    next_seq INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX batches_org ON batches (org_id, kind, created_at DESC, id DESC);
CREATE INDEX batches_status ON batches (status, scheduled_start_at);

CREATE TABLE batch_items (
    batch_id TEXT NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    phone TEXT NOT NULL,
    variables TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL,
    reason TEXT,
    call_id TEXT,
    root_call_id TEXT,
    attempts INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, seq)
);
CREATE INDEX batch_items_status ON batch_items (batch_id, status, seq);
CREATE INDEX batch_items_call ON batch_items (call_id);
CREATE INDEX batch_items_root_call ON batch_items (root_call_id);
CREATE INDEX calls_campaign ON calls (campaign_id, created_at DESC, id DESC);

-- The item follows its latest call's status.
CREATE TRIGGER batch_items_follow_call AFTER UPDATE OF status ON calls
WHEN new.batch_id IS NOT NULL AND new.status <> old.status
BEGIN
    UPDATE batch_items SET status = new.status WHERE call_id = new.id;
END;

-- An automatic retry (the agent's policy) becomes the item's latest call, and
-- reopens a batch that was marked completed in between.
CREATE TRIGGER batch_items_follow_retry AFTER INSERT ON calls
WHEN new.batch_id IS NOT NULL AND new.retry_of IS NOT NULL
BEGIN
    UPDATE batch_items SET call_id = new.id, status = new.status, attempts = attempts + 1
     WHERE root_call_id = new.retry_of;
    UPDATE batches SET status = 'running', finished_at = NULL
     WHERE id = new.batch_id AND status = 'completed';
END;
