//! Post-call analysis over HTTP: the `analysis` object every call read
//! carries, a call's re-run (optionally with a plan to try, not saved), and a
//! batch's re-run in the background with its progress.

use super::MessageBody;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::parse_json;
use crate::batches::BatchKind;
use crate::batches::service;
use crate::batches::service::BatchService;
use crate::domain::CallId;
use crate::domain::analysis::AnalysisPlan;
use crate::domain::clock::SharedClock;
use crate::http::state::AppState;
use crate::postcall::analysis::view::AnalysisView;
use crate::postcall::service::PostcallService;
use crate::store::Store;
use crate::store::analyses::AnalysisProgress;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The analysis routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(rerun_call_analysis))
        .routes(routes!(rerun_batch_analysis, batch_analysis_progress))
}

/// `POST /api/calls/{callId}/analysis` body: an optional plan to try instead of the agent's.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RerunBody {
    /// A plan to analyze this call with instead of its agent's; not saved on the agent.
    pub plan: Option<AnalysisPlan>,
}

fn call_not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Call {id} not found"))
}

/// Re-run a call's analysis now, with its agent's plan or the plan in the body, and answer the result.
#[utoipa::path(post, path = "/api/calls/{callId}/analysis", tag = "calls",
    params(("callId" = String, Path, description = "Call id")),
    request_body(content = Option<RerunBody>, description = "Optional: a plan to try instead of the agent's"),
    responses((status = 200, body = AnalysisView), (status = 400, body = MessageBody),
        (status = 404, body = MessageBody), (status = 409, body = MessageBody)))]
async fn rerun_call_analysis(
    State(store): State<Store>,
    State(postcall): State<PostcallService>,
    caller: Caller,
    Path(call_id): Path<String>,
    body: Bytes,
) -> ApiResult<Json<AnalysisView>> {
    let id: CallId = call_id.parse().map_err(|_| call_not_found(&call_id))?;
    let body: RerunBody = if body.iter().all(u8::is_ascii_whitespace) {
        RerunBody::default()
    } else {
        parse_json(&body)?
    };
    if let Some(plan) = &body.plan {
        plan.validate("plan")
            .map_err(|e| ApiError::BadRequest(e.to_string()))?;
    }
    let detail = store
        .call_detail(caller.org_id, id)
        .await?
        .ok_or_else(|| call_not_found(&call_id))?;
    if detail.call.ended_at.is_none() {
        return Err(ApiError::conflict(format!(
            "Call {call_id} has not ended; it is analyzed when it does"
        )));
    }
    let claim = postcall
        .take_analysis_now(caller.org_id, id, body.plan.as_ref())
        .await?
        .ok_or_else(|| call_not_found(&call_id))?;
    postcall.analyze_claimed(&claim).await?;
    let row = store
        .analysis(caller.org_id, id)
        .await?
        .ok_or_else(|| call_not_found(&call_id))?;
    Ok(Json(AnalysisView::from_row(&row)?))
}

/// How far a batch's analyses have got.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisProgressView {
    /// Calls re-queued by this request (only in the re-run's answer).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued: Option<u64>,
    /// Analyses of the batch's calls.
    pub total: i64,
    /// Waiting or running.
    pub pending: i64,
    /// Produced.
    pub done: i64,
    /// Given up.
    pub failed: i64,
    /// Calls that never connected.
    pub skipped: i64,
    /// Share settled (done, failed or skipped), 0–100.
    pub percent: f64,
}

impl AnalysisProgressView {
    fn new(p: AnalysisProgress, queued: Option<u64>) -> Self {
        let settled = p.total - p.pending;
        let percent = if p.total == 0 {
            100.0
        } else {
            (settled as f64 * 1000.0 / p.total as f64).round() / 10.0
        };
        Self {
            queued,
            total: p.total,
            pending: p.pending,
            done: p.done,
            failed: p.failed,
            skipped: p.skipped,
            percent,
        }
    }
}

/// Re-run the analysis of every connected call of a batch in the background; poll the GET for progress.
#[utoipa::path(post, path = "/api/batches/{batchId}/analysis", tag = "batches",
    params(("batchId" = String, Path, description = "Batch id")),
    responses((status = 202, body = AnalysisProgressView), (status = 404, body = MessageBody)))]
async fn rerun_batch_analysis(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<(StatusCode, Json<AnalysisProgressView>)> {
    let batch_id = service::parse_id(BatchKind::Batch, &id)?;
    batches
        .load(caller.org_id, BatchKind::Batch, batch_id)
        .await?;
    let now = clock.now().timestamp_millis();
    let queued = store
        .requeue_batch_analyses(caller.org_id, batch_id, now)
        .await?;
    let progress = store
        .batch_analysis_progress(caller.org_id, batch_id)
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(AnalysisProgressView::new(progress, Some(queued))),
    ))
}

/// A batch's analysis progress: counts by status and the share settled.
#[utoipa::path(get, path = "/api/batches/{batchId}/analysis", tag = "batches",
    params(("batchId" = String, Path, description = "Batch id")),
    responses((status = 200, body = AnalysisProgressView), (status = 404, body = MessageBody)))]
async fn batch_analysis_progress(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<AnalysisProgressView>> {
    let batch_id = service::parse_id(BatchKind::Batch, &id)?;
    batches
        .load(caller.org_id, BatchKind::Batch, batch_id)
        .await?;
    let progress = store
        .batch_analysis_progress(caller.org_id, batch_id)
        .await?;
    Ok(Json(AnalysisProgressView::new(progress, None)))
}
