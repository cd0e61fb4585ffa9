//! Signing in and out, and a person's own password. Failed sign-ins are
//! throttled per address and per client: after [`MAX_FAILURES_PER_EMAIL`]
//! failures for one address (or [`MAX_FAILURES_PER_CLIENT`] from one client)
//! within [`FAILURE_WINDOW`], further tries are refused with 429 until the
//! oldest failure leaves the window.

use super::chrome::{Chrome, Nav};
use super::csrf::PreSession;
use super::error::ConsoleError;
use super::render::render;
use super::session::{self, ConsoleUser};
use crate::access::password;
use crate::config::Settings;
use crate::domain::Password;
use crate::domain::clock::SharedClock;
use crate::http::state::AppState;
use crate::secrets::server_secret::ServerSecret;
use crate::store::Store;
use crate::store::users::NewSession;
use askama::Template;
use axum::extract::{ConnectInfo, FromRef, FromRequestParts, Query, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{AppendHeaders, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Form, Router};
use parking_lot::Mutex;
use serde::Deserialize;
use std::collections::{HashMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

/// Failures one address may have within the window.
pub const MAX_FAILURES_PER_EMAIL: usize = 5;
/// Failures one client address may have within the window.
pub const MAX_FAILURES_PER_CLIENT: usize = 30;
/// How long a failure counts.
pub const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// Recent failed sign-ins by address and by client, on this node.
#[derive(Debug, Default)]
pub struct SignInThrottle {
    failures: Mutex<HashMap<String, VecDeque<i64>>>,
}

impl SignInThrottle {
    /// Milliseconds until `key` may try again, if it is over `max` now.
    fn wait_ms(&self, key: &str, max: usize, now_ms: i64) -> Option<i64> {
        let window = i64::try_from(FAILURE_WINDOW.as_millis()).unwrap_or(i64::MAX);
        let mut map = self.failures.lock();
        let times = map.get_mut(key)?;
        while times.front().is_some_and(|t| *t <= now_ms - window) {
            times.pop_front();
        }
        if times.is_empty() {
            map.remove(key);
            return None;
        }
        (times.len() >= max).then(|| times.front().map_or(0, |t| t + window - now_ms))
    }

    fn record(&self, key: String, now_ms: i64) {
        self.failures
            .lock()
            .entry(key)
            .or_default()
            .push_back(now_ms);
    }

    fn clear(&self, key: &str) {
        self.failures.lock().remove(key);
    }
}

/// The client's address, when the listener recorded it.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddr(pub Option<IpAddr>);

impl<S: Send + Sync> FromRequestParts<S> for ClientAddr {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip()),
        ))
    }
}

/// Sign-in, sign-out and account routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/sign-in", get(sign_in_page).post(sign_in))
        .route("/sign-out", post(sign_out))
        .route("/account", get(account_page))
        .route("/account/password", post(change_password))
}

#[derive(Template)]
#[template(path = "console/sign_in.html")]
struct SignInPage {
    error: Option<String>,
    email: String,
    next: String,
    /// The pre-session token's form field.
    csrf: String,
}

/// What the sign-in form's pre-session token is made with: the secret its
/// tag is keyed from, the clock it is dated by (sign-in's own clock too),
/// and the settings that say whether its cookie is `Secure`. An extractor,
/// so the sign-in handlers take the three as one argument.
struct FormKeys {
    secret: ServerSecret,
    clock: SharedClock,
    settings: Arc<Settings>,
}

impl<S> FromRequestParts<S> for FormKeys
where
    S: Send + Sync,
    ServerSecret: FromRef<S>,
    SharedClock: FromRef<S>,
    Arc<Settings>: FromRef<S>,
{
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(_: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self {
            secret: ServerSecret::from_ref(state),
            clock: SharedClock::from_ref(state),
            settings: Arc::<Settings>::from_ref(state),
        })
    }
}

/// The sign-in form with a pre-session token: the page, and the cookie
/// its `_csrf` field is bound to.
fn sign_in_form(
    keys: &FormKeys,
    headers: &HeaderMap,
    status: StatusCode,
    error: Option<String>,
    email: String,
    next: String,
) -> Result<Response, ConsoleError> {
    let secure = session::secure_cookies(&keys.settings);
    let token = PreSession::issue(&keys.secret, &keys.clock, secure, headers);
    let page = render(&SignInPage {
        error,
        email,
        next,
        csrf: token.field().to_string(),
    })?;
    let cookie = token.cookie(secure);
    Ok((status, [(header::SET_COOKIE, cookie)], page).into_response())
}

#[derive(Debug, Deserialize)]
struct NextQuery {
    next: Option<String>,
}

/// Where to go after signing in: a path of this site only, so a crafted
/// link cannot send a person elsewhere.
fn safe_next(next: Option<&str>) -> String {
    match next {
        Some(n) if n.starts_with('/') && !n.starts_with("//") && !n.contains('\\') => n.to_string(),
        _ => "/".to_string(),
    }
}

async fn sign_in_page(
    State(store): State<Store>,
    keys: FormKeys,
    headers: HeaderMap,
    Query(q): Query<NextQuery>,
) -> Result<Response, ConsoleError> {
    let next = safe_next(q.next.as_deref());
    if session::lookup(&headers, &store, &keys.clock)
        .await?
        .is_some()
    {
        return Ok(Redirect::to(&next).into_response());
    }
    sign_in_form(&keys, &headers, StatusCode::OK, None, String::new(), next)
}

#[derive(Debug, Deserialize)]
struct SignInForm {
    #[serde(default)]
    email: String,
    #[serde(default)]
    password: String,
    next: Option<String>,
}

/// Signs a person in. The form's pre-session token and origin were checked
/// before this runs (`csrf`), so a page elsewhere never gets here.
async fn sign_in(
    State(store): State<Store>,
    keys: FormKeys,
    Extension(throttle): Extension<Arc<SignInThrottle>>,
    ClientAddr(client): ClientAddr,
    headers: HeaderMap,
    Form(form): Form<SignInForm>,
) -> Result<Response, ConsoleError> {
    let now = keys.clock.now().timestamp_millis();
    let email = form.email.trim().to_lowercase();
    let next = safe_next(form.next.as_deref());
    let email_key = format!("email:{email}");
    let client_key = client.map(|ip| format!("client:{ip}"));
    let wait = throttle
        .wait_ms(&email_key, MAX_FAILURES_PER_EMAIL, now)
        .or_else(|| {
            client_key
                .as_deref()
                .and_then(|k| throttle.wait_ms(k, MAX_FAILURES_PER_CLIENT, now))
        });
    if let Some(wait) = wait {
        let minutes = (wait + 59_999) / 60_000;
        return Err(ConsoleError::TooManyRequests(format!(
            "Too many failed sign-ins. Try again in {minutes} minute(s)."
        )));
    }
    let found = store.user_credentials(&email).await?;
    let stored = found
        .as_ref()
        .map(|u| u.password_hash.clone())
        .unwrap_or_else(|| password::decoy_hash().to_string());
    let given = form.password.clone();
    // argon2 is deliberately slow: off the async threads.
    let matches = tokio::task::spawn_blocking(move || password::verify(&given, &stored))
        .await
        .map_err(|e| ConsoleError::Internal(e.to_string()))?;
    let Some(user) = found.filter(|_| matches) else {
        throttle.record(email_key, now);
        if let Some(k) = client_key {
            throttle.record(k, now);
        }
        return sign_in_form(
            &keys,
            &headers,
            StatusCode::UNAUTHORIZED,
            Some("That email and password do not match.".into()),
            form.email,
            next,
        );
    };
    throttle.clear(&email_key);
    let token = session::new_token();
    let token_hash = session::hash_token(&token);
    let csrf = session::new_token();
    let ttl = i64::try_from(session::SESSION_TTL.as_millis()).unwrap_or(i64::MAX);
    store
        .insert_console_session(&NewSession {
            token_hash: &token_hash,
            user_id: user.id,
            csrf_token: &csrf,
            now_ms: now,
            expires_at: now.saturating_add(ttl),
        })
        .await?;
    let secure = session::secure_cookies(&keys.settings);
    Ok((
        StatusCode::SEE_OTHER,
        // The pre-session cookie served its one form: dropped with the sign-in.
        AppendHeaders([
            (header::SET_COOKIE, session::session_cookie(&token, secure)),
            (header::SET_COOKIE, PreSession::clear_cookie(secure)),
        ]),
        Redirect::to(&next),
    )
        .into_response())
}

async fn sign_out(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(settings): State<Arc<Settings>>,
    user: ConsoleUser,
) -> Result<Response, ConsoleError> {
    let now = clock.now().timestamp_millis();
    store.revoke_console_session(&user.token_hash, now).await?;
    let cookie = session::clear_cookie(session::secure_cookies(&settings));
    Ok(([(header::SET_COOKIE, cookie)], Redirect::to("/sign-in")).into_response())
}

#[derive(Template)]
#[template(path = "console/account.html")]
struct AccountPage {
    chrome: Chrome,
    changed: bool,
    current_error: Option<String>,
    new_error: Option<String>,
}

async fn account_page(user: ConsoleUser) -> Result<Response, ConsoleError> {
    Ok(render(&AccountPage {
        chrome: Chrome::new(&user, Nav::Account),
        changed: false,
        current_error: None,
        new_error: None,
    })?
    .into_response())
}

#[derive(Debug, Deserialize)]
struct PasswordForm {
    #[serde(default)]
    current: String,
    #[serde(default)]
    new: String,
}

async fn change_password(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    user: ConsoleUser,
    Form(form): Form<PasswordForm>,
) -> Result<Response, ConsoleError> {
    let mut page = AccountPage {
        chrome: Chrome::new(&user, Nav::Account),
        changed: false,
        current_error: None,
        new_error: None,
    };
    let stored = store
        .user_password_hash(user.user_id)
        .await?
        .ok_or(ConsoleError::NotFound)?;
    let current = form.current.clone();
    let matches = tokio::task::spawn_blocking(move || password::verify(&current, &stored))
        .await
        .map_err(|e| ConsoleError::Internal(e.to_string()))?;
    if !matches {
        page.current_error = Some("Current password is wrong.".into());
        return Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response());
    }
    let new = match Password::parse(&form.new) {
        Ok(p) => p,
        Err(e) => {
            page.new_error = Some(format!("New password {e}."));
            return Ok((StatusCode::UNPROCESSABLE_ENTITY, render(&page)?).into_response());
        }
    };
    let hash = tokio::task::spawn_blocking(move || password::hash(&new))
        .await
        .map_err(|e| ConsoleError::Internal(e.to_string()))?
        .map_err(|e| ConsoleError::Internal(e.to_string()))?;
    let now = clock.now().timestamp_millis();
    store
        .set_user_password(user.user_id, &hash, Some(&user.token_hash), now)
        .await?;
    page.changed = true;
    Ok(render(&page)?.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn next_stays_on_this_site() {
        assert_eq!(
            safe_next(Some("/calls?status=failed")),
            "/calls?status=failed"
        );
        assert_eq!(safe_next(Some("//evil.example/")), "/");
        assert_eq!(safe_next(Some("https://evil.example/")), "/");
        assert_eq!(safe_next(Some("/\\evil.example")), "/");
        assert_eq!(safe_next(None), "/");
    }

    #[test]
    fn the_throttle_refuses_after_the_limit_until_the_window_passes() {
        let t = SignInThrottle::default();
        for i in 0..5 {
            assert_eq!(t.wait_ms("k", 5, i), None);
            t.record("k".into(), i);
        }
        assert_eq!(t.wait_ms("k", 5, 10), Some(15 * 60_000 - 10));
        assert_eq!(t.wait_ms("k", 5, 15 * 60_000 + 1), None);
    }
}
