//! The HTTP surface: the API under `/api`, health checks and the OpenAPI document.

pub mod account;
pub mod agent_cache;
pub mod agent_text;
pub mod agents;
pub mod analysis;
pub mod auth;
pub mod batches;
pub mod call_reads;
pub mod calls;
pub mod campaigns;
pub mod csv_download;
pub mod dashboard;
pub mod do_not_call;
pub mod error;
pub mod extract;
mod health;
pub mod media;
pub mod numbers;
pub mod openapi;
pub mod ratings;
pub mod recordings;
pub mod state;

use crate::carriers::store_wiring::{ServiceCallbackHost, StatusForwarder};
use crate::http::state::AppState;
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use std::sync::Arc;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;

/// The largest JSON body accepted.
pub const MAX_JSON_BODY: usize = 1024 * 1024;

/// `{message}`: the body of every error and of simple acknowledgements.
#[derive(Debug, Serialize, ToSchema)]
pub struct MessageBody {
    /// Human-readable text.
    pub message: String,
}

impl MessageBody {
    /// A JSON `{message}` body.
    pub fn json(message: impl Into<String>) -> Json<Self> {
        Json(Self {
            message: message.into(),
        })
    }
}

/// The API routes with their OpenAPI description, before auth and fallbacks.
pub fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(openapi::base_document())
        .merge(agents::router())
        .merge(agent_text::router())
        .merge(account::router())
        .merge(numbers::router())
        .merge(do_not_call::router())
        .merge(call_reads::router())
        .merge(dashboard::router())
        .merge(calls::router())
        .merge(recordings::router())
        .merge(batches::router())
        .merge(campaigns::router())
        .merge(ratings::router())
        .merge(analysis::router())
}

/// The full application router.
pub fn router(state: AppState) -> Router {
    let (api, mut doc) = api_routes().split_for_parts();
    // Health is outside the authenticated API but in its document.
    let (health, health_doc) = health::router().split_for_parts();
    doc.merge(health_doc);
    let api = api.route_layer(middleware::from_fn_with_state(
        state.clone(),
        auth::authenticate,
    ));
    // Unmatched paths: under /api they are authenticated first, then answered
    // 403 (outside the twelve mounts) or 404 (inside one).
    let unmatched = Router::new()
        .fallback(unmatched)
        .layer(middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate_api_paths,
        ))
        .with_state(state.clone());
    let request_id = header::HeaderName::from_static("x-request-id");
    Router::new()
        .merge(api)
        .merge(health)
        .merge(media::router())
        .merge(crate::carriers::callbacks::router(Arc::new(
            ServiceCallbackHost::new(
                state.store.clone(),
                Arc::clone(&state.credentials),
                state.engine.clone(),
                state.settings.public_url.clone(),
                state
                    .bus
                    .is_some()
                    .then(|| Arc::new(state.cluster.clone()) as Arc<dyn StatusForwarder>),
            ),
        )))
        .merge(crate::carriers::inbound::router(Arc::new(
            state.inbound.clone(),
        )))
        .merge(recordings::public_router())
        .merge(openapi::router(doc))
        .fallback_service(unmatched)
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
        .layer(middleware::from_fn(json_errors))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(TraceLayer::new_for_http().make_span_with(|req: &Request| {
            let id = req
                .headers()
                .get("x-request-id")
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default();
            tracing::info_span!("http", method = %req.method(), path = %req.uri().path(), request_id = %id)
        }))
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .with_state(state)
}

async fn unmatched(req: Request) -> Response {
    if req.uri().path().starts_with("/api/") || req.uri().path() == "/api" {
        auth::api_fallback(req).await
    } else {
        not_found(req).await
    }
}

async fn not_found(req: Request) -> Response {
    error::ApiError::NotFound(format!("Cannot {} {}", req.method(), req.uri().path()))
        .into_response()
}

/// Gives bodiless or plain-text error responses (405, 413, 415 from the
/// framework) the `{message}` JSON shape every client expects.
async fn json_errors(req: Request, next: Next) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let resp = next.run(req).await;
    let status = resp.status();
    if !(status.is_client_error() || status.is_server_error()) {
        return resp;
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if is_json {
        return resp;
    }
    let message = match status {
        StatusCode::METHOD_NOT_ALLOWED => format!("Method {method} is not allowed on {path}"),
        StatusCode::PAYLOAD_TOO_LARGE => "Request body is too large".to_string(),
        StatusCode::NOT_FOUND => format!("Cannot {method} {path}"),
        other => other
            .canonical_reason()
            .unwrap_or("Request failed")
            .to_string(),
    };
    let (mut parts, _) = resp.into_parts();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    let body = serde_json::json!({ "message": message }).to_string();
    Response::from_parts(parts, Body::from(body))
}
