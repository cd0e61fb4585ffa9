//! Recording rows (the object's key in the recordings store) for the
//! per-call reads, and the retention janitor's deletes.

use super::{Store, StoreResult, with_pool, with_writer};
use crate::domain::{CallId, OrgId};

/// A retained recording's object.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RecordingFileRow {
    /// The recorded call.
    pub call_id: CallId,
    /// The call's workspace.
    pub org_id: OrgId,
    /// The recording's key in the recordings store (`{org_id}/{call_id}.{format}`).
    pub object_key: String,
    /// wav or ogg.
    pub format: String,
    /// Size when it was finalized.
    pub bytes: i64,
    /// The Ogg Opus copy's key, when the call was also recorded as Ogg Opus.
    pub ogg_object_key: Option<String>,
}

impl RecordingFileRow {
    /// The formats this recording is kept in, the main one first.
    pub fn formats(&self) -> Vec<&str> {
        let mut formats = vec![self.format.as_str()];
        if self.ogg_object_key.is_some() && self.format != "ogg" {
            formats.push("ogg");
        }
        formats
    }

    /// The object key of the recording in `format`, if it is kept in it.
    pub fn object_key_for(&self, format: &str) -> Option<&str> {
        if format == self.format {
            Some(&self.object_key)
        } else if format == "ogg" {
            self.ogg_object_key.as_deref()
        } else {
            None
        }
    }

    /// Every object the recording has in the recordings store.
    pub fn object_keys(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.object_key.as_str()).chain(self.ogg_object_key.as_deref())
    }
}

impl Store {
    /// The retained (not yet deleted) recording of a call of a workspace.
    pub async fn recording_file(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> StoreResult<Option<RecordingFileRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, RecordingFileRow>(
                "SELECT call_id, org_id, object_key, format, bytes, ogg_object_key FROM recordings
                 WHERE call_id = $1 AND org_id = $2 AND deleted_at IS NULL",
            )
            .bind(call_id)
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// Up to `limit` retained recordings written before `cutoff_ms`, oldest first.
    pub async fn recordings_written_before(
        &self,
        cutoff_ms: i64,
        limit: i64,
    ) -> StoreResult<Vec<RecordingFileRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, RecordingFileRow>(
                "SELECT call_id, org_id, object_key, format, bytes, ogg_object_key FROM recordings
                 WHERE deleted_at IS NULL AND created_at < $1
                 ORDER BY created_at LIMIT $2",
            )
            .bind(cutoff_ms)
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Marks a recording deleted; its reads answer as if there were none.
    pub async fn mark_recording_deleted(&self, call_id: CallId, now_ms: i64) -> StoreResult<bool> {
        let done = with_writer!(self, pool => {
            sqlx::query("UPDATE recordings SET deleted_at = $1 WHERE call_id = $2 AND deleted_at IS NULL")
                .bind(now_ms)
                .bind(call_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done > 0)
    }

    /// Deletes transcript turn rows written before `cutoff_ms` (the calls keep
    /// `transcript_text`); returns how many went.
    pub async fn prune_turns_before(&self, cutoff_ms: i64) -> StoreResult<u64> {
        let done = with_writer!(self, pool => {
            sqlx::query("DELETE FROM call_turns WHERE created_at < $1")
                .bind(cutoff_ms)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(done)
    }
}
