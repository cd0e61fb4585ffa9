//! The webhook outbox: deliveries queued with the event that caused them,
//! claimed by the delivery worker and retried with backoff.

use super::{BeginWrite, Db, Store, StoreResult, with_pool};
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

/// The claim of due deliveries, with `$lock` after the row choice (Postgres
/// skips rows another node is claiming). The subscription's URL and secrets
/// are read as the rows are claimed, so a pass needs one round trip; a
/// disabled subscription's deliveries are left pending, unsent.
macro_rules! claim_due_sql {
    ($lock:literal) => {
        concat!(
            "UPDATE webhook_deliveries SET lease_owner = $1, lease_until = $2
             FROM (SELECT id FROM webhook_deliveries
                   WHERE status = 'pending' AND next_attempt_at <= $3 AND lease_until <= $3
                     AND EXISTS (SELECT 1 FROM webhook_subscriptions s
                                 WHERE s.id = webhook_deliveries.subscription_id AND s.active)
                   ORDER BY next_attempt_at, id LIMIT $4 ",
            $lock,
            ") AS due
             WHERE webhook_deliveries.id = due.id
             RETURNING webhook_deliveries.id, webhook_deliveries.event_id, webhook_deliveries.event,
               webhook_deliveries.org_id, webhook_deliveries.call_id, webhook_deliveries.attempts,
               webhook_deliveries.created_at,
               (SELECT s.url FROM webhook_subscriptions s
                WHERE s.id = webhook_deliveries.subscription_id) AS url,
               (SELECT s.secret FROM webhook_subscriptions s
                WHERE s.id = webhook_deliveries.subscription_id) AS secret,
               (SELECT s.previous_secret FROM webhook_subscriptions s
                WHERE s.id = webhook_deliveries.subscription_id) AS previous_secret,
               (SELECT s.previous_secret_expires_at FROM webhook_subscriptions s
                WHERE s.id = webhook_deliveries.subscription_id) AS previous_secret_expires_at"
        )
    };
}

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
        let queued = with_pool!(self, pool => {
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
        let queued = with_pool!(self, pool => {
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

    /// Claims for `node` up to `limit` deliveries due at `now_ms`, oldest
    /// first, leased until `lease_until`: no other node sends them while the
    /// lease holds, and when it runs out (the node died mid-attempt) they are
    /// due again. On Postgres rows another node is claiming are skipped
    /// (`FOR UPDATE SKIP LOCKED`); SQLite has one writer, so the statement
    /// alone is atomic.
    pub async fn claim_due_deliveries(
        &self,
        node: &NodeId,
        now_ms: i64,
        lease_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<DueDelivery>> {
        let rows = match &self.db {
            Db::Sqlite(pool) => {
                sqlx::query_as::<_, DueDelivery>(claim_due_sql!(""))
                    .bind(node)
                    .bind(lease_until)
                    .bind(now_ms)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?
            }
            Db::Postgres(pool) => {
                sqlx::query_as::<_, DueDelivery>(claim_due_sql!("FOR UPDATE SKIP LOCKED"))
                    .bind(node)
                    .bind(lease_until)
                    .bind(now_ms)
                    .bind(limit)
                    .fetch_all(pool)
                    .await?
            }
        };
        Ok(rows)
    }

    /// Records a successful attempt by `node`; false when the lease was no
    /// longer its own (it ran out and another node took the delivery).
    pub async fn delivery_succeeded(
        &self,
        id: DeliveryId,
        node: &NodeId,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let n = with_pool!(self, pool => {
            sqlx::query(
                "UPDATE webhook_deliveries SET status = 'delivered', attempts = attempts + 1,
                   delivered_at = $1, last_error = NULL, lease_owner = NULL, lease_until = 0
                 WHERE id = $2 AND lease_owner = $3 AND status = 'pending'",
            )
            .bind(now_ms)
            .bind(id)
            .bind(node)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// Records a failed attempt by `node`: retried at `retry_at`, or given up
    /// when `None`; false when the lease was no longer its own.
    pub async fn delivery_failed(
        &self,
        id: DeliveryId,
        node: &NodeId,
        error: &str,
        retry_at: Option<i64>,
    ) -> StoreResult<bool> {
        let n = with_pool!(self, pool => {
            sqlx::query(
                "UPDATE webhook_deliveries SET attempts = attempts + 1, last_error = $1,
                   status = CASE WHEN CAST($2 AS BIGINT) IS NULL THEN 'failed' ELSE 'pending' END,
                   next_attempt_at = COALESCE(CAST($2 AS BIGINT), next_attempt_at),
                   lease_owner = NULL, lease_until = 0
                 WHERE id = $3 AND lease_owner = $4 AND status = 'pending'",
            )
            .bind(error)
            .bind(retry_at)
            .bind(id)
            .bind(node)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// Frees the delivery leases `node` holds, when its attempts are known to
    /// be over (its own start after a crash, its clean stop); on SQLite, the
    /// one node, every lease. Returns how many.
    pub async fn release_delivery_leases(&self, node: &NodeId) -> StoreResult<u64> {
        let every = !self.is_shared();
        let n = with_pool!(self, pool => {
            sqlx::query(
                "UPDATE webhook_deliveries SET lease_owner = NULL, lease_until = 0
                 WHERE status = 'pending' AND lease_until <> 0 AND (lease_owner = $1 OR $2)",
            )
            .bind(node)
            .bind(every)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
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
