//! Workspaces (organizations).

use super::{Store, StoreResult, with_pool};
use crate::domain::{OrgId, Paise};

/// A workspace as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct OrgRow {
    /// Workspace id.
    pub id: OrgId,
    /// Display name.
    pub name: String,
    /// Concurrent call slots.
    pub concurrency: i64,
    /// Monthly minute quota.
    pub minute_quota: i64,
    /// Wallet balance.
    pub wallet_paise: Paise,
    /// Creation time, Unix ms.
    pub created_at: i64,
}

impl Store {
    /// Creates a workspace with an empty wallet.
    pub async fn create_org(
        &self,
        name: &str,
        concurrency: i64,
        minute_quota: i64,
        now_ms: i64,
    ) -> StoreResult<OrgRow> {
        let id = OrgId::new();
        with_pool!(self, pool => {
            sqlx::query(
                "INSERT INTO orgs (id, name, concurrency, minute_quota, wallet_paise, created_at)
                 VALUES ($1, $2, $3, $4, 0, $5)",
            )
            .bind(id)
            .bind(name)
            .bind(concurrency)
            .bind(minute_quota)
            .bind(now_ms)
            .execute(pool)
            .await?;
        });
        Ok(OrgRow {
            id,
            name: name.to_string(),
            concurrency,
            minute_quota,
            wallet_paise: Paise::ZERO,
            created_at: now_ms,
        })
    }

    /// Reads one workspace.
    pub async fn org(&self, id: OrgId) -> StoreResult<Option<OrgRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, OrgRow>(
                "SELECT id, name, concurrency, minute_quota, wallet_paise, created_at
                 FROM orgs WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// How many workspaces exist; zero means first run.
    pub async fn org_count(&self) -> StoreResult<i64> {
        let count = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>("SELECT COUNT(*) FROM orgs").fetch_one(pool).await?
        });
        Ok(count)
    }

    /// Minutes billed to the workspace in the IST month `month` (YYYY-MM).
    pub async fn minutes_used(&self, org_id: OrgId, month: &str) -> StoreResult<i64> {
        let minutes = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT minutes FROM org_minute_usage WHERE org_id = $1 AND month = $2",
            )
            .bind(org_id)
            .bind(month)
            .fetch_optional(pool)
            .await?
        });
        Ok(minutes.unwrap_or(0))
    }
}
