-- Recordings live in an object store (issue 20.8): a row names its object's
-- key in the store, not a path on one node's disk. Rows written before held
-- `<data_dir>/recordings/{org}/{call}.{format}`, which is that key under the
-- default local store.
ALTER TABLE recordings RENAME COLUMN path TO object_key;
UPDATE recordings SET object_key = org_id || '/' || call_id || '.' || format;
