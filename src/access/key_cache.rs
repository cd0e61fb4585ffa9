//! A cache of API key lookups, so an authenticated request costs no database
//! round trip for its key in the common case.
//!
//! Keys change in another process (the admin CLI revokes them or changes their
//! caps, another node serves the API that does), and a revocation must hold
//! within a second everywhere. On SQLite the store touches a marker file
//! beside the database on every such change; each lookup compares the
//! marker's stamp (one `stat`) with the one the cache was filled under and
//! drops everything when it moved, so the key's very next request sees it.
//! On Postgres the store moves an in-memory marker for this node's own
//! changes (seen by the next request here) and sends the key's hash on
//! [`KEYS_CHANNEL`] with the change; the cluster bus hands it to every node
//! within milliseconds of the commit, where that entry is dropped (and
//! everything after the bus reconnects, [`RESYNC`]).

use crate::cluster::bus::{ClusterBus, RESYNC};
use crate::store::marked_cache::{MarkedCache, Miss, follow};
use crate::store::nodes::KEYS_CHANNEL;
use crate::store::{KeyAuthRow, Store};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::broadcast;

/// How long an entry may be served even if no change was marked, bounding
/// staleness should a change ever bypass the store.
const ENTRY_TTL: Duration = Duration::from_secs(30);

/// Entries kept at most; beyond it the cache starts over.
const MAX_ENTRIES: usize = 10_000;

/// Key lookups by SHA-256 hash, invalidated by the store's change marker and
/// the other nodes' notices.
#[derive(Clone)]
pub struct KeyCache {
    rows: Arc<MarkedCache<String, KeyAuthRow>>,
}

impl KeyCache {
    /// A cache over `store`'s key marker, following `bus` for the other
    /// nodes' changes; off when the store has no marker, or when its marker
    /// sees only this process and no bus tells of the others.
    pub fn new(store: &Store, bus: Option<&ClusterBus>) -> Self {
        let notices = bus.and_then(|bus| bus.subscribe(KEYS_CHANNEL));
        Self::following(store, notices)
    }

    /// [`KeyCache::new`] over a receiver of the keys channel's payloads.
    fn following(store: &Store, notices: Option<broadcast::Receiver<String>>) -> Self {
        let marker = store
            .keys_marker()
            .filter(|marker| !marker.is_local() || notices.is_some())
            .cloned();
        let rows = Arc::new(MarkedCache::new(marker, ENTRY_TTL, MAX_ENTRIES));
        if let Some(notices) = notices {
            tokio::spawn(follow(Arc::downgrade(&rows), notices, |hash| {
                (hash != RESYNC).then(|| hash.to_string())
            }));
        }
        Self { rows }
    }

    /// The cached row for `hash`, or a [`Miss`] to fill it with.
    pub fn get(&self, hash: &str) -> Result<KeyAuthRow, Option<Miss>> {
        self.rows.get(hash)
    }

    /// Keeps `row` unless a change was marked or noticed since `miss` was taken.
    pub fn put(&self, miss: Miss, hash: &str, row: &KeyAuthRow) {
        self.rows.put(miss, hash.to_string(), row.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{ApiKeyId, OrgId};

    fn row(id: ApiKeyId, revoked: bool) -> KeyAuthRow {
        KeyAuthRow {
            id,
            org_id: OrgId::new(),
            daily_limit: 10,
            monthly_limit: 100,
            revoked_at: revoked.then_some(1),
        }
    }

    async fn sqlite_store(dir: &tempfile::TempDir) -> Store {
        let url = format!("sqlite://{}", dir.path().join("k.db").display());
        Store::connect(&url, 2).await.expect("store")
    }

    #[tokio::test]
    async fn a_marked_change_drops_every_entry() {
        let dir = tempfile::tempdir().expect("dir");
        let store = sqlite_store(&dir).await;
        let cache = KeyCache::new(&store, None);
        let k1 = ApiKeyId::new();
        let miss = cache.get("h1").expect_err("empty").expect("enabled");
        cache.put(miss, "h1", &row(k1, false));
        assert_eq!(cache.get("h1").map(|r| r.id).ok(), Some(k1));
        // A revocation through the store (as the admin CLI does) marks a change.
        store.revoke_api_key(k1, 5).await.expect("revoke");
        assert!(cache.get("h1").is_err(), "the entry must be dropped");
    }

    #[tokio::test]
    async fn a_row_read_across_a_change_is_not_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let store = sqlite_store(&dir).await;
        let cache = KeyCache::new(&store, None);
        let (k1, k2) = (ApiKeyId::new(), ApiKeyId::new());
        let miss = cache.get("h1").expect_err("empty").expect("enabled");
        // Another request notices a change while this one reads the database.
        store.set_api_key_limits(k1, 1, 2).await.expect("limits");
        let other = cache.get("h2").expect_err("empty").expect("enabled");
        cache.put(other, "h2", &row(k2, false));
        cache.put(miss, "h1", &row(k1, false));
        assert!(cache.get("h1").is_err(), "a stale read must not be cached");
        assert!(cache.get("h2").is_ok());
    }

    #[tokio::test]
    async fn memory_stores_disable_the_cache() {
        let store = Store::connect("sqlite::memory:", 2).await.expect("store");
        let cache = KeyCache::new(&store, None);
        assert!(matches!(cache.get("h"), Err(None)));
    }

    #[tokio::test]
    async fn a_resync_drops_every_entry_and_a_named_key_only_its_own() {
        let dir = tempfile::tempdir().expect("dir");
        let store = sqlite_store(&dir).await;
        let (tx, rx) = broadcast::channel(8);
        let cache = KeyCache::following(&store, Some(rx));
        for hash in ["h1", "h2", "h3"] {
            let miss = cache.get(hash).expect_err("empty").expect("enabled");
            cache.put(miss, hash, &row(ApiKeyId::new(), false));
        }
        tx.send("h1".to_string()).expect("send");
        until(|| cache.get("h1").is_err()).await;
        assert!(cache.get("h2").is_ok() && cache.get("h3").is_ok());
        tx.send(RESYNC.to_string()).expect("send");
        until(|| cache.get("h2").is_err() && cache.get("h3").is_err()).await;
    }

    /// Yields to the follower until `done`, for at most five seconds.
    async fn until(done: impl Fn() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "notice not applied");
            tokio::task::yield_now().await;
        }
    }
}
