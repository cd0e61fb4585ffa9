//! The console's pages, one module per page family; each gives its routes.

pub mod agents;
pub mod batches;
pub mod calls;
pub mod do_not_call;
pub mod inbound_rules;
pub mod keys;
pub mod numbers;
pub mod overview;
pub mod ratings;
pub mod settings;
pub mod team;
pub mod timestamps;
pub mod wallet;
pub mod webhooks;

use crate::http::state::AppState;
use axum::Router;

/// Every page family's routes.
pub fn routes() -> Router<AppState> {
    Router::new()
        .merge(overview::routes())
        .merge(calls::routes())
        .merge(agents::routes())
        .merge(ratings::routes())
        .merge(batches::routes())
        .merge(do_not_call::routes())
        .merge(wallet::routes())
        .merge(numbers::routes())
        .merge(inbound_rules::routes())
        .merge(keys::routes())
        .merge(webhooks::routes())
        .merge(settings::routes())
        .merge(team::routes())
}
