-- A call's recording may also be kept as Ogg Opus (issue 21.3, built with the
-- `opus` feature): the row names that object beside the WAV's, and its size.
-- Both are null when only the WAV exists.
ALTER TABLE recordings ADD COLUMN ogg_object_key TEXT;
ALTER TABLE recordings ADD COLUMN ogg_bytes BIGINT;
