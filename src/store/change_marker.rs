//! Files beside the SQLite database whose stamp moves whenever one kind of
//! row changes, so processes caching those rows (servers, while the admin CLI
//! or another server writes) notice the change on their very next read.
//!
//! Marking appends one byte, so the file's length grows with every change:
//! two changes within one tick of the file system's coarse clock still give
//! two different stamps, which the modification time alone would not.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Past this length the file starts over (a stamp repeats only if exactly
/// this many changes happen between two reads within one clock tick).
const RESTART_AT_BYTES: u64 = 4096;

/// A marker's identity: modification time and length; `None` before the first change.
pub type Stamp = Option<(SystemTime, u64)>;

/// One change marker file.
#[derive(Debug, Clone)]
pub struct ChangeMarker {
    path: PathBuf,
}

impl ChangeMarker {
    /// The marker `<database file><suffix>`, e.g. `voxline.db.keys-changed`.
    pub fn beside(database: &Path, suffix: &str) -> Self {
        let mut name = database.as_os_str().to_owned();
        name.push(suffix);
        Self {
            path: PathBuf::from(name),
        }
    }

    /// The marker's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The current stamp: one `stat`.
    pub fn stamp(&self) -> Stamp {
        let meta = std::fs::metadata(&self.path).ok()?;
        Some((meta.modified().ok()?, meta.len()))
    }

    /// Records a change; a failure is logged, since the write it marks is already committed.
    pub fn mark(&self) {
        if let Err(err) = self.append() {
            tracing::warn!(path = %self.path.display(), error = %err, "could not mark a change");
        }
    }

    fn append(&self) -> std::io::Result<()> {
        let restart = self.stamp().is_some_and(|(_, len)| len >= RESTART_AT_BYTES);
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(!restart)
            .write(true)
            .truncate(restart)
            .open(&self.path)?;
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
        assert_eq!(marker.stamp(), None);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100 {
            marker.mark();
            assert!(seen.insert(marker.stamp()), "a stamp repeated");
        }
        assert!(marker.path().ends_with("v.db.x-changed"));
    }

    #[test]
    fn the_file_starts_over_past_its_limit() {
        let dir = tempfile::tempdir().expect("dir");
        let marker = ChangeMarker::beside(&dir.path().join("v.db"), ".x-changed");
        for _ in 0..=RESTART_AT_BYTES {
            marker.mark();
        }
        let (_, len) = marker.stamp().expect("marked");
        assert!(len < RESTART_AT_BYTES, "length {len}");
    }
}
