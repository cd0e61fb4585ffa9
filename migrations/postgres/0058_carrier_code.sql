-- The carrier's final answer to a call, where the carrier has codes (issue 33:
-- the SIP status code that ended an unanswered INVITE, or 200 once answered).
ALTER TABLE calls ADD COLUMN carrier_code INTEGER;
