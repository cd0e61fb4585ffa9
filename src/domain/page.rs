//! Pagination parameters shared by every list endpoint.

use serde::Serialize;

/// The default number of rows per page (decisions §4).
pub const DEFAULT_LIMIT: u32 = 20;
/// The largest page a client may ask for.
pub const MAX_LIMIT: u32 = 100;

/// A validated page request: `page` ≥ 1, `limit` in 1..=100.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRequest {
    /// 1-based page number.
    pub page: u32,
    /// Rows per page.
    pub limit: u32,
}

/// Why a page request was refused; the text names the parameter.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{0}")]
pub struct PageError(pub String);

impl PageRequest {
    /// Parses raw query values, naming the offending parameter on failure.
    pub fn parse(page: Option<&str>, limit: Option<&str>) -> Result<Self, PageError> {
        let page = match page {
            None | Some("") => 1,
            Some(raw) => raw
                .parse::<u32>()
                .ok()
                .filter(|p| *p >= 1)
                .ok_or_else(|| PageError("page must be an integer of at least 1".into()))?,
        };
        let limit = match limit {
            None | Some("") => DEFAULT_LIMIT,
            Some(raw) => raw
                .parse::<u32>()
                .ok()
                .filter(|l| (1..=MAX_LIMIT).contains(l))
                .ok_or_else(|| {
                    PageError(format!("limit must be an integer from 1 to {MAX_LIMIT}"))
                })?,
        };
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
