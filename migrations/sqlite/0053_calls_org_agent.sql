-- The calls list filtered to one agent (the console's agent filter, the API's
-- agentId): without an index on agent_id its count walked every call of the
-- workspace and read each row (2 s p50 with 1,000,000 calls). This one is
-- ordered like the listing, so a page is an index range, and holds status and
-- provider, so the count reads the index alone.
CREATE INDEX calls_org_agent ON calls (org_id, agent_id, created_at DESC, id DESC, status, provider);
