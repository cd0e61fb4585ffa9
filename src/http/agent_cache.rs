//! A cache of agent reads, so `GET /api/agents/{id}` costs no database round
//! trip and no JSON rendering in the common case.
//!
//! Every agent write goes through the store, which marks the agents change
//! marker beside the SQLite database after committing and before the write's
//! response; each lookup compares that marker's stamp (one `stat`), so an
//! update made by this or any other process on the same database is visible
//! to the very next read. Postgres deployments span machines that share no
//! file, so there the cache is off.

use crate::domain::AgentId;
use crate::store::marked_cache::{MarkedCache, Miss};
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

/// Agent reads by agent id, invalidated by the store's agents marker.
pub struct AgentCache {
    entries: MarkedCache<AgentId, Arc<CachedAgent>>,
}

impl AgentCache {
    /// A cache over `store`'s agents marker; disabled when the store has none.
    pub fn new(store: &Store) -> Self {
        Self {
            entries: MarkedCache::new(store.agents_marker().cloned(), ENTRY_TTL, MAX_ENTRIES),
        }
    }

    /// The cached read of agent `id`, or a [`Miss`] to fill it with.
    pub fn get(&self, id: AgentId) -> Result<Arc<CachedAgent>, Option<Miss>> {
        self.entries.get(&id)
    }

    /// Keeps `agent` unless a change was marked since `miss` was taken.
    pub fn put(&self, miss: Miss, agent: Arc<CachedAgent>) {
        self.entries.put(miss, agent.row.id, agent);
    }
}
