//! Ratings out of the service: every rating as a CSV download streamed page
//! by page, and the done ratings appended to a Google Sheet; `each_rating`
//! is the pager both (and the analytics) read through.

use super::query::{RatingFilterQuery, optional_bound, parse_agent};
use crate::config::Settings;
use crate::domain::CallId;
use crate::domain::OrgId;
use crate::http::MessageBody;
use crate::http::auth::Caller;
use crate::http::csv_download::{CsvExport, csv_export};
use crate::http::error::{ApiError, ApiResult};
use crate::http::extract::{ApiJson, ApiQuery};
use crate::postcall::ratings::export::{EXPORT_HEADER, EXPORT_PAGE_ROWS, export_record};
use crate::postcall::ratings::sheets::{SheetTarget, append_rows, valid_spreadsheet_id};
use crate::secrets::credentials::CredentialCipher;
use crate::secrets::server_secret::ServerSecret;
use crate::store::{RatingFilter, RatingRow, Store, StoreError, StoreResult};
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;
use std::sync::Arc;
use utoipa::ToSchema;

/// Body of `POST /api/ratings/export-sheet`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExportSheetRequest {
    /// The spreadsheet id from its URL (required).
    #[schema(required = true, nullable = false, pattern = r"\S")]
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

/// Every row of `filter`, page by page.
pub(super) async fn each_rating(
    store: &Store,
    org_id: OrgId,
    filter: &RatingFilter,
    mut visit: impl FnMut(Vec<RatingRow>) -> StoreResult<()>,
) -> Result<(), StoreError> {
    let mut after = None;
    loop {
        let rows = store
            .ratings_after(org_id, filter, after, EXPORT_PAGE_ROWS)
            .await?;
        let Some(last) = rows.last() else {
            return Ok(());
        };
        after = Some((last.call_created_at, last.call_id));
        let full = rows.len() as i64 == EXPORT_PAGE_ROWS;
        visit(rows)?;
        if !full {
            return Ok(());
        }
    }
}

/// The ratings CSV download of the API and the console: every rating `filter`
/// covers, in the order of their calls' `(created_at, id)`.
pub struct RatingsExport {
    /// Where the ratings are read from.
    pub store: Store,
    /// The workspace whose ratings are exported.
    pub org_id: OrgId,
    /// Which ratings.
    pub filter: RatingFilter,
}

impl CsvExport for RatingsExport {
    type Row = RatingRow;
    type Key = (i64, CallId);
    const NAME: &'static str = "rating";

    fn header(&self) -> Vec<String> {
        EXPORT_HEADER.map(String::from).to_vec()
    }

    async fn page(&self, after: Option<&(i64, CallId)>, limit: i64) -> StoreResult<Vec<RatingRow>> {
        self.store
            .ratings_after(self.org_id, &self.filter, after.copied(), limit)
            .await
    }

    fn key(row: &RatingRow) -> (i64, CallId) {
        (row.call_created_at, row.call_id)
    }

    fn record(&self, row: &RatingRow) -> StoreResult<Vec<String>> {
        export_record(row)
    }
}

/// Every rating as a CSV download, streamed page by page (`status` defaults
/// to `all`; other filters as in the list).
#[utoipa::path(get, path = "/api/ratings/export-all", tag = "ratings",
    params(RatingFilterQuery),
    responses((status = 200, description = "text/csv attachment", content_type = "text/csv"),
        (status = 400, body = MessageBody)))]
pub(super) async fn export_all(
    State(store): State<Store>,
    caller: Caller,
    ApiQuery(query): ApiQuery<RatingFilterQuery>,
) -> ApiResult<Response> {
    let filter = query.into_filter("all")?;
    let export = RatingsExport {
        store: store.clone(),
        org_id: caller.org_id,
        filter,
    };
    Ok(csv_export("ratings.csv", export))
}

/// The workspace's stored Google token, if it has one.
async fn stored_google_token(
    store: &Store,
    secret: &ServerSecret,
    org_id: OrgId,
) -> ApiResult<Option<String>> {
    let Some((nonce, sealed)) = store.credential(org_id, "google").await? else {
        return Ok(None);
    };
    let plain = CredentialCipher::new(secret)
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
pub(super) async fn export_sheet(
    State(store): State<Store>,
    State(settings): State<Arc<Settings>>,
    State(secret): State<ServerSecret>,
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
    let org = caller.org_id;
    let token = match body
        .access_token
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        Some(token) => token.to_string(),
        None => stored_google_token(&store, &secret, org).await?.ok_or_else(|| {
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
    // Every record is read before the first append, so a corrupt row
    // refuses the push instead of leaving half of it in the sheet.
    let mut pages: Vec<Vec<Vec<String>>> = Vec::new();
    each_rating(&store, org, &filter, |rows| {
        pages.push(rows.iter().map(export_record).collect::<StoreResult<_>>()?);
        Ok(())
    })
    .await?;
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
        values.extend(page);
        append_rows(
            &http,
            &settings.ratings.sheets_base_url,
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
