//! Campaign reads that go beyond the batch tables: the campaign's calls in the
//! call list's row shape. Campaigns themselves live in `batches` (kind `campaign`).

use super::{CallCounts, CallReadRow, Store, StoreResult, with_pool};
use crate::domain::{CampaignId, OrgId};

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
            let rows = sqlx::query_as::<_, CallReadRow>(
                "SELECT c.id, c.agent_id, c.agent_name, c.phone, c.target_name, c.email, c.from_number,
                   c.provider, c.status, c.ended_reason, c.attempt, c.retry_of, c.batch_id, c.campaign_id,
                   c.campaign_name, c.duration_seconds, c.cost_paise, c.summary, c.created_at, c.answered_at, c.ended_at,
                   c.calendar_status, c.calendar_event_url, c.calendar_error, c.transferred_to,
                   c.transferred_at, c.transfer_status, c.transfer_duration_seconds
                 FROM calls c WHERE c.campaign_id = $1 AND c.org_id = $2
                 ORDER BY c.created_at DESC, c.id DESC LIMIT $3 OFFSET $4",
            )
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
