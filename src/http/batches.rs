//! `/api/batches`: create (also the one-step create-fill-start form), add
//! items, start, pause, resume, stop, retry, list, read, items, rename or
//! reschedule, delete, and the streamed CSV export of results. The views and
//! helpers here serve `/api/campaigns` too.

use super::MessageBody;
use super::auth::Caller;
use super::call_reads::{AnalysisColumns, display_status, merged_object};
use super::csv_download::{CsvExport, csv_export};
use super::error::{ApiError, ApiResult};
use super::extract::{ApiJson, ApiQuery, trimmed};
use crate::batches::service::BatchService;
use crate::batches::service::{self, AddReport, ItemInput, NewBatchInput};
use crate::batches::{BatchAction, BatchKind, Progress};
use crate::calls::placement;
use crate::calls::service::CallService;
use crate::domain::calling_hours::CallingHours;
use crate::domain::clock::SharedClock;
use crate::domain::clock::iso;
use crate::domain::page::{ListEnvelope, PageRequest};
use crate::domain::text::{EMAIL_VARIABLE, Line, Variables};
use crate::domain::{BatchId, Email, OrgId};
use crate::http::state::AppState;
use crate::postcall::analysis::view::stored_verdict;
use crate::store::batches::{BatchRow, ItemResultRow, ItemRow};
use crate::store::{Store, StoreError, StoreResult, decode_json};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The batch routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_batches, create_batch))
        .routes(routes!(get_batch, update_batch, delete_batch))
        .routes(routes!(list_items, add_items))
        .routes(routes!(start_batch))
        .routes(routes!(pause_batch))
        .routes(routes!(resume_batch))
        .routes(routes!(stop_batch))
        .routes(routes!(retry_batch))
        .routes(routes!(export_batch))
}

/// A batch or campaign with its progress.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct BatchView {
    /// Id.
    pub id: String,
    /// Name.
    pub name: String,
    /// Agent placing the calls.
    pub agent_id: String,
    /// Its name.
    pub agent_name: String,
    /// draft, scheduled, running, paused, completed or stopped.
    pub status: String,
    /// Items, skipped ones included.
    pub total: i64,
    /// Items whose latest call completed.
    pub completed: i64,
    /// Items whose latest call failed, went unanswered, was busy, canceled or reached voicemail; skipped and dropped items.
    pub failed: i64,
    /// Items waiting to be dialed or on a live call.
    pub pending: i64,
    /// Of pending: items on a live call.
    pub live: i64,
    /// Of pending: items waiting for their calling hours to open.
    pub waiting: i64,
    /// Of failed: malformed or repeated numbers never dialed.
    pub skipped: i64,
    /// Of failed: unanswered.
    pub no_answer: i64,
    /// Of failed: busy.
    pub busy: i64,
    /// Of failed: canceled, or dropped by a stop.
    pub canceled: i64,
    /// Caller ID override.
    pub from_number: Option<String>,
    /// Automatic start, ISO 8601.
    pub scheduled_start_at: Option<String>,
    /// First start, ISO 8601.
    pub started_at: Option<String>,
    /// Completion or stop, ISO 8601.
    pub finished_at: Option<String>,
    /// Why the service changed the status by itself (e.g. paused: wallet empty).
    pub status_reason: Option<String>,
    /// Creation, ISO 8601.
    pub created_at: String,
    /// Last change, ISO 8601.
    pub updated_at: String,
    /// The batch's own calling hours; null: the agent's, else the workspace's.
    pub calling_hours: Option<CallingHours>,
}

impl BatchView {
    /// The view of a stored batch with its progress.
    pub fn new(row: BatchRow, p: Progress) -> Result<Self, StoreError> {
        Ok(Self {
            calling_hours: row.calling_hours()?,
            id: row.id.to_string(),
            name: row.name,
            agent_id: row.agent_id.to_string(),
            agent_name: row.agent_name,
            status: row.status,
            total: p.total,
            completed: p.completed,
            failed: p.failed,
            pending: p.pending,
            live: p.live,
            waiting: p.waiting,
            skipped: p.skipped,
            no_answer: p.no_answer,
            busy: p.busy,
            canceled: p.canceled,
            from_number: row.from_number,
            scheduled_start_at: row.scheduled_start_at.map(iso),
            started_at: row.started_at.map(iso),
            finished_at: row.finished_at.map(iso),
            status_reason: row.status_reason,
            created_at: iso(row.created_at),
            updated_at: iso(row.updated_at),
        })
    }
}

/// One item (batch) or student (campaign) with its latest call.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ItemView {
    /// Position in the list, from 1.
    pub index: i64,
    /// Name.
    pub name: String,
    /// Number (as given when it was skipped).
    pub phone: String,
    /// Variables the call is placed with.
    #[schema(value_type = Object)]
    pub variables: Value,
    /// Raw status: pending, waiting (for its calling hours), queued, ringing,
    /// in-progress, a call's terminal status, or skipped.
    pub status: String,
    /// Display form of the status.
    pub display_status: String,
    /// Latest call, once dialed.
    pub call_id: Option<String>,
    /// Calls made for this item.
    pub attempts: i64,
    /// Why it was skipped or dropped.
    pub reason: Option<String>,
    /// The rule that skipped it: `do-not-call`, `attempt-cap` or `calling-hours`; null otherwise.
    pub skip_reason: Option<String>,
    /// While waiting: when its calling hours open, ISO 8601.
    pub next_attempt_at: Option<String>,
    /// The rule that last deferred it (`calling-hours`), kept once it is dialed.
    pub wait_reason: Option<String>,
}

impl ItemView {
    /// The view of a stored item of the batch `batch_id`.
    pub fn new(batch_id: BatchId, row: ItemRow) -> Result<Self, StoreError> {
        let display = match row.status.as_str() {
            "pending" => "Pending".to_string(),
            "waiting" => "Waiting for calling hours".to_string(),
            "skipped" => "Skipped".to_string(),
            other => display_status(other).to_string(),
        };
        Ok(Self {
            index: row.seq,
            name: row.name,
            phone: row.phone,
            variables: decode_json(
                "batch_items",
                "variables",
                format_args!("{batch_id}#{}", row.seq),
                &row.variables,
            )?,
            status: row.status,
            display_status: display,
            call_id: row.call_id.map(|id| id.to_string()),
            attempts: row.attempts,
            reason: row.reason,
            skip_reason: row.skip_reason,
            next_attempt_at: row.next_attempt_at.map(iso),
            wait_reason: row.wait_reason,
        })
    }
}

/// The view of a batch with fresh progress.
pub async fn view(batches: &BatchService, row: BatchRow) -> ApiResult<BatchView> {
    let p = batches.progress(row.id).await?;
    Ok(BatchView::new(row, p)?)
}

/// One page of batches of `kind`, newest first.
pub async fn list(
    store: &Store,
    batches: &BatchService,
    org_id: OrgId,
    kind: BatchKind,
    page: PageRequest,
) -> ApiResult<ListEnvelope<BatchView>> {
    let (rows, total) = store
        .list_batches(org_id, kind.as_str(), i64::from(page.limit), page.offset())
        .await?;
    let mut views = Vec::with_capacity(rows.len());
    for row in rows {
        views.push(view(batches, row).await?);
    }
    Ok(ListEnvelope::new(views, total, page))
}

/// The item list's filter, shared with a campaign's students.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ItemsQuery {
    /// Only items (a campaign's students) in this raw status.
    #[serde(default, deserialize_with = "trimmed")]
    pub status: Option<String>,
}

/// One page of a batch's items, optionally of one raw status.
pub async fn items(
    store: &Store,
    batches: &BatchService,
    org_id: OrgId,
    kind: BatchKind,
    id: &str,
    page: PageRequest,
    query: ItemsQuery,
) -> ApiResult<ListEnvelope<ItemView>> {
    let batch = batches
        .load(org_id, kind, service::parse_id(kind, id)?)
        .await?;
    let (rows, total) = store
        .batch_items_page(
            batch.id,
            query.status.as_deref(),
            i64::from(page.limit),
            page.offset(),
        )
        .await?;
    let rows = rows
        .into_iter()
        .map(|row| ItemView::new(batch.id, row))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ListEnvelope::new(rows, total, page))
}

/// Runs a state-machine action on a batch of `kind`.
pub async fn action(
    batches: &BatchService,
    org_id: OrgId,
    kind: BatchKind,
    id: &str,
    action: BatchAction,
) -> ApiResult<Json<MessageBody>> {
    let batch = batches
        .load(org_id, kind, service::parse_id(kind, id)?)
        .await?;
    let message = batches.act(kind, &batch, action).await?;
    Ok(MessageBody::json(message))
}

/// Declares a `POST …/{id}/start|pause|resume|stop|retry` route of batches
/// or campaigns. Every one is the same handler, [`action`] on the batch of its
/// kind; only the path, its documentation and the kind differ.
macro_rules! transition_route {
    (
        $(#[doc = $doc:literal])*
        $name:ident,
        $path:literal,
        $tag:literal,
        $param:literal,
        $param_doc:literal,
        $kind:expr,
        $action:expr,
        responses($($responses:tt)*)
    ) => {
        $(#[doc = $doc])*
        #[utoipa::path(post, path = $path, tag = $tag,
            params(($param = String, Path, description = $param_doc)),
            responses($($responses)*))]
        async fn $name(
            axum::extract::State(batches): axum::extract::State<$crate::batches::service::BatchService>,
            caller: $crate::http::auth::Caller,
            axum::extract::Path(id): axum::extract::Path<String>,
        ) -> $crate::http::error::ApiResult<axum::Json<$crate::http::MessageBody>> {
            $crate::http::batches::action(&batches, caller.org_id, $kind, &id, $action).await
        }
    };
}
pub(crate) use transition_route;

/// Deserializes a field that may be absent (`None`), null (`Some(None)`) or set.
pub fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<String>>, D::Error> {
    Option::<String>::deserialize(d).map(Some)
}

/// `PATCH` body of a batch or campaign.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UpdateBatchBody {
    /// New name.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<Line<200>>,
    /// New automatic start (ISO 8601, future); null makes it a draft again. Only before start.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub scheduled_start_at: Option<Option<String>>,
    /// The batch's own calling hours; null returns to the agent's, else the
    /// workspace's. Allowed at any status; waiting items are checked afresh.
    #[serde(
        default,
        deserialize_with = "crate::domain::json_object::present_object"
    )]
    pub calling_hours: Option<Option<CallingHours>>,
}

/// Applies a PATCH to a batch of `kind`.
pub async fn patch(
    batches: &BatchService,
    org_id: OrgId,
    kind: BatchKind,
    id: &str,
    body: UpdateBatchBody,
) -> ApiResult<Json<BatchView>> {
    let batch = batches
        .load(org_id, kind, service::parse_id(kind, id)?)
        .await?;
    let row = batches
        .update(
            kind,
            &batch,
            body.name.map(Line::into_string),
            body.scheduled_start_at,
            body.calling_hours,
        )
        .await?;
    Ok(Json(view(batches, row).await?))
}

/// Deletes a batch of `kind` unless it runs.
pub async fn remove(
    batches: &BatchService,
    org_id: OrgId,
    kind: BatchKind,
    id: &str,
) -> ApiResult<StatusCode> {
    let batch = batches
        .load(org_id, kind, service::parse_id(kind, id)?)
        .await?;
    batches.delete(kind, &batch).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A person to call.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ItemBody {
    /// Their name.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<Line<200>>,
    /// E.164 number; malformed numbers are stored as skipped and reported.
    pub phone: String,
    /// Fills the agent's placeholders for this call.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub variables: Option<Variables>,
    /// Their email address, shown on their calls and found by `search`; also
    /// the `email` variable unless that is given (an `email` variable alone
    /// serves as well).
    #[serde(default)]
    pub email: Option<Email>,
}

impl From<ItemBody> for ItemInput {
    fn from(b: ItemBody) -> Self {
        let (mut variables, from_variables) =
            b.variables.map(Variables::into_parts).unwrap_or_default();
        if let Some(email) = &b.email {
            variables
                .entry(EMAIL_VARIABLE)
                .or_insert_with(|| Value::String(email.to_string()));
        }
        Self {
            name: b.name.map(Line::into_string).unwrap_or_default(),
            phone: b.phone,
            variables,
            email: b.email.or(from_variables),
        }
    }
}

/// `POST /api/batches` body: a named empty batch, or the one-step form with `contacts`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateBatchBody {
    /// Name; required unless `contacts` is given.
    #[serde(default)]
    #[schema(value_type = Option<String>, max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<Line<200>>,
    /// Agent placing the calls.
    pub agent_id: String,
    /// Automatic start, ISO 8601, in the future.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub scheduled_start_at: Option<String>,
    /// Caller ID override; a number the workspace owns.
    #[serde(default)]
    pub from_number: Option<String>,
    /// One-step form: these people are added and the batch starts at once
    /// (or at `scheduledStartAt`).
    #[serde(default)]
    #[schema(min_items = 1)]
    pub contacts: Option<Vec<ItemBody>>,
    /// The batch's own calling hours (default: the agent's, else the workspace's).
    #[serde(default)]
    pub calling_hours: Option<CallingHours>,
}

/// A skipped item of a request.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct SkippedItemView {
    /// 0-based position in the request.
    pub index: usize,
    /// The number as given.
    pub phone: String,
    /// Why it will not be dialed.
    pub reason: String,
    /// The rule that skipped it: `do-not-call` or `attempt-cap`; null for a malformed or repeated number.
    pub skip_reason: Option<String>,
}

/// The answer to adding items.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AddItemsResponse {
    /// Summary.
    pub message: String,
    /// Items that will be dialed.
    pub added: usize,
    /// Items stored as skipped.
    pub skipped: usize,
    /// The first skipped items with reasons.
    pub skipped_items: Vec<SkippedItemView>,
}

impl AddItemsResponse {
    fn new(message: String, report: AddReport) -> Self {
        Self {
            message,
            added: report.added,
            skipped: report.skipped,
            skipped_items: report
                .skipped_items
                .into_iter()
                .map(|s| SkippedItemView {
                    index: s.index,
                    phone: s.phone,
                    reason: s.reason,
                    skip_reason: s.skip_reason.map(str::to_string),
                })
                .collect(),
        }
    }
}

/// The created batch; the one-step form adds what happened.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedBatch {
    /// The batch.
    #[serde(flatten)]
    pub batch: BatchView,
    /// One-step form: what was done.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// One-step form: contacts that will not be dialed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped_items: Option<Vec<SkippedItemView>>,
}

/// Create a batch (draft, or scheduled with `scheduledStartAt`); with `contacts`, also fill and start it.
#[utoipa::path(post, path = "/api/batches", tag = "batches", request_body = CreateBatchBody,
    responses((status = 201, body = CreatedBatch), (status = 400, body = MessageBody), (status = 402, body = MessageBody),
        (status = 403, body = MessageBody), (status = 404, body = MessageBody)))]
async fn create_batch(
    State(clock): State<SharedClock>,
    State(calls): State<CallService>,
    State(batches): State<BatchService>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateBatchBody>,
) -> ApiResult<(StatusCode, Json<CreatedBatch>)> {
    let org = caller.org_id;
    let now = clock.now();
    let scheduled = body
        .scheduled_start_at
        .as_deref()
        .map(|raw| service::parse_schedule(raw, now))
        .transpose()?;
    let Some(contacts) = body.contacts else {
        let name = body
            .name
            .map(Line::into_string)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ApiError::BadRequest("name is required".into()))?;
        let row = batches
            .create(
                org,
                BatchKind::Batch,
                NewBatchInput {
                    name,
                    agent_id: body.agent_id,
                    from_number: body.from_number,
                    scheduled_start_at: scheduled,
                    calling_hours: body.calling_hours,
                },
            )
            .await?;
        let batch = view(&batches, row).await?;
        return Ok((
            StatusCode::CREATED,
            Json(CreatedBatch {
                batch,
                message: None,
                skipped_items: None,
            }),
        ));
    };
    if contacts.is_empty() {
        return Err(ApiError::BadRequest(
            "contacts must hold at least one contact".into(),
        ));
    }
    // Refusals (wallet, quota, caller ID, agent) come before anything is stored.
    let agent_id = placement::agent_id(&body.agent_id)?;
    calls
        .plan(org, agent_id, body.from_number.as_deref())
        .await?;
    let name = body
        .name
        .map(Line::into_string)
        .filter(|n| !n.is_empty())
        .unwrap_or_else(|| format!("Batch {}", now.format("%Y-%m-%d %H:%M")));
    let row = batches
        .create(
            org,
            BatchKind::Batch,
            NewBatchInput {
                name,
                agent_id: body.agent_id,
                from_number: body.from_number,
                scheduled_start_at: scheduled,
                calling_hours: body.calling_hours,
            },
        )
        .await?;
    let report = batches
        .add_items(
            BatchKind::Batch,
            &row,
            contacts.into_iter().map(ItemInput::from).collect(),
        )
        .await?;
    let message = if report.added == 0 {
        format!(
            "Batch created; every contact was skipped ({} malformed, repeated or on the do-not-call list), nothing to dial",
            report.skipped
        )
    } else if scheduled.is_some() {
        format!(
            "Batch scheduled: {} contact(s) to dial, {} skipped",
            report.added, report.skipped
        )
    } else {
        batches
            .act(BatchKind::Batch, &row, BatchAction::Start)
            .await?;
        format!(
            "Batch started: {} contact(s) to dial, {} skipped",
            report.added, report.skipped
        )
    };
    let row = batches.load(org, BatchKind::Batch, row.id).await?;
    let response = AddItemsResponse::new(String::new(), report);
    Ok((
        StatusCode::CREATED,
        Json(CreatedBatch {
            batch: view(&batches, row).await?,
            message: Some(message),
            skipped_items: Some(response.skipped_items),
        }),
    ))
}

/// `POST /api/batches/{batchId}/items` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddItemsBody {
    /// People to call, in dialing order.
    pub items: Vec<ItemBody>,
}

/// Add items to a batch that has not started (repeatable).
#[utoipa::path(post, path = "/api/batches/{batchId}/items", tag = "batches", request_body = AddItemsBody,
    params(("batchId" = String, Path, description = "Batch id")),
    responses((status = 200, body = AddItemsResponse), (status = 400, body = MessageBody), (status = 404, body = MessageBody),
        (status = 409, body = MessageBody)))]
async fn add_items(
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AddItemsBody>,
) -> ApiResult<Json<AddItemsResponse>> {
    let batch = batches
        .load(
            caller.org_id,
            BatchKind::Batch,
            service::parse_id(BatchKind::Batch, &id)?,
        )
        .await?;
    let report = batches
        .add_items(
            BatchKind::Batch,
            &batch,
            body.items.into_iter().map(ItemInput::from).collect(),
        )
        .await?;
    let message = format!("{} item(s) added, {} skipped", report.added, report.skipped);
    Ok(Json(AddItemsResponse::new(message, report)))
}

/// List batches, newest first, with progress.
#[utoipa::path(get, path = "/api/batches", tag = "batches",
    params(PageRequest),
    responses((status = 200, body = ListEnvelope<BatchView>), (status = 400, body = MessageBody)))]
async fn list_batches(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
) -> ApiResult<Json<ListEnvelope<BatchView>>> {
    Ok(Json(
        list(&store, &batches, caller.org_id, BatchKind::Batch, page).await?,
    ))
}

/// Read a batch with its progress.
#[utoipa::path(get, path = "/api/batches/{batchId}", tag = "batches",
    params(("batchId" = String, Path, description = "Batch id")),
    responses((status = 200, body = BatchView), (status = 404, body = MessageBody)))]
async fn get_batch(
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<BatchView>> {
    let row = batches
        .load(
            caller.org_id,
            BatchKind::Batch,
            service::parse_id(BatchKind::Batch, &id)?,
        )
        .await?;
    Ok(Json(view(&batches, row).await?))
}

/// Each item's latest status, call id and attempts, in order.
#[utoipa::path(get, path = "/api/batches/{batchId}/items", tag = "batches",
    params(
        ("batchId" = String, Path, description = "Batch id"),
        PageRequest,
        ItemsQuery,
    ),
    responses((status = 200, body = ListEnvelope<ItemView>), (status = 400, body = MessageBody), (status = 404, body = MessageBody)))]
async fn list_items(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(page): ApiQuery<PageRequest>,
    ApiQuery(query): ApiQuery<ItemsQuery>,
) -> ApiResult<Json<ListEnvelope<ItemView>>> {
    Ok(Json(
        items(
            &store,
            &batches,
            caller.org_id,
            BatchKind::Batch,
            &id,
            page,
            query,
        )
        .await?,
    ))
}

/// Rename a batch, or change its schedule before it starts.
#[utoipa::path(patch, path = "/api/batches/{batchId}", tag = "batches", request_body = UpdateBatchBody,
    params(("batchId" = String, Path, description = "Batch id")),
    responses((status = 200, body = BatchView), (status = 400, body = MessageBody), (status = 404, body = MessageBody),
        (status = 409, body = MessageBody)))]
async fn update_batch(
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateBatchBody>,
) -> ApiResult<Json<BatchView>> {
    patch(&batches, caller.org_id, BatchKind::Batch, &id, body).await
}

/// Delete a batch that is not running.
#[utoipa::path(delete, path = "/api/batches/{batchId}", tag = "batches",
    params(("batchId" = String, Path, description = "Batch id")),
    responses((status = 204), (status = 404, body = MessageBody), (status = 409, body = MessageBody)))]
async fn delete_batch(
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    remove(&batches, caller.org_id, BatchKind::Batch, &id).await
}

transition_route!(
    /// Start dialing (draft or scheduled batches).
    start_batch,
    "/api/batches/{batchId}/start",
    "batches",
    "batchId",
    "Batch id",
    BatchKind::Batch,
    BatchAction::Start,
    responses((status = 200, body = MessageBody), (status = 402, body = MessageBody), (status = 403, body = MessageBody),
        (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

transition_route!(
    /// Stop dialing; remaining items stay queued and live calls finish.
    pause_batch,
    "/api/batches/{batchId}/pause",
    "batches",
    "batchId",
    "Batch id",
    BatchKind::Batch,
    BatchAction::Pause,
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

transition_route!(
    /// Continue a paused batch.
    resume_batch,
    "/api/batches/{batchId}/resume",
    "batches",
    "batchId",
    "Batch id",
    BatchKind::Batch,
    BatchAction::Resume,
    responses((status = 200, body = MessageBody), (status = 402, body = MessageBody), (status = 403, body = MessageBody),
        (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

transition_route!(
    /// End the batch: pending items are dropped, live calls finish.
    stop_batch,
    "/api/batches/{batchId}/stop",
    "batches",
    "batchId",
    "Batch id",
    BatchKind::Batch,
    BatchAction::Stop,
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

transition_route!(
    /// Re-dial items whose latest call failed, went unanswered, was busy or reached voicemail.
    retry_batch,
    "/api/batches/{batchId}/retry",
    "batches",
    "batchId",
    "Batch id",
    BatchKind::Batch,
    BatchAction::Retry,
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

/// The batch and campaign export's leading columns, in order; the agent's
/// [`AnalysisColumns`] (with `other_extracted`) follow them. `skip_reason` is
/// the rule that skipped an item (`do-not-call`), empty otherwise;
/// `wait_reason` the rule that deferred it (`calling-hours`) and
/// `next_attempt_at` when a waiting item's hours open.
pub const EXPORT_COLUMNS: [&str; 12] = [
    "name",
    "phone",
    "status",
    "attempts",
    "call_id",
    "duration_seconds",
    "ended_reason",
    "summary",
    "variables",
    "skip_reason",
    "wait_reason",
    "next_attempt_at",
];

/// A batch's or campaign's export: its items in `seq` order, each with its
/// latest call's results and analysis.
struct BatchExport {
    store: Store,
    batch_id: BatchId,
    columns: AnalysisColumns,
}

impl CsvExport for BatchExport {
    type Row = ItemResultRow;
    type Key = i64;
    const NAME: &'static str = "batch";

    fn header(&self) -> Vec<String> {
        self.columns.header(&EXPORT_COLUMNS)
    }

    async fn page(&self, after: Option<&i64>, limit: i64) -> StoreResult<Vec<ItemResultRow>> {
        // Item seqs start at 1, so 0 is before the first.
        let after_seq = after.copied().unwrap_or(0);
        self.store
            .batch_results_after(self.batch_id, after_seq, limit)
            .await
    }

    fn key(row: &ItemResultRow) -> i64 {
        row.item.seq
    }

    fn record(&self, row: &ItemResultRow) -> StoreResult<Vec<String>> {
        let item = &row.item;
        // Columns of the item's latest call exist only once it has one.
        let (extracted, verdict) = match item.call_id {
            Some(call_id) => (
                merged_object(
                    call_id,
                    row.extracted.as_deref(),
                    row.structured_data.as_deref(),
                )?,
                stored_verdict(call_id, row.success.as_deref())?,
            ),
            None => (Map::new(), None),
        };
        let mut record = vec![
            item.name.clone(),
            item.phone.clone(),
            item.status.clone(),
            item.attempts.to_string(),
            item.call_id.map(|id| id.to_string()).unwrap_or_default(),
            row.duration_seconds.unwrap_or_default().to_string(),
            row.ended_reason.clone().unwrap_or_default(),
            row.summary.clone().unwrap_or_default(),
            item.variables.clone(),
            item.skip_reason.clone().unwrap_or_default(),
            item.wait_reason.clone().unwrap_or_default(),
            item.next_attempt_at.map(iso).unwrap_or_default(),
        ];
        record.extend(
            self.columns
                .cells(&extracted, verdict.as_ref(), row.success_pass),
        );
        Ok(record)
    }
}

/// Streams the export of the batch of `kind` that `id` names: every item
/// with its latest call's results and analysis, the columns of the batch's
/// agent's current analysis plan.
pub async fn export(
    store: &Store,
    batches: &BatchService,
    org_id: OrgId,
    kind: BatchKind,
    id: &str,
) -> ApiResult<Response> {
    let batch = batches
        .load(org_id, kind, service::parse_id(kind, id)?)
        .await?;
    let columns =
        AnalysisColumns::of_agent(store, org_id, &batch.agent_id.to_string(), true).await?;
    let export = BatchExport {
        store: store.clone(),
        batch_id: batch.id,
        columns,
    };
    Ok(csv_export(&format!("{}.csv", kind.as_str()), export))
}

/// Download every item with its latest call's status, duration, summary and
/// post-call analysis as CSV, streamed.
#[utoipa::path(get, path = "/api/batches/{batchId}/export", tag = "batches",
    params(("batchId" = String, Path, description = "Batch id")),
    responses(
        (status = 200, description = "CSV with columns name, phone, status, attempts, call_id, duration_seconds, ended_reason, summary, variables (JSON); then one column per extracted field of the batch agent's analysis plan (headed extracted.<name> when a column above has its name; the latest call's extracted value, a keypad choice winning over the analysis: strings as they are, numbers and booleans as JSON text, empty when null), success (the verdict's value: true/false, 1-10, excellent/good/fair/poor, 0-100, or a checklist as name:pass;name:fail; empty when not judged), success_pass (true, false or empty) and other_extracted (JSON object of the extracted keys that are not plan fields)", content_type = "text/csv", body = String),
        (status = 404, body = MessageBody),
    ))]
async fn export_batch(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    export(&store, &batches, caller.org_id, BatchKind::Batch, &id).await
}
