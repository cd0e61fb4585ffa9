//! Markers whose stamp moves whenever one kind of row changes, so processes
//! caching those rows notice the change on their very next read.
//!
//! On SQLite the marker is a file beside the database, so servers notice
//! changes made by the admin CLI or another server on the same file. Marking
//! appends one byte, so the file's length grows with every change: two
//! changes within one tick of the file system's coarse clock still give two
//! different stamps, which the modification time alone would not.
//!
//! On Postgres the nodes share no file: the marker is a counter in this
//! process's memory, so this node's own writes reach its caches before the
//! write answers; other processes' changes arrive on the cluster bus (see
//! [`crate::store::marked_cache`]).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

/// Past this length the file starts over (a stamp repeats only if exactly
/// this many changes happen between two reads within one clock tick).
const RESTART_AT_BYTES: u64 = 4096;

/// A marker's identity at one moment; equal stamps mean no change between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stamp {
    /// A file marker not marked yet.
    Unmarked,
    /// A file marker's modification time and length.
    File(SystemTime, u64),
    /// An in-memory marker's count of changes.
    Count(u64),
}

/// One change marker.
#[derive(Debug, Clone)]
pub enum ChangeMarker {
    /// A file every process on the database sees.
    File(PathBuf),
    /// A counter only this process sees (shared by the clones of a store).
    Memory(Arc<AtomicU64>),
}

impl ChangeMarker {
    /// The marker `<database file><suffix>`, e.g. `voxline.db.keys-changed`.
    pub fn beside(database: &Path, suffix: &str) -> Self {
        let mut name = database.as_os_str().to_owned();
        name.push(suffix);
        Self::File(PathBuf::from(name))
    }

    /// A marker of this process's own changes only.
    pub fn in_memory() -> Self {
        Self::Memory(Arc::default())
    }

    /// Whether only this process's changes move the marker, so a cache over
    /// it also needs to hear of other processes' changes.
    pub fn is_local(&self) -> bool {
        matches!(self, Self::Memory(_))
    }

    /// The marker's file, if it is one.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Self::File(path) => Some(path),
            Self::Memory(_) => None,
        }
    }

    /// The current stamp: one `stat`, or one atomic load.
    pub fn stamp(&self) -> Stamp {
        match self {
            Self::File(path) => std::fs::metadata(path)
                .ok()
                .and_then(|meta| Some(Stamp::File(meta.modified().ok()?, meta.len())))
                .unwrap_or(Stamp::Unmarked),
            Self::Memory(count) => Stamp::Count(count.load(Ordering::Acquire)),
        }
    }

    /// Records a change; a failure is logged, since the write it marks is already committed.
    pub fn mark(&self) {
        match self {
            Self::File(path) => {
                if let Err(err) = Self::append(path) {
                    tracing::warn!(path = %path.display(), error = %err, "could not mark a change");
                }
            }
            Self::Memory(count) => {
                count.fetch_add(1, Ordering::AcqRel);
            }
        }
    }

    fn append(path: &Path) -> std::io::Result<()> {
        let restart = std::fs::metadata(path).is_ok_and(|meta| meta.len() >= RESTART_AT_BYTES);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(!restart)
            .write(true)
            .truncate(restart)
            .open(path)?;
        file.write_all(b".")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_mark_moves_the_stamp_even_within_one_clock_tick() {
        let dir = tempfile::tempdir().expect("dir");
        let marker = ChangeMarker::beside(&dir.path().join("v.db"), ".x-changed");
        assert_eq!(marker.stamp(), Stamp::Unmarked);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100 {
            marker.mark();
            assert!(seen.insert(marker.stamp()), "a stamp repeated");
        }
        assert!(marker.path().expect("a file").ends_with("v.db.x-changed"));
        assert!(!marker.is_local());
    }

    #[test]
    fn the_file_starts_over_past_its_limit() {
        let dir = tempfile::tempdir().expect("dir");
        let marker = ChangeMarker::beside(&dir.path().join("v.db"), ".x-changed");
        for _ in 0..=RESTART_AT_BYTES {
            marker.mark();
        }
        let Stamp::File(_, len) = marker.stamp() else {
            panic!("marked");
        };
        assert!(len < RESTART_AT_BYTES, "length {len}");
    }

    #[test]
    fn an_in_memory_marker_moves_for_every_clone() {
        let marker = ChangeMarker::in_memory();
        let clone = marker.clone();
        let before = marker.stamp();
        clone.mark();
        assert_ne!(marker.stamp(), before);
        assert!(marker.is_local() && marker.path().is_none());
    }
}
