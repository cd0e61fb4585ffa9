//! `/healthz` (the process is up, or draining after SIGTERM) and `/readyz`
//! (it can take work: not draining, and the database answers).

use crate::app::state::AppState;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde_json::{Value, json};

/// Health routes; no authentication.
pub fn router() -> Router<AppState> {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
}

/// Still 200 while draining: the process is healthy and must not be killed
/// for failing a liveness probe while its calls finish.
async fn healthz(State(state): State<AppState>) -> Json<Value> {
    let status = if state.engine.is_draining() {
        "draining"
    } else {
        "ok"
    };
    Json(json!({ "status": status }))
}

/// 503 while draining, so a load balancer stops sending new work here.
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    if state.engine.is_draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "draining", "message": "shutting down" })),
        );
    }
    match state.store.ping().await {
        Ok(()) => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "database": state.store.dialect() })),
        ),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({ "status": "unavailable", "message": "database unreachable" })),
            )
        }
    }
}
