-- A call may end `voicemail` (an answering machine took it). That is a terminal
-- status like the others, so the slot it frees wakes the dispatchers too.
DROP TRIGGER calls_wake_on_change ON calls;
CREATE TRIGGER calls_wake_on_change AFTER UPDATE OF status, dispatched ON calls
    FOR EACH ROW WHEN (
        (NEW.status IN ('completed', 'failed', 'no-answer', 'busy', 'canceled', 'voicemail')
            AND OLD.status IN ('queued', 'ringing', 'in-progress'))
        OR (NEW.status = 'queued' AND NOT NEW.dispatched AND OLD.dispatched))
    EXECUTE FUNCTION voxline_wake_dispatch();
