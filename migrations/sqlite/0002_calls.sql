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
    attempt INTEGER NOT NULL DEFAULT 1,
    retry_of TEXT,
    batch_id TEXT,
    campaign_id TEXT,
    campaign_name TEXT,
    carrier_call_id TEXT,
    dispatched BOOLEAN NOT NULL DEFAULT FALSE,
    not_before INTEGER NOT NULL,
    queued_at INTEGER NOT NULL,
    ringing_at INTEGER,
    answered_at INTEGER,
    ended_at INTEGER,
    duration_seconds INTEGER NOT NULL DEFAULT 0,
    rate_paise INTEGER NOT NULL,
    cost_paise INTEGER NOT NULL DEFAULT 0,
    summary TEXT NOT NULL DEFAULT '',
    transcript_text TEXT NOT NULL DEFAULT '',
    extracted TEXT NOT NULL DEFAULT '{}',
    latencies TEXT NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL
);
CREATE INDEX calls_org_created ON calls (org_id, created_at DESC, id DESC);
CREATE INDEX calls_org_status ON calls (org_id, status, created_at DESC);
CREATE INDEX calls_org_phone ON calls (org_id, phone);
CREATE INDEX calls_pending ON calls (status, dispatched, not_before);
CREATE INDEX calls_batch ON calls (batch_id);

CREATE TABLE call_events (
    call_id TEXT NOT NULL REFERENCES calls(id),
    status TEXT NOT NULL,
    at INTEGER NOT NULL
);
CREATE INDEX call_events_call ON call_events (call_id, at);

CREATE TABLE call_turns (
    call_id TEXT NOT NULL REFERENCES calls(id),
    org_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    speaker TEXT NOT NULL,
    text TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (call_id, seq)
);
CREATE INDEX call_turns_created ON call_turns (created_at);

-- Deep search: an FTS5 index over the stored transcript, kept in step by triggers.
CREATE VIRTUAL TABLE calls_fts USING fts5(transcript_text, content='calls', content_rowid='rowid');
CREATE TRIGGER calls_fts_insert AFTER INSERT ON calls BEGIN
    INSERT INTO calls_fts (rowid, transcript_text) VALUES (new.rowid, new.transcript_text);
END;
CREATE TRIGGER calls_fts_update AFTER UPDATE OF transcript_text ON calls BEGIN
    INSERT INTO calls_fts (calls_fts, rowid, transcript_text) VALUES ('delete', old.rowid, old.transcript_text);
    INSERT INTO calls_fts (rowid, transcript_text) VALUES (new.rowid, new.transcript_text);
END;
CREATE TRIGGER calls_fts_delete AFTER DELETE ON calls BEGIN
    INSERT INTO calls_fts (calls_fts, rowid, transcript_text) VALUES ('delete', old.rowid, old.transcript_text);
END;
