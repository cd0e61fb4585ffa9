//! `/inbound` (admin and owner): the workspace's inbound rules that are not
//! one number's: blocked callers (add, remove), the per-caller hourly cap
//! and the routing URL, whose signing secret is shown once when first set.
//! Every change goes through `inbound::workspace_rules`, as the API's do.

use super::timestamps::utc_minute;
use crate::config::Settings;
use crate::console::{Chrome, ConsoleError, ConsoleUser, Nav, render};
use crate::domain::Role;
use crate::domain::clock::SharedClock;
use crate::http::state::AppState;
use crate::inbound::workspace_rules::{self, MAX_CALLER_HOURLY_CAP, RulesChange, RulesError};
use crate::store::Store;
use askama::Template;
use axum::Router;
use axum::extract::{Form, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use std::sync::Arc;

/// Blocked callers shown (newest first).
const BLOCKED_SHOWN: i64 = 200;

/// The page's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/inbound", get(rules_page))
        .route("/inbound/blocked-callers", post(block))
        .route("/inbound/blocked-callers/remove", post(unblock))
        .route("/inbound/settings", post(save_settings))
}

/// One blocked caller as shown.
struct BlockedLine {
    phone: String,
    reason: String,
    when: String,
}

/// The block form as typed.
#[derive(Debug, Default, Deserialize)]
struct BlockForm {
    #[serde(default)]
    phone: String,
    #[serde(default)]
    reason: String,
}

/// The settings form as typed.
#[derive(Debug, Default, Deserialize)]
struct SettingsForm {
    #[serde(default)]
    caller_hourly_cap: String,
    /// Empty removes the URL.
    #[serde(default)]
    routing_url: String,
}

/// Errors beside the forms' fields.
#[derive(Debug, Default)]
struct RulesErrors {
    phone: Option<String>,
    reason: Option<String>,
    caller_hourly_cap: Option<String>,
    routing_url: Option<String>,
}

#[derive(Template)]
#[template(path = "console/inbound_rules.html")]
struct RulesPage {
    chrome: Chrome,
    blocked: Vec<BlockedLine>,
    blocked_total: i64,
    /// More are blocked than the page shows.
    more_blocked: bool,
    block: BlockForm,
    settings: SettingsForm,
    errors: RulesErrors,
    notice: Option<&'static str>,
    /// The routing secret, shown this once.
    fresh_secret: Option<String>,
    max_cap: i64,
}

async fn page_of(
    store: &Store,
    user: &ConsoleUser,
    block: BlockForm,
    settings: Option<SettingsForm>,
    errors: RulesErrors,
) -> Result<RulesPage, ConsoleError> {
    let (rows, blocked_total) = store.blocked_callers(user.org_id, BLOCKED_SHOWN, 0).await?;
    let settings = match settings {
        Some(typed) => typed,
        None => SettingsForm {
            caller_hourly_cap: store
                .inbound_caller_hourly_cap(user.org_id)
                .await?
                .to_string(),
            routing_url: store
                .inbound_routing(user.org_id)
                .await?
                .map(|(url, _)| url)
                .unwrap_or_default(),
        },
    };
    Ok(RulesPage {
        chrome: Chrome::new(user, Nav::Wallet),
        more_blocked: blocked_total > i64::try_from(rows.len()).unwrap_or(i64::MAX),
        blocked: rows
            .into_iter()
            .map(|r| BlockedLine {
                phone: r.phone,
                reason: r.reason,
                when: utc_minute(r.created_at),
            })
            .collect(),
        blocked_total,
        block,
        settings,
        errors,
        notice: None,
        fresh_secret: None,
        max_cap: MAX_CALLER_HOURLY_CAP,
    })
}

#[derive(Debug, Deserialize)]
struct NoticeQuery {
    #[serde(default)]
    done: Option<String>,
}

async fn rules_page(
    State(store): State<Store>,
    user: ConsoleUser,
    Query(q): Query<NoticeQuery>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let mut page = page_of(
        &store,
        &user,
        BlockForm::default(),
        None,
        RulesErrors::default(),
    )
    .await?;
    // Only fixed texts go on the page.
    page.notice = match q.done.as_deref() {
        Some("blocked") => Some("The caller is blocked on every number of the workspace."),
        Some("unblocked") => Some("The caller is no longer blocked."),
        Some("saved") => Some("Inbound rules saved."),
        _ => None,
    };
    Ok(render(&page)?.into_response())
}

/// The page again with the refusals, answered 422 so the input is kept.
async fn refused(
    store: &Store,
    user: &ConsoleUser,
    block: BlockForm,
    settings: Option<SettingsForm>,
    errors: RulesErrors,
) -> Result<Response, ConsoleError> {
    let page = page_of(store, user, block, settings, errors).await?;
    Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response())
}

/// `POST /inbound/blocked-callers`: refuses a caller on every number.
async fn block(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Form(form): Form<BlockForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let blocked = workspace_rules::block_caller(
        &store,
        user.org_id,
        &form.phone,
        &form.reason,
        clock.now().timestamp_millis(),
    )
    .await;
    let mut errors = RulesErrors::default();
    match blocked {
        Ok(_) => return Ok(Redirect::to("/inbound?done=blocked").into_response()),
        Err(RulesError::Store(e)) => return Err(e.into()),
        Err(RulesError::Reason(e)) => errors.reason = Some(format!("The reason {e}.")),
        Err(e @ RulesError::Phone(_)) => errors.phone = Some(format!("The number: {e}.")),
        Err(other) => return Err(ConsoleError::Internal(other.to_string())),
    }
    refused(&store, &user, form, None, errors).await
}

/// The unblock button's form.
#[derive(Debug, Deserialize)]
struct UnblockForm {
    #[serde(default)]
    phone: String,
}

/// `POST /inbound/blocked-callers/remove`: lets a caller through again.
async fn unblock(
    State(store): State<Store>,
    user: ConsoleUser,
    Form(form): Form<UnblockForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    if !workspace_rules::unblock_caller(&store, user.org_id, &form.phone).await? {
        return Err(ConsoleError::NotFound);
    }
    Ok(Redirect::to("/inbound?done=unblocked").into_response())
}

/// `POST /inbound/settings`: the cap and the routing URL, written together.
async fn save_settings(
    State(store): State<Store>,
    State(settings): State<Arc<Settings>>,
    user: ConsoleUser,
    Form(form): Form<SettingsForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let mut errors = RulesErrors::default();
    let Ok(cap) = form.caller_hourly_cap.trim().parse::<i64>() else {
        errors.caller_hourly_cap = Some(format!(
            "Enter a whole number from 0 (no cap) to {MAX_CALLER_HOURLY_CAP}."
        ));
        return refused(&store, &user, BlockForm::default(), Some(form), errors).await;
    };
    let url = form.routing_url.trim();
    let change = RulesChange {
        caller_hourly_cap: Some(cap),
        routing_url: Some((!url.is_empty()).then(|| url.to_string())),
    };
    match workspace_rules::set_rules(&store, &settings.webhook_allow_hosts, user.org_id, change)
        .await
    {
        Ok(None) => Ok(Redirect::to("/inbound?done=saved").into_response()),
        Ok(Some(secret)) => {
            // The secret is shown in this answer only, as the webhooks page does.
            let mut page = page_of(
                &store,
                &user,
                BlockForm::default(),
                None,
                RulesErrors::default(),
            )
            .await?;
            page.notice = Some("Inbound rules saved.");
            page.fresh_secret = Some(secret);
            Ok(render(&page)?.into_response())
        }
        Err(RulesError::Store(e)) => Err(e.into()),
        Err(e @ RulesError::CallerHourlyCap(_)) => {
            errors.caller_hourly_cap = Some(format!("{e}."));
            refused(&store, &user, BlockForm::default(), Some(form), errors).await
        }
        Err(e) => {
            errors.routing_url = Some(format!("{e}."));
            refused(&store, &user, BlockForm::default(), Some(form), errors).await
        }
    }
}
