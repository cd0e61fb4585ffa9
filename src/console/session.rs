//! Server-side sessions. The cookie carries a random 256-bit token; the
//! database keeps only its SHA-256, the person, an expiry and a CSRF token.
//! A session ends when it expires, on sign-out, on a password change (the
//! person's other sessions) or when the person is removed; a role change
//! applies to open sessions on their next request.

use super::error::ConsoleError;
use crate::config::Settings;
use crate::domain::clock::SharedClock;
use crate::domain::{OrgId, Role, UserId};
use crate::store::{Store, StoreError};
use axum::extract::{FromRef, FromRequestParts};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use sha2::{Digest, Sha256};
use std::time::Duration;

/// The session cookie's name.
pub const COOKIE: &str = "voxline_session";

/// How long a session lasts after sign-in.
pub const SESSION_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The signed-in person making a request. Taking it as a handler argument
/// makes the route signed-in only.
#[derive(Debug, Clone)]
pub struct ConsoleUser {
    /// The person.
    pub user_id: UserId,
    /// Their workspace: every read and change is scoped to it.
    pub org_id: OrgId,
    /// Their sign-in address.
    pub email: String,
    /// Their workspace's name.
    pub workspace: String,
    /// What they may do.
    pub role: Role,
    /// The session's CSRF token, for forms.
    pub csrf: String,
    /// SHA-256 of the session's token.
    pub token_hash: String,
}

impl ConsoleUser {
    /// `Forbidden` unless the person's role is at least `min`.
    pub fn require(&self, min: Role) -> Result<(), ConsoleError> {
        if self.role >= min {
            Ok(())
        } else {
            Err(ConsoleError::Forbidden(format!(
                "This needs the {min} role or higher; you are a {}.",
                self.role
            )))
        }
    }

    /// Whether the person's role is at least `min` (to show or hide controls;
    /// handlers still call [`ConsoleUser::require`]).
    pub fn can(&self, min: Role) -> bool {
        self.role >= min
    }
}

impl<S> FromRequestParts<S> for ConsoleUser
where
    S: Send + Sync,
    Store: FromRef<S>,
    SharedClock: FromRef<S>,
{
    type Rejection = ConsoleError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        // The CSRF check already looked the session up for unsafe methods.
        if let Some(user) = parts.extensions.get::<ConsoleUser>() {
            return Ok(user.clone());
        }
        let store = Store::from_ref(state);
        let clock = SharedClock::from_ref(state);
        match lookup(&parts.headers, &store, &clock).await? {
            Some(user) => Ok(user),
            None => Err(ConsoleError::not_signed_in(parts)),
        }
    }
}

/// The person whose live session the request's cookie names, if any.
pub async fn lookup(
    headers: &HeaderMap,
    store: &Store,
    clock: &SharedClock,
) -> Result<Option<ConsoleUser>, StoreError> {
    let Some(token) = token_from_cookies(headers) else {
        return Ok(None);
    };
    let token_hash = hash_token(token);
    let now = clock.now().timestamp_millis();
    let row = store.console_session(&token_hash, now).await?;
    Ok(row.map(|r| ConsoleUser {
        user_id: r.user_id,
        org_id: r.org_id,
        email: r.email,
        workspace: r.workspace,
        role: r.role,
        csrf: r.csrf_token,
        token_hash,
    }))
}

/// The session token in the request's `Cookie` headers.
pub fn token_from_cookies(headers: &HeaderMap) -> Option<&str> {
    cookie(headers, COOKIE)
}

/// The value of the cookie `name` in the request's `Cookie` headers, when
/// it is there and not empty.
pub fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(n, _)| *n == name)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

/// Hex SHA-256 of a session token, as stored.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A fresh random token (256 bits, URL-safe base64).
pub fn new_token() -> String {
    let bytes: [u8; 32] = rand::random();
    URL_SAFE_NO_PAD.encode(bytes)
}

/// The `Set-Cookie` value that opens a session: `HttpOnly`, `SameSite=Lax`,
/// and `Secure` when the service is reached over https.
pub fn session_cookie(token: &str, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    let value = format!(
        "{COOKIE}={token}; Path=/; Max-Age={}; HttpOnly; SameSite=Lax{secure}",
        SESSION_TTL.as_secs()
    );
    // The token is base64url: always a valid header value.
    HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""))
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_cookie(secure: bool) -> HeaderValue {
    if secure {
        HeaderValue::from_static(
            "voxline_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax; Secure",
        )
    } else {
        HeaderValue::from_static("voxline_session=; Path=/; Max-Age=0; HttpOnly; SameSite=Lax")
    }
}

/// Whether cookies must be `Secure`: the service's public URL is https.
/// Only a configured public URL can be: without one the public URL is the
/// bound address, which this server serves over plain http.
pub fn secure_cookies(settings: &Settings) -> bool {
    settings
        .public_url
        .as_deref()
        .is_some_and(|url| url.starts_with("https://"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_found_among_other_cookies() {
        let mut h = HeaderMap::new();
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; voxline_session=abc; b=2"),
        );
        assert_eq!(token_from_cookies(&h), Some("abc"));
        let mut empty = HeaderMap::new();
        empty.append(header::COOKIE, HeaderValue::from_static("voxline_session="));
        assert_eq!(token_from_cookies(&empty), None);
    }

    #[test]
    fn cookies_are_http_only_lax_and_secure_on_https() {
        let c = session_cookie("t", true);
        let c = c.to_str().unwrap();
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Lax") && c.contains("Secure"));
        assert!(
            !session_cookie("t", false)
                .to_str()
                .unwrap()
                .contains("Secure")
        );
        assert_ne!(new_token(), new_token());
        assert_eq!(hash_token("x").len(), 64);
    }
}
