-- Attempt caps (issue 32): at most this many dial attempts per number per
-- rolling 24 hours and 7 days across the workspace. The count reads calls by
-- (org_id, phone, created_at): the index calls_org_phone_created (0041).
ALTER TABLE orgs ADD COLUMN attempt_cap_per_day BIGINT NOT NULL DEFAULT 3;
ALTER TABLE orgs ADD COLUMN attempt_cap_per_week BIGINT NOT NULL DEFAULT 7;
