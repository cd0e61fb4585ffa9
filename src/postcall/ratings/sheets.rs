//! Appends rows to a Google Sheet with the Sheets API v4
//! (`POST /v4/spreadsheets/{id}/values/{range}:append`), authorized with an
//! OAuth bearer token.

use serde_json::{Value, json};
use std::time::Duration;

/// Per-request timeout.
const TIMEOUT: Duration = Duration::from_secs(20);

/// Why an append failed.
#[derive(Debug, thiserror::Error)]
pub enum SheetsError {
    /// The base URL or range does not make a URL.
    #[error("bad Sheets API address: {0}")]
    BadUrl(String),
    /// Google could not be reached.
    #[error("the Sheets API could not be reached: {0}")]
    Request(String),
    /// Google refused the request.
    #[error("the Sheets API answered {status}: {message}")]
    Status {
        /// HTTP status.
        status: u16,
        /// Google's error message, if any.
        message: String,
    },
}

/// A spreadsheet and the range rows are appended after.
#[derive(Debug, Clone)]
pub struct SheetTarget {
    /// The spreadsheet id from its URL.
    pub spreadsheet_id: String,
    /// A1 range, e.g. `Sheet1!A1`.
    pub range: String,
}

/// Whether `id` looks like a spreadsheet id (letters, digits, `-`, `_`).
pub fn valid_spreadsheet_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 200
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

/// The `values:append` URL for `target` under `base_url`.
pub fn append_url(base_url: &str, target: &SheetTarget) -> Result<reqwest::Url, SheetsError> {
    let mut url = reqwest::Url::parse(base_url).map_err(|e| SheetsError::BadUrl(e.to_string()))?;
    url.path_segments_mut()
        .map_err(|()| SheetsError::BadUrl(base_url.to_string()))?
        .pop_if_empty()
        .extend([
            "v4",
            "spreadsheets",
            &target.spreadsheet_id,
            "values",
            &format!("{}:append", target.range),
        ]);
    url.query_pairs_mut()
        .append_pair("valueInputOption", "RAW")
        .append_pair("insertDataOption", "INSERT_ROWS");
    Ok(url)
}

/// Appends `rows` after `target`'s range; returns the rows Google reports written.
pub async fn append_rows(
    http: &reqwest::Client,
    base_url: &str,
    token: &str,
    target: &SheetTarget,
    rows: Vec<Vec<String>>,
) -> Result<u64, SheetsError> {
    let url = append_url(base_url, target)?;
    let sent = rows.len() as u64;
    let body = json!({
        "range": target.range,
        "majorDimension": "ROWS",
        "values": rows,
    });
    let response = http
        .post(url)
        .timeout(TIMEOUT)
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .map_err(|e| SheetsError::Request(e.without_url().to_string()))?;
    let status = response.status();
    let answer: Value = response.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let message = answer
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or_else(|| status.canonical_reason().unwrap_or("request failed"))
            .to_string();
        return Err(SheetsError::Status {
            status: status.as_u16(),
            message,
        });
    }
    Ok(answer
        .pointer("/updates/updatedRows")
        .and_then(Value::as_u64)
        .unwrap_or(sent))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_encode_the_range_and_ids_are_checked() {
        let target = SheetTarget {
            spreadsheet_id: "1AbC_d-9".into(),
            range: "My Sheet!A1".into(),
        };
        let url = append_url("https://sheets.googleapis.com", &target).unwrap();
        assert_eq!(
            url.as_str(),
            "https://sheets.googleapis.com/v4/spreadsheets/1AbC_d-9/values/My%20Sheet!A1:append?valueInputOption=RAW&insertDataOption=INSERT_ROWS"
        );
        assert!(valid_spreadsheet_id("1AbC_d-9"));
        assert!(!valid_spreadsheet_id("../x"));
        assert!(!valid_spreadsheet_id(""));
    }
}
