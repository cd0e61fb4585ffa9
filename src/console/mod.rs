//! The web console: server-rendered pages for a workspace's people, at `/`
//! beside the API. People sign in with an email and password (server-side
//! sessions, `session.rs`); every state-changing request must come from this
//! site's own pages (`origin.rs`) and carry the session's CSRF token, or the
//! sign-in form's pre-session one (`csrf.rs`); pages are askama templates
//! over the same services the API uses (`pages/`), with htmx and a little of
//! our own JavaScript (`assets/console/`) for partial updates and live views.
//!
//! Arrows: `console` → services (`calls`, `batches`, `postcall`, `admin`) →
//! `store`. The API (`http`) never imports the console.

pub mod assets;
pub mod chrome;
pub mod csrf;
pub mod error;
pub mod origin;
pub mod pages;
pub mod render;
pub mod security;
pub mod session;
pub mod sign_in;

use crate::http::state::AppState;
use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::middleware;
use std::sync::Arc;
use tower_http::trace::TraceLayer;

pub use chrome::{Chrome, Nav};
pub use error::ConsoleError;
pub use render::render;
pub use session::ConsoleUser;

/// The largest request body a console form may send (CSV uploads included).
pub const MAX_FORM_BODY: usize = 20 * 1024 * 1024;

/// The console's routes with their security layers, ready to merge beside
/// the API router.
pub fn router(state: AppState) -> Router {
    let throttle = Arc::new(sign_in::SignInThrottle::default());
    let pages = Router::new()
        .merge(sign_in::routes())
        .merge(pages::routes())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            csrf::require_token,
        ))
        // Outside the token check: a cross-site request is refused before
        // its session is even looked up.
        .layer(middleware::from_fn_with_state(
            Arc::new(origin::Site::new(&state.public_url)),
            csrf::refuse_cross_site,
        ))
        .layer(axum::Extension(throttle));
    Router::new()
        .merge(pages)
        .merge(assets::routes())
        .layer(DefaultBodyLimit::max(MAX_FORM_BODY))
        .layer(middleware::from_fn(security::refuse_api_keys))
        .layer(middleware::from_fn(security::headers))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}
