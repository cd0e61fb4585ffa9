//! Per-key, per-IST-day request counters behind the rate limiter.

use super::{Store, StoreResult, with_pool, with_writer};
use crate::domain::ApiKeyId;
use crate::store::BeginWrite;

/// One key's usage on one IST day.
#[derive(Debug, Clone, sqlx::FromRow, PartialEq, Eq)]
pub struct UsageDayRow {
    /// IST calendar day, YYYY-MM-DD.
    pub day: String,
    /// Admitted requests leased ahead; never below the true admitted count.
    pub reserved: i64,
    /// Requests admitted under the caps, as last flushed.
    pub admitted: i64,
    /// 2xx answers.
    pub success: i64,
    /// 4xx and 5xx answers other than 429.
    pub failed: i64,
    /// 429 answers.
    pub rate_limited: i64,
}

impl UsageDayRow {
    /// The count a restarted limiter must start from: what was leased, or more
    /// if more was flushed.
    pub fn counted(&self) -> i64 {
        self.reserved.max(self.admitted)
    }
}

/// A request counted by [`Store::count_request`].
#[derive(Debug, Clone, Copy, sqlx::FromRow, PartialEq, Eq)]
pub struct CountedRequest {
    /// The day's count with this request.
    pub daily: i64,
    /// The key's daily cap as stored when it was counted.
    pub daily_limit: i64,
    /// The key's monthly cap as stored when it was counted.
    pub monthly_limit: i64,
}

/// Counter increments accumulated in memory since the last flush.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UsageDelta {
    /// Key id.
    pub key_id: ApiKeyId,
    /// IST calendar day.
    pub day: String,
    /// Newly admitted requests.
    pub admitted: i64,
    /// New 2xx answers.
    pub success: i64,
    /// New 4xx/5xx answers.
    pub failed: i64,
    /// New 429 answers.
    pub rate_limited: i64,
}

impl Store {
    /// Usage rows of a key whose day starts with `month` (YYYY-MM).
    pub async fn key_usage_in_month(
        &self,
        key_id: ApiKeyId,
        month: &str,
    ) -> StoreResult<Vec<UsageDayRow>> {
        let pattern = format!("{month}-%");
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, UsageDayRow>(
                "SELECT day, reserved, admitted, success, failed, rate_limited
                 FROM api_key_usage WHERE key_id = $1 AND day LIKE $2 ORDER BY day",
            )
            .bind(key_id)
            .bind(&pattern)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Counts one request of a key on `day` of `month` (YYYY-MM) against its
    /// caps as stored now, atomically however many nodes count at once: one
    /// statement that adds the request only while the key is not revoked, the
    /// day's count is below its daily cap and the month's below its monthly
    /// cap. The day's count with this request and the caps it was held to,
    /// or None when the key is revoked or a cap refused it.
    ///
    /// Reading the key's row here makes a revocation or a new cap hold on
    /// every node's very next request, whatever its key cache still holds.
    /// The usage row's lock is held for this statement only; concurrent
    /// requests for one key queue on it, and each re-checks the caps against
    /// the count the one before it left.
    pub async fn count_request(
        &self,
        key_id: ApiKeyId,
        day: &str,
        month: &str,
    ) -> StoreResult<Option<CountedRequest>> {
        let pattern = format!("{month}-%");
        let counted = with_writer!(self, pool => {
            // A day counts what it leased or, if more, what it flushed (a row
            // the one-node limiter leased ahead keeps its lease).
            sqlx::query_as::<_, CountedRequest>(
                "WITH caps AS (
                   SELECT daily_limit, monthly_limit FROM api_keys WHERE id = $1 AND revoked_at IS NULL
                 ), other_days AS (
                   SELECT COALESCE(SUM(CASE WHEN reserved > admitted THEN reserved ELSE admitted END), 0) AS n
                   FROM api_key_usage WHERE key_id = $1 AND day LIKE $3 AND day <> $2
                 )
                 INSERT INTO api_key_usage (key_id, day, reserved)
                 SELECT $1, $2, 1 FROM caps, other_days
                 WHERE caps.daily_limit > 0 AND other_days.n < caps.monthly_limit
                 ON CONFLICT (key_id, day) DO UPDATE SET reserved = 1 +
                   CASE WHEN api_key_usage.reserved > api_key_usage.admitted
                        THEN api_key_usage.reserved ELSE api_key_usage.admitted END
                 WHERE CASE WHEN api_key_usage.reserved > api_key_usage.admitted
                            THEN api_key_usage.reserved ELSE api_key_usage.admitted END
                       < (SELECT daily_limit FROM caps)
                   AND CASE WHEN api_key_usage.reserved > api_key_usage.admitted
                            THEN api_key_usage.reserved ELSE api_key_usage.admitted END
                       + (SELECT n FROM other_days) < (SELECT monthly_limit FROM caps)
                 RETURNING reserved AS daily,
                   (SELECT daily_limit FROM caps) AS daily_limit,
                   (SELECT monthly_limit FROM caps) AS monthly_limit",
            )
            .bind(key_id)
            .bind(day)
            .bind(&pattern)
            .fetch_optional(pool)
            .await?
        });
        Ok(counted)
    }

    /// Raises a key's lease for `day` to at least `upto` admitted requests.
    pub async fn reserve_usage(&self, key_id: ApiKeyId, day: &str, upto: i64) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO api_key_usage (key_id, day, reserved) VALUES ($1, $2, $3)
                 ON CONFLICT (key_id, day) DO UPDATE SET reserved =
                   CASE WHEN api_key_usage.reserved < excluded.reserved
                        THEN excluded.reserved ELSE api_key_usage.reserved END",
            )
            .bind(key_id)
            .bind(day)
            .bind(upto)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Adds buffered counter increments, all in one transaction.
    pub async fn add_usage(&self, deltas: &[UsageDelta]) -> StoreResult<()> {
        if deltas.is_empty() {
            return Ok(());
        }
        with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            for d in deltas {
                sqlx::query(
                    "INSERT INTO api_key_usage (key_id, day, reserved, admitted, success, failed, rate_limited)
                     VALUES ($1, $2, 0, $3, $4, $5, $6)
                     ON CONFLICT (key_id, day) DO UPDATE SET
                       admitted = api_key_usage.admitted + excluded.admitted,
                       success = api_key_usage.success + excluded.success,
                       failed = api_key_usage.failed + excluded.failed,
                       rate_limited = api_key_usage.rate_limited + excluded.rate_limited",
                )
                .bind(d.key_id)
                .bind(&d.day)
                .bind(d.admitted)
                .bind(d.success)
                .bind(d.failed)
                .bind(d.rate_limited)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// After a clean shutdown, sets each lease to the exact admitted count so no
    /// allowance is lost: `(key_id, day, admitted)`.
    pub async fn settle_usage_leases(&self, exact: &[(ApiKeyId, String, i64)]) -> StoreResult<()> {
        if exact.is_empty() {
            return Ok(());
        }
        with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            for (key_id, day, admitted) in exact {
                sqlx::query("UPDATE api_key_usage SET reserved = $1 WHERE key_id = $2 AND day = $3")
                    .bind(*admitted)
                    .bind(*key_id)
                    .bind(day)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }
}
