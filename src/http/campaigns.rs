//! `/api/campaigns`: a batch built from an uploaded CSV of students, with its
//! calls in the call list's row shape and a streamed CSV export of results
//! (the batch export's, see [`batch_http::export`]).

use super::MessageBody;
use super::auth::Caller;
use super::batches::{
    self as batch_http, BatchView, ItemView, ItemsQuery, UpdateBatchBody, transition_route,
};
use super::call_reads::{CallList, CallListStats, CallRowView};
use super::error::{ApiError, ApiResult};
use super::extract::{ApiJson, ApiQuery};
use crate::batches::service::BatchService;
use crate::batches::service::{self, BatchError, NewBatchInput};
use crate::batches::student_sheet::{MAX_SHEET_ROWS, SheetError, StudentSheet};
use crate::batches::{BatchAction, BatchKind, BatchStatus};
use crate::domain::calling_hours::CallingHours;
use crate::domain::clock::SharedClock;
use crate::domain::page::{ListEnvelope, PageRequest};
use crate::domain::text::Line;
use crate::http::state::AppState;
use crate::store::Store;
use axum::Json;
use axum::extract::multipart::MultipartRejection;
use axum::extract::{DefaultBodyLimit, Multipart, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Most data rows one upload may add.
pub const MAX_UPLOAD_ROWS: usize = MAX_SHEET_ROWS;

/// Largest upload body: 100,000 rows with a few variables fit well inside.
pub const MAX_UPLOAD_BYTES: usize = 64 * 1024 * 1024;

/// Most rejected rows listed in the upload's answer.
const MAX_LISTED_REJECTIONS: usize = 20;

/// The campaign routes.
pub fn router() -> OpenApiRouter<AppState> {
    let upload = OpenApiRouter::new()
        .routes(routes!(upload_students))
        .layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES));
    OpenApiRouter::new()
        .routes(routes!(list_campaigns, create_campaign))
        .routes(routes!(get_campaign, update_campaign, delete_campaign))
        .routes(routes!(start_campaign))
        .routes(routes!(pause_campaign))
        .routes(routes!(resume_campaign))
        .routes(routes!(stop_campaign))
        .routes(routes!(retry_campaign))
        .routes(routes!(campaign_calls))
        .routes(routes!(campaign_students))
        .routes(routes!(export_campaign))
        .merge(upload)
}

/// `POST /api/campaigns` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CreateCampaignBody {
    /// Name, shown as `campaignName` on its calls.
    #[schema(value_type = String, max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Line<200>,
    /// Agent placing the calls.
    pub agent_id: String,
    /// Caller ID override; a number the workspace owns.
    #[serde(default)]
    pub from_number: Option<String>,
    /// Automatic start, ISO 8601, in the future.
    #[serde(default)]
    #[schema(format = DateTime)]
    pub scheduled_start_at: Option<String>,
    /// The campaign's own calling hours (default: the agent's, else the workspace's).
    #[serde(default)]
    pub calling_hours: Option<CallingHours>,
}

/// Create an empty campaign (draft, or scheduled with `scheduledStartAt`).
#[utoipa::path(post, path = "/api/campaigns", tag = "campaigns", request_body = CreateCampaignBody,
    responses((status = 201, body = BatchView), (status = 400, body = MessageBody), (status = 404, body = MessageBody)))]
async fn create_campaign(
    State(clock): State<SharedClock>,
    State(batches): State<BatchService>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateCampaignBody>,
) -> ApiResult<(StatusCode, Json<BatchView>)> {
    let scheduled = body
        .scheduled_start_at
        .as_deref()
        .map(|raw| service::parse_schedule(raw, clock.now()))
        .transpose()?;
    let row = batches
        .create(
            caller.org_id,
            BatchKind::Campaign,
            NewBatchInput {
                name: body.name.into_string(),
                agent_id: body.agent_id,
                from_number: body.from_number,
                scheduled_start_at: scheduled,
                calling_hours: body.calling_hours,
            },
        )
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(batch_http::view(&batches, row).await?),
    ))
}

/// List campaigns, newest first, with progress.
#[utoipa::path(get, path = "/api/campaigns", tag = "campaigns",
    params(PageRequest),
    responses((status = 200, body = ListEnvelope<BatchView>), (status = 400, body = MessageBody)))]
async fn list_campaigns(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
) -> ApiResult<Json<ListEnvelope<BatchView>>> {
    Ok(Json(
        batch_http::list(&store, &batches, caller.org_id, BatchKind::Campaign, page).await?,
    ))
}

/// Read a campaign with its progress.
#[utoipa::path(get, path = "/api/campaigns/{campaignId}", tag = "campaigns",
    params(("campaignId" = String, Path, description = "Campaign id")),
    responses((status = 200, body = BatchView), (status = 404, body = MessageBody)))]
async fn get_campaign(
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Json<BatchView>> {
    let row = batches
        .load(
            caller.org_id,
            BatchKind::Campaign,
            service::parse_id(BatchKind::Campaign, &id)?,
        )
        .await?;
    Ok(Json(batch_http::view(&batches, row).await?))
}

/// Rename a campaign, or change its schedule before it starts.
#[utoipa::path(patch, path = "/api/campaigns/{campaignId}", tag = "campaigns", request_body = UpdateBatchBody,
    params(("campaignId" = String, Path, description = "Campaign id")),
    responses((status = 200, body = BatchView), (status = 400, body = MessageBody), (status = 404, body = MessageBody),
        (status = 409, body = MessageBody)))]
async fn update_campaign(
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<UpdateBatchBody>,
) -> ApiResult<Json<BatchView>> {
    batch_http::patch(&batches, caller.org_id, BatchKind::Campaign, &id, body).await
}

/// Delete a campaign that is not running.
#[utoipa::path(delete, path = "/api/campaigns/{campaignId}", tag = "campaigns",
    params(("campaignId" = String, Path, description = "Campaign id")),
    responses((status = 204), (status = 404, body = MessageBody), (status = 409, body = MessageBody)))]
async fn delete_campaign(
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<StatusCode> {
    batch_http::remove(&batches, caller.org_id, BatchKind::Campaign, &id).await
}

transition_route!(
    /// Start dialing the uploaded students.
    start_campaign,
    "/api/campaigns/{campaignId}/start",
    "campaigns",
    "campaignId",
    "Campaign id",
    BatchKind::Campaign,
    BatchAction::Start,
    responses((status = 200, body = MessageBody), (status = 402, body = MessageBody), (status = 403, body = MessageBody),
        (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

transition_route!(
    /// Stop dialing; remaining students stay queued and live calls finish.
    pause_campaign,
    "/api/campaigns/{campaignId}/pause",
    "campaigns",
    "campaignId",
    "Campaign id",
    BatchKind::Campaign,
    BatchAction::Pause,
    responses((status = 200, body = MessageBody), (status = 402, body = MessageBody), (status = 403, body = MessageBody),
        (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

transition_route!(
    /// Continue a paused campaign.
    resume_campaign,
    "/api/campaigns/{campaignId}/resume",
    "campaigns",
    "campaignId",
    "Campaign id",
    BatchKind::Campaign,
    BatchAction::Resume,
    responses((status = 200, body = MessageBody), (status = 402, body = MessageBody), (status = 403, body = MessageBody),
        (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

transition_route!(
    /// End the campaign: pending students are dropped, live calls finish.
    stop_campaign,
    "/api/campaigns/{campaignId}/stop",
    "campaigns",
    "campaignId",
    "Campaign id",
    BatchKind::Campaign,
    BatchAction::Stop,
    responses((status = 200, body = MessageBody), (status = 402, body = MessageBody), (status = 403, body = MessageBody),
        (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

transition_route!(
    /// Re-dial students whose latest call failed, went unanswered or was busy.
    retry_campaign,
    "/api/campaigns/{campaignId}/retry",
    "campaigns",
    "campaignId",
    "Campaign id",
    BatchKind::Campaign,
    BatchAction::Retry,
    responses((status = 200, body = MessageBody), (status = 402, body = MessageBody), (status = 403, body = MessageBody),
        (status = 404, body = MessageBody), (status = 409, body = MessageBody))
);

/// One rejected row of an upload.
#[derive(Debug, Serialize, ToSchema)]
pub struct RejectedRow {
    /// Row number in the file, the header being row 1.
    pub row: usize,
    /// Why it was not added.
    pub reason: String,
}

/// The answer to an upload.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct UploadReport {
    /// Summary.
    pub message: String,
    /// Rows added as students.
    pub accepted: usize,
    /// Rows not added.
    pub rejected: usize,
    /// The first rejected rows with reasons.
    pub rejected_rows: Vec<RejectedRow>,
    /// Of the accepted rows, those stored as skipped (`skipReason: do-not-call`):
    /// their numbers are on the workspace's do-not-call list.
    pub skipped: usize,
}

impl From<SheetError> for ApiError {
    fn from(err: SheetError) -> Self {
        match err {
            SheetError::TooManyRows(_) => Self::PayloadTooLarge(err.to_string()),
            SheetError::Header(_) | SheetError::Empty => Self::BadRequest(err.to_string()),
        }
    }
}

fn bad_multipart(e: impl std::fmt::Display) -> ApiError {
    ApiError::BadRequest(format!(
        "file: send the CSV as a multipart/form-data field named file ({e})"
    ))
}

/// Upload students as CSV (multipart field `file`): columns `name` and `phone`
/// (or `phone_number`, `mobile`, `number`), any header case; every other column
/// becomes a variable. UTF-8 with or without BOM; quoted fields; up to 100,000 rows.
/// A bad row (a malformed or repeated number, no name, a cell with NUL or a
/// control character; a line break is kept in variable columns only) is
/// reported with its row number and reason, and the good rows are added.
#[utoipa::path(post, path = "/api/campaigns/{campaignId}/students/upload", tag = "campaigns",
    params(("campaignId" = String, Path, description = "Campaign id")),
    request_body(content_type = "multipart/form-data", description = "A `file` field holding the CSV"),
    responses((status = 200, body = UploadReport), (status = 400, body = MessageBody), (status = 404, body = MessageBody),
        (status = 409, body = MessageBody), (status = 413, body = MessageBody)))]
async fn upload_students(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
    multipart: Result<Multipart, MultipartRejection>,
) -> ApiResult<Json<UploadReport>> {
    let campaign = batches
        .load(
            caller.org_id,
            BatchKind::Campaign,
            service::parse_id(BatchKind::Campaign, &id)?,
        )
        .await?;
    let status = BatchStatus::from_stored(&campaign.status);
    if !status.is_unstarted() {
        return Err(ApiError::conflict(format!(
            "Campaign is {status}; students can be uploaded only before it starts"
        )));
    }
    let mut multipart = multipart.map_err(bad_multipart)?;
    let seen: HashSet<String> = store.batch_phones(campaign.id).await?.into_iter().collect();
    let mut sheet = StudentSheet::new(seen, MAX_LISTED_REJECTIONS);
    let mut found = false;
    while let Some(mut field) = multipart.next_field().await.map_err(bad_multipart)? {
        if field.name() != Some("file") && field.file_name().is_none() {
            continue;
        }
        found = true;
        while let Some(chunk) = field.chunk().await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::PayloadTooLarge(format!(
                    "file is larger than {} MiB",
                    MAX_UPLOAD_BYTES / 1024 / 1024
                ))
            } else {
                bad_multipart(e)
            }
        })? {
            sheet.push(&chunk)?;
        }
        break;
    }
    if !found {
        return Err(ApiError::BadRequest(
            "file: a multipart field named file holding the CSV is required".into(),
        ));
    }
    let sheet = sheet.finish()?;
    let (accepted, rejected) = (sheet.accepted(), sheet.rejected);
    let rejected_rows = sheet
        .rejected_rows
        .iter()
        .map(|r| RejectedRow {
            row: r.row,
            reason: r.reason.clone(),
        })
        .collect();
    // The whole file was read before anything is appended, so a refused
    // file (over the row limit, a bad header) stores nothing; a bad row,
    // whatever is wrong with it, is only left out and reported.
    let skipped = batches
        .append_checked(BatchKind::Campaign, &campaign, sheet.into_items())
        .await
        .map_err(|err| match err {
            BatchError::StartedWhileAdding(_) => ApiError::conflict(
                "Campaign has started; students can be uploaded only before it starts",
            ),
            other => other.into(),
        })?;
    let message = if skipped == 0 {
        format!("{accepted} student(s) added, {rejected} row(s) rejected")
    } else {
        format!(
            "{accepted} student(s) added ({skipped} skipped: on the do-not-call list), {rejected} row(s) rejected"
        )
    };
    Ok(Json(UploadReport {
        message,
        accepted,
        rejected,
        rejected_rows,
        skipped,
    }))
}

/// The uploaded students with each one's latest status, in file order.
#[utoipa::path(get, path = "/api/campaigns/{campaignId}/students", tag = "campaigns",
    params(
        ("campaignId" = String, Path, description = "Campaign id"),
        PageRequest,
        ItemsQuery,
    ),
    responses((status = 200, body = ListEnvelope<ItemView>), (status = 400, body = MessageBody), (status = 404, body = MessageBody)))]
async fn campaign_students(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(page): ApiQuery<PageRequest>,
    ApiQuery(query): ApiQuery<ItemsQuery>,
) -> ApiResult<Json<ListEnvelope<ItemView>>> {
    Ok(Json(
        batch_http::items(
            &store,
            &batches,
            caller.org_id,
            BatchKind::Campaign,
            &id,
            page,
            query,
        )
        .await?,
    ))
}

/// The campaign's calls (every attempt), newest first, in the call list's row shape.
#[utoipa::path(get, path = "/api/campaigns/{campaignId}/calls", tag = "campaigns",
    params(
        ("campaignId" = String, Path, description = "Campaign id"),
        PageRequest,
    ),
    responses((status = 200, body = CallList), (status = 400, body = MessageBody), (status = 404, body = MessageBody)))]
async fn campaign_calls(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
    ApiQuery(page): ApiQuery<PageRequest>,
) -> ApiResult<Json<CallList>> {
    let org = caller.org_id;
    let campaign = batches
        .load(
            org,
            BatchKind::Campaign,
            service::parse_id(BatchKind::Campaign, &id)?,
        )
        .await?;
    let (rows, counts) = store
        .campaign_calls(org, campaign.id, i64::from(page.limit), page.offset())
        .await?;
    let now = clock.now();
    Ok(Json(CallList {
        rows: rows
            .into_iter()
            .map(|row| CallRowView::from_row(row, now))
            .collect(),
        total: counts.total,
        total_is_estimate: counts.capped,
        page: page.page,
        limit: page.limit,
        stats: CallListStats {
            total: counts.total,
            completed_count: counts.completed,
            failed_count: counts.failed,
        },
    }))
}

/// Download every student with their latest call's status, duration, summary
/// and post-call analysis as CSV, streamed.
#[utoipa::path(get, path = "/api/campaigns/{campaignId}/export", tag = "campaigns",
    params(("campaignId" = String, Path, description = "Campaign id")),
    responses(
        (status = 200, description = "CSV with columns name, phone, status, attempts, call_id, duration_seconds, ended_reason, summary, variables (JSON); then one column per extracted field of the campaign agent's analysis plan (headed extracted.<name> when a column above has its name; the latest call's extracted value, a keypad choice winning over the analysis: strings as they are, numbers and booleans as JSON text, empty when null), success (the verdict's value: true/false, 1-10, excellent/good/fair/poor, 0-100, or a checklist as name:pass;name:fail; empty when not judged), success_pass (true, false or empty) and other_extracted (JSON object of the extracted keys that are not plan fields)", content_type = "text/csv", body = String),
        (status = 404, body = MessageBody),
    ))]
async fn export_campaign(
    State(store): State<Store>,
    State(batches): State<BatchService>,
    caller: Caller,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    batch_http::export(&store, &batches, caller.org_id, BatchKind::Campaign, &id).await
}
