//! Attempt caps: at most N dial attempts per number per rolling 24 hours and
//! 7 days across the workspace. The count and the insert of the call it
//! allows run in one transaction: SQLite's single writer serialises them,
//! and on Postgres a transaction-scoped advisory lock keyed by
//! (workspace, number) makes every node agree, so two placements racing for
//! the last attempt never both dial.

use super::calls::{NewCall, insert_calls_in};
use super::{BeginWrite, Store, StoreResult, with_pool, with_writer};
use crate::domain::{CallId, OrgId};
use sqlx::QueryBuilder;
use std::collections::HashMap;

/// The rule a skipped batch item or a refused call names.
pub const SKIP_REASON: &str = "attempt-cap";

/// Default attempts per number per rolling 24 hours.
pub const DEFAULT_PER_DAY: i64 = 3;
/// Default attempts per number per rolling 7 days.
pub const DEFAULT_PER_WEEK: i64 = 7;
/// The range either cap may be set to.
pub const CAP_RANGE: std::ops::RangeInclusive<i64> = 1..=100;

/// `value` as a cap named `field` (the API's field, the CLI's flag), or the
/// refusal every surface words the same way.
pub fn checked_cap(field: &str, value: i64) -> Result<i64, String> {
    if CAP_RANGE.contains(&value) {
        Ok(value)
    } else {
        Err(format!(
            "{field} must be from {} to {}, got {value}",
            CAP_RANGE.start(),
            CAP_RANGE.end()
        ))
    }
}

/// A cap typed as text (the console's form): [`checked_cap`] of its number.
pub fn checked_cap_text(field: &str, raw: &str) -> Result<i64, String> {
    let raw = raw.trim();
    match raw.parse::<i64>() {
        Ok(value) => checked_cap(field, value),
        Err(_) => Err(format!(
            "{field} must be from {} to {}, got {raw:?}",
            CAP_RANGE.start(),
            CAP_RANGE.end()
        )),
    }
}

const DAY_MS: i64 = 24 * 3600 * 1000;
const WEEK_MS: i64 = 7 * DAY_MS;

/// A workspace's caps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::FromRow)]
pub struct AttemptCaps {
    /// Attempts per number per rolling 24 hours.
    #[sqlx(rename = "attempt_cap_per_day")]
    pub per_day: i64,
    /// Attempts per number per rolling 7 days.
    #[sqlx(rename = "attempt_cap_per_week")]
    pub per_week: i64,
}

impl Default for AttemptCaps {
    fn default() -> Self {
        Self {
            per_day: DEFAULT_PER_DAY,
            per_week: DEFAULT_PER_WEEK,
        }
    }
}

/// Which window a number reached its cap in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CapRule {
    /// The rolling 24 hours.
    Day,
    /// The rolling 7 days.
    Week,
}

/// A number at its cap: the rule, the cap, and when it may be dialed again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CapHit {
    /// The window that is full.
    pub rule: CapRule,
    /// Its cap.
    pub cap: i64,
    /// When an attempt leaves the window (every full one), Unix ms.
    pub again_at_ms: i64,
}

impl CapHit {
    /// What a refusal or a skipped item says.
    pub fn message(&self, phone: &str) -> String {
        let window = match self.rule {
            CapRule::Day => "24 hours",
            CapRule::Week => "7 days",
        };
        let again = chrono::DateTime::from_timestamp_millis(self.again_at_ms)
            .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
            .unwrap_or_default();
        format!(
            "{phone} reached the workspace's attempt cap ({} dial attempts per {window}); it may be dialed again at {again}",
            self.cap
        )
    }
}

/// Whether one more attempt at `now_ms` goes over `caps`, given the earlier
/// attempts' times within the last 7 days in ascending order.
pub fn check(times: &[i64], now_ms: i64, caps: AttemptCaps) -> Option<CapHit> {
    let day: Vec<i64> = times
        .iter()
        .copied()
        .filter(|t| *t > now_ms - DAY_MS)
        .collect();
    let week: Vec<i64> = times
        .iter()
        .copied()
        .filter(|t| *t > now_ms - WEEK_MS)
        .collect();
    let hit = |times: &[i64], cap: i64, rule: CapRule, window: i64| {
        let cap_len = usize::try_from(cap.max(1)).unwrap_or(usize::MAX);
        (times.len() >= cap_len).then(|| CapHit {
            rule,
            cap,
            again_at_ms: times[times.len() - cap_len] + window,
        })
    };
    match (
        hit(&day, caps.per_day, CapRule::Day, DAY_MS),
        hit(&week, caps.per_week, CapRule::Week, WEEK_MS),
    ) {
        (Some(d), Some(w)) => Some(if w.again_at_ms > d.again_at_ms { w } else { d }),
        (d, w) => d.or(w),
    }
}

/// Which calls count as attempts: outbound ones, except those never dialed
/// because a rule stopped them. One literal, so the single check and the
/// grouped one can never count differently.
macro_rules! counted_attempts {
    () => {
        " AND direction = 'outbound'
       AND (ended_reason IS NULL OR ended_reason NOT IN ('do-not-call', 'attempt-cap', 'calling-hours'))"
    };
}

/// Earlier attempts to a number: the workspace's counted calls within the
/// window, any agent, except the one being checked.
pub(crate) const ATTEMPTS_SQL: &str = concat!(
    "SELECT created_at FROM calls
     WHERE org_id = $1 AND phone = $2 AND created_at > $3 AND id <> $4",
    counted_attempts!(),
    " ORDER BY created_at"
);

/// Numbers per grouped statement (far below either database's bind limit).
const GROUP_CHUNK: usize = 500;

pub(crate) const CAPS_SQL: &str =
    "SELECT attempt_cap_per_day, attempt_cap_per_week FROM orgs WHERE id = $1";

pub(crate) const LOCK_SQL: &str =
    "SELECT pg_advisory_xact_lock(hashtextextended('voxline-attempts:' || $1 || ':' || $2, 0))";

/// Within a transaction `$tx` of `$store`: takes the (workspace, number) lock
/// on Postgres, then checks one more attempt; evaluates to `Option<CapHit>`.
macro_rules! check_in_tx {
    ($store:expr, $tx:expr, $org:expr, $phone:expr, $exclude:expr, $now:expr) => {{
        if $store.is_shared() {
            sqlx::query($crate::store::attempt_caps::LOCK_SQL)
                .bind($org)
                .bind($phone)
                .execute(&mut *$tx)
                .await?;
        }
        let caps: $crate::store::attempt_caps::AttemptCaps =
            sqlx::query_as($crate::store::attempt_caps::CAPS_SQL)
                .bind($org)
                .fetch_optional(&mut *$tx)
                .await?
                .unwrap_or_default();
        let times: Vec<i64> = sqlx::query_scalar($crate::store::attempt_caps::ATTEMPTS_SQL)
            .bind($org)
            .bind($phone)
            .bind($now - 7 * 24 * 3600 * 1000)
            .bind($exclude)
            .fetch_all(&mut *$tx)
            .await?;
        $crate::store::attempt_caps::check(&times, $now, caps)
    }};
}
pub(super) use check_in_tx;

impl Store {
    /// The workspace's caps.
    pub async fn attempt_caps(&self, org_id: OrgId) -> StoreResult<AttemptCaps> {
        let caps = with_pool!(self, pool => {
            sqlx::query_as::<_, AttemptCaps>(CAPS_SQL)
                .bind(org_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(caps.unwrap_or_default())
    }

    /// Sets the workspace's caps (each checked by the caller).
    pub async fn set_attempt_caps(&self, org_id: OrgId, caps: AttemptCaps) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "UPDATE orgs SET attempt_cap_per_day = $2, attempt_cap_per_week = $3 WHERE id = $1",
            )
            .bind(org_id)
            .bind(caps.per_day)
            .bind(caps.per_week)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Whether one more attempt to `phone` now, besides the stored call
    /// `call_id` itself, goes over the caps (a read, for a call already
    /// stored and so already counted by every placement since).
    pub async fn attempt_cap_hit(
        &self,
        org_id: OrgId,
        phone: &str,
        call_id: CallId,
        now_ms: i64,
    ) -> StoreResult<Option<CapHit>> {
        let hit = with_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            let hit = check_in_tx!(self, tx, org_id, phone, call_id, now_ms);
            tx.rollback().await?;
            hit
        });
        Ok(hit)
    }

    /// Stores each call of one workspace unless its number is at its cap;
    /// returns, per call, the cap it hit. One transaction counts every
    /// number's earlier attempts in grouped reads and inserts the allowed
    /// calls (on Postgres under every number's lock, taken in sorted order
    /// so two placements never wait on each other crosswise); a number given
    /// twice counts its first call against its second.
    pub async fn insert_calls_capped(
        &self,
        calls: &[NewCall],
        now_ms: i64,
    ) -> StoreResult<Vec<Option<CapHit>>> {
        let Some(first) = calls.first() else {
            return Ok(Vec::new());
        };
        let org_id = first.org_id;
        if calls.iter().any(|c| c.org_id != org_id) {
            // One workspace per placement; mixed input is split, never mixed up.
            let mut hits = Vec::with_capacity(calls.len());
            for call in calls {
                hits.extend(
                    Box::pin(self.insert_calls_capped(std::slice::from_ref(call), now_ms)).await?,
                );
            }
            return Ok(hits);
        }
        let mut phones: Vec<&str> = calls.iter().map(|c| c.phone.as_str()).collect();
        phones.sort_unstable();
        phones.dedup();
        let hits = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            if self.is_shared() {
                for chunk in phones.chunks(GROUP_CHUNK) {
                    let mut lock = QueryBuilder::new(
                        "SELECT pg_advisory_xact_lock(hashtextextended('voxline-attempts:' || ",
                    );
                    lock.push_bind(org_id)
                        .push(" || ':' || v.p, 0)) FROM (VALUES ");
                    let mut rows = lock.separated(", ");
                    for phone in chunk {
                        rows.push("(").push_bind_unseparated(*phone).push_unseparated(")");
                    }
                    lock.push(") AS v(p)");
                    lock.build().execute(&mut *tx).await?;
                }
            }
            let caps: AttemptCaps = sqlx::query_as(CAPS_SQL)
                .bind(org_id)
                .fetch_optional(&mut *tx)
                .await?
                .unwrap_or_default();
            let mut earlier: HashMap<String, Vec<i64>> = HashMap::new();
            for chunk in phones.chunks(GROUP_CHUNK) {
                let mut read = QueryBuilder::new("SELECT phone, created_at FROM calls WHERE org_id = ");
                read.push_bind(org_id)
                    .push(" AND created_at > ")
                    .push_bind(now_ms - WEEK_MS)
                    .push(counted_attempts!())
                    .push(" AND phone IN (");
                let mut list = read.separated(", ");
                for phone in chunk {
                    list.push_bind(*phone);
                }
                read.push(") ORDER BY phone, created_at");
                let rows: Vec<(String, i64)> = read.build_query_as().fetch_all(&mut *tx).await?;
                for (phone, at) in rows {
                    earlier.entry(phone).or_default().push(at);
                }
            }
            let mut hits = Vec::with_capacity(calls.len());
            let mut allowed = Vec::with_capacity(calls.len());
            for call in calls {
                let times = earlier.entry(call.phone.clone()).or_default();
                let hit = check(times, now_ms, caps);
                if hit.is_none() {
                    times.push(now_ms);
                    allowed.push(call.clone());
                }
                hits.push(hit);
            }
            insert_calls_in(&mut tx, &allowed).await?;
            tx.commit().await?;
            hits
        });
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAPS: AttemptCaps = AttemptCaps {
        per_day: 3,
        per_week: 7,
    };

    #[test]
    fn the_fourth_attempt_in_a_day_waits_for_the_first_to_leave_the_window() {
        let now = 10 * DAY_MS;
        assert_eq!(check(&[now - 3000, now - 2000], now, CAPS), None);
        let hit = check(&[now - 3000, now - 2000, now - 1000], now, CAPS).unwrap();
        assert_eq!(hit.rule, CapRule::Day);
        assert_eq!(hit.again_at_ms, now - 3000 + DAY_MS);
        // An attempt a day old has left the window.
        assert_eq!(
            check(&[now - DAY_MS, now - 2000, now - 1000], now, CAPS),
            None
        );
    }

    #[test]
    fn the_week_cap_counts_seven_days_and_names_the_later_release() {
        let now = 10 * DAY_MS;
        let times: Vec<i64> = (1..=7).rev().map(|d| now - d * DAY_MS + 1000).collect();
        let hit = check(&times, now, CAPS).unwrap();
        assert_eq!(hit.rule, CapRule::Week);
        assert_eq!(hit.again_at_ms, times[0] + WEEK_MS);
        let msg = hit.message("+919876543210");
        assert!(msg.contains("7 dial attempts per 7 days"), "{msg}");
    }
}
