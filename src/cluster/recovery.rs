//! Recovery touches only the dead: when a peer's heartbeat is older than the
//! lease, exactly one survivor claims it (a conditional update), ends its
//! live calls with `node-lost` billed to their last sign of life, hands its
//! claimed queued calls back to every node's dispatcher and gives up its
//! batch leases. A live peer's calls are never touched.

use super::service::ClusterService;
use crate::store::{LEASED_JOB_TABLES, StoreError};
use voxline_actors::ended_reason::EndedReason;

impl ClusterService {
    /// One reaper pass; returns the calls it ended.
    pub async fn recover_dead_peers(&self) -> Result<usize, StoreError> {
        let store = &self.store;
        if !store.is_shared() {
            return Ok(0);
        }
        let now = self.clock.now().timestamp_millis();
        let lease_ms = self.node.lease_ms();
        for peer in store.expired_nodes(&self.node_id, now, lease_ms).await? {
            if store.claim_dead_node(&peer, now, lease_ms).await? {
                tracing::warn!(node = %peer, "a peer's lease ran out; recovering its work");
                // Its batches, webhooks and post-call work go to the survivors
                // now, not when their leases would have run out.
                store.release_batch_leases_of_node(&peer).await?;
                for jobs in LEASED_JOB_TABLES {
                    store.release_job_leases(jobs, &peer).await?;
                }
            }
        }
        let mut ended = 0;
        for peer in store.lost_nodes_with_calls(&self.node_id).await? {
            let orphans = store.live_calls_of_node(Some(&peer)).await?;
            self.calls
                .end_orphans(&orphans, EndedReason::NodeLost)
                .await;
            let requeued = store.release_queued_calls_of_node(Some(&peer)).await?;
            store.release_batch_leases_of_node(&peer).await?;
            tracing::warn!(node = %peer, ended = orphans.len(), requeued, "recovered a lost peer's calls");
            ended += orphans.len();
        }
        Ok(ended)
    }
}
