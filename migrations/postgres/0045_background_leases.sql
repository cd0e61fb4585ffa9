-- Background work claimed across nodes (issue 20). A webhook delivery is
-- claimed under a lease like ratings and analyses, so two nodes never send
-- the same row at once, and a dead node's claims come back when the lease
-- runs out. Every lease records the node that holds it, so a node's start
-- frees only its own leases, never a live peer's.
ALTER TABLE webhook_deliveries ADD COLUMN lease_owner TEXT;
ALTER TABLE webhook_deliveries ADD COLUMN lease_until BIGINT NOT NULL DEFAULT 0;
ALTER TABLE ratings ADD COLUMN lease_owner TEXT;
ALTER TABLE call_analyses ADD COLUMN lease_owner TEXT;
