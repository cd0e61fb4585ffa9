//! `/keys` (admin and owner): a workspace's API keys. Create one (its full
//! text shown once, in the answer to the form, never in a URL), list them
//! with prefix, last use and usage against the daily and monthly caps, set
//! the caps, revoke. The same operations as `voxline admin key`.

use super::timestamps::{utc_minute, utc_minute_or_never};
use crate::access::rate_limit::RateLimiter;
use crate::admin::ops::{self, KeyLimitsError};
use crate::console::{Chrome, ConsoleError, ConsoleUser, Nav, render};
use crate::domain::clock::SharedClock;
use crate::domain::text::Line;
use crate::domain::{ApiKeyId, Role};
use crate::http::state::AppState;
use crate::store::Store;
use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Form, Router};
use serde::Deserialize;
use std::sync::Arc;

/// Most characters a key's name may have.
pub const MAX_KEY_NAME_CHARS: usize = 100;

/// The keys page's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/keys", get(keys_page).post(create_key))
        .route("/keys/{id}/revoke", post(revoke_key))
        .route("/keys/{id}/limits", post(set_limits))
}

/// `n` with its thousands grouped by commas, as caps are written: `100,000`.
/// (By reference: askama hands templates' fields over as references.)
pub fn grouped(n: &i64) -> String {
    let n = *n;
    let digits = n.unsigned_abs().to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 + 1);
    if n < 0 {
        out.push('-');
    }
    for (i, d) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(d);
    }
    out
}

/// One key as the list shows it.
#[derive(Debug, Clone)]
pub struct KeyLine {
    /// Key id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// The leading characters of the key.
    pub prefix: String,
    /// When it was last used.
    pub last_used: String,
    /// When it was created.
    pub created: String,
    /// When it was revoked, if it was.
    pub revoked: Option<String>,
    /// Requests admitted today (IST).
    pub today: i64,
    /// Requests admitted this month (IST).
    pub month: i64,
    /// Requests refused by a rate or cap this month.
    pub refused_month: i64,
    /// Daily cap.
    pub daily_limit: i64,
    /// Monthly cap.
    pub monthly_limit: i64,
}

/// A key just created: its full text, shown on this one answer only.
#[derive(Debug, Clone)]
pub struct CreatedKey {
    /// Its name.
    pub name: String,
    /// The full key.
    pub key: String,
}

/// What the caps form of one key shows after a refused change.
#[derive(Debug, Clone, Default)]
pub struct LimitsDraft {
    /// The key the draft is for.
    pub key_id: String,
    /// The daily cap as typed.
    pub daily: String,
    /// The monthly cap as typed.
    pub monthly: String,
    /// Why the daily cap was refused.
    pub daily_error: Option<String>,
    /// Why the monthly cap was refused.
    pub monthly_error: Option<String>,
}

#[derive(Template)]
#[template(path = "console/keys.html")]
struct KeysPage {
    chrome: Chrome,
    keys: Vec<KeyLine>,
    created: Option<CreatedKey>,
    notice: Option<String>,
    name: String,
    name_error: Option<String>,
    limits: LimitsDraft,
}

impl KeysPage {
    /// The value the caps form of `key` shows for `which` (`daily` or
    /// `monthly`): what was typed if the last change to it was refused.
    fn cap_value(&self, key: &KeyLine, which: &str) -> String {
        if self.limits.key_id == key.id {
            match which {
                "daily" => return self.limits.daily.clone(),
                _ => return self.limits.monthly.clone(),
            }
        }
        match which {
            "daily" => key.daily_limit.to_string(),
            _ => key.monthly_limit.to_string(),
        }
    }

    /// The error beside `which` cap of `key`, if its last change was refused.
    fn cap_error(&self, key: &KeyLine, which: &str) -> Option<String> {
        if self.limits.key_id != key.id {
            return None;
        }
        match which {
            "daily" => self.limits.daily_error.clone(),
            _ => self.limits.monthly_error.clone(),
        }
    }
}

/// What the list of keys is read with: the limiter whose buffered counts
/// go to the store first, the store, and the clock that says which day and
/// month the usage is of.
struct KeyReads<'a> {
    limiter: &'a RateLimiter,
    store: &'a Store,
    clock: &'a SharedClock,
}

/// The workspace's keys, newest first, as lines of the list.
async fn key_lines(reads: &KeyReads<'_>, user: &ConsoleUser) -> Result<Vec<KeyLine>, ConsoleError> {
    // Buffered counts and last-used times go to the store first (on SQLite
    // the limiter keeps them in memory between flushes), so the page is current.
    reads.limiter.flush().await?;
    let listed = ops::keys_with_usage(reads.store, user.org_id, reads.clock.now()).await?;
    Ok(listed
        .into_iter()
        .map(|k| KeyLine {
            id: k.key.id.to_string(),
            name: k.key.name,
            prefix: k.key.prefix,
            last_used: utc_minute_or_never(k.key.last_used_at),
            created: utc_minute(k.key.created_at),
            revoked: k.key.revoked_at.map(utc_minute),
            today: k.today.admitted,
            month: k.month.admitted,
            refused_month: k.month.rate_limited,
            daily_limit: k.key.daily_limit,
            monthly_limit: k.key.monthly_limit,
        })
        .collect())
}

/// A page with nothing typed and nothing to report.
async fn blank_page(reads: &KeyReads<'_>, user: &ConsoleUser) -> Result<KeysPage, ConsoleError> {
    Ok(KeysPage {
        chrome: Chrome::new(user, Nav::Keys),
        keys: key_lines(reads, user).await?,
        created: None,
        notice: None,
        name: String::new(),
        name_error: None,
        limits: LimitsDraft::default(),
    })
}

#[derive(Debug, Deserialize)]
struct NoticeQuery {
    done: Option<String>,
}

/// What a finished change says on the page it redirects to; only these
/// fixed texts, so a crafted link cannot put words on the page.
fn notice_text(done: Option<&str>) -> Option<String> {
    match done? {
        "revoked" => Some("The key is revoked: requests with it are refused from now on.".into()),
        "limits" => Some("The key's caps are changed; they apply from its next request.".into()),
        _ => None,
    }
}

async fn keys_page(
    State(limiter): State<Arc<RateLimiter>>,
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Query(q): Query<NoticeQuery>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let reads = KeyReads {
        limiter: &limiter,
        store: &store,
        clock: &clock,
    };
    let mut page = blank_page(&reads, &user).await?;
    page.notice = notice_text(q.done.as_deref());
    Ok(render(&page)?.into_response())
}

#[derive(Debug, Deserialize)]
struct CreateForm {
    #[serde(default)]
    name: String,
}

async fn create_key(
    State(limiter): State<Arc<RateLimiter>>,
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Form(form): Form<CreateForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let reads = KeyReads {
        limiter: &limiter,
        store: &store,
        clock: &clock,
    };
    let name = match Line::<MAX_KEY_NAME_CHARS>::parse(&form.name) {
        Ok(name) if !name.is_empty() => name,
        refused => {
            let why = match refused {
                Err(e) => format!("Name {e}"),
                Ok(_) => "Name is required: say what will use the key".to_string(),
            };
            let mut page = blank_page(&reads, &user).await?;
            page.name = form.name;
            page.name_error = Some(why);
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response());
        }
    };
    let key = ops::create_key(&store, user.org_id, &name, clock.now()).await?;
    tracing::info!(key = %key.id, by = %user.user_id, "API key created in the console");
    let mut page = blank_page(&reads, &user).await?;
    page.created = Some(CreatedKey {
        name: name.into_string(),
        key: key.key,
    });
    // The full key is in this answer only: no cache keeps it.
    Ok((
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        render(&page)?,
    )
        .into_response())
}

/// The key `id` names if it belongs to the person's workspace.
async fn own_key(store: &Store, user: &ConsoleUser, id: &str) -> Result<ApiKeyId, ConsoleError> {
    let id: ApiKeyId = id.parse().map_err(|_| ConsoleError::NotFound)?;
    store
        .api_key(id)
        .await?
        .filter(|k| k.org_id == user.org_id)
        .map(|k| k.id)
        .ok_or(ConsoleError::NotFound)
}

async fn revoke_key(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Path(id): Path<String>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let id = own_key(&store, &user, &id).await?;
    store
        .revoke_api_key(id, clock.now().timestamp_millis())
        .await?;
    tracing::info!(key = %id, by = %user.user_id, "API key revoked in the console");
    Ok(Redirect::to("/keys?done=revoked").into_response())
}

#[derive(Debug, Deserialize)]
struct LimitsForm {
    #[serde(default)]
    daily: String,
    #[serde(default)]
    monthly: String,
}

/// A cap as typed: a whole number of requests, zero or more.
fn parse_cap(raw: &str) -> Result<i64, String> {
    match raw.trim().replace(['_', ','], "").parse::<i64>() {
        Ok(n) if n >= 0 => Ok(n),
        Ok(_) => Err("must not be negative".to_string()),
        Err(_) => Err("must be a whole number of requests".to_string()),
    }
}

async fn set_limits(
    State(limiter): State<Arc<RateLimiter>>,
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Path(id): Path<String>,
    Form(form): Form<LimitsForm>,
) -> Result<Response, ConsoleError> {
    user.require(Role::Admin)?;
    let id = own_key(&store, &user, &id).await?;
    let (daily, monthly) = (parse_cap(&form.daily), parse_cap(&form.monthly));
    let (Ok(daily), Ok(monthly)) = (&daily, &monthly) else {
        let reads = KeyReads {
            limiter: &limiter,
            store: &store,
            clock: &clock,
        };
        let mut page = blank_page(&reads, &user).await?;
        page.limits = LimitsDraft {
            key_id: id.to_string(),
            daily: form.daily,
            monthly: form.monthly,
            daily_error: daily.err().map(|e| format!("Daily cap {e}")),
            monthly_error: monthly.err().map(|e| format!("Monthly cap {e}")),
        };
        return Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response());
    };
    ops::set_key_limits(&store, Some(user.org_id), id, Some(*daily), Some(*monthly))
        .await
        .map_err(|e| match e {
            KeyLimitsError::NotFound(_) => ConsoleError::NotFound,
            KeyLimitsError::Negative => ConsoleError::BadRequest(format!("Caps {e}")),
            KeyLimitsError::Store(store) => ConsoleError::Store(store),
        })?;
    Ok(Redirect::to("/keys?done=limits").into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(grouped(&0), "0");
        assert_eq!(grouped(&999), "999");
        assert_eq!(grouped(&5_000), "5,000");
        assert_eq!(grouped(&100_000), "100,000");
        assert_eq!(grouped(&1_234_567), "1,234,567");
        assert_eq!(grouped(&-1_000), "-1,000");
    }

    #[test]
    fn caps_are_whole_non_negative_numbers() {
        assert_eq!(parse_cap(" 5,000 "), Ok(5_000));
        assert_eq!(parse_cap("0"), Ok(0));
        assert!(parse_cap("-1").is_err());
        assert!(parse_cap("ten").is_err());
        assert!(parse_cap("").is_err());
    }

    #[test]
    fn notices_are_fixed_texts() {
        assert!(notice_text(Some("revoked")).is_some());
        assert_eq!(notice_text(Some("<script>")), None);
        assert_eq!(notice_text(None), None);
    }
}
