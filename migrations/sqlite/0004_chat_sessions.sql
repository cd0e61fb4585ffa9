-- Text chat sessions with agents (POST /api/agents/{id}/chat), and what a call's
-- providers cost: LLM token usage and whether it ran on the workspace's own keys.

CREATE TABLE chat_sessions (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    agent_id TEXT NOT NULL,
    variables TEXT NOT NULL DEFAULT '{}',
    messages TEXT NOT NULL DEFAULT '[]',
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX chat_sessions_org_agent ON chat_sessions (org_id, agent_id, updated_at DESC);

ALTER TABLE calls ADD COLUMN own_credentials BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE calls ADD COLUMN llm_prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE calls ADD COLUMN llm_completion_tokens INTEGER NOT NULL DEFAULT 0;
