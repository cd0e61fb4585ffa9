-- Calls, their status transitions, transcript turns, and the transcript search index.

CREATE TABLE calls (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    agent_id TEXT NOT NULL,
    agent_name TEXT NOT NULL,
    engine TEXT NOT NULL,
    phone TEXT NOT NULL,
    target_name TEXT NOT NULL DEFAULT '',
    email TEXT,
    from_number TEXT NOT NULL,
    provider TEXT NOT NULL,
    status TEXT NOT NULL,
    ended_reason TEXT,
    variables TEXT NOT NULL DEFAULT '{}',
    source TEXT NOT NULL,
    attempt BIGINT NOT NULL DEFAULT 1,
    retry_of TEXT,
    batch_id TEXT,
    campaign_id TEXT,
    campaign_name TEXT,
    carrier_call_id TEXT,
    dispatched BOOLEAN NOT NULL DEFAULT FALSE,
    not_before BIGINT NOT NULL,
    queued_at BIGINT NOT NULL,
    ringing_at BIGINT,
    answered_at BIGINT,
    ended_at BIGINT,
    duration_seconds BIGINT NOT NULL DEFAULT 0,
    rate_paise BIGINT NOT NULL,
    cost_paise BIGINT NOT NULL DEFAULT 0,
    summary TEXT NOT NULL DEFAULT '',
    transcript_text TEXT NOT NULL DEFAULT '',
    extracted TEXT NOT NULL DEFAULT '{}',
    latencies TEXT NOT NULL DEFAULT '[]',
    created_at BIGINT NOT NULL
);
CREATE INDEX calls_org_created ON calls (org_id, created_at DESC, id DESC);
CREATE INDEX calls_org_status ON calls (org_id, status, created_at DESC);
CREATE INDEX calls_org_phone ON calls (org_id, phone);
CREATE INDEX calls_pending ON calls (status, dispatched, not_before);
CREATE INDEX calls_batch ON calls (batch_id);

CREATE TABLE call_events (
    call_id TEXT NOT NULL REFERENCES calls(id),
    status TEXT NOT NULL,
    at BIGINT NOT NULL
);
CREATE INDEX call_events_call ON call_events (call_id, at);

CREATE TABLE call_turns (
    call_id TEXT NOT NULL REFERENCES calls(id),
    org_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (call_id, seq)
);
CREATE INDEX call_turns_created ON call_turns (created_at);

-- Deep search: a GIN full-text index over the stored transcript.
CREATE INDEX calls_transcript_fts ON calls USING GIN (to_tsvector('simple', transcript_text));
