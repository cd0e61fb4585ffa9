-- The do-not-call list (issue 32): numbers a workspace must never dial, each
-- with why and where the entry came from (api, opt-out, import, console).
-- Every dialing path reads it by (org_id, phone).
CREATE TABLE do_not_call (
    org_id TEXT NOT NULL REFERENCES orgs(id),
    phone TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    source TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, phone)
);
CREATE INDEX do_not_call_recent ON do_not_call (org_id, created_at DESC, phone);
-- Why an item was skipped, as a rule the API names (`do-not-call`); NULL for
-- items skipped at upload for a malformed or repeated number (see `reason`).
ALTER TABLE batch_items ADD COLUMN skip_reason TEXT;
