-- The in-flight check before each placement reads a number's newest call:
-- with created_at in the index it is one index seek, where (org_id, phone)
-- alone let the planner walk the workspace's whole listing index instead to
-- honour the ORDER BY (seen as 38 ms per placement with 10,000 calls).
DROP INDEX calls_org_phone;
CREATE INDEX calls_org_phone_created ON calls (org_id, phone, created_at);
