-- Batch reads while a batch dials, on Postgres (issue 6).
--
-- SQLite keeps per-(batch, status) counter rows updated by row triggers
-- (sqlite/0021). On Postgres, concurrent transactions updating shared counter
-- rows can deadlock when multi-row transitions (a retry, a stop) take them in
-- different orders, and a failed transition could be a call's terminal
-- transaction. So item transitions only ever INSERT signed deltas (no row is
-- contended), one row per (batch, status) per statement, and a single folder
-- (`Store::fold_batch_item_counts`, under an advisory lock) moves them into
-- the counter rows every second. A read sums the counters and the few deltas
-- not folded yet, in one statement, so it is always exact.

CREATE TABLE batch_item_counts (
    batch_id TEXT NOT NULL,
    status TEXT NOT NULL,
    items BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (batch_id, status)
);

CREATE TABLE batch_item_count_deltas (
    id BIGSERIAL PRIMARY KEY,
    batch_id TEXT NOT NULL,
    status TEXT NOT NULL,
    delta BIGINT NOT NULL
);
CREATE INDEX batch_item_count_deltas_batch ON batch_item_count_deltas (batch_id);

-- Transition tables make each statement write one delta per (batch, status)
-- it changed, however many items it touched (an upload of 10,000 items is
-- one row). A trigger with transition tables handles one event only, hence three.
CREATE FUNCTION batch_item_counts_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO batch_item_count_deltas (batch_id, status, delta)
        SELECT batch_id, status, COUNT(*) FROM new_items GROUP BY batch_id, status;
    RETURN NULL;
END $$;

CREATE FUNCTION batch_item_counts_deleted() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO batch_item_count_deltas (batch_id, status, delta)
        SELECT batch_id, status, -COUNT(*) FROM old_items GROUP BY batch_id, status;
    RETURN NULL;
END $$;

CREATE FUNCTION batch_item_counts_updated() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO batch_item_count_deltas (batch_id, status, delta)
        SELECT batch_id, status, SUM(delta) FROM (
            SELECT batch_id, status, -1 AS delta FROM old_items
            UNION ALL
            SELECT batch_id, status, 1 FROM new_items
        ) changed
        GROUP BY batch_id, status
        HAVING SUM(delta) <> 0;
    RETURN NULL;
END $$;

CREATE TRIGGER batch_item_counts_inserted AFTER INSERT ON batch_items
REFERENCING NEW TABLE AS new_items
FOR EACH STATEMENT EXECUTE FUNCTION batch_item_counts_inserted();

CREATE TRIGGER batch_item_counts_deleted AFTER DELETE ON batch_items
REFERENCING OLD TABLE AS old_items
FOR EACH STATEMENT EXECUTE FUNCTION batch_item_counts_deleted();

CREATE TRIGGER batch_item_counts_updated AFTER UPDATE ON batch_items
REFERENCING OLD TABLE AS old_items NEW TABLE AS new_items
FOR EACH STATEMENT EXECUTE FUNCTION batch_item_counts_updated();

-- Items written before this migration.
INSERT INTO batch_item_counts (batch_id, status, items)
    SELECT batch_id, status, COUNT(*) FROM batch_items GROUP BY batch_id, status;
