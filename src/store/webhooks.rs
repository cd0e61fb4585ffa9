//! Webhook subscriptions and workspace provider credentials (admin-only records).

use super::{Store, StoreResult, with_pool};
use crate::domain::{OrgId, WebhookId};

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
        with_pool!(self, pool => {
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
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, WebhookRow>(
                "SELECT id, org_id, url, events, secret, active FROM webhook_subscriptions
                 WHERE org_id = $1 AND active = TRUE ORDER BY created_at, id",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Stores (replacing) an encrypted provider credential.
    pub async fn upsert_credential(
        &self,
        org_id: OrgId,
        kind: &str,
        nonce: &str,
        ciphertext: &str,
        now_ms: i64,
    ) -> StoreResult<()> {
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO credentials (org_id, kind, nonce, ciphertext, updated_at) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (org_id, kind) DO UPDATE SET nonce = excluded.nonce,
                   ciphertext = excluded.ciphertext, updated_at = excluded.updated_at",
            )
            .bind(org_id)
            .bind(kind)
            .bind(nonce)
            .bind(ciphertext)
            .bind(now_ms)
            .execute(pool)
            .await?;
        });
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
}
