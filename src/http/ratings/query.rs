//! The filters and call ids of rating requests: `from`/`to` bounds (IST
//! days or instants), score bounds, status, agent, and the path's call id.

use crate::domain::CallId;
use crate::domain::clock::IST;
use crate::http::error::{ApiError, ApiResult};
use crate::store::RatingFilter;
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use serde::Deserialize;
use utoipa::IntoParams;

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

pub(super) fn optional_bound(field: &str, raw: Option<&str>, end: bool) -> ApiResult<Option<i64>> {
    raw.map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| parse_bound(field, r, end))
        .transpose()
}

/// A score bound as the document types it, a number: a blank value is
/// refused like any other non-number.
fn parse_score(field: &str, raw: Option<&str>) -> ApiResult<Option<f64>> {
    raw.map(|r| {
        r.parse::<f64>()
            .ok()
            .filter(|s| (0.0..=10.0).contains(s))
            .ok_or_else(|| ApiError::BadRequest(format!("{field} must be a number from 0 to 10")))
    })
    .transpose()
}

pub(super) fn parse_status(raw: Option<&str>, default: &str) -> ApiResult<String> {
    match raw.map(str::trim).filter(|r| !r.is_empty()) {
        None => Ok(default.to_string()),
        Some(s @ ("pending" | "done" | "failed" | "all")) => Ok(s.to_string()),
        Some(other) => Err(ApiError::BadRequest(format!(
            "status must be pending, done, failed or all, not \"{other}\""
        ))),
    }
}

pub(super) fn parse_agent(raw: Option<&str>) -> Option<String> {
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
    #[param(pattern = r"^\s*(pending|done|failed|all)?\s*$")]
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
    #[param(pattern = r"^\s*(pending|done|failed|all)?\s*$")]
    pub status: Option<String>,
}

impl RatingFilterQuery {
    /// The store filter; `status` defaults to `default_status`.
    pub(super) fn into_filter(self, default_status: &str) -> ApiResult<RatingFilter> {
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
pub(super) fn call_id_param(raw: &str) -> ApiResult<CallId> {
    raw.parse::<CallId>()
        .map_err(|_| ApiError::NotFound(format!("Rating for call {raw} not found")))
}
