//! Campaign reads that go beyond the batch tables: the campaign's calls in the
//! call list's row shape. Campaigns themselves live in `batches` (kind `campaign`).

use super::call_reads::ROW_COLUMNS;
use super::{CallCounts, CallReadRow, Store, StoreResult, with_pool};
use crate::domain::{CampaignId, OrgId};
use sqlx::AssertSqlSafe;

impl Store {
    /// One page of a campaign's calls (every attempt), newest first, with counts.
    pub async fn campaign_calls(
        &self,
        org_id: OrgId,
        campaign_id: CampaignId,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<CallReadRow>, CallCounts)> {
        let (rows, counts) = with_pool!(self, pool => {
            // The list rows' columns, as every call read takes them.
            let rows = sqlx::query_as::<_, CallReadRow>(AssertSqlSafe(format!(
                "SELECT {ROW_COLUMNS} FROM calls c WHERE c.campaign_id = $1 AND c.org_id = $2
                 ORDER BY c.created_at DESC, c.id DESC LIMIT $3 OFFSET $4"
            )))
            .bind(campaign_id)
            .bind(org_id)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?;
            let counts: (i64, i64, i64) = sqlx::query_as(
                "SELECT CAST(COUNT(*) AS BIGINT),
                   CAST(COALESCE(SUM(CASE WHEN status = 'completed' THEN 1 ELSE 0 END), 0) AS BIGINT),
                   CAST(COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT)
                 FROM calls WHERE campaign_id = $1 AND org_id = $2",
            )
            .bind(campaign_id)
            .bind(org_id)
            .fetch_one(pool)
            .await?;
            (rows, counts)
        });
        Ok((
            rows,
            CallCounts {
                total: counts.0,
                completed: counts.1,
                failed: counts.2,
                capped: false,
            },
        ))
    }
}
