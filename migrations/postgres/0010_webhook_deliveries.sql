-- The webhook outbox: one row per (event, subscription) delivery, written in
-- the same transaction that makes a call terminal, so no event is lost.
CREATE TABLE webhook_deliveries (
    id TEXT PRIMARY KEY,
    event_id TEXT NOT NULL,
    event TEXT NOT NULL,
    subscription_id TEXT NOT NULL REFERENCES webhook_subscriptions(id),
    org_id TEXT NOT NULL,
    call_id TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    delivered_at BIGINT
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (status, next_attempt_at);
CREATE INDEX webhook_deliveries_call ON webhook_deliveries (call_id);
