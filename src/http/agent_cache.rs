//! A cache of agent reads, so `GET /api/agents/{id}` costs no database round
//! trip and no JSON rendering in the common case.
//!
//! Every agent write goes through the store, which marks the agents change
//! marker after committing and before the write's response. On SQLite the
//! marker is a file beside the database and each lookup compares its stamp
//! (one `stat`), so an update made by this or any other process on the same
//! database is visible to the very next read. On Postgres the marker is in
//! memory (this node's own writes, seen by its next read), and the store sends
//! the agent's id on [`AGENTS_CHANNEL`] with the change: the cluster bus hands
//! it to every node within milliseconds of the commit, where that entry is
//! dropped (and everything after the bus reconnects, [`RESYNC`]).

use crate::cluster::bus::{ClusterBus, RESYNC};
use crate::domain::AgentId;
use crate::store::marked_cache::{MarkedCache, Miss, follow};
use crate::store::nodes::AGENTS_CHANNEL;
use crate::store::{AgentRow, Store};
use bytes::Bytes;
use std::sync::Arc;
use std::time::Duration;

/// How long an entry may be served even if no change was marked, bounding
/// staleness should a change ever bypass the store.
const ENTRY_TTL: Duration = Duration::from_secs(30);

/// Entries kept at most; beyond it the cache starts over.
const MAX_ENTRIES: usize = 10_000;

/// One agent as read, with the JSON body every read of it answers.
#[derive(Debug)]
pub struct CachedAgent {
    /// The stored row (its workspace and status decide who may see it).
    pub row: AgentRow,
    /// The rendered JSON of the agent's view.
    pub body: Bytes,
}

/// Agent reads by agent id, invalidated by the store's agents marker and the
/// other nodes' notices.
#[derive(Clone)]
pub struct AgentCache {
    entries: Arc<MarkedCache<AgentId, Arc<CachedAgent>>>,
}

impl AgentCache {
    /// A cache over `store`'s agents marker, following `bus` for the other
    /// nodes' changes; off when the store has no marker, or when its marker
    /// sees only this process and no bus tells of the others.
    pub fn new(store: &Store, bus: Option<&ClusterBus>) -> Self {
        let notices = bus.and_then(|bus| bus.subscribe(AGENTS_CHANNEL));
        let marker = store
            .agents_marker()
            .filter(|marker| !marker.is_local() || notices.is_some())
            .cloned();
        let entries = Arc::new(MarkedCache::new(marker, ENTRY_TTL, MAX_ENTRIES));
        if let Some(notices) = notices {
            // Anything but an agent id (the resync) drops every entry.
            tokio::spawn(follow(Arc::downgrade(&entries), notices, |id| {
                if id == RESYNC { None } else { id.parse().ok() }
            }));
        }
        Self { entries }
    }

    /// The cached read of agent `id`, or a [`Miss`] to fill it with.
    pub fn get(&self, id: AgentId) -> Result<Arc<CachedAgent>, Option<Miss>> {
        self.entries.get(&id)
    }

    /// Keeps `agent` unless a change was marked or noticed since `miss` was taken.
    pub fn put(&self, miss: Miss, agent: Arc<CachedAgent>) {
        self.entries.put(miss, agent.row.id, agent);
    }
}
