-- Call reads at scale (issue 3 point 7).
--
-- 1. Per-(workspace, provider, status) call counters kept by triggers, so list
--    totals, list stats and dashboard breakdowns need no COUNT over calls.
--    (SQLite only: it has one writer, so the counter rows never deadlock.
--    Postgres counts with grouped queries instead.)
-- 2. A covering listing index: filtered pages walk it in list order and
--    test status and provider without reading the call rows they skip.
-- 3. A trigram index over the target name, phone and agent name, so `search`
--    (a case-insensitive substring of any of them) is an index lookup, not a
--    scan of the workspace's calls.

CREATE TABLE call_status_counts (
    org_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    status TEXT NOT NULL,
    calls INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (org_id, provider, status)
) WITHOUT ROWID;

INSERT INTO call_status_counts (org_id, provider, status, calls)
    SELECT org_id, provider, status, COUNT(*) FROM calls WHERE true GROUP BY org_id, provider, status;

CREATE TRIGGER call_status_counts_insert AFTER INSERT ON calls BEGIN
    INSERT INTO call_status_counts (org_id, provider, status, calls)
        VALUES (new.org_id, new.provider, new.status, 1)
        ON CONFLICT (org_id, provider, status) DO UPDATE SET calls = calls + 1;
END;

CREATE TRIGGER call_status_counts_update AFTER UPDATE OF org_id, provider, status ON calls
WHEN old.org_id IS NOT new.org_id OR old.provider IS NOT new.provider OR old.status IS NOT new.status
BEGIN
    UPDATE call_status_counts SET calls = calls - 1
        WHERE org_id = old.org_id AND provider = old.provider AND status = old.status;
    INSERT INTO call_status_counts (org_id, provider, status, calls)
        VALUES (new.org_id, new.provider, new.status, 1)
        ON CONFLICT (org_id, provider, status) DO UPDATE SET calls = calls + 1;
END;

CREATE TRIGGER call_status_counts_delete AFTER DELETE ON calls BEGIN
    UPDATE call_status_counts SET calls = calls - 1
        WHERE org_id = old.org_id AND provider = old.provider AND status = old.status;
END;

CREATE INDEX calls_org_listing ON calls (org_id, created_at DESC, id DESC, status, provider);

CREATE VIRTUAL TABLE calls_who_fts USING fts5(
    target_name, phone, agent_name,
    content='calls', content_rowid='rowid', tokenize='trigram'
);
INSERT INTO calls_who_fts (calls_who_fts) VALUES ('rebuild');

CREATE TRIGGER calls_who_fts_insert AFTER INSERT ON calls BEGIN
    INSERT INTO calls_who_fts (rowid, target_name, phone, agent_name)
        VALUES (new.rowid, new.target_name, new.phone, new.agent_name);
END;
CREATE TRIGGER calls_who_fts_update AFTER UPDATE OF target_name, phone, agent_name ON calls BEGIN
    INSERT INTO calls_who_fts (calls_who_fts, rowid, target_name, phone, agent_name)
        VALUES ('delete', old.rowid, old.target_name, old.phone, old.agent_name);
    INSERT INTO calls_who_fts (rowid, target_name, phone, agent_name)
        VALUES (new.rowid, new.target_name, new.phone, new.agent_name);
END;
CREATE TRIGGER calls_who_fts_delete AFTER DELETE ON calls BEGIN
    INSERT INTO calls_who_fts (calls_who_fts, rowid, target_name, phone, agent_name)
        VALUES ('delete', old.rowid, old.target_name, old.phone, old.agent_name);
END;
