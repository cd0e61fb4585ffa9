//! `/api/ratings`: post-call scorecards. Reads (list, one call's, by phone,
//! stats, per-column analytics), exports (streamed CSV, Google Sheets) and
//! the re-scoring operations (rate-now, regenerate, bulk-regenerate, reload).

use super::MessageBody;
use super::auth::Caller;
use super::csv_download::csv_attachment;
use super::error::{ApiError, ApiResult};
use super::extract::{ApiJson, ApiQuery};
use crate::app::state::AppState;
use crate::domain::clock::{IST, iso};
use crate::domain::ids::CallId;
use crate::domain::page::{ListEnvelope, PageRequest};
use crate::domain::phone::PhoneNumber;
use crate::postcall::ratings::export::{EXPORT_HEADER, export_record};
use crate::postcall::ratings::sheets::{SheetTarget, append_rows, valid_spreadsheet_id};
use crate::postcall::ratings::template::effective_template;
use crate::postcall::ratings::worker::{RatingOutcome, rate_claimed, take_now};
use crate::secrets::credentials::CredentialCipher;
use crate::store::{RatingFilter, RatingRow, Store, StoreError};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use voxline_actors::engine::CallStatus;

/// Rows read per page while streaming exports.
const EXPORT_PAGE_ROWS: i64 = 500;

/// Seconds a client should wait before asking again for a pending rating.
const RETRY_AFTER_SECONDS: &str = "5";

/// Call ids one bulk request may name.
const MAX_BULK_IDS: usize = 1_000;

/// The rating routes; static paths win over `/api/ratings/{callId}`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_ratings))
        .routes(routes!(rating_stats))
        .routes(routes!(rating_analytics))
        .routes(routes!(export_all))
        .routes(routes!(export_sheet))
        .routes(routes!(bulk_regenerate))
        .routes(routes!(reload))
        .routes(routes!(ratings_by_phone))
        .routes(routes!(get_rating))
        .routes(routes!(rate_now))
        .routes(routes!(regenerate))
}

/// One scored column.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ColumnView {
    /// Column name from the template.
    pub name: String,
    /// 0 (worst) to 10 (best).
    pub score: f64,
    /// The evidence behind the score.
    #[serde(default)]
    pub reason: String,
}

/// A rating (scorecard): the spec's record plus its state.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RatingView {
    /// The rated call.
    pub call_id: String,
    /// The call's target name.
    pub candidate_name: String,
    /// Mean of the column scores; null until done.
    pub overall_rating: Option<f64>,
    /// The agent's name.
    pub agent_name: String,
    /// One entry per template column.
    pub columns: Vec<ColumnView>,
    /// `pending`, `done` or `failed`.
    pub status: String,
    /// Agent id.
    pub agent_id: String,
    /// Number called, E.164.
    pub phone: String,
    /// Why the last scoring failed.
    pub error: Option<String>,
    /// When the scorecard was produced, ISO 8601.
    pub rated_at: Option<String>,
    /// When the call was placed, ISO 8601.
    pub call_created_at: String,
}

impl RatingView {
    fn from_row(row: RatingRow) -> Self {
        let columns = serde_json::from_str(&row.columns).unwrap_or_default();
        Self {
            call_id: row.call_id,
            candidate_name: row.target_name,
            overall_rating: row.overall,
            agent_name: row.agent_name,
            columns,
            error: (row.status == "failed").then_some(row.last_error).flatten(),
            status: row.status,
            agent_id: row.agent_id,
            phone: row.phone,
            rated_at: row.rated_at.map(iso),
            call_created_at: iso(row.call_created_at),
        }
    }
}

/// `{phone, rows}`: every rating of calls to one number.
#[derive(Debug, Serialize, ToSchema)]
pub struct PhoneRatings {
    /// The number, E.164.
    pub phone: String,
    /// Its ratings, newest call first.
    pub rows: Vec<RatingView>,
}

/// One agent's averages.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentAverage {
    /// Agent id.
    pub agent_id: String,
    /// Agent name.
    pub agent_name: String,
    /// Its done ratings.
    pub rated: i64,
    /// Their mean overall.
    pub average_overall: Option<f64>,
}

/// Counts by status and averages across the workspace.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RatingStats {
    /// Every rating.
    pub total: i64,
    /// Waiting to be scored.
    pub pending: i64,
    /// Scored.
    pub done: i64,
    /// Given up (see `error`; regenerate or reload to retry).
    pub failed: i64,
    /// Mean overall of the done ratings.
    pub average_overall: Option<f64>,
    /// Per agent, by agent id.
    pub agents: Vec<AgentAverage>,
}

/// How many scores fell on one value.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Bucket {
    /// The score, 0–10 (decimal scores are rounded).
    pub score: u8,
    /// Ratings with it.
    pub count: i64,
}

/// The distribution of one column's (or the overall) scores.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Distribution {
    /// Column name (`overall` for the overall rating).
    pub name: String,
    /// Scores counted.
    pub count: i64,
    /// Their mean.
    pub average: Option<f64>,
    /// Eleven buckets, scores 0 to 10.
    pub buckets: Vec<Bucket>,
}

impl Distribution {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            count: 0,
            average: None,
            buckets: (0..=10).map(|score| Bucket { score, count: 0 }).collect(),
        }
    }

    fn add(&mut self, score: f64) {
        let bucket = score.round().clamp(0.0, 10.0) as usize;
        self.buckets[bucket].count += 1;
        let sum = self.average.unwrap_or(0.0) * self.count as f64 + score;
        self.count += 1;
        self.average = Some(sum / self.count as f64);
    }

    fn rounded(mut self) -> Self {
        self.average = self.average.map(round2);
        self
    }
}

/// Score distributions of the done ratings.
#[derive(Debug, Serialize, ToSchema)]
pub struct RatingAnalytics {
    /// Done ratings counted.
    pub total: i64,
    /// The overall rating's distribution.
    pub overall: Distribution,
    /// One per column name, in order of first appearance.
    pub columns: Vec<Distribution>,
}

/// `{message, queued}` of the re-queueing operations.
#[derive(Debug, Serialize, ToSchema)]
pub struct QueuedBody {
    /// What was done.
    pub message: String,
    /// Ratings put back in the queue.
    pub queued: u64,
}

/// Body of `POST /api/ratings/export-sheet`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportSheetRequest {
    /// The spreadsheet id from its URL (required).
    pub spreadsheet_id: Option<String>,
    /// A1 range rows are appended after (default `Sheet1!A1`).
    pub range: Option<String>,
    /// OAuth token with the spreadsheets scope; default: the workspace's `google` credential.
    pub access_token: Option<String>,
    /// Only this agent's calls.
    pub agent_id: Option<String>,
    /// Calls from this date or instant.
    pub from: Option<String>,
    /// Calls up to this date (inclusive) or before this instant.
    pub to: Option<String>,
    /// Write a header row first (default true).
    pub header: Option<bool>,
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

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

/// A `from`/`to` bound: an RFC 3339 instant, or an IST calendar day (`to`
/// days are inclusive, so they end at the next midnight).
fn parse_bound(field: &str, raw: &str, end: bool) -> ApiResult<i64> {
    let raw = raw.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
        return Ok(at.timestamp_millis());
    }
    let day = NaiveDate::parse_from_str(raw, "%Y-%m-%d").map_err(|_| {
        ApiError::BadRequest(format!(
            "{field} must be a date (YYYY-MM-DD) or an RFC 3339 instant"
        ))
    })?;
    let day = if end {
        day.succ_opt()
            .ok_or_else(|| ApiError::BadRequest(format!("{field} is out of range")))?
    } else {
        day
    };
    let midnight = day.and_hms_opt(0, 0, 0).unwrap_or_default();
    IST.from_local_datetime(&midnight)
        .single()
        .map(|t| t.with_timezone(&Utc).timestamp_millis())
        .ok_or_else(|| ApiError::BadRequest(format!("{field} is out of range")))
}

fn optional_bound(field: &str, raw: Option<&str>, end: bool) -> ApiResult<Option<i64>> {
    raw.map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| parse_bound(field, r, end))
        .transpose()
}

fn parse_score(field: &str, raw: Option<&str>) -> ApiResult<Option<f64>> {
    raw.map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| {
            r.parse::<f64>()
                .ok()
                .filter(|s| (0.0..=10.0).contains(s))
                .ok_or_else(|| {
                    ApiError::BadRequest(format!("{field} must be a number from 0 to 10"))
                })
        })
        .transpose()
}

fn parse_status(raw: Option<&str>, default: &str) -> ApiResult<String> {
    match raw.map(str::trim).filter(|r| !r.is_empty()) {
        None => Ok(default.to_string()),
        Some(s @ ("pending" | "done" | "failed" | "all")) => Ok(s.to_string()),
        Some(other) => Err(ApiError::BadRequest(format!(
            "status must be pending, done, failed or all, not \"{other}\""
        ))),
    }
}

fn parse_agent(raw: Option<&str>) -> Option<String> {
    raw.map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string)
}

/// The filters of the list, the analytics and the export; checked, in this
/// order, by [`RatingFilterQuery::into_filter`] with the same rules as the
/// export bodies.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct RatingFilterQuery {
    /// pending, done, failed or all; the list defaults to done, the export to all, and analytics reads done ratings only.
    pub status: Option<String>,
    /// Only this agent's calls.
    pub agent_id: Option<String>,
    /// Calls from this day (YYYY-MM-DD, IST) or instant.
    pub from: Option<String>,
    /// Calls up to this day (inclusive) or before this instant.
    pub to: Option<String>,
    /// Overall at least, 0 to 10.
    #[param(value_type = Option<f64>, minimum = 0, maximum = 10)]
    pub min_score: Option<String>,
    /// Overall at most, 0 to 10.
    #[param(value_type = Option<f64>, minimum = 0, maximum = 10)]
    pub max_score: Option<String>,
}

/// The by-phone read's filter.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RatingStatusQuery {
    /// done (default), pending, failed or all.
    pub status: Option<String>,
}

impl RatingFilterQuery {
    /// The store filter; `status` defaults to `default_status`.
    fn into_filter(self, default_status: &str) -> ApiResult<RatingFilter> {
        let filter = RatingFilter {
            status: parse_status(self.status.as_deref(), default_status)?,
            agent_id: parse_agent(self.agent_id.as_deref()),
            from_ms: optional_bound("from", self.from.as_deref(), false)?,
            to_ms: optional_bound("to", self.to.as_deref(), true)?,
            min_score: parse_score("minScore", self.min_score.as_deref())?,
            max_score: parse_score("maxScore", self.max_score.as_deref())?,
        };
        if let (Some(min), Some(max)) = (filter.min_score, filter.max_score)
            && min > max
        {
            return Err(ApiError::BadRequest(
                "minScore must not be greater than maxScore".into(),
            ));
        }
        Ok(filter)
    }
}

/// A call id from the path; anything else names no rating.
fn call_id_param(raw: &str) -> ApiResult<String> {
    raw.parse::<CallId>()
        .map(|id| id.to_string())
        .map_err(|_| ApiError::NotFound(format!("Rating for call {raw} not found")))
}

/// List ratings, newest call first. Filters: `status` (`done` by default;
/// `pending`, `failed`, `all`), `agentId`, `from`/`to` (call date: YYYY-MM-DD
/// in IST, `to` inclusive, or RFC 3339), `minScore`/`maxScore` (overall).
#[utoipa::path(get, path = "/api/ratings", tag = "ratings",
    params(PageRequest, RatingFilterQuery),
    responses((status = 200, body = ListEnvelope<RatingView>), (status = 400, body = MessageBody)))]
async fn list_ratings(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
    ApiQuery(query): ApiQuery<RatingFilterQuery>,
) -> ApiResult<Json<ListEnvelope<RatingView>>> {
    let filter = query.into_filter("done")?;
    let (rows, total) = state
        .store
        .list_ratings(&caller.org(), &filter, i64::from(page.limit), page.offset())
        .await?;
    Ok(Json(ListEnvelope::new(
        rows.into_iter().map(RatingView::from_row).collect(),
        total,
        page,
    )))
}

/// One call's rating. A rating still being scored answers 404 with
/// `status: "pending"` and `Retry-After`; a failed one answers 200 with
/// `status: "failed"` and the `error`.
#[utoipa::path(get, path = "/api/ratings/{callId}", tag = "ratings",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = RatingView), (status = 404, body = MessageBody)))]
async fn get_rating(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> ApiResult<Response> {
    let call_id = call_id_param(&raw)?;
    let org = caller.org();
    match state.store.rating(&org, &call_id).await? {
        Some(row) if row.status == "pending" => {
            let body = serde_json::json!({
                "message": format!("Rating for call {call_id} is not ready yet: it is being scored; retry in a few seconds"),
                "status": "pending",
            });
            let mut response = (StatusCode::NOT_FOUND, Json(body)).into_response();
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
            Ok(response)
        }
        Some(row) => Ok(Json(RatingView::from_row(row)).into_response()),
        None if state.store.call_status(&org, &call_id).await?.is_some() => {
            Err(ApiError::NotFound(format!(
                "Call {call_id} has no rating: only completed calls in which the callee spoke are rated (POST /api/ratings/{call_id}/rate-now scores it anyway)"
            )))
        }
        None => Err(ApiError::NotFound(format!(
            "Rating for call {call_id} not found"
        ))),
    }
}

/// Every rating of calls to one number (`status` as in the list, default `done`).
#[utoipa::path(get, path = "/api/ratings/by-phone/{phone}", tag = "ratings",
    params(("phone" = String, Path, description = "E.164 number, e.g. +919845012310"),
        RatingStatusQuery),
    responses((status = 200, body = PhoneRatings), (status = 400, body = MessageBody)))]
async fn ratings_by_phone(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
    ApiQuery(query): ApiQuery<RatingStatusQuery>,
) -> ApiResult<Json<PhoneRatings>> {
    let phone =
        PhoneNumber::parse(&raw).map_err(|e| ApiError::BadRequest(format!("phone {raw:?} {e}")))?;
    let status = parse_status(query.status.as_deref(), "done")?;
    let rows = state
        .store
        .ratings_by_phone(&caller.org(), phone.as_str(), &status)
        .await?;
    Ok(Json(PhoneRatings {
        phone: phone.as_str().to_string(),
        rows: rows.into_iter().map(RatingView::from_row).collect(),
    }))
}

/// Counts by status, the average overall and each agent's average.
#[utoipa::path(get, path = "/api/ratings/stats", tag = "ratings",
    responses((status = 200, body = RatingStats)))]
async fn rating_stats(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<RatingStats>> {
    let (counts, agents) = state.store.rating_stats(&caller.org()).await?;
    Ok(Json(RatingStats {
        total: counts.total,
        pending: counts.pending,
        done: counts.done,
        failed: counts.failed,
        average_overall: counts.average_overall.map(round2),
        agents: agents
            .into_iter()
            .map(|a| AgentAverage {
                agent_id: a.agent_id,
                agent_name: a.agent_name,
                rated: a.rated,
                average_overall: a.average_overall.map(round2),
            })
            .collect(),
    }))
}

/// Every row of `filter`, page by page.
async fn each_rating(
    store: &Store,
    org_id: &str,
    filter: &RatingFilter,
    mut visit: impl FnMut(Vec<RatingRow>),
) -> Result<(), StoreError> {
    let mut after = None;
    loop {
        let rows = store
            .ratings_after(org_id, filter, after, EXPORT_PAGE_ROWS)
            .await?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = Some((last.call_created_at, last.call_id.clone()));
        let full = rows.len() as i64 == EXPORT_PAGE_ROWS;
        visit(rows);
        if !full {
            return Ok(());
        }
    }
}

/// The distribution of each column's scores (11 buckets, 0–10) and of the
/// overall, over done ratings (filters `agentId`, `from`, `to` as in the list).
#[utoipa::path(get, path = "/api/ratings/analytics", tag = "ratings",
    params(RatingFilterQuery),
    responses((status = 200, body = RatingAnalytics), (status = 400, body = MessageBody)))]
async fn rating_analytics(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<RatingFilterQuery>,
) -> ApiResult<Json<RatingAnalytics>> {
    let filter = RatingFilter {
        status: "done".into(),
        ..query.into_filter("done")?
    };
    let mut overall = Distribution::new("overall");
    let mut columns: Vec<Distribution> = Vec::new();
    let mut total = 0;
    each_rating(&state.store, &caller.org(), &filter, |rows| {
        for row in rows {
            total += 1;
            if let Some(o) = row.overall {
                overall.add(o);
            }
            let scored: Vec<ColumnView> = serde_json::from_str(&row.columns).unwrap_or_default();
            for column in scored {
                let at = match columns.iter().position(|d| d.name == column.name) {
                    Some(at) => at,
                    None => {
                        columns.push(Distribution::new(&column.name));
                        columns.len() - 1
                    }
                };
                columns[at].add(column.score);
            }
        }
    })
    .await?;
    Ok(Json(RatingAnalytics {
        total,
        overall: overall.rounded(),
        columns: columns.into_iter().map(Distribution::rounded).collect(),
    }))
}

/// A CSV chunk of `rows`, with the header first when `header` is set.
fn csv_chunk(rows: &[RatingRow], header: bool) -> Result<Bytes, csv::Error> {
    let mut out = csv::WriterBuilder::new()
        .terminator(csv::Terminator::Any(b'\n'))
        .from_writer(Vec::new());
    if header {
        out.write_record(EXPORT_HEADER)?;
    }
    for row in rows {
        out.write_record(export_record(row))?;
    }
    out.into_inner()
        .map(Bytes::from)
        .map_err(|e| csv::Error::from(e.into_error()))
}

/// Where a streamed export is.
struct ExportCursor {
    store: Store,
    org_id: String,
    filter: RatingFilter,
    after: Option<(i64, String)>,
    header_written: bool,
    finished: bool,
}

async fn next_export_chunk(
    mut cursor: ExportCursor,
) -> Result<Option<(Bytes, ExportCursor)>, std::io::Error> {
    if cursor.finished {
        return Ok(None);
    }
    let rows = cursor
        .store
        .ratings_after(
            &cursor.org_id,
            &cursor.filter,
            cursor.after.clone(),
            EXPORT_PAGE_ROWS,
        )
        .await
        .map_err(std::io::Error::other)?;
    cursor.finished = (rows.len() as i64) < EXPORT_PAGE_ROWS;
    if let Some(last) = rows.last() {
        cursor.after = Some((last.call_created_at, last.call_id.clone()));
    }
    let chunk = csv_chunk(&rows, !cursor.header_written).map_err(std::io::Error::other)?;
    cursor.header_written = true;
    Ok(Some((chunk, cursor)))
}

/// Every rating as a CSV download, streamed page by page (`status` defaults
/// to `all`; other filters as in the list).
#[utoipa::path(get, path = "/api/ratings/export-all", tag = "ratings",
    params(RatingFilterQuery),
    responses((status = 200, description = "text/csv attachment", content_type = "text/csv"),
        (status = 400, body = MessageBody)))]
async fn export_all(
    State(state): State<AppState>,
    caller: Caller,
    ApiQuery(query): ApiQuery<RatingFilterQuery>,
) -> ApiResult<Response> {
    let cursor = ExportCursor {
        store: state.store.clone(),
        org_id: caller.org(),
        filter: query.into_filter("all")?,
        after: None,
        header_written: false,
        finished: false,
    };
    let stream = futures::stream::try_unfold(cursor, next_export_chunk);
    Ok(csv_attachment("ratings.csv", stream))
}

/// The workspace's stored Google token, if it has one.
async fn stored_google_token(state: &AppState, org_id: &str) -> ApiResult<Option<String>> {
    let Some((nonce, sealed)) = state.store.credential(org_id, "google").await? else {
        return Ok(None);
    };
    let plain = CredentialCipher::new(&state.secret)
        .open(&nonce, &sealed)
        .map_err(|e| anyhow::anyhow!("google credential: {e}"))?;
    let value: Value =
        serde_json::from_slice(&plain).map_err(|e| anyhow::anyhow!("google credential: {e}"))?;
    Ok(value
        .get("accessToken")
        .and_then(Value::as_str)
        .filter(|t| !t.is_empty())
        .map(str::to_string))
}

/// Appends the done ratings (filters `agentId`, `from`, `to`) to a Google
/// Sheet with the Sheets API v4 `values:append`, a header row first.
#[utoipa::path(post, path = "/api/ratings/export-sheet", tag = "ratings",
    request_body = ExportSheetRequest,
    responses((status = 200, body = MessageBody), (status = 400, body = MessageBody),
        (status = 502, body = MessageBody)))]
async fn export_sheet(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<ExportSheetRequest>,
) -> ApiResult<Json<MessageBody>> {
    let spreadsheet_id = body
        .spreadsheet_id
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .ok_or_else(|| ApiError::BadRequest("spreadsheetId is required".into()))?;
    if !valid_spreadsheet_id(spreadsheet_id) {
        return Err(ApiError::BadRequest(
            "spreadsheetId must be the id from the spreadsheet's URL (letters, digits, - and _)"
                .into(),
        ));
    }
    let range = body
        .range
        .as_deref()
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .unwrap_or("Sheet1!A1")
        .to_string();
    if range.chars().any(char::is_control) || range.len() > 200 {
        return Err(ApiError::BadRequest(
            "range must be an A1 range such as Sheet1!A1".into(),
        ));
    }
    let org = caller.org();
    let token = match body
        .access_token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        Some(token) => token.to_string(),
        None => stored_google_token(&state, &org).await?.ok_or_else(|| {
            ApiError::BadRequest(
                "accessToken is required: pass it in the body or store a google workspace credential ({\"accessToken\": …})".into(),
            )
        })?,
    };
    let filter = RatingFilter {
        status: "done".into(),
        agent_id: parse_agent(body.agent_id.as_deref()),
        from_ms: optional_bound("from", body.from.as_deref(), false)?,
        to_ms: optional_bound("to", body.to.as_deref(), true)?,
        min_score: None,
        max_score: None,
    };
    let mut pages = Vec::new();
    each_rating(&state.store, &org, &filter, |rows| pages.push(rows)).await?;
    let count: usize = pages.iter().map(Vec::len).sum();
    if count == 0 {
        return Ok(MessageBody::json(
            "No done ratings match; nothing was appended",
        ));
    }
    let target = SheetTarget {
        spreadsheet_id: spreadsheet_id.to_string(),
        range,
    };
    let http = reqwest::Client::new();
    let mut header = body.header.unwrap_or(true);
    for page in pages {
        let mut values: Vec<Vec<String>> = Vec::with_capacity(page.len() + 1);
        if header {
            values.push(EXPORT_HEADER.iter().map(|h| (*h).to_string()).collect());
            header = false;
        }
        values.extend(page.iter().map(export_record));
        append_rows(
            &http,
            &state.settings.ratings.sheets_base_url,
            &token,
            &target,
            values,
        )
        .await
        .map_err(|e| ApiError::BadGateway(e.to_string()))?;
    }
    Ok(MessageBody::json(format!(
        "Appended {count} rating(s) to spreadsheet {spreadsheet_id}"
    )))
}

/// Whether a call can be scored: it ended, and (without a rating yet) it
/// completed with the callee speaking.
async fn check_rateable(state: &AppState, org: &str, call_id: &str) -> ApiResult<()> {
    let status = state
        .store
        .call_status(org, call_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Call {call_id} not found")))?;
    if !CallStatus::parse(&status).is_some_and(CallStatus::is_terminal) {
        return Err(ApiError::conflict(format!(
            "Call {call_id} has not ended yet ({status}); it is rated when it does"
        )));
    }
    if !state.store.call_conversed(org, call_id).await? {
        return Err(ApiError::conflict(format!(
            "Call {call_id} has no conversation to rate: it did not complete with the callee speaking"
        )));
    }
    Ok(())
}

/// Scores a call now and answers with the outcome.
async fn rate_synchronously(
    state: &AppState,
    org: &str,
    call_id: &str,
    done: &str,
) -> ApiResult<Json<MessageBody>> {
    let claim = take_now(state, org, call_id)
        .await?
        .ok_or_else(|| ApiError::NotFound(format!("Call {call_id} not found")))?;
    match rate_claimed(state, &claim).await? {
        RatingOutcome::Done { overall } => Ok(MessageBody::json(format!(
            "{done} call {call_id}: overall {overall}"
        ))),
        RatingOutcome::Failed { reason } => Err(ApiError::BadGateway(format!(
            "Rating call {call_id} failed: {reason}"
        ))),
        RatingOutcome::Stale => Err(ApiError::conflict(format!(
            "The rating of call {call_id} was re-queued while it was being scored; try again"
        ))),
    }
}

/// Scores a call now instead of waiting for the queue; answers when done.
/// An already-rated call is left as it is (use regenerate to replace it).
#[utoipa::path(post, path = "/api/ratings/{callId}/rate-now", tag = "ratings",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody),
        (status = 409, body = MessageBody), (status = 502, body = MessageBody)))]
async fn rate_now(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    let call_id = call_id_param(&raw)?;
    let org = caller.org();
    match state.store.rating(&org, &call_id).await? {
        Some(row) if row.status == "done" => {
            return Ok(MessageBody::json(format!(
                "Call {call_id} is already rated (overall {}); use regenerate to score it again",
                row.overall.unwrap_or_default()
            )));
        }
        Some(_) => {}
        None => check_rateable(&state, &org, &call_id).await?,
    }
    rate_synchronously(&state, &org, &call_id, "Rated").await
}

/// Scores a rated call again with its agent's current template and LLM; the
/// new scorecard replaces the old one (which stays readable meanwhile).
#[utoipa::path(post, path = "/api/ratings/{callId}/regenerate", tag = "ratings",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody),
        (status = 502, body = MessageBody)))]
async fn regenerate(
    State(state): State<AppState>,
    caller: Caller,
    Path(raw): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    let call_id = call_id_param(&raw)?;
    let org = caller.org();
    if state.store.rating(&org, &call_id).await?.is_none() {
        return Err(ApiError::NotFound(format!(
            "Call {call_id} has no rating to regenerate"
        )));
    }
    rate_synchronously(&state, &org, &call_id, "Regenerated the scorecard of").await
}

/// Puts many ratings back in the queue: the named `callIds`, or those whose
/// calls match `agentId`/`from`/`to`. The worker re-scores them.
#[utoipa::path(post, path = "/api/ratings/bulk-regenerate", tag = "ratings",
    request_body = BulkRegenerateRequest,
    responses((status = 200, body = QueuedBody), (status = 400, body = MessageBody)))]
async fn bulk_regenerate(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<BulkRegenerateRequest>,
) -> ApiResult<Json<QueuedBody>> {
    let org = caller.org();
    let now = state.clock.now().timestamp_millis();
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
            parsed.push(id.to_string());
        }
        state.store.requeue_rating_ids(&org, &parsed, now).await?
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
        state.store.requeue_ratings(&org, &filter, now).await?
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
async fn reload(State(state): State<AppState>, caller: Caller) -> ApiResult<Json<QueuedBody>> {
    let org = caller.org();
    let mut own = 0;
    let mut default = 0;
    for agent_id in state.store.rated_agent_ids(&org).await? {
        let spec = state
            .store
            .agent(&org, &agent_id)
            .await?
            .and_then(|a| a.spec().ok());
        let agent_template = spec.as_ref().and_then(|s| s.rating_template.as_ref());
        if effective_template(agent_template) == effective_template(None) {
            default += 1;
        } else {
            own += 1;
        }
    }
    let now = state.clock.now().timestamp_millis();
    let mut queued = 0;
    for status in ["pending", "failed"] {
        let filter = RatingFilter {
            status: status.into(),
            ..RatingFilter::default()
        };
        queued += state.store.requeue_ratings(&org, &filter, now).await?;
    }
    Ok(Json(QueuedBody {
        message: format!(
            "Re-read the templates of {} agent(s) ({own} with their own, {default} on the default); re-queued {queued} pending or failed rating(s)",
            own + default
        ),
        queued,
    }))
}
