//! Recovery touches only the dead: when a peer's heartbeat is older than the
//! lease, exactly one survivor claims it (a conditional update), ends its
//! live calls with `node-lost` billed to their last sign of life, hands its
//! claimed queued calls back to every node's dispatcher and gives up its
//! batch leases. A live peer's calls are never touched.

use crate::app::state::AppState;
use crate::calls::dispatch::end_orphans;
use crate::store::{LEASED_JOB_TABLES, StoreError};
use voxline_actors::ended_reason::EndedReason;

/// One reaper pass; returns the calls it ended.
pub async fn recover_dead_peers(state: &AppState) -> Result<usize, StoreError> {
    let store = &state.store;
    if !store.is_shared() {
        return Ok(0);
    }
    let now = state.clock.now().timestamp_millis();
    let lease_ms = state.settings.node.lease_ms();
    for peer in store.expired_nodes(&state.node_id, now, lease_ms).await? {
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
    for peer in store.lost_nodes_with_calls(&state.node_id).await? {
        let orphans = store.live_calls_of_node(Some(&peer)).await?;
        end_orphans(state, &orphans, EndedReason::NodeLost).await;
        let requeued = store.release_queued_calls_of_node(Some(&peer)).await?;
        store.release_batch_leases_of_node(&peer).await?;
        tracing::warn!(node = %peer, ended = orphans.len(), requeued, "recovered a lost peer's calls");
        ended += orphans.len();
    }
    Ok(ended)
}
