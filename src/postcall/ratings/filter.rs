//! Which ratings a list, analytics or export covers, from what a client
//! typed: `from`/`to` bounds (IST days or instants), score bounds, status and
//! agent. The API's query strings and the console's filter form read alike.

use crate::domain::clock::IST;
use crate::store::RatingFilter;
use chrono::{DateTime, NaiveDate, TimeZone, Utc};

/// A filter value that does not parse; the message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct FilterError(pub String);

/// The filters as a client typed them; blank values are absent.
#[derive(Debug, Clone, Default)]
pub struct RatingFilterText<'a> {
    /// pending, done, failed or all.
    pub status: Option<&'a str>,
    /// Only this agent's calls.
    pub agent_id: Option<&'a str>,
    /// Calls from this day (YYYY-MM-DD, IST) or instant.
    pub from: Option<&'a str>,
    /// Calls up to this day (inclusive) or before this instant.
    pub to: Option<&'a str>,
    /// Overall at least, 0 to 10.
    pub min_score: Option<&'a str>,
    /// Overall at most, 0 to 10.
    pub max_score: Option<&'a str>,
}

impl RatingFilterText<'_> {
    /// The store filter, checked in field order; `status` defaults to `default_status`.
    pub fn parse(&self, default_status: &str) -> Result<RatingFilter, FilterError> {
        let filter = RatingFilter {
            status: parse_status(self.status, default_status)?,
            agent_id: parse_agent(self.agent_id),
            from_ms: optional_bound("from", self.from, false)?,
            to_ms: optional_bound("to", self.to, true)?,
            min_score: parse_score("minScore", self.min_score)?,
            max_score: parse_score("maxScore", self.max_score)?,
        };
        if let (Some(min), Some(max)) = (filter.min_score, filter.max_score)
            && min > max
        {
            return Err(FilterError(
                "minScore must not be greater than maxScore".into(),
            ));
        }
        Ok(filter)
    }
}

/// A `from`/`to` bound: an RFC 3339 instant, or an IST calendar day (`to`
/// days are inclusive, so they end at the next midnight).
fn parse_bound(field: &str, raw: &str, end: bool) -> Result<i64, FilterError> {
    let raw = raw.trim();
    if let Ok(at) = DateTime::parse_from_rfc3339(raw) {
        return Ok(at.timestamp_millis());
    }
    let day = NaiveDate::parse_from_str(raw, "%Y-%m-%d").map_err(|_| {
        FilterError(format!(
            "{field} must be a date (YYYY-MM-DD) or an RFC 3339 instant"
        ))
    })?;
    let day = if end {
        day.succ_opt()
            .ok_or_else(|| FilterError(format!("{field} is out of range")))?
    } else {
        day
    };
    let midnight = day.and_hms_opt(0, 0, 0).unwrap_or_default();
    IST.from_local_datetime(&midnight)
        .single()
        .map(|t| t.with_timezone(&Utc).timestamp_millis())
        .ok_or_else(|| FilterError(format!("{field} is out of range")))
}

/// A bound when one is given (blank is none).
pub fn optional_bound(
    field: &str,
    raw: Option<&str>,
    end: bool,
) -> Result<Option<i64>, FilterError> {
    raw.map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| parse_bound(field, r, end))
        .transpose()
}

/// A score bound as the document types it, a number: a blank value is
/// refused like any other non-number.
fn parse_score(field: &str, raw: Option<&str>) -> Result<Option<f64>, FilterError> {
    raw.map(|r| {
        r.parse::<f64>()
            .ok()
            .filter(|s| (0.0..=10.0).contains(s))
            .ok_or_else(|| FilterError(format!("{field} must be a number from 0 to 10")))
    })
    .transpose()
}

/// The status filter, `default` when absent or blank.
pub fn parse_status(raw: Option<&str>, default: &str) -> Result<String, FilterError> {
    match raw.map(str::trim).filter(|r| !r.is_empty()) {
        None => Ok(default.to_string()),
        Some(s @ ("pending" | "done" | "failed" | "all")) => Ok(s.to_string()),
        Some(other) => Err(FilterError(format!(
            "status must be pending, done, failed or all, not \"{other}\""
        ))),
    }
}

/// The agent filter as given (a value that is no agent id matches nothing).
pub fn parse_agent(raw: Option<&str>) -> Option<String> {
    raw.map(str::trim)
        .filter(|r| !r.is_empty())
        .map(str::to_string)
}
