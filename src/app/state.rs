//! Shared state handed to every HTTP handler and background job.

use crate::access::rate_limit::RateLimiter;
use crate::app::config::Settings;
use crate::calls::ledger::StoreLedger;
use crate::calls::welcome_cache::WelcomeCache;
use crate::domain::clock::SharedClock;
use crate::providers::resilience::Breakers;
use crate::store::Store;
use std::sync::Arc;
use voxline_actors::media_token::{MediaTokens, UsedTokens};

/// The application's shared state; cheap to clone.
#[derive(Clone)]
pub struct AppState {
    inner: Arc<AppInner>,
}

/// What [`AppState`] points at.
pub struct AppInner {
    /// Storage.
    pub store: Store,
    /// Time source.
    pub clock: SharedClock,
    /// Per-key request caps.
    pub limiter: Arc<RateLimiter>,
    /// Resolved settings.
    pub settings: Settings,
    /// Server secret for signatures.
    pub secret: Vec<u8>,
    /// The call engine.
    pub engine: crate::calls::media_stream::CallEngine,
    /// Records call outcomes (also used for calls the engine never held).
    pub ledger: Arc<StoreLedger>,
    /// Verifies media tokens.
    pub media_tokens: MediaTokens,
    /// Media tokens already used.
    pub used_tokens: UsedTokens,
    /// API key lookups, so authentication skips the database when it can.
    pub key_cache: crate::access::key_cache::KeyCache,
    /// Agent reads, so `GET /api/agents/{id}` skips the database when it can.
    pub agent_cache: crate::http::agent_cache::AgentCache,
    /// Warm welcome audio of awake agents.
    pub welcome_cache: Arc<WelcomeCache>,
    /// Scores post-call ratings.
    pub rater: Arc<crate::postcall::ratings::scoring::Rater>,
    /// Per-LLM-endpoint limit shared by analyses and ratings.
    pub postcall_slots: Arc<crate::postcall::llm_slots::LlmSlots>,
    /// This server's provider circuit breakers, shared by every selector it builds.
    pub breakers: Breakers,
    /// This node's id among the nodes sharing the database.
    pub node_id: crate::domain::NodeId,
    /// The base URL carriers and peers reach this node on: the configured
    /// public URL, or the bound address.
    pub public_url: String,
    /// The bus between nodes (Postgres); None on SQLite, where this is the only node.
    pub bus: Option<crate::cluster::bus::ClusterBus>,
    /// Finished call recordings, shared by the nodes.
    pub recordings: crate::recordings::RecordingStore,
    /// This node's draining flag and load, as the dispatcher reads them.
    pub node_status: Arc<crate::cluster::node_status::NodeStatus>,
}

impl AppInner {
    /// Marks a media token used; false when it was used before.
    pub fn claim_media_token(&self, token: &str, now_unix: i64) -> bool {
        self.used_tokens.claim(token, now_unix)
    }
}

impl AppState {
    /// Wraps the parts.
    pub fn new(inner: AppInner) -> Self {
        Self {
            inner: Arc::new(inner),
        }
    }

    /// This node as the leased-job worker sees it: its store, clock and id.
    pub fn worker_node(&self) -> crate::background::leased_worker::WorkerNode {
        crate::background::leased_worker::WorkerNode {
            store: self.store.clone(),
            clock: self.clock.clone(),
            node: self.node_id.clone(),
        }
    }
}

impl std::ops::Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.inner
    }
}
