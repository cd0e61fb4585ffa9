//! What post-call work runs on, gathered once at start: analyses and ratings,
//! whether the leased-job worker or a request runs them, take a
//! [`PostcallService`].

use super::llm_slots::LlmSlots;
use super::ratings::scoring::Rater;
use crate::background::leased_worker::WorkerNode;
use crate::domain::NodeId;
use crate::domain::clock::SharedClock;
use crate::store::Store;
use std::sync::Arc;

/// The post-call room's dependencies; cheap to clone.
#[derive(Clone)]
pub struct PostcallService {
    /// Where calls, analyses and ratings are stored.
    pub(crate) store: Store,
    /// Time source for leases and stamps.
    pub(crate) clock: SharedClock,
    /// This node, the holder of the leases it takes.
    pub(crate) node_id: NodeId,
    /// Scores ratings, and selects the models analyses ask.
    pub(crate) rater: Arc<Rater>,
    /// The per-LLM-endpoint limit analyses and ratings share.
    pub(crate) postcall_slots: Arc<LlmSlots>,
}

impl PostcallService {
    /// The service over these parts.
    pub fn new(
        store: Store,
        clock: SharedClock,
        node_id: NodeId,
        rater: Arc<Rater>,
        postcall_slots: Arc<LlmSlots>,
    ) -> Self {
        Self {
            store,
            clock,
            node_id,
            rater,
            postcall_slots,
        }
    }

    /// This node as the leased-job worker sees it.
    pub fn worker_node(&self) -> WorkerNode {
        WorkerNode {
            store: self.store.clone(),
            clock: self.clock.clone(),
            node: self.node_id.clone(),
        }
    }
}
