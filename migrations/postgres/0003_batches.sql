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
    scheduled_start_at BIGINT,
    started_at BIGINT,
    finished_at BIGINT,
    next_seq BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE INDEX batches_org ON batches (org_id, kind, created_at DESC, id DESC);
CREATE INDEX batches_status ON batches (status, scheduled_start_at);

CREATE TABLE batch_items (
    batch_id TEXT NOT NULL REFERENCES batches(id) ON DELETE CASCADE,
    seq BIGINT NOT NULL,
    name TEXT NOT NULL,
    phone TEXT NOT NULL,
    variables TEXT NOT NULL DEFAULT '{}',
    status TEXT NOT NULL,
    reason TEXT,
    call_id TEXT,
    root_call_id TEXT,
    attempts BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, seq)
);
CREATE INDEX batch_items_status ON batch_items (batch_id, status, seq);
CREATE INDEX batch_items_call ON batch_items (call_id);
CREATE INDEX batch_items_root_call ON batch_items (root_call_id);
CREATE INDEX calls_campaign ON calls (campaign_id, created_at DESC, id DESC);

-- The item follows its latest call's status.
CREATE FUNCTION batch_items_follow_call() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE batch_items SET status = NEW.status WHERE call_id = NEW.id;
    RETURN NULL;
END;
$$;
CREATE TRIGGER batch_items_follow_call AFTER UPDATE OF status ON calls
FOR EACH ROW WHEN (NEW.batch_id IS NOT NULL AND NEW.status <> OLD.status)
EXECUTE FUNCTION batch_items_follow_call();

-- An automatic retry (the agent's policy) becomes the item's latest call, and
-- reopens a batch that was marked completed in between.
CREATE FUNCTION batch_items_follow_retry() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE batch_items SET call_id = NEW.id, status = NEW.status, attempts = attempts + 1
     WHERE root_call_id = NEW.retry_of;
    UPDATE batches SET status = 'running', finished_at = NULL
     WHERE id = NEW.batch_id AND status = 'completed';
    RETURN NULL;
END;
$$;
CREATE TRIGGER batch_items_follow_retry AFTER INSERT ON calls
FOR EACH ROW WHEN (NEW.batch_id IS NOT NULL AND NEW.retry_of IS NOT NULL)
EXECUTE FUNCTION batch_items_follow_retry();
