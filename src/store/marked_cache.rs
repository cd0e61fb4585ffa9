//! A read-through cache of store rows that drops every entry when the store's
//! change marker for those rows moves (see [`crate::store::change_marker`]),
//! and single entries when another node says they changed.
//!
//! Each lookup compares the marker's stamp (one `stat` on SQLite, one atomic
//! load on Postgres) with the one the cache was filled under. On SQLite that
//! sees a change made by any process on the same database on the very next
//! lookup. On Postgres it sees this process's own changes; the other nodes'
//! arrive as notices ([`follow`]): the changed row's name drops that entry,
//! anything else (the bus's resync after a reconnect, a lagging receiver)
//! drops them all. Without a marker (in-memory SQLite, Postgres without a
//! bus) the cache is off and every lookup misses.

use crate::store::change_marker::{ChangeMarker, Stamp};
use parking_lot::RwLock;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Weak;
use std::time::{Duration, Instant};
use tokio::sync::broadcast;

/// Rows keyed by `K`, valid while the marker's stamp stays put and no notice names them.
pub struct MarkedCache<K, V> {
    marker: Option<ChangeMarker>,
    ttl: Duration,
    max_entries: usize,
    inner: RwLock<Inner<K, V>>,
}

struct Inner<K, V> {
    stamp: Stamp,
    /// Notices applied so far; a read that spans one is not kept.
    notices: u64,
    entries: HashMap<K, (V, Instant)>,
}

/// What a miss hands back, so a row read from the database is kept only if
/// no change was marked or noticed while it was being read.
pub struct Miss {
    stamp: Stamp,
    notices: u64,
}

impl<K: Hash + Eq, V: Clone> MarkedCache<K, V> {
    /// A cache over `marker` (off when `None`); entries live at most `ttl`,
    /// bounding staleness should a change ever bypass the store, and past
    /// `max_entries` the cache starts over.
    pub fn new(marker: Option<ChangeMarker>, ttl: Duration, max_entries: usize) -> Self {
        Self {
            inner: RwLock::new(Inner {
                stamp: marker.as_ref().map_or(Stamp::Unmarked, ChangeMarker::stamp),
                notices: 0,
                entries: HashMap::new(),
            }),
            marker,
            ttl,
            max_entries,
        }
    }

    /// The cached value for `key`, or a [`Miss`] to fill it with (`None` when the cache is off).
    pub fn get<Q>(&self, key: &Q) -> Result<V, Option<Miss>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let Some(marker) = &self.marker else {
            return Err(None);
        };
        let stamp = marker.stamp();
        {
            let inner = self.inner.read();
            if inner.stamp == stamp {
                return match inner.entries.get(key) {
                    Some((value, at)) if at.elapsed() < self.ttl => Ok(value.clone()),
                    _ => Err(Some(Miss {
                        stamp,
                        notices: inner.notices,
                    })),
                };
            }
        }
        let mut inner = self.inner.write();
        if inner.stamp != stamp {
            inner.entries.clear();
            inner.stamp = stamp;
        }
        Err(Some(Miss {
            stamp,
            notices: inner.notices,
        }))
    }

    /// Keeps `value` under `key` unless a change was marked or noticed since `miss` was taken.
    pub fn put(&self, miss: Miss, key: K, value: V) {
        // A change marked during the read: the next lookup drops the entry
        // anyway, but checking here keeps a stale row from ever being served.
        let current = self
            .marker
            .as_ref()
            .map_or(Stamp::Unmarked, ChangeMarker::stamp);
        let mut inner = self.inner.write();
        if inner.stamp != miss.stamp || current != miss.stamp || inner.notices != miss.notices {
            return;
        }
        if inner.entries.len() >= self.max_entries {
            inner.entries.clear();
        }
        inner.entries.insert(key, (value, Instant::now()));
    }

    /// Drops the entry of `key`: another node changed its row.
    pub fn forget<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let mut inner = self.inner.write();
        inner.notices += 1;
        inner.entries.remove(key);
    }

    /// Drops every entry: changes may have gone unheard.
    pub fn clear(&self) {
        let mut inner = self.inner.write();
        inner.notices += 1;
        inner.entries.clear();
    }
}

/// Applies the notices of `changes` to `cache` until the cache is dropped or
/// the channel closes: a payload `name` maps to a key drops that entry, any
/// other payload drops every entry, and so do notices lost to lag.
pub async fn follow<K, V>(
    cache: Weak<MarkedCache<K, V>>,
    mut changes: broadcast::Receiver<String>,
    name: impl Fn(&str) -> Option<K>,
) where
    K: Hash + Eq,
    V: Clone,
{
    loop {
        let notice = changes.recv().await;
        let Some(cache) = cache.upgrade() else {
            return;
        };
        match notice {
            Ok(payload) => match name(&payload) {
                Some(key) => cache.forget(&key),
                None => cache.clear(),
            },
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "cache notices lagged; dropping every entry");
                cache.clear();
            }
            Err(broadcast::error::RecvError::Closed) => {
                cache.clear();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn cache(dir: &tempfile::TempDir) -> (ChangeMarker, MarkedCache<String, u32>) {
        let marker = ChangeMarker::beside(&dir.path().join("c.db"), ".rows-changed");
        let cache = MarkedCache::new(Some(marker.clone()), Duration::from_secs(30), 2);
        (marker, cache)
    }

    fn fill(cache: &MarkedCache<String, u32>, key: &str, value: u32) {
        let miss = cache.get(key).expect_err("empty").expect("enabled");
        cache.put(miss, key.into(), value);
    }

    #[test]
    fn a_marked_change_drops_every_entry() {
        let dir = tempfile::tempdir().expect("dir");
        let (marker, cache) = cache(&dir);
        fill(&cache, "a", 1);
        assert_eq!(cache.get("a").ok(), Some(1));
        marker.mark();
        assert!(cache.get("a").is_err(), "the entry must be dropped");
    }

    #[test]
    fn a_value_read_across_a_change_is_not_kept() {
        let dir = tempfile::tempdir().expect("dir");
        let (marker, cache) = cache(&dir);
        let miss = cache.get("a").expect_err("empty").expect("enabled");
        marker.mark();
        cache.put(miss, "a".into(), 1);
        assert!(cache.get("a").is_err(), "a stale read must not be cached");
    }

    #[test]
    fn the_cache_starts_over_when_full() {
        let dir = tempfile::tempdir().expect("dir");
        let (_marker, cache) = cache(&dir);
        for (i, key) in ["a", "b", "c"].into_iter().enumerate() {
            fill(&cache, key, i as u32);
        }
        assert!(cache.get("a").is_err());
        assert_eq!(cache.get("c").ok(), Some(2));
    }

    #[test]
    fn without_a_marker_every_lookup_misses() {
        let cache: MarkedCache<String, u32> = MarkedCache::new(None, Duration::from_secs(1), 10);
        assert!(matches!(cache.get("a"), Err(None)));
    }

    #[test]
    fn a_notice_drops_its_entry_and_a_read_spanning_one_is_not_kept() {
        let cache = MarkedCache::new(Some(ChangeMarker::in_memory()), Duration::from_secs(30), 8);
        fill(&cache, "a", 1);
        fill(&cache, "b", 2);
        cache.forget("a");
        assert!(cache.get("a").is_err());
        assert_eq!(cache.get("b").ok(), Some(2), "other entries stay");
        let miss = cache.get("c").expect_err("empty").expect("enabled");
        cache.forget("a");
        cache.put(miss, "c".into(), 3);
        assert!(
            cache.get("c").is_err(),
            "a read across a notice must not be kept"
        );
    }

    async fn until(what: &str, check: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while !check() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn followed_notices_drop_named_entries_and_anything_else_drops_all() {
        let cache = Arc::new(MarkedCache::new(
            Some(ChangeMarker::in_memory()),
            Duration::from_secs(30),
            8,
        ));
        let (tx, rx) = broadcast::channel(8);
        let follower = tokio::spawn(follow(Arc::downgrade(&cache), rx, |p: &str| {
            (p != "*").then(|| p.to_string())
        }));
        fill(&cache, "a", 1);
        fill(&cache, "b", 2);
        tx.send("a".to_string()).expect("send");
        until("a dropped", || cache.get("a").is_err()).await;
        assert_eq!(cache.get("b").ok(), Some(2));
        tx.send("*".to_string()).expect("send");
        until("everything dropped", || cache.get("b").is_err()).await;
        drop(tx);
        follower.await.expect("the follower ends with its channel");
    }
}
