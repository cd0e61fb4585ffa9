//! One call's webhook deliveries as the delivery log shows them, for the
//! console's call page.

use crate::domain::{CallId, OrgId};
use crate::store::{DeliveryLogRow, Store, StoreResult, with_pool};
impl Store {
    /// Every webhook delivery of a call of a workspace, newest first.
    pub async fn call_delivery_log(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> StoreResult<Vec<DeliveryLogRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, DeliveryLogRow>(
                "SELECT id, subscription_id, event, event_id, call_id, status, attempts, last_error,
                   next_attempt_at, delivered_at, created_at
                 FROM webhook_deliveries
                 WHERE call_id = $1 AND org_id = $2
                 ORDER BY created_at DESC, id DESC",
            )
            .bind(call_id)
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }
}
