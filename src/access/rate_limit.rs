//! Per-key daily and monthly request caps (spec Limits).
//!
//! One node (SQLite): counting is exact and in memory. Each key's window sits
//! behind its own lock, so concurrent requests can never over-admit.
//! Durability comes from leases: before the admitted count passes what the
//! database has reserved, a larger reservation is written (ahead of time, in
//! the background, in the common case). After a crash the limiter restarts
//! from the reservation, so a cap is never exceeded; after a clean shutdown
//! the exact count is written back.
//!
//! Several nodes (Postgres): each request is counted in the database, by one
//! statement that adds it to the day's row only while the key is not revoked
//! and the day's and the month's counts are below the caps as stored now
//! ([`Store::count_request`]), so a revocation or a new cap holds on every
//! node's next request whatever its key cache holds; the row lock
//! orders concurrent requests from every node, so a cap is never exceeded,
//! and the count it returns is the request's place in the cluster-wide day
//! (the same quota headers as one node gives). Leasing blocks per node
//! instead would save that round trip but strand allowance: a node holding
//! unused leases while another refuses admits fewer than the cap, and the
//! leases would have to be traded back between nodes to be exact. One
//! single-row statement per authenticated request is cheap beside the
//! request's own work, and a crash loses nothing, so nothing is leased or
//! settled on this path.
//!
//! Outcome categories and last-used times are buffered and flushed each second
//! on both.

use crate::domain::ApiKeyId;
use crate::domain::clock::{
    SharedClock, ist_day, ist_month_key, next_ist_midnight, next_ist_month_start,
};
use crate::store::{KeyAuthRow, Store, StoreError, UsageDayRow, UsageDelta};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex as AsyncMutex;

/// Requests leased per reservation write at first, and at least.
const LEASE_CHUNK: i64 = 128;

/// The most requests one reservation write leases. A busy key's lease grows
/// towards this so that it lasts about [`LEASE_TARGET`], so a slow write (a
/// checkpoint's fsync) never leaves requests waiting for the next lease;
/// the price is that a crash may count up to this many unserved requests.
const LEASE_CHUNK_MAX: i64 = 8192;

/// How long a lease should last at the key's current request rate.
const LEASE_TARGET: std::time::Duration = std::time::Duration::from_secs(1);

/// The daily quota figures sent in the X-RateLimit headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// The daily ceiling.
    pub limit: i64,
    /// Requests left today.
    pub remaining: i64,
    /// Unix seconds of the next daily reset.
    pub reset: i64,
}

/// The limiter's verdict on one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Admission {
    /// Go ahead.
    Allowed(Quota),
    /// Refused with 429.
    Limited {
        /// "daily" or "monthly".
        scope: &'static str,
        /// The cap that was reached.
        limit: i64,
        /// Requests already admitted in that window.
        used: i64,
        /// Seconds until that window resets.
        retry_after: i64,
        /// Header figures.
        quota: Quota,
    },
    /// The key was revoked, though the lookup that found it did not know
    /// yet (another node revoked it a moment ago): refused with 401.
    Revoked,
}

/// How an answered request is categorised in usage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx (and 1xx/3xx).
    Success,
    /// 4xx or 5xx other than 429.
    Failed,
    /// 429.
    RateLimited,
}

impl Outcome {
    /// The category of a status code.
    pub fn of_status(status: u16) -> Self {
        match status {
            429 => Self::RateLimited,
            400..=599 => Self::Failed,
            _ => Self::Success,
        }
    }
}

/// Usage of one key as currently counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeyUsage {
    /// Admitted today (IST).
    pub daily: i64,
    /// Admitted this month (IST).
    pub monthly: i64,
}

#[derive(Debug, Default)]
struct KeyWindow {
    day: String,
    month: String,
    daily: i64,
    monthly: i64,
    reserved: i64,
    extending: bool,
    /// Requests the next extension leases (between the two chunk bounds).
    chunk: i64,
    /// When the last extension was asked for, to size the next one.
    extended_at: Option<std::time::Instant>,
}

#[derive(Debug, Default)]
struct Pending {
    deltas: HashMap<(ApiKeyId, String), UsageDelta>,
    last_used: HashMap<ApiKeyId, i64>,
}

/// The process-wide rate limiter.
pub struct RateLimiter {
    store: Store,
    clock: SharedClock,
    /// Counting in the database shared with other nodes, not in memory.
    shared: bool,
    windows: parking_lot::Mutex<HashMap<ApiKeyId, Arc<AsyncMutex<KeyWindow>>>>,
    pending: parking_lot::Mutex<Pending>,
}

impl RateLimiter {
    /// A limiter counting into `store`.
    pub fn new(store: Store, clock: SharedClock) -> Arc<Self> {
        Arc::new(Self {
            shared: store.is_shared(),
            store,
            clock,
            windows: parking_lot::Mutex::new(HashMap::new()),
            pending: parking_lot::Mutex::new(Pending::default()),
        })
    }

    fn window(&self, key_id: ApiKeyId) -> Arc<AsyncMutex<KeyWindow>> {
        let mut windows = self.windows.lock();
        if let Some(window) = windows.get(&key_id) {
            return window.clone();
        }
        windows.entry(key_id).or_default().clone()
    }

    /// Counts one request against `key`'s caps, or refuses it.
    pub async fn admit(self: &Arc<Self>, key: &KeyAuthRow) -> Result<Admission, StoreError> {
        let now = self.clock.now();
        let day = ist_day(now).to_string();
        let month = ist_month_key(now);
        if self.shared {
            return self.admit_counted_in_store(key, now, day, &month).await;
        }
        let window_lock = self.window(key.id);
        let mut w = window_lock.lock().await;
        if w.day != day {
            self.roll(key.id, &day, &month, &mut w).await?;
        }
        let usage = KeyUsage {
            daily: w.daily,
            monthly: w.monthly,
        };
        if let Some(refusal) = refusal(key, now, usage) {
            return Ok(refusal);
        }
        w.daily += 1;
        w.monthly += 1;
        let chunk = w.chunk.clamp(LEASE_CHUNK, LEASE_CHUNK_MAX);
        if w.daily > w.reserved {
            // The lease ran out: this request must not answer before it is durable.
            let target = w.daily + chunk - 1;
            self.store.reserve_usage(key.id, &day, target).await?;
            w.reserved = target;
        } else if w.daily + chunk / 2 > w.reserved && !w.extending {
            w.extending = true;
            // Size the lease to the rate: half a chunk went by since the last extension.
            let now = std::time::Instant::now();
            w.chunk = match w.extended_at {
                Some(at) if now.duration_since(at) < LEASE_TARGET / 4 => chunk * 2,
                Some(at) if now.duration_since(at) > LEASE_TARGET * 2 => chunk / 2,
                _ => chunk,
            }
            .clamp(LEASE_CHUNK, LEASE_CHUNK_MAX);
            w.extended_at = Some(now);
            let target = w.reserved + w.chunk;
            let this = Arc::clone(self);
            let key_id = key.id;
            let lease_day = day.clone();
            tokio::spawn(async move {
                let written = this.store.reserve_usage(key_id, &lease_day, target).await;
                let lock = this.window(key_id);
                let mut w = lock.lock().await;
                w.extending = false;
                match written {
                    Ok(()) if w.day == lease_day => w.reserved = w.reserved.max(target),
                    Ok(()) => {}
                    Err(err) => tracing::warn!(error = %err, "rate-limit lease extension failed"),
                }
            });
        }
        let daily = w.daily;
        drop(w);
        self.count_admitted(key.id, day);
        Ok(Admission::Allowed(quota(key, now, daily)))
    }

    /// [`RateLimiter::admit`] on a database several nodes count in.
    async fn admit_counted_in_store(
        &self,
        key: &KeyAuthRow,
        now: DateTime<Utc>,
        day: String,
        month: &str,
    ) -> Result<Admission, StoreError> {
        // Counts only grow, so a refused request reads at or over a cap (or
        // its key revoked); were usage lowered by hand in between, the next
        // attempt counts again.
        let mut held_to = key.clone();
        let mut usage = KeyUsage::default();
        for _ in 0..2 {
            if let Some(counted) = self.store.count_request(key.id, &day, month).await? {
                self.count_admitted(key.id, day);
                held_to.daily_limit = counted.daily_limit;
                held_to.monthly_limit = counted.monthly_limit;
                return Ok(Admission::Allowed(quota(&held_to, now, counted.daily)));
            }
            let Some(current) = self.store.api_key(key.id).await? else {
                return Ok(Admission::Revoked);
            };
            if current.revoked_at.is_some() {
                return Ok(Admission::Revoked);
            }
            held_to.daily_limit = current.daily_limit;
            held_to.monthly_limit = current.monthly_limit;
            usage = usage_of(&self.store.key_usage_in_month(key.id, month).await?, &day);
            if let Some(refusal) = refusal(&held_to, now, usage) {
                return Ok(refusal);
            }
        }
        // The database refused twice: its word stands.
        Ok(Admission::Limited {
            scope: "daily",
            limit: held_to.daily_limit,
            used: usage.daily,
            retry_after: (next_ist_midnight(now).timestamp() - now.timestamp()).max(1),
            quota: quota(&held_to, now, usage.daily),
        })
    }

    /// Adds one admitted request to the buffered usage counters.
    fn count_admitted(&self, key_id: ApiKeyId, day: String) {
        self.pending
            .lock()
            .deltas
            .entry((key_id, day.clone()))
            .or_insert_with(|| UsageDelta {
                key_id,
                day,
                ..UsageDelta::default()
            })
            .admitted += 1;
    }

    /// Moves a window onto the IST day `day`, loading its counts from the store.
    ///
    /// When this process already counted an earlier day, that day's unused
    /// lease is given back first and its exact count is used for the month,
    /// so a lease never inflates the monthly total.
    async fn roll(
        &self,
        key_id: ApiKeyId,
        day: &str,
        month: &str,
        w: &mut KeyWindow,
    ) -> Result<(), StoreError> {
        let previous = (!w.day.is_empty()).then(|| (w.day.clone(), w.daily));
        if let Some((old_day, exact)) = &previous {
            self.store
                .settle_usage_leases(&[(key_id, old_day.clone(), *exact)])
                .await?;
        }
        let rows = self.store.key_usage_in_month(key_id, month).await?;
        let today = rows.iter().find(|r| r.day == day);
        w.day = day.to_string();
        w.month = month.to_string();
        w.daily = today.map_or(0, |r| r.counted());
        w.reserved = today.map_or(0, |r| r.reserved);
        w.monthly = rows
            .iter()
            .map(|r| match &previous {
                Some((old_day, exact)) if *old_day == r.day => *exact,
                _ => r.counted(),
            })
            .sum();
        Ok(())
    }

    /// Records how an identified request was answered.
    pub fn record(&self, key_id: ApiKeyId, outcome: Outcome) {
        let now = self.clock.now();
        let day = ist_day(now).to_string();
        let mut pending = self.pending.lock();
        pending.last_used.insert(key_id, now.timestamp_millis());
        let delta = pending
            .deltas
            .entry((key_id, day.clone()))
            .or_insert_with(|| UsageDelta {
                key_id,
                day,
                ..UsageDelta::default()
            });
        match outcome {
            Outcome::Success => delta.success += 1,
            Outcome::Failed => delta.failed += 1,
            Outcome::RateLimited => delta.rate_limited += 1,
        }
    }

    /// Current counts for a key, loading them if this process has not seen it.
    pub async fn usage(&self, key: &KeyAuthRow) -> Result<KeyUsage, StoreError> {
        let now = self.clock.now();
        let day = ist_day(now).to_string();
        let month = ist_month_key(now);
        if self.shared {
            let rows = self.store.key_usage_in_month(key.id, &month).await?;
            return Ok(usage_of(&rows, &day));
        }
        let lock = self.window(key.id);
        let mut w = lock.lock().await;
        if w.day != day {
            self.roll(key.id, &day, &month, &mut w).await?;
        }
        Ok(KeyUsage {
            daily: w.daily,
            monthly: w.monthly,
        })
    }

    /// Writes buffered counters and last-used times; put back on failure.
    pub async fn flush(&self) -> Result<(), StoreError> {
        let taken = std::mem::take(&mut *self.pending.lock());
        if taken.deltas.is_empty() && taken.last_used.is_empty() {
            return Ok(());
        }
        let deltas: Vec<UsageDelta> = taken.deltas.values().cloned().collect();
        let seen: Vec<(ApiKeyId, i64)> = taken.last_used.iter().map(|(k, v)| (*k, *v)).collect();
        // Last-used first: a reader that sees a request counted then also
        // sees the key used (the admin key list reads both).
        let result = async {
            self.store.touch_api_keys(&seen).await?;
            self.store.add_usage(&deltas).await
        }
        .await;
        if let Err(err) = result {
            let mut pending = self.pending.lock();
            for (k, d) in taken.deltas {
                let e = pending.deltas.entry(k).or_insert_with(|| UsageDelta {
                    key_id: d.key_id,
                    day: d.day.clone(),
                    ..UsageDelta::default()
                });
                e.admitted += d.admitted;
                e.success += d.success;
                e.failed += d.failed;
                e.rate_limited += d.rate_limited;
            }
            for (k, at) in taken.last_used {
                let e = pending.last_used.entry(k).or_insert(at);
                *e = (*e).max(at);
            }
            return Err(err);
        }
        Ok(())
    }

    /// Flushes and gives back unused leases (one node; several lease
    /// nothing); called on clean shutdown.
    pub async fn shutdown(&self) -> Result<(), StoreError> {
        self.flush().await?;
        let windows: Vec<(ApiKeyId, Arc<AsyncMutex<KeyWindow>>)> = self
            .windows
            .lock()
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect();
        let mut exact = Vec::with_capacity(windows.len());
        for (key_id, lock) in windows {
            let w = lock.lock().await;
            if !w.day.is_empty() {
                exact.push((key_id, w.day.clone(), w.daily));
            }
        }
        self.store.settle_usage_leases(&exact).await
    }
}

/// The daily quota figures of `key` once `daily` requests were admitted today.
fn quota(key: &KeyAuthRow, now: DateTime<Utc>, daily: i64) -> Quota {
    Quota {
        limit: key.daily_limit,
        remaining: (key.daily_limit - daily).max(0),
        reset: next_ist_midnight(now).timestamp(),
    }
}

/// The 429 answer when `usage` reached one of `key`'s caps (the daily one first).
fn refusal(key: &KeyAuthRow, now: DateTime<Utc>, usage: KeyUsage) -> Option<Admission> {
    let (scope, limit, used, resets_at) = if usage.daily >= key.daily_limit {
        (
            "daily",
            key.daily_limit,
            usage.daily,
            next_ist_midnight(now),
        )
    } else if usage.monthly >= key.monthly_limit {
        (
            "monthly",
            key.monthly_limit,
            usage.monthly,
            next_ist_month_start(now),
        )
    } else {
        return None;
    };
    Some(Admission::Limited {
        scope,
        limit,
        used,
        retry_after: (resets_at.timestamp() - now.timestamp()).max(1),
        quota: quota(key, now, usage.daily),
    })
}

/// A key's counts on `day` and in its month from the month's stored rows.
fn usage_of(rows: &[UsageDayRow], day: &str) -> KeyUsage {
    KeyUsage {
        daily: rows
            .iter()
            .find(|r| r.day == day)
            .map_or(0, UsageDayRow::counted),
        monthly: rows.iter().map(UsageDayRow::counted).sum(),
    }
}
