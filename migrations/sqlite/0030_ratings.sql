-- Post-call scorecards, one per rated call. A row is written pending in the
-- same transaction that ends the call, so a restart never loses a rating; the
-- rating worker leases pending rows, scores them and marks them done or failed.
CREATE TABLE ratings (
    call_id TEXT PRIMARY KEY REFERENCES calls(id),
    org_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    -- pending, done or failed
    status TEXT NOT NULL,
    overall REAL,
    -- JSON array of {name, score, reason}
    columns TEXT NOT NULL DEFAULT '[]',
    -- JSON {columns: [{name, description}]} used for the last scoring
    template TEXT,
    -- scoring attempts of the last job (a malformed model reply is retried)
    attempts BIGINT NOT NULL DEFAULT 0,
    -- bumped whenever the rating is re-queued, so a stale job's result is discarded
    generation BIGINT NOT NULL DEFAULT 0,
    -- scorecards produced so far; names each rating.completed event
    version BIGINT NOT NULL DEFAULT 0,
    -- a worker holds the row until then (Unix ms); 0 when free
    lease_until BIGINT NOT NULL DEFAULT 0,
    last_error TEXT,
    -- call.completed waits for the rating until then (Unix ms)
    webhook_deadline BIGINT NOT NULL,
    -- the call's creation time, for the list's date filters and order
    call_created_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    rated_at BIGINT
);
CREATE INDEX ratings_org_created ON ratings (org_id, call_created_at DESC, call_id DESC);
CREATE INDEX ratings_due ON ratings (status, lease_until);

-- A call.completed delivery held back until the call's rating lands (or its deadline).
ALTER TABLE webhook_deliveries ADD COLUMN held_for_rating BOOLEAN NOT NULL DEFAULT FALSE;
