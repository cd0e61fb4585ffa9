//! What this node's cluster work runs on, gathered once at start: the
//! heartbeat, the dispatcher, call orders between nodes and the reaper all
//! take a [`ClusterService`].

use super::bus::ClusterBus;
use super::node_status::NodeStatus;
use crate::calls::media_stream::CallEngine;
use crate::calls::service::CallService;
use crate::config::NodeSettings;
use crate::domain::NodeId;
use crate::domain::clock::SharedClock;
use crate::store::Store;
use std::sync::Arc;

/// The cluster room's dependencies; cheap to clone.
#[derive(Clone)]
pub struct ClusterService {
    /// Where nodes, leases and calls are stored.
    pub(crate) store: Store,
    /// Time source for heartbeats and leases.
    pub(crate) clock: SharedClock,
    /// This node's engine.
    pub(crate) engine: CallEngine,
    /// This node's id.
    pub(crate) node_id: NodeId,
    /// Placing, dispatching and failing calls.
    pub(crate) calls: CallService,
    /// Heartbeat, lease and overload settings.
    pub(crate) node: NodeSettings,
    /// The base URL peers reach this node on.
    pub(crate) public_url: String,
    /// The bus between nodes; None on SQLite, where this is the only node.
    pub(crate) bus: Option<ClusterBus>,
    /// This node's draining flag and load.
    pub(crate) node_status: Arc<NodeStatus>,
}

/// The parts a [`ClusterService`] is built of, named so a call site reads.
pub struct ClusterParts {
    /// The calls room, whose store, clock, engine and node id the cluster shares.
    pub calls: CallService,
    /// Heartbeat, lease and overload settings.
    pub node: NodeSettings,
    /// The base URL peers reach this node on.
    pub public_url: String,
    /// The bus between nodes, if any.
    pub bus: Option<ClusterBus>,
    /// This node's draining flag and load.
    pub node_status: Arc<NodeStatus>,
}

impl ClusterService {
    /// The service over `parts`.
    pub fn new(parts: ClusterParts) -> Self {
        let calls = parts.calls;
        Self {
            store: calls.store.clone(),
            clock: calls.clock.clone(),
            engine: calls.engine.clone(),
            node_id: calls.node_id.clone(),
            calls,
            node: parts.node,
            public_url: parts.public_url,
            bus: parts.bus,
            node_status: parts.node_status,
        }
    }
}
