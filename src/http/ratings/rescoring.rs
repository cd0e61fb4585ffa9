//! Scoring again: one call now (rate-now, regenerate, answered when done),
//! many calls back into the queue (bulk-regenerate), and pending and failed
//! ratings re-queued after the templates are re-read (reload).

use super::query::{call_id_param, optional_bound, parse_agent};
use crate::domain::CallId;
use crate::domain::clock::SharedClock;
use crate::http::MessageBody;
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::ApiJson;
use crate::postcall::ratings::regenerate::RescoreError;
use crate::postcall::ratings::template::effective_template;
use crate::postcall::service::PostcallService;
use crate::store::RatingFilter;
use crate::store::Store;
use axum::Json;
use axum::extract::{Path, State};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Call ids one bulk request may name.
const MAX_BULK_IDS: usize = 1_000;

/// `{message, queued}` of the re-queueing operations.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueuedBody {
    /// What was done.
    pub message: String,
    /// Ratings put back in the queue.
    pub queued: u64,
}

/// Body of `POST /api/ratings/bulk-regenerate`; at least one field.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BulkRegenerateRequest {
    /// These calls' ratings.
    pub call_ids: Option<Vec<String>>,
    /// Ratings of this agent's calls.
    pub agent_id: Option<String>,
    /// Calls from this date or instant.
    pub from: Option<String>,
    /// Calls up to this date (inclusive) or before this instant.
    pub to: Option<String>,
}

impl From<RescoreError> for ApiError {
    fn from(err: RescoreError) -> Self {
        use RescoreError as E;
        match err {
            E::Store(err) => Self::Store(err),
            E::CallNotFound(_) | E::NoRating(_) => Self::NotFound(err.to_string()),
            E::NotEnded { .. } | E::NoConversation(_) | E::Stale(_) => {
                Self::conflict(err.to_string())
            }
            E::Failed { .. } => Self::BadGateway(err.to_string()),
        }
    }
}

/// Scores a call now instead of waiting for the queue; answers when done.
/// An already-rated call is left as it is (use regenerate to replace it).
#[utoipa::path(post, path = "/api/ratings/{callId}/rate-now", tag = "ratings",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody),
        (status = 409, body = MessageBody), (status = 502, body = MessageBody)))]
pub(super) async fn rate_now(
    State(store): State<Store>,
    State(postcall): State<PostcallService>,
    caller: Caller,
    Path(raw): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    let call_id = call_id_param(&raw)?;
    let org = caller.org_id;
    match store.rating(org, call_id).await? {
        Some(row) if row.status == "done" => {
            return Ok(MessageBody::json(format!(
                "Call {call_id} is already rated (overall {}); use regenerate to score it again",
                row.overall.unwrap_or_default()
            )));
        }
        Some(_) => {}
        None => postcall.check_rateable(org, call_id).await?,
    }
    let overall = postcall.rate_synchronously(org, call_id).await?;
    Ok(MessageBody::json(format!(
        "Rated call {call_id}: overall {overall}"
    )))
}

/// Scores a rated call again with its agent's current template and LLM; the
/// new scorecard replaces the old one (which stays readable meanwhile).
#[utoipa::path(post, path = "/api/ratings/{callId}/regenerate", tag = "ratings",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody),
        (status = 502, body = MessageBody)))]
pub(super) async fn regenerate(
    State(postcall): State<PostcallService>,
    caller: Caller,
    Path(raw): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    let call_id = call_id_param(&raw)?;
    let overall = postcall.regenerate(caller.org_id, call_id).await?;
    Ok(MessageBody::json(format!(
        "Regenerated the scorecard of call {call_id}: overall {overall}"
    )))
}

/// Puts many ratings back in the queue: the named `callIds`, or those whose
/// calls match `agentId`/`from`/`to`. The worker re-scores them.
#[utoipa::path(post, path = "/api/ratings/bulk-regenerate", tag = "ratings",
    request_body = BulkRegenerateRequest,
    responses((status = 200, body = QueuedBody), (status = 400, body = MessageBody)))]
pub(super) async fn bulk_regenerate(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    ApiJson(body): ApiJson<BulkRegenerateRequest>,
) -> ApiResult<Json<QueuedBody>> {
    let org = caller.org_id;
    let now = clock.now().timestamp_millis();
    let queued = if let Some(ids) = &body.call_ids {
        if body.agent_id.is_some() || body.from.is_some() || body.to.is_some() {
            return Err(ApiError::BadRequest(
                "callIds cannot be combined with agentId, from or to".into(),
            ));
        }
        if ids.is_empty() || ids.len() > MAX_BULK_IDS {
            return Err(ApiError::BadRequest(format!(
                "callIds must hold 1 to {MAX_BULK_IDS} call ids"
            )));
        }
        let mut parsed = Vec::with_capacity(ids.len());
        for (i, id) in ids.iter().enumerate() {
            let id: CallId = id
                .parse()
                .map_err(|_| ApiError::BadRequest(format!("callIds[{i}] is not a call id")))?;
            parsed.push(id);
        }
        store.requeue_rating_ids(org, &parsed, now).await?
    } else {
        let filter = RatingFilter {
            status: "all".into(),
            agent_id: parse_agent(body.agent_id.as_deref()),
            from_ms: optional_bound("from", body.from.as_deref(), false)?,
            to_ms: optional_bound("to", body.to.as_deref(), true)?,
            min_score: None,
            max_score: None,
        };
        if filter.agent_id.is_none() && filter.from_ms.is_none() && filter.to_ms.is_none() {
            return Err(ApiError::BadRequest(
                "give callIds, or at least one of agentId, from and to".into(),
            ));
        }
        store.requeue_ratings(org, &filter, now).await?
    };
    Ok(Json(QueuedBody {
        message: format!("Queued {queued} rating(s) for re-scoring"),
        queued,
    }))
}

/// Re-reads the rating templates of the workspace's agents and puts pending
/// and failed ratings back in the queue at once (failed ones get a fresh
/// set of attempts).
#[utoipa::path(post, path = "/api/ratings/reload", tag = "ratings",
    responses((status = 200, body = QueuedBody)))]
pub(super) async fn reload(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
) -> ApiResult<Json<QueuedBody>> {
    let org = caller.org_id;
    let mut own = 0;
    let mut default = 0;
    for agent_id in store.rated_agent_ids(org).await? {
        let spec = store
            .agent(org, agent_id)
            .await?
            .map(|a| a.spec())
            .transpose()?;
        let agent_template = spec.as_ref().and_then(|s| s.rating_template.as_ref());
        if effective_template(agent_template) == effective_template(None) {
            default += 1;
        } else {
            own += 1;
        }
    }
    let now = clock.now().timestamp_millis();
    let mut queued = 0;
    for status in ["pending", "failed"] {
        let filter = RatingFilter {
            status: status.into(),
            ..RatingFilter::default()
        };
        queued += store.requeue_ratings(org, &filter, now).await?;
    }
    Ok(Json(QueuedBody {
        message: format!(
            "Re-read the templates of {} agent(s) ({own} with their own, {default} on the default); re-queued {queued} pending or failed rating(s)",
            own + default
        ),
        queued,
    }))
}
