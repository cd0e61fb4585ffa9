-- Post-call analysis, one row per ended call. Written in the same transaction
-- that ends the call: `pending` for a call that connected, `skipped` for one
-- that never did. The analysis worker leases pending rows, asks the agent's
-- LLM for the summary, structured data and success verdict, and marks them
-- done or failed; a re-run bumps `generation` so a stale job's answer is
-- dropped.
CREATE TABLE call_analyses (
    call_id TEXT PRIMARY KEY REFERENCES calls(id),
    org_id TEXT NOT NULL,
    agent_id TEXT NOT NULL,
    batch_id TEXT,
    -- pending, done, failed or skipped
    status TEXT NOT NULL,
    -- JSON plan to use instead of the agent's (a re-run with a plan); NULL: the agent's
    plan TEXT,
    summary TEXT,
    -- JSON object of the extracted fields
    structured_data TEXT,
    -- JSON {rubric, value, pass, reason}
    success TEXT,
    -- the verdict as pass/fail, for the list filter and the success rate
    success_pass BOOLEAN,
    error TEXT,
    model TEXT,
    prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    latency_ms BIGINT NOT NULL DEFAULT 0,
    attempts BIGINT NOT NULL DEFAULT 0,
    generation BIGINT NOT NULL DEFAULT 0,
    -- analyses produced so far; names each call.analyzed event
    version BIGINT NOT NULL DEFAULT 0,
    -- a worker holds the row until then (Unix ms); 0 when free
    lease_until BIGINT NOT NULL DEFAULT 0,
    -- call.completed waits for the analysis until then (Unix ms)
    webhook_deadline BIGINT NOT NULL,
    call_created_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    completed_at BIGINT
);
CREATE INDEX call_analyses_due ON call_analyses (status, lease_until);
CREATE INDEX call_analyses_org_created ON call_analyses (org_id, call_created_at);
CREATE INDEX call_analyses_batch ON call_analyses (batch_id);
