-- Issue 21.6, webhook secret rotation: the secret a subscription had before
-- its last rotation stays valid until `previous_secret_expires_at` (Unix ms);
-- until then deliveries carry a signature under each. Secrets are stored as
-- the current one is: plain, since the service must sign with them.
ALTER TABLE webhook_subscriptions ADD COLUMN previous_secret TEXT;
ALTER TABLE webhook_subscriptions ADD COLUMN previous_secret_expires_at BIGINT;
-- The delivery log, per subscription (`admin webhook deliveries --subscription`).
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (subscription_id, created_at);

-- Issue 21.5, email: a batch or campaign item's address, which its calls
-- carry in `calls.email` (searched with the name and phone).
ALTER TABLE batch_items ADD COLUMN email TEXT;
