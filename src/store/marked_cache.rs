//! A read-through cache of store rows that drops every entry when the store's
//! change marker for those rows moves (see [`crate::store::change_marker`]).
//!
//! Each lookup compares the marker's stamp (one `stat`) with the one the cache
//! was filled under, so a change made by any process on the same database is
//! seen by the very next lookup. Without a marker (Postgres, in-memory SQLite)
//! the cache is off and every lookup misses.

use crate::store::change_marker::{ChangeMarker, Stamp};
use parking_lot::RwLock;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

/// Rows keyed by `K`, valid while the marker's stamp stays put.
pub struct MarkedCache<K, V> {
    marker: Option<ChangeMarker>,
    ttl: Duration,
    max_entries: usize,
    inner: RwLock<Inner<K, V>>,
}

struct Inner<K, V> {
    stamp: Stamp,
    entries: HashMap<K, (V, Instant)>,
}

/// What a miss hands back, so a row read from the database is kept only if
/// no change was marked while it was being read.
pub struct Miss {
    stamp: Stamp,
}

impl<K: Hash + Eq, V: Clone> MarkedCache<K, V> {
    /// A cache over `marker` (off when `None`); entries live at most `ttl`,
    /// bounding staleness should a change ever bypass the store, and past
    /// `max_entries` the cache starts over.
    pub fn new(marker: Option<ChangeMarker>, ttl: Duration, max_entries: usize) -> Self {
        Self {
            inner: RwLock::new(Inner {
                stamp: marker.as_ref().and_then(ChangeMarker::stamp),
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
                    _ => Err(Some(Miss { stamp })),
                };
            }
        }
        let mut inner = self.inner.write();
        if inner.stamp != stamp {
            inner.entries.clear();
            inner.stamp = stamp;
        }
        Err(Some(Miss { stamp }))
    }

    /// Keeps `value` under `key` unless a change was marked since `miss` was taken.
    pub fn put(&self, miss: Miss, key: K, value: V) {
        // A change marked during the read: the next lookup drops the entry
        // anyway, but checking here keeps a stale row from ever being served.
        let current = self.marker.as_ref().and_then(ChangeMarker::stamp);
        let mut inner = self.inner.write();
        if inner.stamp != miss.stamp || current != miss.stamp {
            return;
        }
        if inner.entries.len() >= self.max_entries {
            inner.entries.clear();
        }
        inner.entries.insert(key, (value, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(dir: &tempfile::TempDir) -> (ChangeMarker, MarkedCache<String, u32>) {
        let marker = ChangeMarker::beside(&dir.path().join("c.db"), ".rows-changed");
        let cache = MarkedCache::new(Some(marker.clone()), Duration::from_secs(30), 2);
        (marker, cache)
    }

    #[test]
    fn a_marked_change_drops_every_entry() {
        let dir = tempfile::tempdir().expect("dir");
        let (marker, cache) = cache(&dir);
        let miss = cache.get("a").expect_err("empty").expect("enabled");
        cache.put(miss, "a".into(), 1);
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
            let miss = cache.get(key).expect_err("empty").expect("enabled");
            cache.put(miss, key.into(), i as u32);
        }
        assert!(cache.get("a").is_err());
        assert_eq!(cache.get("c").ok(), Some(2));
    }

    #[test]
    fn without_a_marker_every_lookup_misses() {
        let cache: MarkedCache<String, u32> = MarkedCache::new(None, Duration::from_secs(1), 10);
        assert!(matches!(cache.get("a"), Err(None)));
    }
}
