-- In-call tools. Every tool call the agent makes is a row, attached to the
-- transcript turn that made it; the call keeps the outcome of the two tools
-- that change its record: the calendar booking and the transfer (with what the
-- carrier later reports about the bridged leg).
CREATE TABLE call_tool_calls (
    call_id TEXT NOT NULL REFERENCES calls(id),
    seq BIGINT NOT NULL,
    org_id TEXT NOT NULL,
    -- index of the agent turn (call_turns.seq) that made the call
    turn_seq BIGINT NOT NULL,
    tool_call_id TEXT NOT NULL,
    name TEXT NOT NULL,
    -- JSON
    arguments TEXT NOT NULL,
    -- JSON result, or NULL when the tool failed
    result TEXT,
    error TEXT,
    latency_ms BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (call_id, seq)
);

ALTER TABLE calls ADD COLUMN calendar_status TEXT;
ALTER TABLE calls ADD COLUMN calendar_event_url TEXT;
ALTER TABLE calls ADD COLUMN calendar_error TEXT;
ALTER TABLE calls ADD COLUMN transferred_to TEXT;
ALTER TABLE calls ADD COLUMN transferred_at BIGINT;
-- what the carrier reported about the bridged leg: completed, no-answer, busy, failed, …
ALTER TABLE calls ADD COLUMN transfer_status TEXT;
ALTER TABLE calls ADD COLUMN transfer_duration_seconds BIGINT;
