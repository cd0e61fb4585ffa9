//! The CSRF check: every state-changing console request must carry its
//! session's token, in the `X-CSRF-Token` header (htmx requests: the layout
//! sets it on `<body>`) or a `_csrf` field of a urlencoded form. The session
//! cookie is `SameSite=Lax` too; the token also covers same-site attackers
//! and old browsers.

use super::MAX_FORM_BODY;
use super::error::ConsoleError;
use super::session;
use crate::app::state::AppState;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The header htmx requests carry the token in.
pub const HEADER: &str = "x-csrf-token";
/// The form field plain forms carry the token in.
pub const FIELD: &str = "_csrf";

/// Paths that change state without a session yet: signing in.
const OPEN: &[&str] = &["/sign-in"];

/// Lets safe methods through; for the others requires a live session and its
/// CSRF token, and hands the session on to the handler.
pub async fn require_token(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS)
        || OPEN.contains(&req.uri().path())
    {
        return next.run(req).await;
    }
    let (mut parts, body) = req.into_parts();
    let user = match session::lookup(&parts.headers, &state).await {
        Ok(Some(user)) => user,
        Ok(None) => return ConsoleError::not_signed_in(&parts).into_response(),
        Err(err) => return ConsoleError::Store(err).into_response(),
    };
    let header_token = parts
        .headers
        .get(HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let is_form = parts
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let (given, body) = match header_token {
        Some(token) => (Some(token), body),
        None if is_form => {
            let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BODY).await else {
                return ConsoleError::BadRequest("The form is too large.".into()).into_response();
            };
            let token = form_urlencoded::parse(&bytes)
                .find(|(k, _)| k == FIELD)
                .map(|(_, v)| v.into_owned());
            (token, Body::from(bytes))
        }
        None => (None, body),
    };
    if !given.is_some_and(|g| same(g.as_bytes(), user.csrf.as_bytes())) {
        return ConsoleError::Csrf.into_response();
    }
    parts.extensions.insert(user);
    next.run(Request::from_parts(parts, body)).await
}

/// Compares without stopping at the first difference, so the time taken
/// tells nothing about how much of a guess was right.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    #[test]
    fn tokens_compare_whole() {
        assert!(super::same(b"abc", b"abc"));
        assert!(!super::same(b"abc", b"abd"));
        assert!(!super::same(b"abc", b"ab"));
    }
}
