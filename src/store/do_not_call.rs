//! The workspace's do-not-call list: numbers no path may dial. Each entry
//! keeps why and where it came from; an opt-out lists the number and queues
//! its `number.opted_out` event in the call's terminal transaction.

use super::{BeginWrite, Store, StoreResult, with_pool, with_writer};
use crate::domain::do_not_call::DncSource;
use crate::domain::{CallId, OrgId};
use std::collections::HashSet;

/// The event an opt-out queues.
pub const OPTED_OUT_EVENT: &str = "number.opted_out";

/// The reason an opt-out's entry gives.
pub const OPTED_OUT_REASON: &str = "Asked not to be called again during a call";

/// Inside the write transaction `$tx`: lists `$phone` for `$org_id` with
/// source `opt-out` (an entry already there is kept) and queues the
/// `number.opted_out` event of `$call_id`. The call's terminal transaction
/// runs it, so a call that reads as ended by an opt-out always has its number
/// listed, across a crash too.
macro_rules! opt_out_in_tx {
    ($tx:expr, $org_id:expr, $call_id:expr, $phone:expr, $now_ms:expr) => {{
        sqlx::query(
            "INSERT INTO do_not_call (org_id, phone, reason, source, created_at) VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (org_id, phone) DO NOTHING",
        )
        .bind($org_id)
        .bind($phone)
        .bind($crate::store::do_not_call::OPTED_OUT_REASON)
        .bind($crate::domain::do_not_call::DncSource::OptOut)
        .bind($now_ms)
        .execute(&mut *$tx)
        .await?;
        $crate::store::webhook_outbox::queue_in_tx!(
            &mut *$tx,
            $org_id,
            $call_id,
            $crate::store::do_not_call::OPTED_OUT_EVENT,
            $now_ms
        )
    }};
}
pub(crate) use opt_out_in_tx;

/// One listed number.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DncRow {
    /// The number, E.164.
    pub phone: String,
    /// Why, as given.
    pub reason: String,
    /// Where the entry came from.
    pub source: DncSource,
    /// When listed, Unix ms.
    pub created_at: i64,
}

/// A `LIKE` pattern matching `term` anywhere, its wildcards escaped with `\`.
fn contains_pattern(term: &str) -> String {
    let mut pattern = String::with_capacity(term.len() + 2);
    pattern.push('%');
    for c in term.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

impl Store {
    /// Lists `phone` for `org_id`; an entry already there is kept as it is.
    /// Returns the entry and whether this call added it.
    pub async fn add_do_not_call(
        &self,
        org_id: OrgId,
        phone: &str,
        reason: &str,
        source: DncSource,
        now_ms: i64,
    ) -> StoreResult<(DncRow, bool)> {
        let (row, added) = with_writer!(self, pool => {
            let added = sqlx::query(
                "INSERT INTO do_not_call (org_id, phone, reason, source, created_at) VALUES ($1, $2, $3, $4, $5)
                 ON CONFLICT (org_id, phone) DO NOTHING",
            )
            .bind(org_id)
            .bind(phone)
            .bind(reason)
            .bind(source)
            .bind(now_ms)
            .execute(pool)
            .await?
            .rows_affected()
                > 0;
            let row = sqlx::query_as::<_, DncRow>(
                "SELECT phone, reason, source, created_at FROM do_not_call WHERE org_id = $1 AND phone = $2",
            )
            .bind(org_id)
            .bind(phone)
            .fetch_one(pool)
            .await?;
            (row, added)
        });
        Ok((row, added))
    }

    /// Lists every `(phone, reason)` in one transaction; returns, per entry,
    /// whether it was added (false: already listed, or earlier in `entries`).
    pub async fn add_do_not_call_many(
        &self,
        org_id: OrgId,
        entries: &[(String, String)],
        source: DncSource,
        now_ms: i64,
    ) -> StoreResult<Vec<bool>> {
        let added = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let mut added = Vec::with_capacity(entries.len());
            for (phone, reason) in entries {
                let n = sqlx::query(
                    "INSERT INTO do_not_call (org_id, phone, reason, source, created_at) VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (org_id, phone) DO NOTHING",
                )
                .bind(org_id)
                .bind(phone)
                .bind(reason)
                .bind(source)
                .bind(now_ms)
                .execute(&mut *tx)
                .await?
                .rows_affected();
                added.push(n > 0);
            }
            tx.commit().await?;
            added
        });
        Ok(added)
    }

    /// Takes `phone` off the list; false when it was not listed.
    pub async fn remove_do_not_call(&self, org_id: OrgId, phone: &str) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query("DELETE FROM do_not_call WHERE org_id = $1 AND phone = $2")
                .bind(org_id)
                .bind(phone)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// A page of the list, newest first, with the total; `search` matches a
    /// substring of the number or the reason, case-insensitively.
    pub async fn do_not_call_page(
        &self,
        org_id: OrgId,
        search: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<DncRow>, i64)> {
        let pattern = contains_pattern(search.unwrap_or_default());
        let (rows, total) = with_pool!(self, pool => {
            let rows = sqlx::query_as::<_, DncRow>(
                "SELECT phone, reason, source, created_at FROM do_not_call
                 WHERE org_id = $1 AND (phone LIKE $2 ESCAPE '\\' OR LOWER(reason) LIKE $2 ESCAPE '\\')
                 ORDER BY created_at DESC, phone LIMIT $3 OFFSET $4",
            )
            .bind(org_id)
            .bind(&pattern)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?;
            let total: i64 = sqlx::query_scalar(
                "SELECT COUNT(*) FROM do_not_call
                 WHERE org_id = $1 AND (phone LIKE $2 ESCAPE '\\' OR LOWER(reason) LIKE $2 ESCAPE '\\')",
            )
            .bind(org_id)
            .bind(&pattern)
            .fetch_one(pool)
            .await?;
            (rows, total)
        });
        Ok((rows, total))
    }

    /// Up to `limit` entries after the number `after`, in number order (the export's pages).
    pub async fn do_not_call_after(
        &self,
        org_id: OrgId,
        after: Option<&str>,
        limit: i64,
    ) -> StoreResult<Vec<DncRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, DncRow>(
                "SELECT phone, reason, source, created_at FROM do_not_call
                 WHERE org_id = $1 AND phone > $2 ORDER BY phone LIMIT $3",
            )
            .bind(org_id)
            .bind(after.unwrap_or_default())
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Whether `org_id` listed `phone`: the check every dialing path makes.
    pub async fn is_do_not_call(&self, org_id: OrgId, phone: &str) -> StoreResult<bool> {
        let found = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM do_not_call WHERE org_id = $1 AND phone = $2",
            )
            .bind(org_id)
            .bind(phone)
            .fetch_one(pool)
            .await?
        });
        Ok(found > 0)
    }

    /// Every number `org_id` listed, for screening an upload at once.
    pub async fn do_not_call_phones(&self, org_id: OrgId) -> StoreResult<HashSet<String>> {
        let phones = with_pool!(self, pool => {
            sqlx::query_scalar::<_, String>("SELECT phone FROM do_not_call WHERE org_id = $1")
                .bind(org_id)
                .fetch_all(pool)
                .await?
        });
        Ok(phones.into_iter().collect())
    }

    /// Marks the batch item whose latest call is `call_id` skipped by the rule
    /// `skip_reason` (`do-not-call`, `attempt-cap`; its call was never dialed),
    /// `note` replacing its `reason` when given.
    pub async fn skip_item_of_call(
        &self,
        call_id: CallId,
        skip_reason: &str,
        note: Option<&str>,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "UPDATE batch_items SET status = 'skipped', skip_reason = $1, reason = COALESCE($3, reason)
                 WHERE call_id = $2",
            )
            .bind(skip_reason)
            .bind(call_id)
            .bind(note)
            .execute(pool)
            .await?;
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::contains_pattern;

    #[test]
    fn search_patterns_escape_wildcards() {
        assert_eq!(contains_pattern(""), "%%");
        assert_eq!(contains_pattern("91_9"), "%91\\_9%");
        assert_eq!(contains_pattern("Opt%Out"), "%opt\\%out%");
    }
}
