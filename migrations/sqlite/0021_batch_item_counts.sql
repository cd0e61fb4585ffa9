-- Batch reads while a batch dials (issue 6).
--
-- Per-(batch, status) item counters kept by triggers on every item insert,
-- transition and delete, so a batch's progress and its item totals read a few
-- counter rows instead of counting items while the dialer writes them.
-- (SQLite only, like call_status_counts in 0020: it has one writer, so the
-- counter rows never deadlock. Postgres counts over batch_items_status.)

CREATE TABLE batch_item_counts (
    batch_id TEXT NOT NULL,
    status TEXT NOT NULL,
    items INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, status)
) WITHOUT ROWID;

INSERT INTO batch_item_counts (batch_id, status, items)
    SELECT batch_id, status, COUNT(*) FROM batch_items WHERE true GROUP BY batch_id, status;

CREATE TRIGGER batch_item_counts_insert AFTER INSERT ON batch_items BEGIN
    INSERT INTO batch_item_counts (batch_id, status, items)
        VALUES (new.batch_id, new.status, 1)
        ON CONFLICT (batch_id, status) DO UPDATE SET items = items + 1;
END;

CREATE TRIGGER batch_item_counts_update AFTER UPDATE OF batch_id, status ON batch_items
WHEN old.batch_id IS NOT new.batch_id OR old.status IS NOT new.status
BEGIN
    UPDATE batch_item_counts SET items = items - 1
        WHERE batch_id = old.batch_id AND status = old.status;
    INSERT INTO batch_item_counts (batch_id, status, items)
        VALUES (new.batch_id, new.status, 1)
        ON CONFLICT (batch_id, status) DO UPDATE SET items = items + 1;
END;

CREATE TRIGGER batch_item_counts_delete AFTER DELETE ON batch_items BEGIN
    UPDATE batch_item_counts SET items = items - 1
        WHERE batch_id = old.batch_id AND status = old.status;
END;

-- A deleted batch's items go with it (the item trigger above empties the
-- counters first); this drops the emptied counter rows.
CREATE TRIGGER batch_item_counts_batch_delete AFTER DELETE ON batches BEGIN
    DELETE FROM batch_item_counts WHERE batch_id = old.id;
END;
