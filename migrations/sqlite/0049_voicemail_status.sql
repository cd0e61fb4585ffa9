-- A call may end `voicemail` (an answering machine took it). SQLite stores the
-- status as free text and has no dispatch trigger (one node dispatches in
-- process), so nothing changes here; the number stays in step with Postgres.
SELECT 1;
