//! `/healthz` (the process is up, or draining after SIGTERM, and this node's
//! load) and `/readyz` (it can take work: not draining, and the database
//! answers).

use crate::calls::media_stream::CallEngine;
use crate::cluster::node_status::NodeStatus;
use crate::domain::NodeId;
use crate::http::state::AppState;
use crate::store::Store;
use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use serde::Serialize;
use serde_json::{Value, json};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Health routes; no authentication. `/healthz` is in the OpenAPI document.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .merge(Router::new().route("/readyz", get(readyz)).into())
}

/// Whether the process is serving or draining after a signal.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum HealthStatus {
    /// Serving.
    Ok,
    /// A SIGTERM came: live calls finish, nothing new starts.
    Draining,
}

/// The liveness answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct HealthView {
    /// Serving or draining after a signal.
    pub status: HealthStatus,
    /// This node's load.
    pub node: NodeHealth,
}

/// This node among those sharing the database, as its last heartbeat measured it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeHealth {
    /// The node's id (`--node-id`, or generated and kept in the data directory).
    pub id: String,
    /// Calls on the line on this node now.
    pub live_calls: u64,
    /// Takes no new calls: an operator drained it (`voxline admin node drain`) or it is shutting down.
    pub draining: bool,
    /// Takes no new calls: at its most live calls or above its CPU limit at the last heartbeat.
    pub overloaded: bool,
    /// CPU use over the last heartbeat period, in percent of one core.
    pub cpu_percent: f64,
}

/// Still 200 while draining: the process is healthy and must not be killed
/// for failing a liveness probe while its calls finish.
#[utoipa::path(
    get,
    path = "/healthz",
    tag = "health",
    responses((status = 200, description = "The process is up; this node's load", body = HealthView))
)]
async fn healthz(
    State(engine): State<CallEngine>,
    State(node_id): State<NodeId>,
    State(node_status): State<Arc<NodeStatus>>,
) -> Json<HealthView> {
    let shutting_down = engine.is_draining();
    let status = if shutting_down {
        HealthStatus::Draining
    } else {
        HealthStatus::Ok
    };
    Json(HealthView {
        status,
        node: NodeHealth {
            id: node_id.to_string(),
            live_calls: u64::try_from(engine.live_calls()).unwrap_or(u64::MAX),
            draining: shutting_down || node_status.is_draining(),
            overloaded: node_status.is_overloaded(),
            cpu_percent: node_status.cpu_permille() as f64 / 10.0,
        },
    })
}

/// 503 while draining, so a load balancer stops sending new work here.
async fn readyz(
    State(store): State<Store>,
    State(engine): State<CallEngine>,
) -> (StatusCode, Json<Value>) {
    if engine.is_draining() {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({ "status": "draining", "message": "shutting down" })),
        );
    }
    match store.ping().await {
        Ok(()) => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "database": store.dialect() })),
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
