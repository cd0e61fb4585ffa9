//! Webhook subscriptions and workspace provider credentials (admin-only records).

use super::{BeginWrite, Db, Store, StoreResult, notifying, with_pool, with_writer};
use crate::domain::{CallId, DeliveryId, OrgId, WebhookId};
use crate::store::nodes::CREDENTIALS_CHANNEL;

/// A webhook subscription.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookRow {
    /// Subscription id.
    pub id: WebhookId,
    /// Owning workspace.
    pub org_id: OrgId,
    /// Delivery URL.
    pub url: String,
    /// JSON array of event names.
    pub events: String,
    /// HMAC signing secret.
    pub secret: String,
    /// Whether deliveries are made.
    pub active: bool,
    /// When the subscription was added, Unix ms.
    pub created_at: i64,
    /// Until when the secret before the last rotation still signs, Unix ms.
    pub previous_secret_expires_at: Option<i64>,
}

/// `SELECT` of [`WebhookRow`]s from the subscriptions, then `$rest`.
macro_rules! select_webhooks {
    ($rest:literal) => {
        concat!(
            "SELECT id, org_id, url, events, secret, active, created_at, previous_secret_expires_at
             FROM webhook_subscriptions ",
            $rest
        )
    };
}

/// One delivery of a subscription, for the operator's delivery log.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeliveryLogRow {
    /// Delivery id (the `X-Service-Delivery` header).
    pub id: DeliveryId,
    /// The subscription it goes to.
    pub subscription_id: WebhookId,
    /// Event kind.
    pub event: String,
    /// Event id, stable across retries and redeliveries.
    pub event_id: String,
    /// The call the event is about.
    pub call_id: CallId,
    /// `pending`, `delivered` or `failed` (given up).
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
    /// When the next attempt is due (meaningful while pending), Unix ms.
    pub next_attempt_at: i64,
    /// When it was delivered, Unix ms.
    pub delivered_at: Option<i64>,
    /// When it was queued, Unix ms.
    pub created_at: i64,
}

/// Which deliveries the log lists.
#[derive(Debug, Clone, Copy, Default)]
pub struct DeliveryLogFilter {
    /// Only this subscription's.
    pub subscription: Option<WebhookId>,
    /// Only failed ones: given up, or pending after a failed attempt.
    pub failed: bool,
    /// At most this many, newest first.
    pub limit: i64,
}

impl Store {
    /// Adds a subscription and returns its id.
    pub async fn insert_webhook(
        &self,
        org_id: OrgId,
        url: &str,
        events: &[String],
        secret: &str,
        now_ms: i64,
    ) -> StoreResult<WebhookId> {
        let id = WebhookId::new();
        let events = serde_json::to_string(events)?;
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO webhook_subscriptions (id, org_id, url, events, secret, active, created_at)
                 VALUES ($1, $2, $3, $4, $5, TRUE, $6)",
            )
            .bind(id)
            .bind(org_id)
            .bind(url)
            .bind(&events)
            .bind(secret)
            .bind(now_ms)
            .execute(pool)
            .await?;
        });
        Ok(id)
    }

    /// Active subscriptions of a workspace.
    pub async fn webhooks(&self, org_id: OrgId) -> StoreResult<Vec<WebhookRow>> {
        let sql = select_webhooks!("WHERE org_id = $1 AND active = TRUE ORDER BY created_at, id");
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, WebhookRow>(sql)
                .bind(org_id)
                .fetch_all(pool)
                .await?
        });
        Ok(rows)
    }

    /// Every subscription of a workspace, disabled ones too, oldest first.
    pub async fn all_webhooks(&self, org_id: OrgId) -> StoreResult<Vec<WebhookRow>> {
        let sql = select_webhooks!("WHERE org_id = $1 ORDER BY created_at, id");
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, WebhookRow>(sql)
                .bind(org_id)
                .fetch_all(pool)
                .await?
        });
        Ok(rows)
    }

    /// One subscription, whatever its workspace (the operator names it by id).
    pub async fn webhook(&self, id: WebhookId) -> StoreResult<Option<WebhookRow>> {
        let sql = select_webhooks!("WHERE id = $1");
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, WebhookRow>(sql)
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row)
    }

    /// Enables or disables a subscription; false when there is none. A
    /// disabled one gets no new events, and its pending deliveries wait
    /// (unsent) until it is enabled again.
    pub async fn set_webhook_active(&self, id: WebhookId, active: bool) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query("UPDATE webhook_subscriptions SET active = $1 WHERE id = $2")
                .bind(active)
                .bind(id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Deletes a subscription with its delivery log; false when there is none.
    pub async fn delete_webhook(&self, id: WebhookId) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            sqlx::query("DELETE FROM webhook_deliveries WHERE subscription_id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?;
            let n = sqlx::query("DELETE FROM webhook_subscriptions WHERE id = $1")
                .bind(id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            tx.commit().await?;
            n
        });
        Ok(n > 0)
    }

    /// Replaces a subscription's secret with `secret`; the one it replaces
    /// keeps signing (beside the new) until `previous_expires_at`, Unix ms.
    /// False when there is no such subscription.
    pub async fn rotate_webhook_secret(
        &self,
        id: WebhookId,
        secret: &str,
        previous_expires_at: i64,
    ) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE webhook_subscriptions SET previous_secret = secret, secret = $1,
                   previous_secret_expires_at = $2
                 WHERE id = $3",
            )
            .bind(secret)
            .bind(previous_expires_at)
            .bind(id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// A workspace's delivery log, newest first, as `filter` narrows it.
    pub async fn delivery_log(
        &self,
        org_id: OrgId,
        filter: DeliveryLogFilter,
    ) -> StoreResult<Vec<DeliveryLogRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, DeliveryLogRow>(
                "SELECT id, subscription_id, event, event_id, call_id, status, attempts, last_error,
                   next_attempt_at, delivered_at, created_at
                 FROM webhook_deliveries
                 WHERE org_id = $1
                   AND (CAST($2 AS TEXT) IS NULL OR subscription_id = $2)
                   AND (NOT $3 OR status = 'failed' OR (status = 'pending' AND last_error IS NOT NULL))
                 ORDER BY created_at DESC, id DESC LIMIT $4",
            )
            .bind(org_id)
            .bind(filter.subscription)
            .bind(filter.failed)
            .bind(filter.limit)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Stores (replacing) an encrypted provider credential, and marks the
    /// change (telling the other nodes on Postgres) before it returns, so
    /// no cache of opened credentials serves the old one afterwards.
    pub async fn upsert_credential(
        &self,
        org_id: OrgId,
        kind: &str,
        nonce: &str,
        ciphertext: &str,
        now_ms: i64,
    ) -> StoreResult<()> {
        const UPSERT: &str = "INSERT INTO credentials (org_id, kind, nonce, ciphertext, updated_at) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (org_id, kind) DO UPDATE SET nonce = excluded.nonce,
                   ciphertext = excluded.ciphertext, updated_at = excluded.updated_at";
        match &self.write_db {
            Db::Sqlite(pool) => {
                let query = sqlx::query(UPSERT)
                    .bind(org_id)
                    .bind(kind)
                    .bind(nonce)
                    .bind(ciphertext)
                    .bind(now_ms);
                query.execute(pool).await?;
            }
            Db::Postgres(pool) => {
                let sql = notifying(UPSERT, "org_id", 6);
                let query = sqlx::query(sql)
                    .bind(org_id)
                    .bind(kind)
                    .bind(nonce)
                    .bind(ciphertext)
                    .bind(now_ms)
                    .bind(CREDENTIALS_CHANNEL);
                query.fetch_all(pool).await?;
            }
        }
        self.mark_credentials_changed();
        Ok(())
    }

    /// The encrypted credential `(nonce, ciphertext)` of a kind, if set.
    pub async fn credential(
        &self,
        org_id: OrgId,
        kind: &str,
    ) -> StoreResult<Option<(String, String)>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, (String, String)>(
                "SELECT nonce, ciphertext FROM credentials WHERE org_id = $1 AND kind = $2",
            )
            .bind(org_id)
            .bind(kind)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// The workspaces holding a credential of `kind`, with when each was last
    /// replaced (Unix ms), oldest workspace id first.
    pub async fn credential_holders(&self, kind: &str) -> StoreResult<Vec<(OrgId, i64)>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, (OrgId, i64)>(
                "SELECT org_id, updated_at FROM credentials WHERE kind = $1 ORDER BY org_id",
            )
            .bind(kind)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// The kinds of credential a workspace has stored, with when each was
    /// last replaced (Unix ms), in kind order; never the values.
    pub async fn credential_kinds(&self, org_id: OrgId) -> StoreResult<Vec<(String, i64)>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, (String, i64)>(
                "SELECT kind, updated_at FROM credentials WHERE org_id = $1 ORDER BY kind",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Deletes a workspace's credential of `kind`, marking the change as
    /// [`Store::upsert_credential`] does; false when none was stored.
    pub async fn delete_credential(&self, org_id: OrgId, kind: &str) -> StoreResult<bool> {
        const DELETE: &str = "DELETE FROM credentials WHERE org_id = $1 AND kind = $2";
        let n = match &self.write_db {
            Db::Sqlite(pool) => {
                let query = sqlx::query(DELETE).bind(org_id).bind(kind);
                query.execute(pool).await?.rows_affected()
            }
            Db::Postgres(pool) => {
                let sql = notifying(DELETE, "org_id", 3);
                let query = sqlx::query(sql)
                    .bind(org_id)
                    .bind(kind)
                    .bind(CREDENTIALS_CHANNEL);
                query.fetch_all(pool).await?.len() as u64
            }
        };
        if n > 0 {
            self.mark_credentials_changed();
        }
        Ok(n > 0)
    }
}
