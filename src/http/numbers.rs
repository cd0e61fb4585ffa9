//! `/api/numbers`: the workspace's rented numbers and, per number, the agent
//! that answers it and what a caller gets when every slot is taken.

use super::MessageBody;
use super::auth::Caller;
use super::batches::present;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiJson, ApiQuery};
use crate::calls::service::CallService;
use crate::config::Settings;
use crate::domain::OrgId;
use crate::domain::calling_hours::CallingHours;
use crate::domain::clock::{SharedClock, iso};
use crate::domain::inbound::{self, WhenBusy};
use crate::domain::json_object::object_only;
use crate::domain::page::{ListEnvelope, PageRequest};
use crate::http::state::AppState;
use crate::inbound::routing::{RoutingChange, RoutingError, parse_hold_message, set_routing};
use crate::inbound::service::InboundService;
use crate::inbound::workspace_rules::{self, RulesChange, RulesError};
use crate::store::attempt_caps::checked_cap;
use crate::store::{NumberRow, Store};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The numbers routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_numbers))
        .routes(routes!(get_number, patch_number))
        .routes(routes!(list_blocked_callers, block_caller))
        .routes(routes!(unblock_caller))
        .routes(routes!(get_inbound_settings, patch_inbound_settings))
        .routes(routes!(get_dialing_settings, patch_dialing_settings))
}

/// A number's inbound settings.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InboundView {
    /// Whether the number answers calls.
    pub enabled: bool,
    /// What a caller gets when every slot of the workspace is taken.
    pub when_busy: WhenBusy,
    /// How long a held caller waits for a slot (`whenBusy: queue`).
    pub queue_seconds: u32,
    /// What a held caller hears.
    pub hold_message: String,
}

/// A phone number the workspace rents.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NumberView {
    /// Number id.
    pub id: String,
    /// E.164.
    pub phone: String,
    /// Carrier.
    pub provider: String,
    /// active or suspended.
    pub status: String,
    /// Default caller ID.
    pub is_default: bool,
    /// Monthly rent.
    pub monthly_rent_paise: i64,
    /// First rented.
    pub rented_at: String,
    /// Next renewal from the wallet.
    pub renews_at: String,
    /// The agent that answers calls to the number, if any.
    pub inbound_agent_id: Option<String>,
    /// What to set as the number's voice (answer) URL in the carrier's console
    /// (with our signature where the carrier signs nothing); null where the
    /// carrier's inbound calls are not served, or its credential is not set.
    pub inbound_url: Option<String>,
    /// Inbound calling.
    pub inbound: InboundView,
}

impl NumberView {
    /// The view of a stored number, with its console URL.
    pub fn from_row(n: NumberRow, inbound_url: Option<String>) -> Self {
        let inbound = n.inbound();
        Self {
            inbound_url,
            id: n.id.to_string(),
            inbound_agent_id: n.inbound_agent_id.map(|a| a.to_string()),
            inbound: InboundView {
                enabled: inbound.enabled,
                when_busy: inbound.when_busy,
                queue_seconds: inbound.queue_seconds,
                hold_message: inbound.hold_message().to_string(),
            },
            phone: n.phone,
            provider: n.provider,
            status: n.status,
            is_default: n.is_default,
            monthly_rent_paise: n.monthly_rent_paise.get(),
            rented_at: iso(n.rented_at),
            renews_at: iso(n.renews_at),
        }
    }
}

/// `{rows}` of numbers.
#[derive(Debug, Serialize, ToSchema)]
pub struct NumberList {
    /// The numbers.
    pub rows: Vec<NumberView>,
}

/// List the workspace's phone numbers.
#[utoipa::path(get, path = "/api/numbers", tag = "numbers", responses((status = 200, body = NumberList)))]
async fn list_numbers(
    State(store): State<Store>,
    State(inbound): State<InboundService>,
    caller: Caller,
) -> ApiResult<Json<NumberList>> {
    let rows = store.numbers(caller.org_id).await?;
    let urls = inbound.inbound_urls(&rows).await;
    let views = rows
        .into_iter()
        .zip(urls)
        .map(|(row, url)| NumberView::from_row(row, url))
        .collect();
    Ok(Json(NumberList { rows: views }))
}

/// Read one of the workspace's numbers.
#[utoipa::path(get, path = "/api/numbers/{numberId}", tag = "numbers",
    params(("numberId" = String, Path, description = "Number id")),
    responses((status = 200, body = NumberView), (status = 404, body = MessageBody)))]
async fn get_number(
    State(store): State<Store>,
    State(inbound): State<InboundService>,
    caller: Caller,
    Path(number_id): Path<String>,
) -> ApiResult<Json<NumberView>> {
    let not_found = || ApiError::NotFound(format!("Number {number_id} not found"));
    let id = number_id.parse().map_err(|_| not_found())?;
    let row = store
        .number(caller.org_id, id)
        .await?
        .ok_or_else(not_found)?;
    let url = inbound.inbound_url(&row).await;
    Ok(Json(NumberView::from_row(row, url)))
}

/// `inbound` of a number's `PATCH` body; absent fields keep their value. Read
/// only from a JSON object: serde's derive would also take an array, by position.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InboundInput {
    /// Answer calls to the number (needs `inboundAgentId`).
    #[serde(default)]
    pub enabled: Option<bool>,
    /// `reject` answers busy when every slot is taken; `queue` holds the caller.
    #[serde(default)]
    pub when_busy: Option<WhenBusy>,
    /// Seconds a held caller waits for a slot, 5 to 600.
    #[serde(default)]
    #[schema(minimum = 5, maximum = 600)]
    pub queue_seconds: Option<i64>,
    /// What a held caller hears; null restores the default.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, max_length = 500)]
    pub hold_message: Option<Option<String>>,
}

/// `PATCH /api/numbers/{numberId}` body.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NumberPatch {
    /// The agent that answers calls to the number (an agent of the workspace); null takes it off.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, min_length = 1)]
    pub inbound_agent_id: Option<Option<String>>,
    /// Inbound calling settings.
    #[serde(default, deserialize_with = "object_only")]
    pub inbound: Option<InboundInput>,
}

impl NumberPatch {
    /// The change it asks for, its values parsed.
    fn into_change(self) -> Result<RoutingChange, ApiError> {
        let inbound = self.inbound.unwrap_or_default();
        let queue_seconds = inbound
            .queue_seconds
            .map(inbound::queue_seconds)
            .transpose()
            .map_err(|e| ApiError::BadRequest(format!("inbound.queueSeconds {e}")))?;
        let hold_message = match inbound.hold_message {
            None => None,
            Some(None) => Some(None),
            Some(Some(raw)) => Some(
                parse_hold_message(&raw)
                    .map_err(|e| ApiError::BadRequest(format!("inbound.holdMessage {e}")))?,
            ),
        };
        Ok(RoutingChange {
            agent_id: self.inbound_agent_id,
            enabled: inbound.enabled,
            when_busy: inbound.when_busy,
            queue_seconds,
            hold_message,
        })
    }
}

impl From<RulesError> for ApiError {
    fn from(err: RulesError) -> Self {
        match err {
            RulesError::Store(e) => Self::Store(e),
            other => Self::BadRequest(other.to_string()),
        }
    }
}

impl From<RoutingError> for ApiError {
    fn from(err: RoutingError) -> Self {
        match err {
            RoutingError::NumberNotFound(_) => Self::NotFound(err.to_string()),
            RoutingError::AgentNotFound(_) | RoutingError::EnabledWithoutAgent => {
                Self::BadRequest(err.to_string())
            }
            RoutingError::Store(e) => Self::Store(e),
        }
    }
}

/// Put an agent on a number and set how it answers calls.
#[utoipa::path(patch, path = "/api/numbers/{numberId}", tag = "numbers", request_body = NumberPatch,
    params(("numberId" = String, Path, description = "Number id")),
    responses((status = 200, body = NumberView), (status = 400, body = MessageBody), (status = 404, body = MessageBody)))]
async fn patch_number(
    State(store): State<Store>,
    State(inbound): State<InboundService>,
    caller: Caller,
    Path(number_id): Path<String>,
    ApiJson(patch): ApiJson<NumberPatch>,
) -> ApiResult<Json<NumberView>> {
    let change = patch.into_change()?;
    let row = set_routing(&store, caller.org_id, &number_id, change).await?;
    let url = inbound.inbound_url(&row).await;
    Ok(Json(NumberView::from_row(row, url)))
}

/// A caller the workspace refuses.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BlockedCallerView {
    /// The caller's number, E.164.
    pub phone: String,
    /// Why.
    pub reason: String,
    /// When blocked, ISO 8601.
    pub created_at: String,
}

impl BlockedCallerView {
    fn from_row(row: crate::store::inbound_callers::BlockedCallerRow) -> Self {
        Self {
            phone: row.phone,
            reason: row.reason,
            created_at: iso(row.created_at),
        }
    }
}

/// `POST /api/numbers/blocked-callers` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BlockCallerInput {
    /// The caller's number, E.164 (one libphonenumber calls valid).
    #[schema(pattern = r"^\+[1-9][0-9]{6,14}$")]
    pub phone: String,
    /// Why (optional, up to 200 characters).
    #[serde(default)]
    #[schema(max_length = 200)]
    pub reason: Option<String>,
}

/// Callers the workspace refuses, newest first.
#[utoipa::path(get, path = "/api/numbers/blocked-callers", tag = "numbers",
    params(PageRequest),
    responses((status = 200, body = ListEnvelope<BlockedCallerView>)))]
async fn list_blocked_callers(
    State(store): State<Store>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
) -> ApiResult<Json<ListEnvelope<BlockedCallerView>>> {
    let (rows, total) = store
        .blocked_callers(caller.org_id, i64::from(page.limit), page.offset())
        .await?;
    let rows = rows.into_iter().map(BlockedCallerView::from_row).collect();
    Ok(Json(ListEnvelope::new(rows, total, page)))
}

/// Refuse a caller on every number of the workspace (its call is rejected unanswered).
#[utoipa::path(post, path = "/api/numbers/blocked-callers", tag = "numbers", request_body = BlockCallerInput,
    responses((status = 201, body = BlockedCallerView), (status = 400, body = MessageBody)))]
async fn block_caller(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    ApiJson(input): ApiJson<BlockCallerInput>,
) -> ApiResult<(StatusCode, Json<BlockedCallerView>)> {
    let row = workspace_rules::block_caller(
        &store,
        caller.org_id,
        &input.phone,
        input.reason.as_deref().unwrap_or_default(),
        clock.now().timestamp_millis(),
    )
    .await?;
    Ok((StatusCode::CREATED, Json(BlockedCallerView::from_row(row))))
}

/// Let a blocked caller through again.
#[utoipa::path(delete, path = "/api/numbers/blocked-callers/{phone}", tag = "numbers",
    params(("phone" = String, Path, description = "The caller's number, E.164")),
    responses((status = 204, description = "Unblocked"), (status = 404, body = MessageBody)))]
async fn unblock_caller(
    State(store): State<Store>,
    caller: Caller,
    Path(phone): Path<String>,
) -> ApiResult<StatusCode> {
    let not_found = || ApiError::NotFound(format!("Caller {phone} is not blocked"));
    if workspace_rules::unblock_caller(&store, caller.org_id, &phone).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(not_found())
    }
}

/// The workspace's inbound rules that are not a number's.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InboundSettingsView {
    /// Calls one caller may place to the workspace's numbers in an hour; 0: no cap.
    pub caller_hourly_cap: i64,
    /// Asked for each ringing call which agent answers and with which
    /// variables (a signed POST of `{to, from, carrier, knownCaller}`, 2 s).
    pub routing_url: Option<String>,
    /// The secret routing requests are signed with (`x-service-signature`),
    /// shown only in the answer that first set a routing URL.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routing_secret: Option<String>,
}

/// `PATCH /api/numbers/inbound-settings` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InboundSettingsInput {
    /// Calls one caller may place in an hour, 0 to 1,000; 0: no cap.
    #[serde(default)]
    #[schema(minimum = 0, maximum = 1000)]
    pub caller_hourly_cap: Option<i64>,
    /// The routing URL (http or https, not a private address); null removes it.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, pattern = r"^https?://[^\s/?#]+([/?#]\S*)?$", max_length = 2000)]
    pub routing_url: Option<Option<String>>,
}

/// The workspace's inbound rules as stored (the secret not shown).
async fn inbound_settings(
    store: &Store,
    org_id: crate::domain::OrgId,
) -> ApiResult<InboundSettingsView> {
    Ok(InboundSettingsView {
        caller_hourly_cap: store.inbound_caller_hourly_cap(org_id).await?,
        routing_url: store.inbound_routing(org_id).await?.map(|(url, _)| url),
        routing_secret: None,
    })
}

/// Read the workspace's inbound rules.
#[utoipa::path(get, path = "/api/numbers/inbound-settings", tag = "numbers",
    responses((status = 200, body = InboundSettingsView)))]
async fn get_inbound_settings(
    State(store): State<Store>,
    caller: Caller,
) -> ApiResult<Json<InboundSettingsView>> {
    Ok(Json(inbound_settings(&store, caller.org_id).await?))
}

/// Change the workspace's inbound rules; absent fields keep their value.
#[utoipa::path(patch, path = "/api/numbers/inbound-settings", tag = "numbers", request_body = InboundSettingsInput,
    responses((status = 200, body = InboundSettingsView), (status = 400, body = MessageBody)))]
async fn patch_inbound_settings(
    State(store): State<Store>,
    State(settings): State<Arc<Settings>>,
    caller: Caller,
    ApiJson(input): ApiJson<InboundSettingsInput>,
) -> ApiResult<Json<InboundSettingsView>> {
    let fresh_secret = workspace_rules::set_rules(
        &store,
        &settings.webhook_allow_hosts,
        caller.org_id,
        RulesChange {
            caller_hourly_cap: input.caller_hourly_cap,
            routing_url: input.routing_url,
        },
    )
    .await?;
    let mut view = inbound_settings(&store, caller.org_id).await?;
    view.routing_secret = fresh_secret;
    Ok(Json(view))
}

/// The workspace's outbound dialing rules: the attempt caps and calling hours.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DialingSettingsView {
    /// Dial attempts per number per rolling 24 hours, any agent (default 3).
    pub attempt_cap_per_day: i64,
    /// Dial attempts per number per rolling 7 days, any agent (default 7).
    pub attempt_cap_per_week: i64,
    /// The workspace's calling hours, which agents and batches may override
    /// (default 09:00–21:00 every day in the callee's time zone).
    pub calling_hours: CallingHours,
    /// Whether `callingHours` is the server's default (the workspace set none).
    pub calling_hours_default: bool,
}

/// The workspace's dialing rules as stored, with the server's default hours.
async fn dialing_settings(
    store: &Store,
    org_id: OrgId,
    default_hours: CallingHours,
) -> ApiResult<DialingSettingsView> {
    let caps = store.attempt_caps(org_id).await?;
    let own = store.org_calling_hours(org_id).await?;
    Ok(DialingSettingsView {
        attempt_cap_per_day: caps.per_day,
        attempt_cap_per_week: caps.per_week,
        calling_hours_default: own.is_none(),
        calling_hours: own.unwrap_or(default_hours),
    })
}

/// `PATCH /api/numbers/dialing-settings` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DialingSettingsInput {
    /// Dial attempts per number per rolling 24 hours, 1 to 100.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub attempt_cap_per_day: Option<i64>,
    /// Dial attempts per number per rolling 7 days, 1 to 100.
    #[serde(default)]
    #[schema(minimum = 1, maximum = 100)]
    pub attempt_cap_per_week: Option<i64>,
    /// The workspace's calling hours; null returns to the server's default.
    #[serde(
        default,
        deserialize_with = "crate::domain::json_object::present_object"
    )]
    pub calling_hours: Option<Option<CallingHours>>,
}

/// Read the workspace's dialing rules (attempt caps, calling hours).
#[utoipa::path(get, path = "/api/numbers/dialing-settings", tag = "numbers",
    responses((status = 200, body = DialingSettingsView)))]
async fn get_dialing_settings(
    State(store): State<Store>,
    State(calls): State<CallService>,
    caller: Caller,
) -> ApiResult<Json<DialingSettingsView>> {
    Ok(Json(
        dialing_settings(&store, caller.org_id, calls.default_calling_hours).await?,
    ))
}

/// Change the workspace's dialing rules; absent fields keep their value.
#[utoipa::path(patch, path = "/api/numbers/dialing-settings", tag = "numbers", request_body = DialingSettingsInput,
    responses((status = 200, body = DialingSettingsView), (status = 400, body = MessageBody)))]
async fn patch_dialing_settings(
    State(store): State<Store>,
    State(calls): State<CallService>,
    caller: Caller,
    ApiJson(input): ApiJson<DialingSettingsInput>,
) -> ApiResult<Json<DialingSettingsView>> {
    let in_range = |field: &str, value: Option<i64>| {
        value
            .map(|v| checked_cap(field, v))
            .transpose()
            .map_err(ApiError::BadRequest)
    };
    let per_day = in_range("attemptCapPerDay", input.attempt_cap_per_day)?;
    let per_week = in_range("attemptCapPerWeek", input.attempt_cap_per_week)?;
    let mut caps = store.attempt_caps(caller.org_id).await?;
    caps.per_day = per_day.unwrap_or(caps.per_day);
    caps.per_week = per_week.unwrap_or(caps.per_week);
    store.set_attempt_caps(caller.org_id, caps).await?;
    if let Some(hours) = input.calling_hours {
        store
            .set_org_calling_hours(caller.org_id, hours.as_ref())
            .await?;
    }
    Ok(Json(
        dialing_settings(&store, caller.org_id, calls.default_calling_hours).await?,
    ))
}
