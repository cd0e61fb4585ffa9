//! A cache of API key lookups, so an authenticated request costs no database
//! round trip for its key in the common case.
//!
//! Keys change in another process (the admin CLI revokes them or changes their
//! caps), and a revocation must hold on the key's very next request. The store
//! touches a marker file beside the SQLite database on every such change; each
//! lookup compares the marker's modification stamp (one `stat`) with the one
//! the cache was filled under and drops everything when it moved. Postgres
//! deployments span machines that share no file, so there the cache is off.

use crate::store::marked_cache::{MarkedCache, Miss};
use crate::store::{KeyAuthRow, Store};
use std::time::Duration;

/// How long an entry may be served even if no change was marked, bounding
/// staleness should a change ever bypass the store.
const ENTRY_TTL: Duration = Duration::from_secs(30);

/// Entries kept at most; beyond it the cache starts over.
const MAX_ENTRIES: usize = 10_000;

/// Key lookups by SHA-256 hash, invalidated by the store's change marker.
pub struct KeyCache {
    rows: MarkedCache<String, KeyAuthRow>,
}

impl KeyCache {
    /// A cache over `store`'s key marker; disabled when the store has none.
    pub fn new(store: &Store) -> Self {
        Self {
            rows: MarkedCache::new(store.keys_marker().cloned(), ENTRY_TTL, MAX_ENTRIES),
        }
    }

    /// The cached row for `hash`, or a [`Miss`] to fill it with.
    pub fn get(&self, hash: &str) -> Result<KeyAuthRow, Option<Miss>> {
        self.rows.get(hash)
    }

    /// Keeps `row` unless a change was marked since `miss` was taken.
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
        let cache = KeyCache::new(&store);
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
        let cache = KeyCache::new(&store);
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
    async fn postgres_or_memory_stores_disable_the_cache() {
        let store = Store::connect("sqlite::memory:", 2).await.expect("store");
        let cache = KeyCache::new(&store);
        assert!(matches!(cache.get("h"), Err(None)));
    }
}
