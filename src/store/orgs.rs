//! Workspaces (organizations).

use super::stored_json::decode_json;
use super::{Store, StoreResult, with_pool, with_writer};
use crate::domain::calling_hours::CallingHours;
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
    /// The workspace's calling hours as stored JSON; None: the server's default.
    /// Read through [`OrgRow::calling_hours`].
    pub calling_hours: Option<String>,
}

impl OrgRow {
    /// The workspace's own calling hours; None when it keeps the server's default.
    pub fn calling_hours(&self) -> StoreResult<Option<CallingHours>> {
        self.calling_hours
            .as_deref()
            .map(|text| decode_json("orgs", "calling_hours", self.id, text))
            .transpose()
    }
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
        with_writer!(self, pool => {
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
            calling_hours: None,
        })
    }

    /// Reads one workspace.
    pub async fn org(&self, id: OrgId) -> StoreResult<Option<OrgRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, OrgRow>(
                "SELECT id, name, concurrency, minute_quota, wallet_paise, created_at, calling_hours
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

    /// The workspace's own calling hours; None when it keeps the server's default.
    pub async fn org_calling_hours(&self, id: OrgId) -> StoreResult<Option<CallingHours>> {
        let text: Option<Option<String>> = with_pool!(self, pool => {
            sqlx::query_scalar("SELECT calling_hours FROM orgs WHERE id = $1")
                .bind(id)
                .fetch_optional(pool)
                .await?
        });
        text.flatten()
            .map(|text| decode_json("orgs", "calling_hours", id, &text))
            .transpose()
    }

    /// Sets the workspace's calling hours (None: back to the server's default).
    pub async fn set_org_calling_hours(
        &self,
        id: OrgId,
        hours: Option<&CallingHours>,
    ) -> StoreResult<()> {
        let text = hours.map(serde_json::to_string).transpose()?;
        with_writer!(self, pool => {
            sqlx::query("UPDATE orgs SET calling_hours = $2 WHERE id = $1")
                .bind(id)
                .bind(text.as_deref())
                .execute(pool)
                .await?;
        });
        Ok(())
    }
}
