-- Calling hours (issue 32): a window in the callee's time zone outside which
-- batch items, campaign rows and retries wait and single calls are refused.
-- The workspace's default and a batch's override are stored as their JSON
-- form (NULL: inherit the agent's, then the workspace's, then the server's).
ALTER TABLE orgs ADD COLUMN calling_hours TEXT;
ALTER TABLE batches ADD COLUMN calling_hours TEXT;
-- A call placed outside its window by a permitted override: 'request'
-- (respectCallingHours: false) or 'emergency-alert' (bypassCallingHours).
ALTER TABLE calls ADD COLUMN calling_hours_override TEXT;
-- An item outside its window waits ('waiting') until next_attempt_at; the
-- rule that deferred it stays in wait_reason after it is dialed.
ALTER TABLE batch_items ADD COLUMN next_attempt_at BIGINT;
ALTER TABLE batch_items ADD COLUMN wait_reason TEXT;
CREATE INDEX batch_items_waiting ON batch_items (next_attempt_at) WHERE status = 'waiting';
