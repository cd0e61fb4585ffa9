//! The workspace's inbound rules that are not one number's: blocked callers,
//! the per-caller hourly cap and the routing URL, checked and stored here so
//! the API (`/api/numbers/blocked-callers`, `/api/numbers/inbound-settings`)
//! and the console apply the same rules.

use crate::domain::text::{self, Lines, TextError};
use crate::domain::{OrgId, PhoneNumber};
use crate::egress;
use crate::store::inbound_callers::BlockedCallerRow;
use crate::store::{Store, StoreError};
use crate::webhooks::subscriptions::new_secret;

/// Longest routing URL.
pub const MAX_ROUTING_URL_CHARS: usize = 2_000;
/// Largest per-caller hourly cap.
pub const MAX_CALLER_HOURLY_CAP: i64 = 1_000;
/// Longest reason for blocking a caller.
pub const MAX_BLOCK_REASON_CHARS: usize = 200;

/// Why a rule change is refused; each message names the API's field.
#[derive(Debug, thiserror::Error)]
pub enum RulesError {
    /// The caller's number is not E.164.
    #[error("phone {0}")]
    Phone(String),
    /// The reason is too long or holds forbidden characters.
    #[error("reason {0}")]
    Reason(TextError),
    /// The cap is out of bounds.
    #[error("callerHourlyCap must be between 0 and {MAX_CALLER_HOURLY_CAP}, not {0}")]
    CallerHourlyCap(i64),
    /// The URL is too long or holds forbidden characters.
    #[error("routingUrl {0}")]
    RoutingUrlText(TextError),
    /// The URL is not one the service may call (scheme, private address).
    #[error("routingUrl is refused: {0}")]
    RoutingUrlRefused(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Refuses calls from `raw_phone` on every number of the workspace.
pub async fn block_caller(
    store: &Store,
    org_id: OrgId,
    raw_phone: &str,
    raw_reason: &str,
    now_ms: i64,
) -> Result<BlockedCallerRow, RulesError> {
    let phone = PhoneNumber::parse(raw_phone).map_err(|e| RulesError::Phone(e.to_string()))?;
    let reason =
        text::parse(raw_reason, Lines::One, MAX_BLOCK_REASON_CHARS).map_err(RulesError::Reason)?;
    Ok(store
        .block_caller(org_id, phone.as_str(), &reason, now_ms)
        .await?)
}

/// Lets `raw_phone` through again; false when it was not blocked (or is no number).
pub async fn unblock_caller(
    store: &Store,
    org_id: OrgId,
    raw_phone: &str,
) -> Result<bool, StoreError> {
    match PhoneNumber::parse(raw_phone) {
        Ok(phone) => store.unblock_caller(org_id, phone.as_str()).await,
        Err(_) => Ok(false),
    }
}

/// A change to the workspace's rules; `None` keeps what is stored.
#[derive(Debug, Clone, Default)]
pub struct RulesChange {
    /// Calls one caller may place in an hour; 0: no cap.
    pub caller_hourly_cap: Option<i64>,
    /// The routing URL (`Some(None)` removes it), as typed.
    pub routing_url: Option<Option<String>>,
}

/// Checks and stores `change`; every field is checked before anything is
/// written. Returns the routing secret when this change first set a URL
/// (it is shown once).
pub async fn set_rules(
    store: &Store,
    allow_hosts: &[String],
    org_id: OrgId,
    change: RulesChange,
) -> Result<Option<String>, RulesError> {
    if let Some(cap) = change.caller_hourly_cap
        && !(0..=MAX_CALLER_HOURLY_CAP).contains(&cap)
    {
        return Err(RulesError::CallerHourlyCap(cap));
    }
    let routing_url = match change.routing_url {
        Some(Some(raw)) => {
            let url = text::parse(&raw, Lines::One, MAX_ROUTING_URL_CHARS)
                .map_err(RulesError::RoutingUrlText)?;
            egress::check_url_for_storage(&url, allow_hosts)
                .await
                .map_err(|e| RulesError::RoutingUrlRefused(e.to_string()))?;
            Some(Some(url))
        }
        other => other,
    };
    if let Some(cap) = change.caller_hourly_cap {
        store.set_inbound_caller_hourly_cap(org_id, cap).await?;
    }
    let mut fresh_secret = None;
    if let Some(url) = routing_url {
        let (secret, fresh) = store
            .set_inbound_routing_url(org_id, url.as_deref(), &new_secret())
            .await?;
        if fresh && url.is_some() {
            fresh_secret = Some(secret);
        }
    }
    Ok(fresh_secret)
}
