//! Reading ratings: the list, one call's scorecard (with its pending and
//! unrated answers), and every rating of one number.

use super::query::{RatingFilterQuery, RatingStatusQuery, call_id_param, parse_status};
use crate::domain::clock::iso;
use crate::domain::page::{ListEnvelope, PageRequest};
use crate::domain::phone::PhoneNumber;
use crate::http::MessageBody;
use crate::http::auth::Caller;
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::ApiQuery;
use crate::store::Store;
use crate::store::{RatingRow, StoreResult, decode_json};
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// Seconds a client should wait before asking again for a pending rating.
const RETRY_AFTER_SECONDS: &str = "5";

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
    fn from_row(row: RatingRow) -> StoreResult<Self> {
        let columns = decode_json("ratings", "columns", row.call_id, &row.columns)?;
        Ok(Self {
            call_id: row.call_id.to_string(),
            candidate_name: row.target_name,
            overall_rating: row.overall,
            agent_name: row.agent_name,
            columns,
            error: (row.status == "failed").then_some(row.last_error).flatten(),
            status: row.status,
            agent_id: row.agent_id.to_string(),
            phone: row.phone,
            rated_at: row.rated_at.map(iso),
            call_created_at: iso(row.call_created_at),
        })
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

/// List ratings, newest call first. Filters: `status` (`done` by default;
/// `pending`, `failed`, `all`), `agentId`, `from`/`to` (call date: YYYY-MM-DD
/// in IST, `to` inclusive, or RFC 3339), `minScore`/`maxScore` (overall).
#[utoipa::path(get, path = "/api/ratings", tag = "ratings",
    params(PageRequest, RatingFilterQuery),
    responses((status = 200, body = ListEnvelope<RatingView>), (status = 400, body = MessageBody)))]
pub(super) async fn list_ratings(
    State(store): State<Store>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
    ApiQuery(query): ApiQuery<RatingFilterQuery>,
) -> ApiResult<Json<ListEnvelope<RatingView>>> {
    let filter = query.into_filter("done")?;
    let (rows, total) = store
        .list_ratings(caller.org_id, &filter, i64::from(page.limit), page.offset())
        .await?;
    Ok(Json(ListEnvelope::new(
        rows.into_iter()
            .map(RatingView::from_row)
            .collect::<StoreResult<_>>()?,
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
pub(super) async fn get_rating(
    State(store): State<Store>,
    caller: Caller,
    Path(raw): Path<String>,
) -> ApiResult<Response> {
    let call_id = call_id_param(&raw)?;
    let org = caller.org_id;
    match store.rating(org, call_id).await? {
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
        Some(row) => Ok(Json(RatingView::from_row(row)?).into_response()),
        None if store.call_status(org, call_id).await?.is_some() => {
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
    params(("phone" = String, Path, description = "E.164 number, e.g. +919845012310",
            pattern = r"^\+[1-9][0-9]{6,14}$"),
        RatingStatusQuery),
    responses((status = 200, body = PhoneRatings), (status = 400, body = MessageBody)))]
pub(super) async fn ratings_by_phone(
    State(store): State<Store>,
    caller: Caller,
    Path(raw): Path<String>,
    ApiQuery(query): ApiQuery<RatingStatusQuery>,
) -> ApiResult<Json<PhoneRatings>> {
    let phone =
        PhoneNumber::parse(&raw).map_err(|e| ApiError::BadRequest(format!("phone {raw:?} {e}")))?;
    let status = parse_status(query.status.as_deref(), "done")?;
    let rows = store
        .ratings_by_phone(caller.org_id, phone.as_str(), &status)
        .await?;
    Ok(Json(PhoneRatings {
        phone: phone.as_str().to_string(),
        rows: rows
            .into_iter()
            .map(RatingView::from_row)
            .collect::<StoreResult<_>>()?,
    }))
}
