-- The calls list filtered to one agent (the console's agent filter, the API's
-- agentId): ordered like the listing, so a page is an index range, and holding
-- status and provider, so the count can read the index alone.
CREATE INDEX calls_org_agent ON calls (org_id, agent_id, created_at DESC, id DESC, status, provider);
