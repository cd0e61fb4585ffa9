//! What carriers report about transferred calls' bridged legs.

use super::{Store, StoreResult, with_pool, with_writer};
use crate::domain::CallId;

/// A call's transfer as stored: where it went and what the carrier reported about the leg.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CallTransferRow {
    /// The number the callee was bridged to (set by the engine when it transfers).
    pub transferred_to: Option<String>,
    /// When the engine handed the call over, Unix ms.
    pub transferred_at: Option<i64>,
    /// The carrier's outcome for the bridged leg: completed, no-answer, busy, failed, canceled.
    pub transfer_status: Option<String>,
    /// How long the bridged leg lasted, when the carrier says.
    pub transfer_duration_seconds: Option<i64>,
}

impl Store {
    /// Records what the carrier reported about a transferred call's bridged leg; `false`
    /// when no such call exists.
    ///
    /// A report without a duration keeps one already stored: carriers may report a leg more
    /// than once (an outcome, then the leg's hang-up) and not every report carries the length.
    pub async fn record_transfer_leg(
        &self,
        call_id: CallId,
        status: &str,
        duration_seconds: Option<u32>,
    ) -> StoreResult<bool> {
        let done = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE calls SET transfer_status = $1,
                   transfer_duration_seconds = COALESCE($2, transfer_duration_seconds)
                 WHERE id = $3",
            )
            .bind(status)
            .bind(duration_seconds.map(i64::from))
            .bind(call_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(done > 0)
    }

    /// A call's transfer columns, or `None` when no such call exists.
    pub async fn call_transfer(&self, call_id: CallId) -> StoreResult<Option<CallTransferRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, CallTransferRow>(
                "SELECT transferred_to, transferred_at, transfer_status, transfer_duration_seconds
                 FROM calls WHERE id = $1",
            )
            .bind(call_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }
}
