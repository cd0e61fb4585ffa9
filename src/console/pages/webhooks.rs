//! `/webhooks` (admin and owner): a workspace's webhook subscriptions and
//! their delivery log. Add one (its signing secret shown once), disable,
//! enable, delete, rotate the secret (shown once; the old one keeps signing
//! for the overlap chosen), and redeliver a call's events from the log. The
//! same service as `voxline admin webhook` and the API's redeliver.

use super::timestamps::{utc_minute, utc_minute_or_never};
use crate::config::Settings;
use crate::console::{Chrome, ConsoleError, ConsoleUser, Nav, render};
use crate::domain::Role;
use crate::domain::clock::SharedClock;
use crate::http::state::AppState;
use crate::store::{DeliveryLogFilter, Store, StoreResult, decode_json};
use crate::webhooks::subscriptions::{
    self, DEFAULT_EVENTS, EVENT_KINDS, RedeliverError, SubscriptionError,
};
use askama::Template;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use std::sync::Arc;
use std::time::Duration;

/// Most deliveries the log shows at once.
pub const DELIVERY_LOG_ROWS: i64 = 100;

/// The overlaps a rotation offers: how long the old secret keeps signing.
pub const OVERLAPS: &[(&str, &str)] = &[
    ("0s", "none: the old secret stops now"),
    ("1h", "1 hour"),
    ("24h", "24 hours"),
    ("7days", "7 days"),
];

/// The webhooks page's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/webhooks", get(webhooks_page).post(add_subscription))
        .route("/webhooks/{id}/enable", post(enable))
        .route("/webhooks/{id}/disable", post(disable))
        .route("/webhooks/{id}/delete", post(delete))
        .route("/webhooks/{id}/rotate", post(rotate))
        .route("/webhooks/redeliver", post(redeliver))
}

/// One subscription as the list shows it (never its secret).
#[derive(Debug, Clone)]
pub struct SubscriptionLine {
    /// Subscription id.
    pub id: String,
    /// Delivery URL.
    pub url: String,
    /// Its events, comma-separated.
    pub events: String,
    /// Whether deliveries are made.
    pub active: bool,
    /// When it was added.
    pub created: String,
    /// Until when the secret before the last rotation still signs, if it does.
    pub previous_until: Option<String>,
}

/// One delivery of the log.
#[derive(Debug, Clone)]
pub struct DeliveryLine {
    /// Delivery id.
    pub id: String,
    /// Subscription id.
    pub subscription: String,
    /// Event kind.
    pub event: String,
    /// Event id.
    pub event_id: String,
    /// The call it is about.
    pub call_id: String,
    /// pending, delivered or failed.
    pub status: String,
    /// Attempts made.
    pub attempts: i64,
    /// The last attempt's error.
    pub last_error: Option<String>,
    /// When the next attempt is due (pending ones).
    pub next_attempt: Option<String>,
    /// When it was delivered.
    pub delivered: String,
    /// When it was queued.
    pub created: String,
}

/// A secret just made: shown on this one answer only.
#[derive(Debug, Clone)]
pub struct ShownSecret {
    /// What it signs for.
    pub url: String,
    /// The secret.
    pub secret: String,
    /// Until when the previous one still signs (after a rotation).
    pub previous_until: Option<String>,
}

/// An event checkbox of the add form.
#[derive(Debug, Clone)]
pub struct EventChoice {
    /// Event kind.
    pub name: &'static str,
    /// Whether it is ticked.
    pub checked: bool,
}

/// The delivery log's filter, kept in the URL.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct LogQuery {
    /// Only failed deliveries.
    #[serde(default)]
    pub failed: Option<String>,
    /// Only this subscription's.
    #[serde(default)]
    pub subscription: Option<String>,
    /// A finished change's fixed notice.
    #[serde(default)]
    pub done: Option<String>,
}

#[derive(Template)]
#[template(path = "console/webhooks.html")]
struct WebhooksPage {
    chrome: Chrome,
    subscriptions: Vec<SubscriptionLine>,
    deliveries: Vec<DeliveryLine>,
    only_failed: bool,
    only_subscription: String,
    shown: Option<ShownSecret>,
    notice: Option<String>,
    url: String,
    url_error: Option<String>,
    events: Vec<EventChoice>,
    events_error: Option<String>,
    overlaps: &'static [(&'static str, &'static str)],
}

/// The events ticked by default on the add form.
fn default_choices() -> Vec<EventChoice> {
    EVENT_KINDS
        .iter()
        .map(|name| EventChoice {
            name,
            checked: DEFAULT_EVENTS.contains(name),
        })
        .collect()
}

/// The page for `user` with the log narrowed by `query`, nothing typed.
async fn page_for(
    store: &Store,
    clock: &SharedClock,
    user: &ConsoleUser,
    query: &LogQuery,
) -> Result<WebhooksPage, ConsoleError> {
    let now_ms = clock.now().timestamp_millis();
    let rows = store.all_webhooks(user.org_id).await?;
    let subscription = query
        .subscription
        .as_deref()
        .filter(|s| !s.is_empty())
        .and_then(|s| rows.iter().find(|w| w.id.to_string() == s))
        .map(|w| w.id);
    let only_failed = query.failed.as_deref().is_some_and(|f| !f.is_empty());
    let deliveries = store
        .delivery_log(
            user.org_id,
            DeliveryLogFilter {
                subscription,
                failed: only_failed,
                limit: DELIVERY_LOG_ROWS,
            },
        )
        .await?
        .into_iter()
        .map(|d| DeliveryLine {
            id: d.id.to_string(),
            subscription: d.subscription_id.to_string(),
            event: d.event,
            event_id: d.event_id,
            call_id: d.call_id.to_string(),
            next_attempt: (d.status == "pending").then(|| utc_minute(d.next_attempt_at)),
            status: d.status,
            attempts: d.attempts,
            last_error: d.last_error,
            delivered: utc_minute_or_never(d.delivered_at),
            created: utc_minute(d.created_at),
        })
        .collect();
    let subscriptions = rows
        .into_iter()
        .map(|w| {
            let events: Vec<String> =
                decode_json("webhook_subscriptions", "events", w.id, &w.events)?;
            Ok(SubscriptionLine {
                id: w.id.to_string(),
                url: w.url,
                events: events.join(", "),
                active: w.active,
                created: utc_minute(w.created_at),
                previous_until: w
                    .previous_secret_expires_at
                    .filter(|until| *until > now_ms)
                    .map(utc_minute),
            })
        })
        .collect::<StoreResult<_>>()?;
    Ok(WebhooksPage {
        chrome: Chrome::new(user, Nav::Webhooks),
        subscriptions,
        deliveries,
        only_failed,
        only_subscription: subscription.map(|s| s.to_string()).unwrap_or_default(),
        shown: None,
        notice: notice_text(query.done.as_deref()),
        url: String::new(),
        url_error: None,
        events: default_choices(),
        events_error: None,
        overlaps: OVERLAPS,
    })
}

/// What a finished change says on the page it redirects to; only these
/// fixed texts, so a crafted link cannot put words on the page.
fn notice_text(done: Option<&str>) -> Option<String> {
    match done? {
        "enabled" => Some("The subscription is enabled: deliveries resume.".into()),
        "disabled" => Some(
            "The subscription is disabled: it gets no new events, and its pending deliveries wait."
                .into(),
        ),
        "deleted" => Some("The subscription and its delivery log are deleted.".into()),
        "redelivered" => Some(
            "The call's events are queued again for every active subscription that covers them."
                .into(),
        ),
        _ => None,
    }
}

async fn webhooks_page(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Query(query): Query<LogQuery>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    Ok(render(&page_for(&store, &clock, &user, &query).await?)?.into_response())
}

/// A page with a secret on it: kept out of every cache.
fn secret_answer(page: &WebhooksPage) -> Result<Response, ConsoleError> {
    Ok(([(header::CACHE_CONTROL, "no-store")], render(page)?).into_response())
}

async fn add_subscription(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(settings): State<Arc<Settings>>,
    user: ConsoleUser,
    body: Bytes,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    // Parsed by hand: the event checkboxes repeat one field name.
    let mut url = String::new();
    let mut events: Vec<String> = Vec::new();
    for (key, value) in form_urlencoded::parse(&body) {
        match key.as_ref() {
            "url" => url = value.into_owned(),
            "event" => events.push(value.into_owned()),
            _ => {}
        }
    }
    let refused = |mut page: WebhooksPage, url_error: Option<String>, events_error| {
        page.url = url.clone();
        page.events = EVENT_KINDS
            .iter()
            .map(|name| EventChoice {
                name,
                checked: events.iter().any(|e| e == name),
            })
            .collect();
        page.url_error = url_error;
        page.events_error = events_error;
        Ok::<_, ConsoleError>((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
    };
    let page = page_for(&store, &clock, &user, &LogQuery::default()).await?;
    if url.trim().is_empty() {
        return refused(page, Some("URL is required".into()), None);
    }
    if events.is_empty() {
        return refused(page, None, Some("Choose at least one event".into()));
    }
    let added = subscriptions::add(
        &store,
        user.org_id,
        &url,
        &events,
        &settings.webhook_allow_hosts,
        clock.now().timestamp_millis(),
    )
    .await;
    let added = match added {
        Ok(added) => added,
        Err(SubscriptionError::UnknownEvent(e)) => {
            return refused(page, None, Some(format!("Event {e} is not one we send")));
        }
        Err(SubscriptionError::Store(e)) => return Err(e.into()),
        Err(other) => return refused(page, Some(format!("URL {other}")), None),
    };
    tracing::info!(webhook = %added.id, by = %user.user_id, "webhook subscription added in the console");
    let mut page = page_for(&store, &clock, &user, &LogQuery::default()).await?;
    page.shown = Some(ShownSecret {
        url: added.url,
        secret: added.secret,
        previous_until: None,
    });
    secret_answer(&page)
}

/// The subscription `id` names if it is in the person's workspace.
async fn own_subscription(
    store: &Store,
    user: &ConsoleUser,
    id: &str,
) -> Result<crate::store::WebhookRow, ConsoleError> {
    subscriptions::in_workspace(store, user.org_id, id)
        .await
        .map_err(|e| match e {
            SubscriptionError::Store(store) => ConsoleError::Store(store),
            _ => ConsoleError::NotFound,
        })
}

async fn enable(
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    set_active(&store, &user, &id, true).await
}

async fn disable(
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    set_active(&store, &user, &id, false).await
}

/// Turns deliveries to one of the workspace's endpoints on or off.
async fn set_active(
    store: &Store,
    user: &ConsoleUser,
    id: &str,
    active: bool,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let row = own_subscription(store, user, id).await?;
    store.set_webhook_active(row.id, active).await?;
    let done = if active { "enabled" } else { "disabled" };
    Ok(Redirect::to(&format!("/webhooks?done={done}")).into_response())
}

async fn delete(
    State(store): State<Store>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let row = own_subscription(&store, &user, &id).await?;
    store.delete_webhook(row.id).await?;
    tracing::info!(webhook = %row.id, by = %user.user_id, "webhook subscription deleted in the console");
    Ok(Redirect::to("/webhooks?done=deleted").into_response())
}

#[derive(Debug, Deserialize)]
struct RotateForm {
    #[serde(default)]
    overlap: String,
}

async fn rotate(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Form(form): Form<RotateForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let row = own_subscription(&store, &user, &id).await?;
    // Only the offered overlaps: the form is a select.
    let overlap: Duration = OVERLAPS
        .iter()
        .find(|(value, _)| *value == form.overlap)
        .and_then(|(value, _)| humantime::parse_duration(value).ok())
        .ok_or_else(|| ConsoleError::BadRequest("Choose one of the offered overlaps.".into()))?;
    let rotated =
        subscriptions::rotate_secret(&store, row.id, overlap, clock.now().timestamp_millis())
            .await
            .map_err(|e| match e {
                SubscriptionError::Store(store) => ConsoleError::Store(store),
                SubscriptionError::NotFound(_) => ConsoleError::NotFound,
                other => ConsoleError::BadRequest(other.to_string()),
            })?;
    tracing::info!(webhook = %row.id, by = %user.user_id, "webhook secret rotated in the console");
    let mut page = page_for(&store, &clock, &user, &LogQuery::default()).await?;
    page.shown = Some(ShownSecret {
        url: row.url,
        secret: rotated.secret,
        previous_until: (!overlap.is_zero()).then(|| utc_minute(rotated.previous_valid_until)),
    });
    secret_answer(&page)
}

#[derive(Debug, Deserialize)]
struct RedeliverForm {
    #[serde(default)]
    call_id: String,
}

async fn redeliver(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Form(form): Form<RedeliverForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    subscriptions::redeliver_call(
        &store,
        user.org_id,
        &form.call_id,
        clock.now().timestamp_millis(),
    )
    .await
    .map_err(|e| match e {
        RedeliverError::NotFound(_) => ConsoleError::NotFound,
        RedeliverError::NotEnded { .. } => ConsoleError::Conflict(e.to_string()),
        RedeliverError::Store(store) => ConsoleError::Store(store),
    })?;
    Ok(Redirect::to("/webhooks?done=redelivered").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_offered_overlap_parses() {
        for (value, _) in OVERLAPS {
            assert!(humantime::parse_duration(value).is_ok(), "{value}");
        }
    }

    #[test]
    fn the_add_form_ticks_the_default_events() {
        let ticked: Vec<&str> = default_choices()
            .iter()
            .filter(|c| c.checked)
            .map(|c| c.name)
            .collect();
        assert_eq!(ticked, DEFAULT_EVENTS);
    }
}
