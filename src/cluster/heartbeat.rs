//! The node's heartbeat: every few seconds it stamps its row with its load,
//! and reads back what operators and peers decided (drain, lost).

use crate::app::state::AppState;
use crate::store::StoreError;
use crate::store::nodes::NodeLoad;

/// One heartbeat; applies the answer to the node's status.
pub async fn beat(state: &AppState) -> Result<(), StoreError> {
    let live_calls = i64::try_from(state.engine.live_calls()).unwrap_or(i64::MAX);
    let overloaded = state
        .settings
        .node
        .max_live_calls
        .is_some_and(|max| live_calls >= i64::from(max));
    let cpu_permille = state.node_status.cpu_permille();
    state.node_status.set_load(cpu_permille, overloaded);
    let now = state.clock.now().timestamp_millis();
    let load = NodeLoad {
        live_calls,
        cpu_permille,
        overloaded,
    };
    let orders = state
        .store
        .node_heartbeat(&state.node_id, load, now)
        .await?;
    state.node_status.set_draining(orders.draining);
    if orders.lost {
        // A stall longer than the lease: a peer ended this node's calls and
        // requeued its work. Come back as a fresh node; the calls still
        // running here find their ends already recorded.
        tracing::error!(node = %state.node_id, "peers took this node for lost; registering again");
        let url = state.settings.public_url.clone().unwrap_or_default();
        state.store.register_node(&state.node_id, &url, now).await?;
    }
    Ok(())
}
