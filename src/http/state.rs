//! The HTTP layer's shared state: every part a handler or the console may
//! take, built once in `app::server` and handed out by `FromRef`.

use crate::access::rate_limit::RateLimiter;
use crate::calls::ledger::StoreLedger;
use crate::calls::welcome_cache::WelcomeCache;
use crate::config::Settings;
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
    pub settings: Arc<Settings>,
    /// Server secret for signatures.
    pub secret: crate::secrets::server_secret::ServerSecret,
    /// Workspace carrier accounts, kept once opened (dials and callbacks share them).
    pub credentials: Arc<crate::carriers::store_wiring::StoreCredentials>,
    /// The call engine.
    pub engine: crate::calls::media_stream::CallEngine,
    /// Records call outcomes (also used for calls the engine never held).
    pub ledger: Arc<StoreLedger>,
    /// Verifies media tokens.
    pub media_tokens: MediaTokens,
    /// Media tokens already used.
    pub used_tokens: Arc<UsedTokens>,
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
    /// Agents: their saves, lifecycle and text chat.
    pub agents: crate::agents::service::AgentService,
    /// Post-call analyses and ratings.
    pub postcall: crate::postcall::service::PostcallService,
    /// Placing, dispatching and failing calls.
    pub calls: crate::calls::service::CallService,
    /// Batches and campaigns: their lifecycle, items and feed.
    pub batches: crate::batches::service::BatchService,
    /// This node's cluster work: heartbeat, dispatcher, call orders, reaper.
    pub cluster: crate::cluster::service::ClusterService,
    /// Answering the workspace's numbers.
    pub inbound: crate::inbound::service::InboundService,
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
        self.postcall.worker_node()
    }
}

impl std::ops::Deref for AppState {
    type Target = AppInner;
    fn deref(&self) -> &AppInner {
        &self.inner
    }
}

/// Lets a handler take one part of the state (`State<Store>`,
/// `State<CallService>`), so its signature says what it uses.
macro_rules! state_parts {
    ($($part:ty => |$inner:ident| $get:expr;)*) => {
        $(
            impl axum::extract::FromRef<AppState> for $part {
                fn from_ref(state: &AppState) -> Self {
                    let $inner: &AppInner = state;
                    $get
                }
            }
        )*
    };
}

state_parts! {
    MediaTokens => |s| s.media_tokens.clone();
    crate::inbound::service::InboundService => |s| s.inbound.clone();
    Arc<UsedTokens> => |s| s.used_tokens.clone();
    Arc<Settings> => |s| s.settings.clone();
    crate::secrets::server_secret::ServerSecret => |s| s.secret.clone();
    crate::store::Store => |s| s.store.clone();
    crate::domain::clock::SharedClock => |s| s.clock.clone();
    Arc<RateLimiter> => |s| s.limiter.clone();
    crate::calls::media_stream::CallEngine => |s| s.engine.clone();
    Arc<StoreLedger> => |s| s.ledger.clone();
    crate::access::key_cache::KeyCache => |s| s.key_cache.clone();
    crate::http::agent_cache::AgentCache => |s| s.agent_cache.clone();
    Arc<WelcomeCache> => |s| s.welcome_cache.clone();
    Arc<crate::postcall::ratings::scoring::Rater> => |s| s.rater.clone();
    Arc<crate::postcall::llm_slots::LlmSlots> => |s| s.postcall_slots.clone();
    Breakers => |s| s.breakers.clone();
    crate::domain::NodeId => |s| s.node_id.clone();
    Option<crate::cluster::bus::ClusterBus> => |s| s.bus.clone();
    crate::recordings::RecordingStore => |s| s.recordings.clone();
    Arc<crate::cluster::node_status::NodeStatus> => |s| s.node_status.clone();
    crate::agents::service::AgentService => |s| s.agents.clone();
    crate::calls::service::CallService => |s| s.calls.clone();
    crate::postcall::service::PostcallService => |s| s.postcall.clone();
    crate::batches::service::BatchService => |s| s.batches.clone();
    crate::cluster::service::ClusterService => |s| s.cluster.clone();
}
