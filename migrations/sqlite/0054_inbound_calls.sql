-- Inbound calling (issue 31): a number answers with an agent, and a call
-- records which way it went. `to_number` is the workspace number an inbound
-- caller dialed (NULL on outbound calls, whose `from_number` is ours).
ALTER TABLE phone_numbers ADD COLUMN inbound_agent_id TEXT;
ALTER TABLE phone_numbers ADD COLUMN inbound_enabled BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE phone_numbers ADD COLUMN inbound_when_busy TEXT NOT NULL DEFAULT 'reject';
ALTER TABLE phone_numbers ADD COLUMN inbound_queue_seconds INTEGER NOT NULL DEFAULT 60;
ALTER TABLE phone_numbers ADD COLUMN inbound_hold_message TEXT;
ALTER TABLE calls ADD COLUMN direction TEXT NOT NULL DEFAULT 'outbound';
ALTER TABLE calls ADD COLUMN to_number TEXT;
CREATE INDEX phone_numbers_inbound_agent ON phone_numbers (inbound_agent_id);
-- Callers a workspace refuses, and how many calls one caller may place to the
-- workspace's numbers in an hour (0: no cap).
CREATE TABLE inbound_blocked_callers (
    org_id TEXT NOT NULL REFERENCES orgs(id),
    phone TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL,
    PRIMARY KEY (org_id, phone)
);
ALTER TABLE orgs ADD COLUMN inbound_caller_hourly_cap INTEGER NOT NULL DEFAULT 20;
CREATE INDEX calls_inbound_caller ON calls (org_id, phone, created_at) WHERE direction = 'inbound';
-- The workspace's inbound routing URL (chooses the agent and variables of each
-- inbound call) and the secret its requests are signed with.
ALTER TABLE orgs ADD COLUMN inbound_routing_url TEXT;
ALTER TABLE orgs ADD COLUMN inbound_routing_secret TEXT;
