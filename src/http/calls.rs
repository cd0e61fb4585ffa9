//! Placing and canceling calls: `POST /api/calls`, `POST /api/agents/{id}/test-call`,
//! `POST /api/alert`, `POST /api/calls/{id}/cancel`.

use super::MessageBody;
use super::agents::AgentView;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiJson;
use crate::calls::calling_hours;
use crate::calls::ledger::StoreLedger;
use crate::calls::media_stream::CallEngine;
use crate::calls::placement::{self, CallSource, CallTarget};
use crate::calls::service::CallService;
use crate::calls::test_call::TestCallError;
use crate::cluster::service::ClusterService;
use crate::domain::PhoneNumber;
use crate::domain::calling_hours::WindowCheck;
use crate::domain::clock::SharedClock;
use crate::domain::do_not_call::SKIP_REASON;
use crate::domain::hours_override::HoursOverride;
use crate::domain::ids::CallId;
use crate::domain::text::{Line, Variables};
use crate::http::state::AppState;
use crate::store::Store;
use crate::store::attempt_caps::SKIP_REASON as ATTEMPT_CAP;
use crate::webhooks::subscriptions::{self, RedeliverError};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::HashSet;
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::{CallEnd, CallLedger, CallStatus, CancelOutcome};

/// Most numbers one alert may dial.
pub const MAX_ALERT_PHONES: usize = 10_000;

/// The call-placing routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(place_call))
        .routes(routes!(test_call))
        .routes(routes!(alert))
        .routes(routes!(cancel_call))
        .routes(routes!(redeliver_webhook))
}

/// `POST /api/calls` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlaceCallBody {
    /// Agent that runs the call.
    pub agent_id: String,
    /// E.164 number to dial.
    #[schema(pattern = r"^\+[1-9][0-9]{6,14}$")]
    pub to: String,
    /// Name of the person called.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<Line<200>>,
    /// Fills the agent's placeholders.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<Variables>,
    /// Caller ID override; must be a number the workspace owns.
    #[serde(default)]
    pub from_number: Option<String>,
    /// false places the call even outside the callee's calling hours, when the
    /// agent allows it (`compliance.allowCallingHoursOverride`); the call
    /// records the override (`callingHoursOverride: request`). Default true.
    #[serde(default)]
    pub respect_calling_hours: Option<bool>,
}

/// A queued call.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlacedCall {
    /// The new call's id.
    pub call_id: String,
    /// Raw status: queued.
    pub status: String,
}

/// Place one call from a backend.
#[utoipa::path(post, path = "/api/calls", tag = "calls", request_body = PlaceCallBody,
    responses((status = 201, body = PlacedCall), (status = 400, body = MessageBody), (status = 402, body = MessageBody),
        (status = 403, body = MessageBody), (status = 404, body = MessageBody)))]
async fn place_call(
    State(calls): State<CallService>,
    caller: Caller,
    ApiJson(body): ApiJson<PlaceCallBody>,
) -> ApiResult<(StatusCode, Json<PlacedCall>)> {
    let phone =
        PhoneNumber::parse(&body.to).map_err(|e| ApiError::BadRequest(format!("to {e}")))?;
    let agent_id = placement::agent_id(&body.agent_id)?;
    let plan = calls
        .plan(caller.org_id, agent_id, body.from_number.as_deref())
        .await?;
    calls.check_do_not_call(caller.org_id, &phone).await?;
    let calling_hours_override =
        calls.check_single_call(&plan, &phone, body.respect_calling_hours.unwrap_or(true))?;
    let (variables, email) = body
        .variables
        .map(Variables::into_parts)
        .unwrap_or_default();
    let name = placement::target_name(&variables, body.name.map(Line::into_string));
    let placed = calls
        .place(
            &plan,
            vec![CallTarget {
                phone,
                name,
                email,
                variables,
                calling_hours_override,
            }],
            CallSource::Api,
        )
        .await?;
    let call_id = placed
        .single()?
        .map(|id| id.to_string())
        .ok_or_else(|| ApiError::Internal(anyhow::anyhow!("no call was placed")))?;
    Ok((
        StatusCode::CREATED,
        Json(PlacedCall {
            call_id,
            status: "queued".into(),
        }),
    ))
}

/// `POST /api/agents/{agentId}/test-call` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestCallBody {
    /// E.164 number to ring.
    #[schema(pattern = r"^\+[1-9][0-9]{6,14}$")]
    pub phone_number: String,
    /// Fills the agent's placeholders.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<Variables>,
}

/// The agent, with the test call's id.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TestCallResponse {
    /// The new call's id.
    pub call_id: String,
    /// Raw status: queued.
    pub call_status: String,
    /// The agent placing it.
    #[serde(flatten)]
    pub agent: AgentView,
}

impl From<TestCallError> for ApiError {
    fn from(err: TestCallError) -> Self {
        match err {
            TestCallError::InFlight { live, .. } => Self::Conflict {
                message: err.to_string(),
                extra: Some(json!({ "callId": live })),
            },
            TestCallError::Placement(err) => err.into(),
            TestCallError::NotPlaced => Self::Internal(anyhow::Error::new(err)),
        }
    }
}

/// Ring one number with an agent.
#[utoipa::path(post, path = "/api/agents/{agentId}/test-call", tag = "agents", request_body = TestCallBody,
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 201, body = TestCallResponse), (status = 400, body = MessageBody), (status = 402, body = MessageBody),
        (status = 403, body = MessageBody), (status = 404, body = MessageBody), (status = 409, body = MessageBody)))]
async fn test_call(
    State(calls): State<CallService>,
    caller: Caller,
    Path(agent_id): Path<String>,
    ApiJson(body): ApiJson<TestCallBody>,
) -> ApiResult<(StatusCode, Json<TestCallResponse>)> {
    let phone = PhoneNumber::parse(&body.phone_number)
        .map_err(|e| ApiError::BadRequest(format!("phoneNumber {e}")))?;
    let (call_id, plan) = calls
        .place_test_call(caller.org_id, &agent_id, phone, body.variables)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(TestCallResponse {
            call_id: call_id.to_string(),
            call_status: "queued".into(),
            agent: AgentView::from_row(&plan.agent)?,
        }),
    ))
}

/// `POST /api/alert` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AlertBody {
    /// Agent that places the calls.
    pub agent_id: String,
    /// E.164 strings, or `{name?, phone}` objects.
    #[schema(value_type = Vec<Object>, min_items = 1)]
    pub phones: Vec<Value>,
    /// Caller ID override.
    #[serde(default)]
    pub from_number: Option<String>,
    /// Applied to every call.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<Variables>,
}

/// One dialed number of an alert.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertCall {
    /// Call id.
    pub call_id: String,
    /// E.164 number.
    pub phone: String,
}

/// A valid number of an alert that was not dialed.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertSkip {
    /// E.164 number.
    pub phone: String,
    /// The rule that skipped it: `do-not-call`, `attempt-cap` or `calling-hours`.
    pub skip_reason: String,
    /// What to do about it.
    pub message: String,
}

/// The alert's result.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AlertResponse {
    /// Summary.
    pub message: String,
    /// One call per distinct valid number that may be dialed.
    pub calls: Vec<AlertCall>,
    /// Calls created.
    pub dialed: usize,
    /// Numbers skipped: malformed or placeholder ones, and those of `skippedNumbers`.
    pub skipped: usize,
    /// Each valid number that was not dialed, with the rule that skipped it.
    pub skipped_numbers: Vec<AlertSkip>,
}

/// Ring many numbers at once.
#[utoipa::path(post, path = "/api/alert", tag = "alert", request_body = AlertBody,
    responses((status = 200, body = AlertResponse), (status = 400, body = MessageBody), (status = 402, body = MessageBody),
        (status = 403, body = MessageBody), (status = 404, body = MessageBody)))]
async fn alert(
    State(calls): State<CallService>,
    caller: Caller,
    ApiJson(body): ApiJson<AlertBody>,
) -> ApiResult<Json<AlertResponse>> {
    if body.phones.is_empty() {
        return Err(ApiError::BadRequest(
            "phones must hold at least one number".into(),
        ));
    }
    if body.phones.len() > MAX_ALERT_PHONES {
        return Err(ApiError::BadRequest(format!(
            "phones holds {} numbers; at most {MAX_ALERT_PHONES} are allowed",
            body.phones.len()
        )));
    }
    let (variables, email) = body
        .variables
        .map(Variables::into_parts)
        .unwrap_or_default();
    let mut seen = HashSet::new();
    let mut targets = Vec::new();
    let mut skipped = 0;
    for entry in &body.phones {
        let (raw, name) = match entry {
            Value::String(s) => (Some(s.as_str()), None),
            Value::Object(o) => (
                o.get("phone").and_then(Value::as_str),
                o.get("name").and_then(Value::as_str),
            ),
            _ => (None, None),
        };
        let Some(phone) = raw.and_then(|r| PhoneNumber::parse(r).ok()) else {
            skipped += 1;
            continue;
        };
        if !seen.insert(phone.clone()) {
            continue;
        }
        targets.push(CallTarget {
            name: placement::target_name(&variables, name.map(str::to_string)),
            phone,
            email: email.clone(),
            variables: variables.clone(),
            calling_hours_override: None,
        });
    }
    if targets.is_empty() {
        return Err(ApiError::BadRequest(
            "phones holds no valid E.164 number; every entry was malformed or a placeholder".into(),
        ));
    }
    let agent_id = placement::agent_id(&body.agent_id)?;
    let plan = calls
        .plan(caller.org_id, agent_id, body.from_number.as_deref())
        .await?;
    let listed = calls
        .listed_numbers(caller.org_id, targets.iter().map(|t| t.phone.as_str()))
        .await?;
    let mut skipped_numbers = Vec::new();
    targets.retain(|t| {
        if listed.contains(t.phone.as_str()) {
            skipped_numbers.push(AlertSkip {
                phone: t.phone.as_str().to_string(),
                skip_reason: SKIP_REASON.to_string(),
                message: format!("{} is on the workspace's do-not-call list", t.phone),
            });
            false
        } else {
            true
        }
    });
    // Calling hours: outside them an emergency agent (`bypassCallingHours`)
    // dials anyway and each call records it; any other agent skips the number.
    let hours = calls.calling_hours_for(&plan.org, &plan.spec, None)?;
    let now = calls.clock.now();
    let bypass = plan.spec.compliance.bypass_calling_hours;
    targets.retain_mut(|t| match hours.check(t.phone.as_str(), now) {
        WindowCheck::Open => true,
        _ if bypass => {
            t.calling_hours_override = Some(HoursOverride::EmergencyAlert);
            true
        }
        closed => {
            skipped_numbers.push(AlertSkip {
                phone: t.phone.as_str().to_string(),
                skip_reason: calling_hours::RULE.to_string(),
                message: calling_hours::closed_message(t.phone.as_str(), &hours, closed),
            });
            false
        }
    });
    skipped += skipped_numbers.len();
    let placed = if targets.is_empty() {
        Vec::new()
    } else {
        let placed = calls.place(&plan, targets, CallSource::Alert).await?;
        for (phone, hit) in placed.capped {
            skipped_numbers.push(AlertSkip {
                message: hit.message(&phone),
                phone,
                skip_reason: ATTEMPT_CAP.to_string(),
            });
            skipped += 1;
        }
        placed.calls
    };
    let dialed = placed.len();
    Ok(Json(AlertResponse {
        message: format!("Alert queued: {dialed} call(s), {skipped} number(s) skipped"),
        calls: placed
            .into_iter()
            .map(|(call_id, phone)| AlertCall {
                call_id: call_id.to_string(),
                phone,
            })
            .collect(),
        dialed,
        skipped,
        skipped_numbers,
    }))
}

/// Cancel a queued call or hang up a live one.
#[utoipa::path(post, path = "/api/calls/{callId}/cancel", tag = "calls",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody), (status = 409, body = MessageBody)))]
async fn cancel_call(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(engine): State<CallEngine>,
    State(ledger): State<Arc<StoreLedger>>,
    State(cluster): State<ClusterService>,
    caller: Caller,
    Path(call_id): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    let not_found = || ApiError::NotFound(format!("Call {call_id} not found"));
    let id: CallId = call_id.parse().map_err(|_| not_found())?;
    let org = caller.org_id;
    let status = store.call_status(org, id).await?.ok_or_else(not_found)?;
    if CallStatus::parse(&status).is_some_and(CallStatus::is_terminal) {
        return Err(ApiError::conflict(format!(
            "Call {call_id} has already ended ({status})"
        )));
    }
    match engine
        .cancel(org.into(), id.into())
        .await
        .map_err(|e| ApiError::Internal(e.into()))?
    {
        CancelOutcome::Dequeued => Ok(MessageBody::json("Call canceled")),
        CancelOutcome::HangingUp => Ok(MessageBody::json("Call is being hung up")),
        CancelOutcome::NotFound
            if matches!(
                cluster.forward_cancel(id, &org.to_string()).await?,
                crate::cluster::call_orders::Forwarded::ToOwner(_)
            ) =>
        {
            // Another node holds the call: it hangs it up.
            Ok(MessageBody::json("Call is being hung up"))
        }
        CancelOutcome::NotFound => {
            // Not held by the engine: a scheduled retry or a call awaiting dispatch.
            let end = CallEnd {
                call_id: id.into(),
                status: CallStatus::Canceled,
                ended_reason: EndedReason::Canceled,
                answered_at: None,
                ended_at: clock.now().timestamp_millis(),
            };
            ledger
                .finish(end)
                .await
                .map_err(|e| ApiError::Internal(anyhow::anyhow!(e)))?;
            Ok(MessageBody::json("Call canceled"))
        }
    }
}

/// `POST /api/calls/{callId}/redeliver-webhook` answer: what was queued again.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedeliverBody {
    /// Human-readable summary, e.g. `Queued 2 event(s): call.completed for 1 subscription(s), …`.
    pub message: String,
    /// Every event of the call, in the order it was first produced, with how
    /// many subscriptions it was queued for (0 when none is active and covers it).
    pub queued: Vec<RedeliveredEvent>,
}

/// One event queued again.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedeliveredEvent {
    /// `call.completed`, `call.analyzed` or `rating.completed`.
    pub event: String,
    /// The event's original id: receivers that saw it already dedupe on it.
    pub event_id: String,
    /// Active subscriptions covering the event that it was queued for.
    pub subscriptions: u64,
}

/// Re-send every event of an ended call (`call.completed`, and the
/// `call.analyzed` and `rating.completed` follow-ups it produced), each with
/// its original `eventId`, to every active subscription that covers it,
/// through the durable outbox.
#[utoipa::path(post, path = "/api/calls/{callId}/redeliver-webhook", tag = "calls",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = RedeliverBody), (status = 404, body = MessageBody), (status = 409, body = MessageBody)))]
async fn redeliver_webhook(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    Path(call_id): Path<String>,
) -> ApiResult<Json<RedeliverBody>> {
    let queued = subscriptions::redeliver_call(
        &store,
        caller.org_id,
        &call_id,
        clock.now().timestamp_millis(),
    )
    .await
    .map_err(|e| match e {
        RedeliverError::NotFound(_) => ApiError::NotFound(e.to_string()),
        RedeliverError::NotEnded { .. } => ApiError::conflict(e.to_string()),
        RedeliverError::Store(store) => store.into(),
    })?;
    let parts: Vec<String> = queued
        .iter()
        .map(|q| format!("{} for {} subscription(s)", q.event, q.subscriptions))
        .collect();
    Ok(Json(RedeliverBody {
        message: format!("Queued {} event(s): {}", queued.len(), parts.join(", ")),
        queued: queued
            .into_iter()
            .map(|q| RedeliveredEvent {
                event: q.event,
                event_id: q.event_id,
                subscriptions: q.subscriptions,
            })
            .collect(),
    }))
}
