//! `ConsoleError`: every way a console request fails, answered as a page a
//! person can read (or, for htmx, a status and a redirect it follows).

use crate::store::StoreError;
use askama::Template;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};

/// A failed console request.
#[derive(Debug, thiserror::Error)]
pub enum ConsoleError {
    /// No live session: sign in first, then come back to `next`.
    #[error("sign in first")]
    NotSignedIn {
        /// Where to return after signing in (a path of this site).
        next: String,
        /// Whether htmx made the request (it follows `HX-Redirect`).
        htmx: bool,
    },
    /// The person's role does not allow this.
    #[error("{0}")]
    Forbidden(String),
    /// The form's CSRF token is missing or not the session's.
    #[error("the form's security token is missing or stale")]
    Csrf,
    /// A state-changing request another site's page made.
    #[error("the request came from another site")]
    CrossSite,
    /// No such page or record in the person's workspace.
    #[error("not found")]
    NotFound,
    /// The request cannot be done as asked; the text says why.
    #[error("{0}")]
    BadRequest(String),
    /// The request conflicts with the record's state; the text says why.
    #[error("{0}")]
    Conflict(String),
    /// Too many attempts; the text says when to try again.
    #[error("{0}")]
    TooManyRequests(String),
    /// The database failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A template failed to render.
    #[error("rendering failed: {0}")]
    Render(#[from] askama::Error),
    /// Anything else that is the service's fault.
    #[error("{0}")]
    Internal(String),
}

impl ConsoleError {
    /// The rejection for a request without a live session.
    pub fn not_signed_in(parts: &Parts) -> Self {
        let next = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_else(|| "/".to_string());
        let htmx = parts.headers.contains_key("hx-request");
        Self::NotSignedIn { next, htmx }
    }
}

#[derive(Template)]
#[template(path = "console/error.html")]
struct ErrorPage<'a> {
    title: &'a str,
    message: &'a str,
}

/// The encoded `next` parameter of a sign-in link.
fn sign_in_url(next: &str) -> String {
    let next: String = form_urlencoded::byte_serialize(next.as_bytes()).collect();
    format!("/sign-in?next={next}")
}

impl IntoResponse for ConsoleError {
    fn into_response(self) -> Response {
        let (status, title, message) = match &self {
            ConsoleError::NotSignedIn { next, htmx } => {
                let url = sign_in_url(next);
                if *htmx {
                    let mut resp = StatusCode::UNAUTHORIZED.into_response();
                    if let Ok(v) = HeaderValue::from_str(&url) {
                        resp.headers_mut().insert("hx-redirect", v);
                    }
                    return resp;
                }
                return Redirect::to(&url).into_response();
            }
            ConsoleError::Forbidden(m) => (StatusCode::FORBIDDEN, "Not allowed", m.clone()),
            ConsoleError::Csrf => (
                StatusCode::FORBIDDEN,
                "Form expired",
                "The form's security token is missing or stale. Reload the page and try again."
                    .to_string(),
            ),
            ConsoleError::CrossSite => (
                StatusCode::FORBIDDEN,
                "Refused",
                "This request came from another site, so it was not carried out. Open Voxline \
                 directly and try again."
                    .to_string(),
            ),
            ConsoleError::NotFound => (
                StatusCode::NOT_FOUND,
                "Not found",
                "There is no such page or record in your workspace.".to_string(),
            ),
            ConsoleError::BadRequest(m) => (StatusCode::BAD_REQUEST, "Cannot do that", m.clone()),
            ConsoleError::Conflict(m) => (StatusCode::CONFLICT, "Cannot do that now", m.clone()),
            ConsoleError::TooManyRequests(m) => (
                StatusCode::TOO_MANY_REQUESTS,
                "Too many attempts",
                m.clone(),
            ),
            ConsoleError::Store(_) | ConsoleError::Render(_) | ConsoleError::Internal(_) => {
                tracing::error!(error = %self, "console request failed");
                (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Something went wrong",
                    "The request failed on our side. Try again in a moment.".to_string(),
                )
            }
        };
        let page = ErrorPage {
            title,
            message: &message,
        };
        match page.render() {
            Ok(body) => (status, Html(body)).into_response(),
            Err(_) => (
                status,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                message,
            )
                .into_response(),
        }
    }
}
