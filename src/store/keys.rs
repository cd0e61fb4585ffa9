//! API keys: only the SHA-256 hash and a display prefix are stored.
//!
//! A revocation or a change of caps moves the keys change marker once
//! committed and, on Postgres, sends the key's hash on [`KEYS_CHANNEL`] in
//! the same statement, for [`crate::access::key_cache::KeyCache`] on every node.

use super::{Db, Store, StoreResult, notifying, with_pool, with_writer};
use crate::domain::{ApiKeyId, OrgId};
use crate::store::BeginWrite;
use crate::store::nodes::KEYS_CHANNEL;

/// What the auth layer needs to know about a presented key.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct KeyAuthRow {
    /// Key id.
    pub id: ApiKeyId,
    /// Owning workspace.
    pub org_id: OrgId,
    /// Daily request cap.
    pub daily_limit: i64,
    /// Monthly request cap.
    pub monthly_limit: i64,
    /// Set once the key is revoked.
    pub revoked_at: Option<i64>,
}

/// A key as listed to administrators.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ApiKeyRow {
    /// Key id.
    pub id: ApiKeyId,
    /// Owning workspace.
    pub org_id: OrgId,
    /// Descriptive name.
    pub name: String,
    /// Leading characters of the key, for recognition.
    pub prefix: String,
    /// Daily request cap.
    pub daily_limit: i64,
    /// Monthly request cap.
    pub monthly_limit: i64,
    /// Revocation time, Unix ms.
    pub revoked_at: Option<i64>,
    /// Last authenticated use, Unix ms.
    pub last_used_at: Option<i64>,
    /// Creation time, Unix ms.
    pub created_at: i64,
}

/// Fields of a new key.
#[derive(Debug, Clone)]
pub struct NewApiKey<'a> {
    /// Key id.
    pub id: ApiKeyId,
    /// Owning workspace.
    pub org_id: OrgId,
    /// Descriptive name.
    pub name: &'a str,
    /// Display prefix.
    pub prefix: &'a str,
    /// Hex SHA-256 of the full key.
    pub key_hash: &'a str,
    /// Daily request cap.
    pub daily_limit: i64,
    /// Monthly request cap.
    pub monthly_limit: i64,
    /// Creation time, Unix ms.
    pub now_ms: i64,
}

impl Store {
    /// Stores a new key's hash and metadata.
    pub async fn insert_api_key(&self, key: &NewApiKey<'_>) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO api_keys (id, org_id, name, prefix, key_hash, daily_limit, monthly_limit, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
            )
            .bind(key.id)
            .bind(key.org_id)
            .bind(key.name)
            .bind(key.prefix)
            .bind(key.key_hash)
            .bind(key.daily_limit)
            .bind(key.monthly_limit)
            .bind(key.now_ms)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Looks a presented key up by its hash.
    pub async fn api_key_by_hash(&self, key_hash: &str) -> StoreResult<Option<KeyAuthRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, KeyAuthRow>(
                "SELECT id, org_id, daily_limit, monthly_limit, revoked_at
                 FROM api_keys WHERE key_hash = $1",
            )
            .bind(key_hash)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// Every key of a workspace, newest first.
    pub async fn api_keys(&self, org_id: OrgId) -> StoreResult<Vec<ApiKeyRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, ApiKeyRow>(
                "SELECT id, org_id, name, prefix, daily_limit, monthly_limit, revoked_at, last_used_at, created_at
                 FROM api_keys WHERE org_id = $1 ORDER BY created_at DESC, id DESC",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// One key's metadata.
    pub async fn api_key(&self, id: ApiKeyId) -> StoreResult<Option<ApiKeyRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, ApiKeyRow>(
                "SELECT id, org_id, name, prefix, daily_limit, monthly_limit, revoked_at, last_used_at, created_at
                 FROM api_keys WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// Revokes a key; false when no such key exists.
    pub async fn revoke_api_key(&self, id: ApiKeyId, now_ms: i64) -> StoreResult<bool> {
        const UPDATE: &str =
            "UPDATE api_keys SET revoked_at = COALESCE(revoked_at, $1) WHERE id = $2";
        let done = match &self.write_db {
            Db::Sqlite(pool) => {
                let query = sqlx::query(UPDATE).bind(now_ms).bind(id);
                query.execute(pool).await?.rows_affected() > 0
            }
            Db::Postgres(pool) => {
                let sql = notifying(UPDATE, "key_hash", 3);
                let query = sqlx::query(sql).bind(now_ms).bind(id).bind(KEYS_CHANNEL);
                !query.fetch_all(pool).await?.is_empty()
            }
        };
        self.mark_keys_changed();
        Ok(done)
    }

    /// Overrides a key's caps; false when no such key exists.
    pub async fn set_api_key_limits(
        &self,
        id: ApiKeyId,
        daily: i64,
        monthly: i64,
    ) -> StoreResult<bool> {
        const UPDATE: &str =
            "UPDATE api_keys SET daily_limit = $1, monthly_limit = $2 WHERE id = $3";
        let done = match &self.write_db {
            Db::Sqlite(pool) => {
                let query = sqlx::query(UPDATE).bind(daily).bind(monthly).bind(id);
                query.execute(pool).await?.rows_affected() > 0
            }
            Db::Postgres(pool) => {
                let sql = notifying(UPDATE, "key_hash", 4);
                let query = sqlx::query(sql)
                    .bind(daily)
                    .bind(monthly)
                    .bind(id)
                    .bind(KEYS_CHANNEL);
                !query.fetch_all(pool).await?.is_empty()
            }
        };
        self.mark_keys_changed();
        Ok(done)
    }

    /// Records last-used times gathered since the previous flush, in one transaction.
    pub async fn touch_api_keys(&self, seen: &[(ApiKeyId, i64)]) -> StoreResult<()> {
        if seen.is_empty() {
            return Ok(());
        }
        with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            for (id, at) in seen {
                sqlx::query(
                    "UPDATE api_keys SET last_used_at = $1
                     WHERE id = $2 AND (last_used_at IS NULL OR last_used_at < $1)",
                )
                .bind(*at)
                .bind(*id)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }
}
