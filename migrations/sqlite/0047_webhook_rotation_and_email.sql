-- Issue 21.6, webhook secret rotation: the secret a subscription had before
-- its last rotation stays valid until `previous_secret_expires_at` (Unix ms);
-- until then deliveries carry a signature under each. Secrets are stored as
-- the current one is: plain, since the service must sign with them.
ALTER TABLE webhook_subscriptions ADD COLUMN previous_secret TEXT;
ALTER TABLE webhook_subscriptions ADD COLUMN previous_secret_expires_at BIGINT;
-- The delivery log, per subscription (`admin webhook deliveries --subscription`).
CREATE INDEX webhook_deliveries_subscription ON webhook_deliveries (subscription_id, created_at);

-- Issue 21.5, email: a batch or campaign item's address, which its calls
-- carry in `calls.email`; `search` matches it like the name and phone, so the
-- trigram index over them (0020) is rebuilt with it.
ALTER TABLE batch_items ADD COLUMN email TEXT;

DROP TRIGGER calls_who_fts_insert;
DROP TRIGGER calls_who_fts_update;
DROP TRIGGER calls_who_fts_delete;
DROP TABLE calls_who_fts;

CREATE VIRTUAL TABLE calls_who_fts USING fts5(
    target_name, phone, agent_name, email,
    content='calls', content_rowid='rowid', tokenize='trigram'
);
INSERT INTO calls_who_fts (calls_who_fts) VALUES ('rebuild');

CREATE TRIGGER calls_who_fts_insert AFTER INSERT ON calls BEGIN
    INSERT INTO calls_who_fts (rowid, target_name, phone, agent_name, email)
        VALUES (new.rowid, new.target_name, new.phone, new.agent_name, new.email);
END;
CREATE TRIGGER calls_who_fts_update AFTER UPDATE OF target_name, phone, agent_name, email ON calls BEGIN
    INSERT INTO calls_who_fts (calls_who_fts, rowid, target_name, phone, agent_name, email)
        VALUES ('delete', old.rowid, old.target_name, old.phone, old.agent_name, old.email);
    INSERT INTO calls_who_fts (rowid, target_name, phone, agent_name, email)
        VALUES (new.rowid, new.target_name, new.phone, new.agent_name, new.email);
END;
CREATE TRIGGER calls_who_fts_delete AFTER DELETE ON calls BEGIN
    INSERT INTO calls_who_fts (calls_who_fts, rowid, target_name, phone, agent_name, email)
        VALUES ('delete', old.rowid, old.target_name, old.phone, old.agent_name, old.email);
END;
