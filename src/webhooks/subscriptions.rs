//! Managing a workspace's webhook subscriptions: adding one (its URL checked
//! against the address guard when it is stored), rotating its signing secret
//! with an overlap, and redelivering an ended call's events. Shared by the
//! admin CLI, the console and the API, so each refuses the same things.

use crate::domain::{CallId, OrgId, WebhookId};
use crate::egress::address_guard::{EgressError, check_url_for_storage};
use crate::store::webhook_outbox::Redelivered;
use crate::store::{Store, StoreError};
use std::time::Duration;
use voxline_actors::engine::CallStatus;

/// Event kinds a subscription may name.
pub const EVENT_KINDS: &[&str] = &[
    "call.completed",
    "call.analyzed",
    "rating.completed",
    "number.opted_out",
];

/// The events a subscription gets when none are named: `call.completed`, and
/// `call.analyzed`, its follow-up when the analysis finished after the wait.
pub const DEFAULT_EVENTS: &[&str] = &["call.completed", "call.analyzed"];

/// How long a webhook URL's host may take to resolve when it is added.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a subscription could not be added or changed.
#[derive(Debug, thiserror::Error)]
pub enum SubscriptionError {
    /// The URL does not parse.
    #[error("is not a URL: {0}")]
    NotUrl(String),
    /// The URL is neither http nor https.
    #[error("must be http or https")]
    Scheme,
    /// The URL resolves into addresses deliveries would refuse.
    #[error(
        "is refused: {0}, a loopback, private, link-local or metadata address; \
         only allow-listed hosts may receive webhooks"
    )]
    Refused(String),
    /// The URL could not be checked (no such host, say).
    #[error("is refused: {0}")]
    Unchecked(String),
    /// The URL's host did not resolve in time.
    #[error("is refused: its host did not resolve within {}s", RESOLVE_TIMEOUT.as_secs())]
    ResolveTimeout,
    /// An event name that is not one of [`EVENT_KINDS`].
    #[error("{0} is not one of {kinds}", kinds = EVENT_KINDS.join(", "))]
    UnknownEvent(String),
    /// The overlap does not fit in the clock's range.
    #[error("overlap is too long")]
    OverlapTooLong,
    /// No subscription with that id in the workspace.
    #[error("no webhook subscription with id {0}")]
    NotFound(String),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A subscription just added, with its secret (shown only now).
#[derive(Debug, Clone)]
pub struct NewSubscription {
    /// Subscription id.
    pub id: WebhookId,
    /// The signing secret.
    pub secret: String,
    /// The delivery URL as stored.
    pub url: String,
    /// The events it gets.
    pub events: Vec<String>,
}

/// A subscription's new secret after a rotation.
#[derive(Debug, Clone)]
pub struct RotatedSecret {
    /// Subscription id.
    pub id: WebhookId,
    /// The new signing secret, shown only now.
    pub secret: String,
    /// Until when the old secret signs beside it, Unix ms.
    pub previous_valid_until: i64,
}

/// A new webhook signing secret: `whsec_` and 256 random bits.
pub fn new_secret() -> String {
    format!(
        "whsec_{}",
        crate::access::api_key::GeneratedKey::generate()
            .full
            .trim_start_matches("acai_")
    )
}

/// Parses `events` (empty: [`DEFAULT_EVENTS`]) into known event names.
pub fn parse_events(events: &[String]) -> Result<Vec<String>, SubscriptionError> {
    if events.is_empty() {
        return Ok(DEFAULT_EVENTS.iter().map(|e| (*e).to_string()).collect());
    }
    let mut parsed: Vec<String> = Vec::with_capacity(events.len());
    for event in events {
        let event = event.trim();
        if !EVENT_KINDS.contains(&event) {
            return Err(SubscriptionError::UnknownEvent(event.to_string()));
        }
        if !parsed.iter().any(|known| known == event) {
            parsed.push(event.to_string());
        }
    }
    Ok(parsed)
}

/// Checks that a delivery URL parses and is http or https.
fn check_url_syntax(url: &str) -> Result<(), SubscriptionError> {
    let parsed = reqwest::Url::parse(url).map_err(|e| SubscriptionError::NotUrl(e.to_string()))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(SubscriptionError::Scheme);
    }
    Ok(())
}

/// Checks a delivery URL: http(s), and resolving only to addresses
/// deliveries may reach unless its host is in `allow_hosts`; deliveries would
/// be refused anyway, so the mistake shows when the URL is stored.
pub async fn check_url(url: &str, allow_hosts: &[String]) -> Result<(), SubscriptionError> {
    check_url_syntax(url)?;
    let allow: Vec<String> = allow_hosts
        .iter()
        .map(|h| h.trim().to_ascii_lowercase())
        .filter(|h| !h.is_empty())
        .collect();
    match tokio::time::timeout(RESOLVE_TIMEOUT, check_url_for_storage(url, &allow)).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(EgressError::Refused(why))) => Err(SubscriptionError::Refused(why)),
        Ok(Err(other)) => Err(SubscriptionError::Unchecked(other.to_string())),
        Err(_) => Err(SubscriptionError::ResolveTimeout),
    }
}

/// Adds a subscription of `org_id` to `url` for `events` (empty: the
/// defaults), after checking both; returns it with its new secret.
pub async fn add(
    store: &Store,
    org_id: OrgId,
    url: &str,
    events: &[String],
    allow_hosts: &[String],
    now_ms: i64,
) -> Result<NewSubscription, SubscriptionError> {
    let url = url.trim();
    check_url_syntax(url)?;
    let events = parse_events(events)?;
    check_url(url, allow_hosts).await?;
    let secret = new_secret();
    let id = store
        .insert_webhook(org_id, url, &events, &secret, now_ms)
        .await?;
    Ok(NewSubscription {
        id,
        secret,
        url: url.to_string(),
        events,
    })
}

/// Gives subscription `id` a new secret; the old one keeps signing beside
/// it for `overlap`, so receivers can switch without losing a delivery.
pub async fn rotate_secret(
    store: &Store,
    id: WebhookId,
    overlap: Duration,
    now_ms: i64,
) -> Result<RotatedSecret, SubscriptionError> {
    let overlap_ms =
        i64::try_from(overlap.as_millis()).map_err(|_| SubscriptionError::OverlapTooLong)?;
    let until = now_ms.saturating_add(overlap_ms);
    let secret = new_secret();
    if !store.rotate_webhook_secret(id, &secret, until).await? {
        return Err(SubscriptionError::NotFound(id.to_string()));
    }
    Ok(RotatedSecret {
        id,
        secret,
        previous_valid_until: until,
    })
}

/// Subscription `id` if it belongs to `org_id`: one workspace never sees or
/// changes another's.
pub async fn in_workspace(
    store: &Store,
    org_id: OrgId,
    id: &str,
) -> Result<crate::store::WebhookRow, SubscriptionError> {
    let missing = || SubscriptionError::NotFound(id.to_string());
    let parsed: WebhookId = id.parse().map_err(|_| missing())?;
    store
        .webhook(parsed)
        .await?
        .filter(|row| row.org_id == org_id)
        .ok_or_else(missing)
}

/// Why an ended call's events could not be sent again.
#[derive(Debug, thiserror::Error)]
pub enum RedeliverError {
    /// No such call in the workspace.
    #[error("Call {0} not found")]
    NotFound(String),
    /// The call is still live: its events are sent when it ends.
    #[error("Call {call} has not ended yet ({status}); its events are sent when it does")]
    NotEnded {
        /// The call id as given.
        call: String,
        /// Its current status.
        status: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Queues again every event of an ended call (`call.completed` and the
/// follow-ups it produced), each with its original event id, for every
/// active subscription that covers it, through the durable outbox.
pub async fn redeliver_call(
    store: &Store,
    org_id: OrgId,
    call_id: &str,
    now_ms: i64,
) -> Result<Vec<Redelivered>, RedeliverError> {
    let not_found = || RedeliverError::NotFound(call_id.to_string());
    let id: CallId = call_id.parse().map_err(|_| not_found())?;
    let status = store.call_status(org_id, id).await?.ok_or_else(not_found)?;
    if !CallStatus::parse(&status).is_some_and(CallStatus::is_terminal) {
        return Err(RedeliverError::NotEnded {
            call: call_id.to_string(),
            status,
        });
    }
    Ok(store.redeliver_call_events(org_id, id, now_ms).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_default_dedupe_and_refuse_unknown_names() {
        assert_eq!(parse_events(&[]).unwrap(), DEFAULT_EVENTS);
        let twice = vec![
            "rating.completed".to_string(),
            "rating.completed".to_string(),
        ];
        assert_eq!(parse_events(&twice).unwrap(), ["rating.completed"]);
        let unknown = vec!["call.started".to_string()];
        assert!(matches!(
            parse_events(&unknown),
            Err(SubscriptionError::UnknownEvent(e)) if e == "call.started"
        ));
    }

    #[test]
    fn secrets_are_prefixed_and_fresh() {
        let (a, b) = (new_secret(), new_secret());
        assert!(a.starts_with("whsec_") && a.len() > 40, "{a}");
        assert_ne!(a, b);
    }
}
