-- Workspaces, API keys and their usage, agents, numbers, wallet, webhooks, credentials.
-- Timestamps are Unix milliseconds (UTC); ids are UUIDv7 text.

CREATE TABLE orgs (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    concurrency INTEGER NOT NULL,
    minute_quota INTEGER NOT NULL,
    wallet_paise INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL
);

CREATE TABLE api_keys (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    prefix TEXT NOT NULL,
    key_hash TEXT NOT NULL UNIQUE,
    daily_limit INTEGER NOT NULL,
    monthly_limit INTEGER NOT NULL,
    revoked_at INTEGER,
    last_used_at INTEGER,
    created_at INTEGER NOT NULL
);
CREATE INDEX api_keys_org ON api_keys (org_id, created_at);

-- One row per key per IST day. `reserved` is the admitted-request count leased
-- ahead by the rate limiter, so a crash can never hand out more than the cap.
CREATE TABLE api_key_usage (
    key_id TEXT NOT NULL REFERENCES api_keys(id),
    day TEXT NOT NULL,
    reserved INTEGER NOT NULL DEFAULT 0,
    admitted INTEGER NOT NULL DEFAULT 0,
    success INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    rate_limited INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (key_id, day)
);

CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    name TEXT NOT NULL,
    status TEXT NOT NULL,
    spec TEXT NOT NULL,
    dormant BOOLEAN NOT NULL DEFAULT FALSE,
    last_active_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX agents_org ON agents (org_id, created_at);

CREATE TABLE phone_numbers (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    phone TEXT NOT NULL UNIQUE,
    provider TEXT NOT NULL,
    status TEXT NOT NULL,
    is_default BOOLEAN NOT NULL DEFAULT FALSE,
    monthly_rent_paise INTEGER NOT NULL,
    rented_at INTEGER NOT NULL,
    renews_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX phone_numbers_org ON phone_numbers (org_id);
CREATE INDEX phone_numbers_renewal ON phone_numbers (renews_at);

CREATE TABLE wallet_transactions (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    kind TEXT NOT NULL,
    amount_paise INTEGER NOT NULL,
    balance_after_paise INTEGER NOT NULL,
    call_id TEXT,
    number_id TEXT,
    created_at INTEGER NOT NULL
);
CREATE INDEX wallet_transactions_org ON wallet_transactions (org_id, created_at);
CREATE UNIQUE INDEX wallet_transactions_call_charge ON wallet_transactions (call_id) WHERE kind = 'call-charge';

CREATE TABLE org_minute_usage (
    org_id TEXT NOT NULL REFERENCES orgs(id),
    month TEXT NOT NULL,
    minutes INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, month)
);

CREATE TABLE webhook_subscriptions (
    id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    url TEXT NOT NULL,
    events TEXT NOT NULL,
    secret TEXT NOT NULL,
    active BOOLEAN NOT NULL DEFAULT TRUE,
    created_at INTEGER NOT NULL
);
CREATE INDEX webhook_subscriptions_org ON webhook_subscriptions (org_id);

CREATE TABLE credentials (
    org_id TEXT NOT NULL REFERENCES orgs(id),
    kind TEXT NOT NULL,
    nonce TEXT NOT NULL,
    ciphertext TEXT NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (org_id, kind)
);

CREATE TABLE recordings (
    call_id TEXT PRIMARY KEY,
    org_id TEXT NOT NULL REFERENCES orgs(id),
    path TEXT NOT NULL,
    format TEXT NOT NULL,
    duration_ms INTEGER NOT NULL,
    bytes INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    deleted_at INTEGER
);
CREATE INDEX recordings_org ON recordings (org_id, created_at);
