//! The filters and call ids of rating requests: `from`/`to` bounds (IST
//! days or instants), score bounds, status, agent, and the path's call id.

use crate::domain::CallId;
use crate::http::error::{ApiError, ApiResult};
use crate::postcall::ratings::filter::{self, FilterError, RatingFilterText};
use crate::store::RatingFilter;
use serde::Deserialize;
use utoipa::IntoParams;

impl From<FilterError> for ApiError {
    fn from(err: FilterError) -> Self {
        Self::BadRequest(err.0)
    }
}

pub(super) fn optional_bound(field: &str, raw: Option<&str>, end: bool) -> ApiResult<Option<i64>> {
    Ok(filter::optional_bound(field, raw, end)?)
}

pub(super) fn parse_status(raw: Option<&str>, default: &str) -> ApiResult<String> {
    Ok(filter::parse_status(raw, default)?)
}

pub(super) fn parse_agent(raw: Option<&str>) -> Option<String> {
    filter::parse_agent(raw)
}

/// The filters of the list, the analytics and the export; checked, in this
/// order, by [`RatingFilterQuery::into_filter`] with the same rules as the
/// export bodies.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[serde(rename_all = "camelCase")]
#[into_params(parameter_in = Query)]
pub struct RatingFilterQuery {
    /// pending, done, failed or all; the list defaults to done, the export to all, and analytics reads done ratings only.
    // Spaces around the value are trimmed; tabs and line breaks are refused
    // as in any query value, so the pattern's white space excludes controls.
    #[param(
        pattern = r"^[^\S\x00-\x1f\x7f-\x9f]*(pending|done|failed|all)?[^\S\x00-\x1f\x7f-\x9f]*$"
    )]
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
    // Spaces around the value are trimmed; tabs and line breaks are refused
    // as in any query value, so the pattern's white space excludes controls.
    #[param(
        pattern = r"^[^\S\x00-\x1f\x7f-\x9f]*(pending|done|failed|all)?[^\S\x00-\x1f\x7f-\x9f]*$"
    )]
    pub status: Option<String>,
}

impl RatingFilterQuery {
    /// The store filter; `status` defaults to `default_status`.
    pub(super) fn into_filter(self, default_status: &str) -> ApiResult<RatingFilter> {
        let text = RatingFilterText {
            status: self.status.as_deref(),
            agent_id: self.agent_id.as_deref(),
            from: self.from.as_deref(),
            to: self.to.as_deref(),
            min_score: self.min_score.as_deref(),
            max_score: self.max_score.as_deref(),
        };
        Ok(text.parse(default_status)?)
    }
}

/// A call id from the path; anything else names no rating.
pub(super) fn call_id_param(raw: &str) -> ApiResult<CallId> {
    raw.parse::<CallId>()
        .map_err(|_| ApiError::NotFound(format!("Rating for call {raw} not found")))
}
