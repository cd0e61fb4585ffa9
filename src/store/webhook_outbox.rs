//! The webhook outbox: deliveries queued with the event that caused them,
//! claimed by the delivery worker (a [`JobTable`] of [`super::leased_jobs`])
//! and retried with backoff.

use super::leased_jobs::{Attempts, Holder, JobTable, Settle};
use super::{BeginWrite, Store, StoreResult, with_pool, with_writer};
use crate::domain::{CallId, DeliveryId, NodeId, OrgId};

/// Inserts the deliveries of one event inside an open transaction; used by
/// [`Store::queue_call_event`], by `finish_call`, whose terminal transition
/// and outbox rows commit together, and by the rating's completion.
///
/// The long form sets when the deliveries become due, whether they are held
/// for the call's rating (decisions §8) and the event id.
macro_rules! queue_in_tx {
    ($conn:expr, $org_id:expr, $call_id:expr, $event:expr, $now_ms:expr) => {{
        let event_id = $crate::store::webhook_outbox::event_id($call_id, $event);
        $crate::store::webhook_outbox::queue_in_tx!(
            $conn, $org_id, $call_id, $event, $now_ms, $now_ms, false, &event_id
        )
    }};
    ($conn:expr, $org_id:expr, $call_id:expr, $event:expr, $now_ms:expr, $due_ms:expr, $held:expr, $event_id:expr) => {{
        let pattern = format!("%\"{}\"%", $event);
        let subscriptions: Vec<$crate::domain::WebhookId> = sqlx::query_scalar(
            "SELECT id FROM webhook_subscriptions WHERE org_id = $1 AND active AND events LIKE $2",
        )
        .bind($org_id)
        .bind(&pattern)
        .fetch_all(&mut *$conn)
        .await?;
        for subscription in &subscriptions {
            sqlx::query(
                "INSERT INTO webhook_deliveries (id, event_id, event, subscription_id, org_id, call_id,
                   next_attempt_at, created_at, held_for_rating)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
            )
            .bind($crate::domain::DeliveryId::new())
            .bind($event_id)
            .bind($event)
            .bind(subscription)
            .bind($org_id)
            .bind($call_id)
            .bind($due_ms)
            .bind($now_ms)
            .bind($held)
            .execute(&mut *$conn)
            .await?;
        }
        subscriptions.len() as u64
    }};
}
pub(crate) use queue_in_tx;

/// One delivery waiting for (another) attempt.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DueDelivery {
    /// Delivery id (the `X-Service-Delivery` header).
    pub id: DeliveryId,
    /// Event id, stable across retries and redeliveries.
    pub event_id: String,
    /// Event kind, e.g. `call.completed`.
    pub event: String,
    /// Workspace of the call.
    pub org_id: OrgId,
    /// The call the event is about.
    pub call_id: CallId,
    /// Attempts made so far.
    pub attempts: i64,
    /// When the delivery was queued, Unix ms.
    pub created_at: i64,
    /// Subscription URL.
    pub url: String,
    /// Subscription signing secret.
    pub secret: String,
    /// The secret before the subscription's last rotation, if any.
    pub previous_secret: Option<String>,
    /// Until when `previous_secret` still signs, Unix ms.
    pub previous_secret_expires_at: Option<i64>,
}

impl DueDelivery {
    /// The secrets a delivery sent at `now_ms` is signed with: the current
    /// one, and the previous one while its rotation overlap lasts.
    pub fn signing_secrets(&self, now_ms: i64) -> Vec<&str> {
        let mut secrets = vec![self.secret.as_str()];
        if let (Some(previous), Some(until)) =
            (&self.previous_secret, self.previous_secret_expires_at)
            && now_ms < until
        {
            secrets.push(previous.as_str());
        }
        secrets
    }
}

/// A delivery as listed for an operator.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeliveryRow {
    /// Delivery id.
    pub id: DeliveryId,
    /// Event id.
    pub event_id: String,
    /// `pending`, `delivered` or `failed`.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// Last failure, if any.
    pub last_error: Option<String>,
}

/// Deliveries as leased jobs: due at `next_attempt_at` once no one holds
/// them, oldest due first; only the lease holder records an attempt, and a
/// failed attempt is due again after a backoff. The subscription's URL and
/// secrets are read as the rows are claimed, so a pass needs one round trip;
/// a disabled subscription's deliveries are left pending, unsent.
pub const DELIVERY_JOBS: JobTable = JobTable {
    table: "webhook_deliveries",
    id: "id",
    status: "status",
    done_status: "delivered",
    lease_owner: "lease_owner",
    lease_until: "lease_until",
    attempts: "attempts",
    error: "last_error",
    next_attempt_at: Some("next_attempt_at"),
    generation: None,
    settles_settled: false,
    due_also: Some(
        "EXISTS (SELECT 1 FROM webhook_subscriptions s
                 WHERE s.id = webhook_deliveries.subscription_id AND s.active)",
    ),
    order_by: "next_attempt_at",
    returning: "webhook_deliveries.id, webhook_deliveries.event_id, webhook_deliveries.event,
        webhook_deliveries.org_id, webhook_deliveries.call_id, webhook_deliveries.attempts,
        webhook_deliveries.created_at,
        (SELECT s.url FROM webhook_subscriptions s
         WHERE s.id = webhook_deliveries.subscription_id) AS url,
        (SELECT s.secret FROM webhook_subscriptions s
         WHERE s.id = webhook_deliveries.subscription_id) AS secret,
        (SELECT s.previous_secret FROM webhook_subscriptions s
         WHERE s.id = webhook_deliveries.subscription_id) AS previous_secret,
        (SELECT s.previous_secret_expires_at FROM webhook_subscriptions s
         WHERE s.id = webhook_deliveries.subscription_id) AS previous_secret_expires_at",
};

/// The stable id of a call's event: receivers dedupe on it.
pub fn event_id(call_id: CallId, event: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{event}/{call_id}").as_bytes());
    format!("evt_{}", hex::encode(&digest[..16]))
}

/// One event of a call queued again by [`Store::redeliver_call_events`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redelivered {
    /// Event kind, e.g. `rating.completed`.
    pub event: String,
    /// The event's original id.
    pub event_id: String,
    /// Subscriptions it was queued for.
    pub subscriptions: u64,
}

impl Store {
    /// Queues `event` about `call_id` for every active subscription of the
    /// workspace that covers it; returns how many deliveries were queued.
    pub async fn queue_call_event(
        &self,
        org_id: OrgId,
        call_id: CallId,
        event: &str,
        now_ms: i64,
    ) -> StoreResult<u64> {
        let queued = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let n = queue_in_tx!(&mut *tx, org_id, call_id, event, now_ms);
            tx.commit().await?;
            n
        });
        Ok(queued)
    }

    /// Queues again every event a (terminal) call has produced, each with
    /// its original event id, for every active subscription that covers it;
    /// in the order the events were first produced.
    ///
    /// The call's events are `call.completed`, every event already in its
    /// outbox (the follow-ups `call.analyzed` and `rating.completed`, one per
    /// version), and the latest follow-up its analysis and rating produced
    /// even if no subscription covered it then (late, or a re-run: the rule
    /// `complete_analysis` and `complete_rating` apply).
    pub async fn redeliver_call_events(
        &self,
        org_id: OrgId,
        call_id: CallId,
        now_ms: i64,
    ) -> StoreResult<Vec<Redelivered>> {
        let queued = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let mut events: Vec<(String, String, i64)> = sqlx::query_as(
                "SELECT event, event_id, MIN(created_at) FROM webhook_deliveries
                 WHERE org_id = $1 AND call_id = $2 GROUP BY event, event_id",
            )
            .bind(org_id)
            .bind(call_id)
            .fetch_all(&mut *tx)
            .await?;
            let completed = event_id(call_id, "call.completed");
            if !events.iter().any(|(_, id, _)| *id == completed) {
                events.push(("call.completed".to_string(), completed, i64::MIN));
            }
            let analysis: Option<(i64, i64)> = sqlx::query_as(
                "SELECT version, COALESCE(completed_at, 0) FROM call_analyses
                 WHERE org_id = $1 AND call_id = $2 AND status = 'done'
                   AND (version > 1 OR completed_at >= webhook_deadline)",
            )
            .bind(org_id)
            .bind(call_id)
            .fetch_optional(&mut *tx)
            .await?;
            let rating: Option<(i64, i64)> = sqlx::query_as(
                "SELECT version, COALESCE(rated_at, 0) FROM ratings
                 WHERE org_id = $1 AND call_id = $2 AND status = 'done'
                   AND (version > 1 OR rated_at >= webhook_deadline)",
            )
            .bind(org_id)
            .bind(call_id)
            .fetch_optional(&mut *tx)
            .await?;
            for (event, latest) in [("call.analyzed", analysis), ("rating.completed", rating)] {
                if let Some((version, at)) = latest {
                    let id = event_id(call_id, &format!("{event}/{version}"));
                    if !events.iter().any(|(_, known, _)| *known == id) {
                        events.push((event.to_string(), id, at));
                    }
                }
            }
            events.sort_by(|a, b| a.2.cmp(&b.2).then_with(|| a.1.cmp(&b.1)));
            let mut queued = Vec::with_capacity(events.len());
            for (event, id, _) in events {
                let subscriptions = queue_in_tx!(
                    &mut *tx, org_id, call_id, event.as_str(), now_ms, now_ms, false, &id
                );
                queued.push(Redelivered { event, event_id: id, subscriptions });
            }
            tx.commit().await?;
            queued
        });
        Ok(queued)
    }

    /// Records an attempt by `node` at `now_ms`: delivered, given up, or due
    /// again ([`Settle`]); false when the lease was no longer its own (it ran
    /// out and another node took the delivery).
    pub async fn record_delivery_attempt(
        &self,
        id: DeliveryId,
        node: &NodeId,
        to: Settle<'_>,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            let mut update = DELIVERY_JOBS.settle(to, Attempts::Count);
            if to == Settle::Done {
                update.push(", delivered_at = ").push_bind(now_ms);
            }
            DELIVERY_JOBS.push_holder(&mut update, &id.to_string(), Holder::Lease(node));
            update.build().execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }

    /// Every delivery of a call, oldest first.
    pub async fn call_deliveries(&self, call_id: CallId) -> StoreResult<Vec<DeliveryRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, DeliveryRow>(
                "SELECT id, event_id, status, attempts, last_error FROM webhook_deliveries
                 WHERE call_id = $1 ORDER BY created_at, id",
            )
            .bind(call_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }
}
