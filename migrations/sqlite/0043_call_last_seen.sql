-- The last sign of life of a live call: stamped every couple of seconds while
-- its conversation runs, so that after a crash the restart bills an answered
-- call up to here instead of up to its last stored turn, which may be long ago.
ALTER TABLE calls ADD COLUMN last_seen_at BIGINT;
