//! Platform-administrator operations, shared by the `admin` CLI and bootstrap.

use crate::access::api_key::GeneratedKey;
use crate::domain::clock::{ist_day, ist_month_key};
use crate::domain::{ApiKeyId, OrgId, Paise};
use crate::store::nodes::NodeRow;
use crate::store::{
    ApiKeyRow, NumberRow, OrgRow, Store, StoreError, UsageDayRow, keys::NewApiKey,
    numbers::NewNumber,
};
use chrono::{DateTime, Months, Utc};

/// Default concurrent call slots of a new workspace.
pub const DEFAULT_CONCURRENCY: i64 = 10;
/// Default monthly minute quota of a new workspace.
pub const DEFAULT_MINUTE_QUOTA: i64 = 10_000;
/// Default daily request cap per key.
pub const DEFAULT_DAILY_LIMIT: i64 = 5_000;
/// Default monthly request cap per key.
pub const DEFAULT_MONTHLY_LIMIT: i64 = 100_000;
/// Default monthly rent of a carrier number: ₹500.
pub const DEFAULT_RENT_PAISE: Paise = Paise(50_000);

/// A created key with its one-time full text.
#[derive(Debug, Clone)]
pub struct NewKey {
    /// Key id.
    pub id: ApiKeyId,
    /// The full key, shown once.
    pub key: String,
    /// Display prefix.
    pub prefix: String,
}

/// Creates a workspace with the defaults of decisions §3.
pub async fn create_org(
    store: &Store,
    name: &str,
    concurrency: Option<i64>,
    minute_quota: Option<i64>,
    now: DateTime<Utc>,
) -> Result<OrgRow, StoreError> {
    store
        .create_org(
            name,
            concurrency.unwrap_or(DEFAULT_CONCURRENCY),
            minute_quota.unwrap_or(DEFAULT_MINUTE_QUOTA),
            now.timestamp_millis(),
        )
        .await
}

/// Creates an API key for a workspace with the default caps.
pub async fn create_key(
    store: &Store,
    org_id: OrgId,
    name: &str,
    now: DateTime<Utc>,
) -> Result<NewKey, StoreError> {
    let generated = GeneratedKey::generate();
    let id = ApiKeyId::new();
    store
        .insert_api_key(&NewApiKey {
            id,
            org_id,
            name,
            prefix: &generated.prefix,
            key_hash: &generated.hash,
            daily_limit: DEFAULT_DAILY_LIMIT,
            monthly_limit: DEFAULT_MONTHLY_LIMIT,
            now_ms: now.timestamp_millis(),
        })
        .await?;
    Ok(NewKey {
        id,
        key: generated.full,
        prefix: generated.prefix,
    })
}

/// Request counts of one key over a period (an IST day or month).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    /// Requests admitted (counted against the caps).
    pub admitted: i64,
    /// Admitted requests that succeeded.
    pub success: i64,
    /// Admitted requests that failed.
    pub failed: i64,
    /// Requests refused by a rate or a cap.
    pub rate_limited: i64,
}

/// A key as administrators list it, with today's and this month's usage.
#[derive(Debug, Clone)]
pub struct KeyWithUsage {
    /// The key's row (no secret: only its hash is stored, and not read).
    pub key: ApiKeyRow,
    /// Today's counts (IST).
    pub today: RequestCounts,
    /// This month's counts (IST).
    pub month: RequestCounts,
}

/// Every key of a workspace, newest first, with its usage at `now`.
pub async fn keys_with_usage(
    store: &Store,
    org_id: OrgId,
    now: DateTime<Utc>,
) -> Result<Vec<KeyWithUsage>, StoreError> {
    let day = ist_day(now).to_string();
    let month = ist_month_key(now);
    // Counts are read before the key rows: the limiter commits a key's
    // last-used time before its counts, so in this order a counted request
    // always shows with its last-used time.
    let mut usages = Vec::new();
    for k in store.api_keys(org_id).await? {
        usages.push((k.id, store.key_usage_in_month(k.id, &month).await?));
    }
    let mut keys = Vec::new();
    for key in store.api_keys(org_id).await? {
        let usage = usages
            .iter()
            .find(|(id, _)| *id == key.id)
            .map(|(_, u)| u.as_slice())
            .unwrap_or_default();
        let count = |rows: &mut dyn Iterator<Item = &UsageDayRow>| {
            rows.fold(RequestCounts::default(), |acc, u| RequestCounts {
                admitted: acc.admitted + u.admitted,
                success: acc.success + u.success,
                failed: acc.failed + u.failed,
                rate_limited: acc.rate_limited + u.rate_limited,
            })
        };
        let today = count(&mut usage.iter().filter(|u| u.day == day));
        let month = count(&mut usage.iter());
        keys.push(KeyWithUsage { key, today, month });
    }
    Ok(keys)
}

/// Why a key's caps could not be set.
#[derive(Debug, thiserror::Error)]
pub enum KeyLimitsError {
    /// A cap below zero.
    #[error("must not be negative")]
    Negative,
    /// No such key in the workspace.
    #[error("no key with id {0}")]
    NotFound(ApiKeyId),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Overrides a key's caps (`None` keeps one as it is); returns the caps now
/// in force. `org_id`, when given, is the workspace the key must belong to.
pub async fn set_key_limits(
    store: &Store,
    org_id: Option<OrgId>,
    id: ApiKeyId,
    daily: Option<i64>,
    monthly: Option<i64>,
) -> Result<(i64, i64), KeyLimitsError> {
    let key = store
        .api_key(id)
        .await?
        .filter(|k| org_id.is_none_or(|org| k.org_id == org))
        .ok_or(KeyLimitsError::NotFound(id))?;
    let daily = daily.unwrap_or(key.daily_limit);
    let monthly = monthly.unwrap_or(key.monthly_limit);
    if daily < 0 || monthly < 0 {
        return Err(KeyLimitsError::Negative);
    }
    store.set_api_key_limits(id, daily, monthly).await?;
    Ok((daily, monthly))
}

/// Rents a number for a workspace; the first month counts as paid online.
pub async fn add_number(
    store: &Store,
    org_id: OrgId,
    phone: &str,
    provider: &str,
    is_default: bool,
    rent_paise: Option<Paise>,
    now: DateTime<Utc>,
) -> Result<NumberRow, StoreError> {
    let rent = rent_paise.unwrap_or(if provider == "sim" {
        Paise::ZERO
    } else {
        DEFAULT_RENT_PAISE
    });
    let renews = now.checked_add_months(Months::new(1)).unwrap_or(now);
    store
        .insert_number(&NewNumber {
            org_id,
            phone,
            provider,
            is_default,
            monthly_rent_paise: rent,
            now_ms: now.timestamp_millis(),
            renews_at: renews.timestamp_millis(),
        })
        .await
}

/// A node's state as `voxline admin nodes` shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Heartbeating and taking calls.
    Alive,
    /// Heartbeating; an operator drained it.
    Draining,
    /// Heartbeating; above its load threshold.
    Overloaded,
    /// No heartbeat within the lease; peers will take its work.
    Dead,
    /// Stopped cleanly, or its work was recovered by a peer.
    Gone,
}

impl NodeState {
    /// The lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Alive => "alive",
            Self::Draining => "draining",
            Self::Overloaded => "overloaded",
            Self::Dead => "dead",
            Self::Gone => "gone",
        }
    }
}

/// What a node is at `now_ms`, given the lease after which silence means dead.
pub fn node_state(node: &NodeRow, now_ms: i64, lease_ms: i64) -> NodeState {
    if node.lost_at.is_some() {
        NodeState::Gone
    } else if node.heartbeat_at < now_ms - lease_ms {
        NodeState::Dead
    } else if node.draining {
        NodeState::Draining
    } else if node.overloaded {
        NodeState::Overloaded
    } else {
        NodeState::Alive
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(heartbeat_at: i64) -> NodeRow {
        NodeRow {
            id: "n1".parse().unwrap(),
            public_url: "http://10.0.0.1:8080".into(),
            started_at: 0,
            heartbeat_at,
            draining: false,
            live_calls: 0,
            cpu_permille: 0,
            overloaded: false,
            lost_at: None,
        }
    }

    #[test]
    fn state_follows_heartbeat_flags_and_loss() {
        let lease = 10_000;
        let now = 100_000;
        assert_eq!(node_state(&node(now - 2_000), now, lease), NodeState::Alive);
        assert_eq!(
            node_state(&node(now - lease), now, lease),
            NodeState::Alive,
            "at the lease"
        );
        assert_eq!(
            node_state(&node(now - lease - 1), now, lease),
            NodeState::Dead
        );
        let overloaded = NodeRow {
            overloaded: true,
            ..node(now)
        };
        assert_eq!(node_state(&overloaded, now, lease), NodeState::Overloaded);
        let draining = NodeRow {
            draining: true,
            ..overloaded.clone()
        };
        assert_eq!(
            node_state(&draining, now, lease),
            NodeState::Draining,
            "draining shows first"
        );
        let silent = NodeRow {
            draining: true,
            ..node(0)
        };
        assert_eq!(
            node_state(&silent, now, lease),
            NodeState::Dead,
            "a dead node drains nothing"
        );
        let gone = NodeRow {
            lost_at: Some(now),
            ..node(now)
        };
        assert_eq!(node_state(&gone, now, lease), NodeState::Gone);
    }
}
