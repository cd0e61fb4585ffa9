//! `/api/numbers/do-not-call`: the workspace's do-not-call list. Every path
//! that dials checks it; see `calls::do_not_call` for the rules.

use super::MessageBody;
use super::auth::Caller;
use super::csv_download::{CsvExport, csv_export};
use super::error::{ApiError, ApiResult};
use super::extract::{ApiJson, ApiQuery};
use crate::calls::do_not_call::{self as dnc, DncError, ImportReport};
use crate::domain::OrgId;
use crate::domain::clock::{SharedClock, iso};
use crate::domain::do_not_call::DncSource;
use crate::domain::page::{ListEnvelope, PageRequest};
use crate::domain::text::{Line, optional_line};
use crate::http::state::AppState;
use crate::store::do_not_call::DncRow;
use crate::store::{Store, StoreResult};
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Largest import file.
pub const MAX_IMPORT_BYTES: usize = 8 * 1024 * 1024;

/// The do-not-call routes.
pub fn router() -> OpenApiRouter<AppState> {
    let import = OpenApiRouter::new()
        .routes(routes!(import_do_not_call))
        .layer(DefaultBodyLimit::max(MAX_IMPORT_BYTES));
    OpenApiRouter::new()
        .routes(routes!(list_do_not_call, add_do_not_call))
        .routes(routes!(remove_do_not_call))
        .routes(routes!(export_do_not_call))
        .merge(import)
}

impl From<DncError> for ApiError {
    fn from(err: DncError) -> Self {
        match err {
            DncError::Store(e) => Self::Store(e),
            other => Self::BadRequest(other.to_string()),
        }
    }
}

/// A number the workspace never dials.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct DncEntryView {
    /// The number, E.164.
    pub phone: String,
    /// Why.
    pub reason: String,
    /// Where the entry came from.
    pub source: DncSource,
    /// When listed, ISO 8601.
    pub created_at: String,
}

impl DncEntryView {
    fn from_row(row: DncRow) -> Self {
        Self {
            phone: row.phone,
            reason: row.reason,
            source: row.source,
            created_at: iso(row.created_at),
        }
    }
}

/// `POST /api/numbers/do-not-call` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DncInput {
    /// The number, E.164 (one libphonenumber calls valid).
    #[schema(pattern = r"^\+[1-9][0-9]{6,14}$")]
    pub phone: String,
    /// Why (optional, one line, up to 200 characters).
    #[serde(default)]
    #[schema(max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub reason: Option<String>,
}

/// The list's filter.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DncQuery {
    /// Case-insensitive substring of the number or the reason.
    #[serde(default, deserialize_with = "optional_line")]
    #[param(value_type = Option<String>, max_length = 200)]
    pub search: Option<Line<200>>,
}

/// The numbers the workspace never dials, newest first.
#[utoipa::path(get, path = "/api/numbers/do-not-call", tag = "numbers",
    params(PageRequest, DncQuery),
    responses((status = 200, body = ListEnvelope<DncEntryView>), (status = 400, body = MessageBody)))]
async fn list_do_not_call(
    State(store): State<Store>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
    ApiQuery(query): ApiQuery<DncQuery>,
) -> ApiResult<Json<ListEnvelope<DncEntryView>>> {
    let (rows, total) = store
        .do_not_call_page(
            caller.org_id,
            query.search.as_ref().map(Line::as_str),
            i64::from(page.limit),
            page.offset(),
        )
        .await?;
    let rows = rows.into_iter().map(DncEntryView::from_row).collect();
    Ok(Json(ListEnvelope::new(rows, total, page)))
}

/// Put a number on the do-not-call list (source `api`): no path dials it from
/// then on. A number already listed answers 200 with its entry as it was.
#[utoipa::path(post, path = "/api/numbers/do-not-call", tag = "numbers", request_body = DncInput,
    responses((status = 201, body = DncEntryView, description = "Listed"),
        (status = 200, body = DncEntryView, description = "Already listed"),
        (status = 400, body = MessageBody)))]
async fn add_do_not_call(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    ApiJson(input): ApiJson<DncInput>,
) -> ApiResult<(StatusCode, Json<DncEntryView>)> {
    let (row, added) = dnc::add(
        &store,
        caller.org_id,
        &input.phone,
        input.reason.as_deref().unwrap_or_default(),
        DncSource::Api,
        clock.now().timestamp_millis(),
    )
    .await?;
    let status = if added {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(DncEntryView::from_row(row))))
}

/// Take a number off the do-not-call list.
#[utoipa::path(delete, path = "/api/numbers/do-not-call/{phone}", tag = "numbers",
    params(("phone" = String, Path, description = "The number, E.164")),
    responses((status = 204, description = "Removed"), (status = 404, body = MessageBody)))]
async fn remove_do_not_call(
    State(store): State<Store>,
    caller: Caller,
    Path(phone): Path<String>,
) -> ApiResult<StatusCode> {
    if dnc::remove(&store, caller.org_id, &phone).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound(format!(
            "{phone} is not on the do-not-call list"
        )))
    }
}

/// A refused row of an import.
#[derive(Debug, Serialize, ToSchema)]
pub struct InvalidRowView {
    /// The row in the file, the header being row 1.
    pub row: usize,
    /// The number as given.
    pub phone: String,
    /// Why it was not listed.
    pub reason: String,
}

/// What an import did.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ImportView {
    /// Summary.
    pub message: String,
    /// Numbers listed now.
    pub added: usize,
    /// Numbers already listed, or repeated in the file.
    pub duplicate: usize,
    /// Rows refused.
    pub invalid: usize,
    /// The first 100 refused rows.
    pub invalid_rows: Vec<InvalidRowView>,
}

impl From<ImportReport> for ImportView {
    fn from(r: ImportReport) -> Self {
        Self {
            message: r.summary(),
            added: r.added,
            duplicate: r.duplicate,
            invalid: r.invalid,
            invalid_rows: r
                .invalid_rows
                .into_iter()
                .map(|i| InvalidRowView {
                    row: i.row,
                    phone: i.phone,
                    reason: i.reason,
                })
                .collect(),
        }
    }
}

/// Import numbers from CSV (the request body, `text/csv`): a `phone` column
/// and an optional `reason`, any header case, UTF-8 with or without BOM; up
/// to 50,000 rows. Valid numbers are listed with source `import`; a bad row
/// is reported with its row number and the rest are listed.
#[utoipa::path(post, path = "/api/numbers/do-not-call/import", tag = "numbers",
    request_body(content = String, content_type = "text/csv", description = "CSV with a phone column and an optional reason column"),
    responses((status = 200, body = ImportView), (status = 400, body = MessageBody), (status = 413, body = MessageBody)))]
async fn import_do_not_call(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Json<ImportView>> {
    let body = body.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::PayloadTooLarge(format!(
                "file is larger than {} MiB",
                MAX_IMPORT_BYTES / 1024 / 1024
            ))
        } else {
            ApiError::BadRequest(format!("file could not be read: {e}"))
        }
    })?;
    let report = dnc::import(&store, caller.org_id, &body, clock.now().timestamp_millis()).await?;
    Ok(Json(report.into()))
}

/// The export: every entry in number order.
struct DncExport {
    store: Store,
    org_id: OrgId,
}

impl CsvExport for DncExport {
    type Row = DncRow;
    type Key = String;
    const NAME: &'static str = "do-not-call";

    fn header(&self) -> Vec<String> {
        ["phone", "reason", "source", "created_at"]
            .map(str::to_string)
            .to_vec()
    }

    async fn page(&self, after: Option<&String>, limit: i64) -> StoreResult<Vec<DncRow>> {
        self.store
            .do_not_call_after(self.org_id, after.map(String::as_str), limit)
            .await
    }

    fn key(row: &DncRow) -> String {
        row.phone.clone()
    }

    fn record(&self, row: &DncRow) -> StoreResult<Vec<String>> {
        Ok(vec![
            row.phone.clone(),
            row.reason.clone(),
            row.source.as_str().to_string(),
            iso(row.created_at),
        ])
    }
}

/// Download the whole list as CSV (`phone,reason,source,created_at`), streamed;
/// the file imports back as it is.
#[utoipa::path(get, path = "/api/numbers/do-not-call/export.csv", tag = "numbers",
    responses((status = 200, content_type = "text/csv", body = String)))]
async fn export_do_not_call(State(store): State<Store>, caller: Caller) -> Response {
    export(store, caller.org_id)
}

/// The streamed CSV of `org_id`'s list, as the API's export and the
/// console's export link answer it.
pub fn export(store: Store, org_id: OrgId) -> Response {
    csv_export("do-not-call.csv", DncExport { store, org_id })
}
