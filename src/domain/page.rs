//! Pagination parameters shared by every list endpoint.

use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};

/// The default number of rows per page (decisions §4).
pub const DEFAULT_LIMIT: u32 = 20;
/// The largest page a client may ask for.
pub const MAX_LIMIT: u32 = 100;

/// A validated page request: `page` ≥ 1, `limit` in 1..=100; the `page` and
/// `limit` query parameters of every list endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PageRequest {
    /// 1-based page number, default 1.
    #[serde(default = "first_page", deserialize_with = "page_param")]
    #[param(minimum = 1, maximum = 2_147_483_647)]
    pub page: u32,
    /// Rows per page: 1 to 100, default 20.
    #[serde(default = "default_limit", deserialize_with = "limit_param")]
    #[param(minimum = 1, maximum = 100)]
    pub limit: u32,
}

/// Why a page request was refused; the text names the parameter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct PageError(pub String);

/// The largest page number: the document says `int32`, so a client
/// generated from it never needs more, and the server refuses what it could
/// not send.
pub const MAX_PAGE: u32 = 2_147_483_647;

/// Why a `page` value is refused, said after the parameter's name.
const PAGE_REASON: &str = "must be an integer from 1 to 2147483647";

fn limit_reason() -> String {
    format!("must be an integer from 1 to {MAX_LIMIT}")
}

fn first_page() -> u32 {
    1
}

fn default_limit() -> u32 {
    DEFAULT_LIMIT
}

/// A `page` value; blank is refused like any other non-number (an absent
/// `page` is the first page).
fn page_number(raw: &str) -> Option<u32> {
    raw.parse::<u32>()
        .ok()
        .filter(|p| (1..=MAX_PAGE).contains(p))
}

/// A `limit` value; blank is refused (an absent `limit` is [`DEFAULT_LIMIT`]).
fn page_limit(raw: &str) -> Option<u32> {
    raw.parse::<u32>()
        .ok()
        .filter(|l| (1..=MAX_LIMIT).contains(l))
}

fn page_param<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    page_number(&String::deserialize(d)?).ok_or_else(|| D::Error::custom(PAGE_REASON))
}

fn limit_param<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    page_limit(&String::deserialize(d)?).ok_or_else(|| D::Error::custom(limit_reason()))
}

impl PageRequest {
    /// Parses raw query values, naming the offending parameter on failure.
    pub fn parse(page: Option<&str>, limit: Option<&str>) -> Result<Self, PageError> {
        let page = page
            .map_or(Some(1), page_number)
            .ok_or_else(|| PageError(format!("page {PAGE_REASON}")))?;
        let limit = limit
            .map_or(Some(DEFAULT_LIMIT), page_limit)
            .ok_or_else(|| PageError(format!("limit {}", limit_reason())))?;
        Ok(Self { page, limit })
    }

    /// Rows to skip before this page.
    pub fn offset(self) -> i64 {
        i64::from(self.page - 1) * i64::from(self.limit)
    }
}

/// The list envelope `{rows, total, page, limit}` of the spec.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ListEnvelope<T> {
    /// The rows of this page.
    pub rows: Vec<T>,
    /// Rows matching the request across all pages.
    pub total: i64,
    /// The 1-based page number.
    pub page: u32,
    /// Rows per page.
    pub limit: u32,
}

impl<T> ListEnvelope<T> {
    /// Wraps one page of rows.
    pub fn new(rows: Vec<T>, total: i64, req: PageRequest) -> Self {
        Self {
            rows,
            total,
            page: req.page,
            limit: req.limit,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bounds() {
        assert_eq!(
            PageRequest::parse(None, None).unwrap(),
            PageRequest { page: 1, limit: 20 }
        );
        assert!(
            PageRequest::parse(Some("0"), None)
                .unwrap_err()
                .0
                .contains("page")
        );
        assert!(
            PageRequest::parse(None, Some("101"))
                .unwrap_err()
                .0
                .contains("limit")
        );
        assert!(
            PageRequest::parse(None, Some("x"))
                .unwrap_err()
                .0
                .contains("limit")
        );
        assert_eq!(
            PageRequest::parse(Some("3"), Some("10")).unwrap().offset(),
            20
        );
    }
}
