//! Who may call a workspace's numbers: the callers it blocked, and how many
//! inbound calls one caller placed lately (against the workspace's hourly cap).

use super::{Store, StoreResult, with_pool, with_writer};
use crate::domain::OrgId;

/// A caller a workspace refuses.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BlockedCallerRow {
    /// The caller's number, E.164.
    pub phone: String,
    /// Why, as the workspace wrote it.
    pub reason: String,
    /// When blocked, Unix ms.
    pub created_at: i64,
}

impl Store {
    /// Blocks `phone` for `org_id` (again: the reason is replaced).
    pub async fn block_caller(
        &self,
        org_id: OrgId,
        phone: &str,
        reason: &str,
        now_ms: i64,
    ) -> StoreResult<BlockedCallerRow> {
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO inbound_blocked_callers (org_id, phone, reason, created_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (org_id, phone) DO UPDATE SET reason = EXCLUDED.reason",
            )
            .bind(org_id)
            .bind(phone)
            .bind(reason)
            .bind(now_ms)
            .execute(pool)
            .await?;
        });
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, BlockedCallerRow>(
                "SELECT phone, reason, created_at FROM inbound_blocked_callers WHERE org_id = $1 AND phone = $2",
            )
            .bind(org_id)
            .bind(phone)
            .fetch_one(pool)
            .await?
        });
        Ok(row)
    }

    /// Lets `phone` call `org_id` again; `false` when it was not blocked.
    pub async fn unblock_caller(&self, org_id: OrgId, phone: &str) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query("DELETE FROM inbound_blocked_callers WHERE org_id = $1 AND phone = $2")
                .bind(org_id)
                .bind(phone)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// A page of a workspace's blocked callers, newest first, with the total.
    pub async fn blocked_callers(
        &self,
        org_id: OrgId,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<BlockedCallerRow>, i64)> {
        let (rows, total) = with_pool!(self, pool => {
            let rows = sqlx::query_as::<_, BlockedCallerRow>(
                "SELECT phone, reason, created_at FROM inbound_blocked_callers WHERE org_id = $1
                 ORDER BY created_at DESC, phone LIMIT $2 OFFSET $3",
            )
            .bind(org_id)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?;
            let total: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM inbound_blocked_callers WHERE org_id = $1")
                .bind(org_id)
                .fetch_one(pool)
                .await?;
            (rows, total)
        });
        Ok((rows, total))
    }

    /// Whether `org_id` blocked `phone`.
    pub async fn is_caller_blocked(&self, org_id: OrgId, phone: &str) -> StoreResult<bool> {
        let found = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM inbound_blocked_callers WHERE org_id = $1 AND phone = $2",
            )
            .bind(org_id)
            .bind(phone)
            .fetch_one(pool)
            .await?
        });
        Ok(found > 0)
    }

    /// Inbound calls `phone` placed to `org_id`'s numbers since `since_ms`.
    pub async fn inbound_calls_from(
        &self,
        org_id: OrgId,
        phone: &str,
        since_ms: i64,
    ) -> StoreResult<i64> {
        let n = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM calls WHERE org_id = $1 AND phone = $2 AND direction = 'inbound'
                   AND created_at >= $3",
            )
            .bind(org_id)
            .bind(phone)
            .bind(since_ms)
            .fetch_one(pool)
            .await?
        });
        Ok(n)
    }

    /// How many inbound calls one caller may place to `org_id` in an hour (0: no cap).
    pub async fn inbound_caller_hourly_cap(&self, org_id: OrgId) -> StoreResult<i64> {
        let cap = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>("SELECT inbound_caller_hourly_cap FROM orgs WHERE id = $1")
                .bind(org_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(cap.unwrap_or(0))
    }

    /// Sets the hourly cap per caller; `false` when there is no such workspace.
    pub async fn set_inbound_caller_hourly_cap(
        &self,
        org_id: OrgId,
        cap: i64,
    ) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query("UPDATE orgs SET inbound_caller_hourly_cap = $1 WHERE id = $2")
                .bind(cap)
                .bind(org_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// The workspace's inbound routing URL and its signing secret, if set.
    pub async fn inbound_routing(&self, org_id: OrgId) -> StoreResult<Option<(String, String)>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, (Option<String>, Option<String>)>(
                "SELECT inbound_routing_url, inbound_routing_secret FROM orgs WHERE id = $1",
            )
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row.and_then(|(url, secret)| url.zip(secret)))
    }

    /// Sets (or with `None` clears) the workspace's inbound routing URL; a
    /// workspace without a signing secret gets `fresh_secret`. Returns the
    /// secret now in use and whether it is the fresh one.
    pub async fn set_inbound_routing_url(
        &self,
        org_id: OrgId,
        url: Option<&str>,
        fresh_secret: &str,
    ) -> StoreResult<(String, bool)> {
        let secret = with_writer!(self, pool => {
            sqlx::query_scalar::<_, Option<String>>(
                "UPDATE orgs SET inbound_routing_url = $1,
                   inbound_routing_secret = COALESCE(inbound_routing_secret, $2)
                 WHERE id = $3 RETURNING inbound_routing_secret",
            )
            .bind(url)
            .bind(fresh_secret)
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        let secret = secret.flatten().unwrap_or_else(|| fresh_secret.to_string());
        let fresh = secret == fresh_secret;
        Ok((secret, fresh))
    }

    /// The name and variables of the latest call from `from_number` to `phone`
    /// in the workspace (a batch item's, once dialed): who an inbound caller is.
    pub async fn latest_call_between(
        &self,
        org_id: OrgId,
        phone: &str,
        from_number: &str,
    ) -> StoreResult<Option<(String, String)>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, (String, String)>(
                "SELECT target_name, variables FROM calls
                 WHERE org_id = $1 AND phone = $2 AND from_number = $3 AND direction = 'outbound'
                 ORDER BY created_at DESC LIMIT 1",
            )
            .bind(org_id)
            .bind(phone)
            .bind(from_number)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }
}
