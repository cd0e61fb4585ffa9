//! The read side of `/api/calls`: the filtered list with stats, one call with
//! its transcript, the transcript and turn reads, and the streamed CSV export.

use super::MessageBody;
use super::auth::Caller;
use super::csv_download::{CsvExport, csv_export};
use super::error::{ApiError, ApiResult};
use super::extract::{ApiQuery, flag, trimmed};
use crate::calls::tool_call_view::ToolCallView;
use crate::domain::clock::SharedClock;
use crate::domain::clock::display_duration;
use crate::domain::clock::iso;
use crate::domain::inbound::CallDirection;
use crate::domain::page::{ListEnvelope, PageRequest};
use crate::domain::text::{Line, optional_line};
use crate::domain::{AgentId, CallId, OrgId};
use crate::http::state::AppState;
use crate::postcall::analysis::view::{
    AnalysisView, merged_extracted, stored_structured_data, stored_verdict,
};
use crate::store::analyses::AnalysisRow;
use crate::store::{CallFilter, CallReadRow, Store, StoreResult, decode_json};
use axum::Json;
use axum::extract::{Path, State};
use axum::response::Response;
use chrono::{DateTime, Utc};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};
use std::collections::HashMap;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use voxline_actors::engine::CallStatus;

/// `campaignName` of a call that belongs to no campaign.
pub const NO_CAMPAIGN: &str = "No campaign";

/// Deep search looks inside transcripts of calls this recent (spec Limits).
pub const DEEP_SEARCH_DAYS: i64 = 90;

/// The shortest search term deep search accepts (spec Limits).
pub const DEEP_SEARCH_MIN_CHARS: usize = 3;

/// The CSV export's columns, in order; an export filtered to one agent
/// appends that agent's [`AnalysisColumns`].
pub const EXPORT_COLUMNS: [&str; 12] = [
    "id",
    "name",
    "phone",
    "agent",
    "status",
    "duration_seconds",
    "cost_paise",
    "provider",
    "direction",
    "ended_reason",
    "created_at",
    "summary",
];

/// Header of the analysis verdict's value column.
pub const SUCCESS_COLUMN: &str = "success";

/// Header of the verdict's pass/fail column.
pub const SUCCESS_PASS_COLUMN: &str = "success_pass";

/// Header of the JSON column holding the extracted keys that are not fields
/// of the agent's plan (keypad choices, fields of an earlier plan).
pub const OTHER_EXTRACTED_COLUMN: &str = "other_extracted";

/// Prefix of a field column whose name a fixed column already has.
pub const FIELD_COLUMN_PREFIX: &str = "extracted.";

/// The analysis columns an export appends for one agent's plan: one per
/// extracted field (in the plan's order), `success` (the verdict's value:
/// `true`, `7`, `good`, `85`, or a checklist as `name:pass;name:fail`) and
/// `success_pass` (`true`, `false` or empty), and optionally a final
/// `other_extracted` JSON object of every other extracted key, so nothing is
/// lost. Cells: strings as they are, numbers and booleans as JSON text,
/// null or missing as empty.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AnalysisColumns {
    /// The plan's field names, in order.
    fields: Vec<String>,
    /// Whether `other_extracted` ends the row.
    other_extracted: bool,
}

impl AnalysisColumns {
    /// Columns for these field names.
    pub fn new(fields: Vec<String>, other_extracted: bool) -> Self {
        Self {
            fields,
            other_extracted,
        }
    }

    /// Columns for the current plan of the agent `agent_id` names; no field
    /// columns when that is no agent of the workspace (deleted ones count),
    /// an error when its stored spec no longer parses.
    pub async fn of_agent(
        store: &Store,
        org_id: OrgId,
        agent_id: &str,
        other_extracted: bool,
    ) -> StoreResult<Self> {
        let fields = match agent_id.parse::<AgentId>() {
            Ok(id) => match store.agent(org_id, id).await? {
                Some(agent) => agent.spec()?.analysis_plan().field_names(),
                None => Vec::new(),
            },
            Err(_) => Vec::new(),
        };
        Ok(Self::new(fields, other_extracted))
    }

    /// The whole header: `fixed`, then these columns. A field named like a
    /// fixed or analysis column is headed `extracted.<name>`.
    pub fn header(&self, fixed: &[&str]) -> Vec<String> {
        let mut taken: Vec<&str> = fixed.to_vec();
        taken.extend([SUCCESS_COLUMN, SUCCESS_PASS_COLUMN]);
        if self.other_extracted {
            taken.push(OTHER_EXTRACTED_COLUMN);
        }
        let mut header: Vec<String> = fixed.iter().map(|c| (*c).to_string()).collect();
        header.extend(self.fields.iter().map(|name| {
            if taken.contains(&name.as_str()) {
                format!("{FIELD_COLUMN_PREFIX}{name}")
            } else {
                name.clone()
            }
        }));
        header.extend([SUCCESS_COLUMN.to_string(), SUCCESS_PASS_COLUMN.to_string()]);
        if self.other_extracted {
            header.push(OTHER_EXTRACTED_COLUMN.to_string());
        }
        header
    }

    /// The cells of one row: `extracted` is the call's extracted object,
    /// `verdict` its stored verdict (see [`stored_verdict`]).
    pub fn cells(
        &self,
        extracted: &Map<String, Value>,
        verdict: Option<&Value>,
        success_pass: Option<bool>,
    ) -> Vec<String> {
        let mut cells: Vec<String> = self
            .fields
            .iter()
            .map(|name| cell_text(extracted.get(name)))
            .collect();
        cells.push(verdict_text(verdict));
        cells.push(
            success_pass
                .map(|pass| pass.to_string())
                .unwrap_or_default(),
        );
        if self.other_extracted {
            let others: Map<String, Value> = extracted
                .iter()
                .filter(|(key, _)| !self.fields.contains(key))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect();
            cells.push(Value::Object(others).to_string());
        }
        cells
    }
}

/// A call's extracted object for exports: the analysis' structured data with
/// the keypad choices (the call's stored `extracted`) merged over it, as
/// `extracted` reads (see [`merged_extracted`]); absent or non-object values
/// add nothing, text that no longer parses is an error.
pub fn merged_object(
    call_id: CallId,
    keypad: Option<&str>,
    structured_data: Option<&str>,
) -> StoreResult<Map<String, Value>> {
    let mut merged = stored_structured_data(call_id, structured_data)?;
    let keypad = keypad
        .map(|text| decode_json::<Value>("calls", "extracted", call_id, text))
        .transpose()?;
    if let Some(Value::Object(choices)) = keypad {
        merged.extend(choices);
    }
    Ok(merged)
}

/// An extracted value as a cell: strings as they are, null or missing as
/// empty, anything else as JSON text.
fn cell_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

/// The verdict's value as a cell; a checklist reads `name:pass;name:fail`.
fn verdict_text(verdict: Option<&Value>) -> String {
    match verdict.and_then(|v| v.get("value")) {
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| {
                match (
                    item.get("name").and_then(Value::as_str),
                    item.get("pass").and_then(Value::as_bool),
                ) {
                    (Some(name), Some(pass)) => {
                        format!("{name}:{}", if pass { "pass" } else { "fail" })
                    }
                    _ => cell_text(Some(item)),
                }
            })
            .collect::<Vec<_>>()
            .join(";"),
        value => cell_text(value),
    }
}

/// The call read routes; `/api/calls/export.csv` is a static path, so it wins over `/api/calls/{callId}`.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_calls))
        .routes(routes!(export_calls_csv))
        .routes(routes!(get_call))
        .routes(routes!(get_call_transcript))
        .routes(routes!(list_call_turns))
}

/// One transcript line of the call detail read.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TranscriptLine {
    /// `Bot` (the agent) or `Candidate` (the person called).
    pub speaker: String,
    /// What was said.
    pub text: String,
}

/// A call as the list shows it: the spec's Call row plus machine-usable extras.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallRowView {
    /// Call id.
    pub id: String,
    /// Name of the person called.
    pub student_name: String,
    /// Number dialed, E.164.
    pub phone: String,
    /// Email of the person called: an item's `email` (a CSV `email` column), or the `email` variable.
    pub email: Option<String>,
    /// Campaign name, or "No campaign".
    pub campaign_name: String,
    /// Agent name.
    pub agent_name: String,
    /// Display duration such as `2m 05s`; use `durationSeconds` for arithmetic.
    pub duration: String,
    /// Display status such as `Completed` or `No Answer`.
    pub status: String,
    /// Telephony provider.
    pub provider: String,
    /// `outbound` (we dialed) or `inbound` (the person called one of the workspace's numbers).
    pub direction: CallDirection,
    /// On inbound calls, the workspace number the caller dialed; `phone` is the caller's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_number: Option<String>,
    /// Display time relative to now, such as `5 minutes ago`.
    pub started_at: String,
    /// Post-call summary.
    pub summary: String,
    /// Calendar booking by the agent's `bookAppointment` tool: `booked`, `failed`, or null
    /// when none was tried.
    pub calendar_status: Option<String>,
    /// The booked event's page.
    pub calendar_event_url: Option<String>,
    /// Why the booking failed.
    pub calendar_error: Option<String>,
    /// Empty in list rows; every turn in order in the detail read.
    pub transcript: Vec<TranscriptLine>,
    /// Raw status, as the `status` filter takes it.
    pub raw_status: String,
    /// Talk time in seconds.
    pub duration_seconds: i64,
    /// Charge in paise.
    pub cost_paise: i64,
    /// Why the call ended.
    pub ended_reason: Option<String>,
    /// Creation time, ISO 8601.
    pub created_at: String,
    /// Agent id.
    pub agent_id: String,
    /// Attempt number, 1 for the first.
    pub attempt: i64,
    /// Batch the call belongs to.
    pub batch_id: Option<String>,
    /// Campaign the call belongs to.
    pub campaign_id: Option<String>,
    /// The post-call analysis; null until the call has ended.
    pub analysis: Option<AnalysisView>,
    /// Where the agent transferred the callee (`endedReason` `transferred`).
    pub transferred_to: Option<String>,
    /// When the callee was handed over, ISO 8601.
    pub transferred_at: Option<String>,
    /// What the carrier reported about the bridged leg: completed, no-answer, busy, failed.
    pub transfer_status: Option<String>,
    /// How long the bridged leg lasted, in seconds.
    pub transfer_duration_seconds: Option<i64>,
}

impl CallRowView {
    /// The list row of a stored call, with `startedAt` relative to `now`.
    pub fn from_row(row: CallReadRow, now: DateTime<Utc>) -> Self {
        Self {
            student_name: row.target_name,
            phone: row.phone,
            email: row.email,
            campaign_name: row
                .campaign_name
                .filter(|name| !name.is_empty())
                .unwrap_or_else(|| NO_CAMPAIGN.to_string()),
            agent_name: row.agent_name,
            duration: display_duration(row.duration_seconds),
            status: display_status(&row.status).to_string(),
            provider: row.provider,
            direction: row.direction,
            to_number: row.to_number,
            started_at: relative_time(row.created_at, now.timestamp_millis()),
            summary: row.summary,
            calendar_status: row.calendar_status,
            calendar_event_url: row.calendar_event_url,
            calendar_error: row.calendar_error,
            transferred_to: row.transferred_to,
            transferred_at: row.transferred_at.map(iso),
            transfer_status: row.transfer_status,
            transfer_duration_seconds: row.transfer_duration_seconds,
            transcript: Vec::new(),
            raw_status: row.status,
            duration_seconds: row.duration_seconds,
            cost_paise: row.cost_paise.get(),
            ended_reason: row.ended_reason,
            created_at: iso(row.created_at),
            agent_id: row.agent_id,
            attempt: row.attempt,
            batch_id: row.batch_id.map(|id| id.to_string()),
            campaign_id: row.campaign_id,
            id: row.id.to_string(),
            analysis: None,
        }
    }
}

/// `{total, completedCount, failedCount}` for the list's filter.
#[derive(Debug, Clone, Copy, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallListStats {
    /// Calls matching the filter.
    pub total: i64,
    /// Of which completed.
    pub completed_count: i64,
    /// Of which failed.
    pub failed_count: i64,
}

/// The call list envelope: `{rows, total, page, limit, stats}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CallList {
    /// The rows of this page, newest first.
    pub rows: Vec<CallRowView>,
    /// Calls matching the filter across all pages.
    pub total: i64,
    /// True when a search matched more calls than are counted (1,000): then
    /// `total` and `stats` count the newest 1,000 matches and the true
    /// figures are larger; pages past them still answer.
    #[serde(rename = "totalIsEstimate")]
    pub total_is_estimate: bool,
    /// The 1-based page number.
    pub page: u32,
    /// Rows per page.
    pub limit: u32,
    /// Counts for the same filter.
    pub stats: CallListStats,
}

/// One persisted status transition.
#[derive(Debug, Serialize, ToSchema)]
pub struct StatusEventView {
    /// Raw status entered.
    pub status: String,
    /// When, ISO 8601.
    pub at: String,
}

/// One call with its transcript, variables, extracted fields and status history.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallDetailView {
    /// The list row, with `transcript` populated.
    #[serde(flatten)]
    pub call: CallRowView,
    /// Variables the call was placed with.
    #[schema(value_type = Object)]
    pub variables: Value,
    /// Fields extracted after the call.
    #[schema(value_type = Object)]
    pub extracted: Value,
    /// Per-turn latencies.
    #[schema(value_type = Vec<Object>)]
    pub latencies: Value,
    /// Caller ID.
    pub from_number: String,
    /// The first attempt this call retries.
    pub retry_of: Option<String>,
    /// How it was placed outside its callee's calling hours, if it was:
    /// `request` (`respectCallingHours: false`, the agent allowing it) or
    /// `emergency-alert` (an alert dial of an agent with `bypassCallingHours`).
    pub calling_hours_override: Option<String>,
    /// The carrier's id of the call: the SIP Call-ID on `sip`, Twilio's CallSid, ….
    pub carrier_call_id: Option<String>,
    /// The carrier's final code, where it has codes: on `sip`, the SIP status
    /// code that ended an unanswered INVITE (486, 480, …), or 200 once answered.
    pub carrier_code: Option<i32>,
    /// Answer time, ISO 8601.
    pub answered_at: Option<String>,
    /// End time, ISO 8601.
    pub ended_at: Option<String>,
    /// Every status transition in order.
    pub status_history: Vec<StatusEventView>,
    /// Every tool the agent called, in order.
    pub tool_calls: Vec<ToolCallView>,
    /// LLM tokens used per stage.
    pub usage: CallUsageView,
}

/// Tokens one stage of a call used.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TokenUsageView {
    /// Tokens in the prompts sent.
    pub prompt_tokens: i64,
    /// Tokens generated.
    pub completion_tokens: i64,
}

/// A call's LLM tokens per stage: the live conversation's turns, and the post-call
/// analysis once it ran (ratings show theirs on the scorecard).
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallUsageView {
    /// The agent's replies during the call.
    pub conversation: TokenUsageView,
    /// The post-call analysis; null until it ran.
    pub analysis: Option<TokenUsageView>,
}

/// One turn of the transcript read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptTurnView {
    /// `assistant` or `user`.
    pub speaker: String,
    /// What was said.
    pub text: String,
    /// When, ISO 8601.
    pub created_at: String,
    /// The tools the agent called in this turn, in order (empty for most turns).
    pub tool_calls: Vec<ToolCallView>,
}

/// `{transcriptText, turns}`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TranscriptView {
    /// The whole transcript, kept after turns are pruned.
    pub transcript_text: String,
    /// Every stored turn in order.
    pub turns: Vec<TranscriptTurnView>,
    /// The post-call analysis; null until the call has ended.
    pub analysis: Option<AnalysisView>,
}

/// A raw stored turn.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnRowView {
    /// Order within the call.
    pub seq: i64,
    /// `assistant` or `user`.
    pub speaker: String,
    /// What was said.
    pub text: String,
    /// When, ISO 8601.
    pub created_at: String,
}

/// The display form of a raw status; unknown values pass through.
pub fn display_status(raw: &str) -> &str {
    CallStatus::parse(raw).map_or(raw, |status| status.display())
}

/// The detail read's speaker label for a stored speaker.
pub fn speaker_label(speaker: &str) -> &'static str {
    if speaker == "assistant" {
        "Bot"
    } else {
        "Candidate"
    }
}

/// How long before `now_ms` the instant `at_ms` was, for display: `just now`,
/// `1 minute ago`, `5 minutes ago`, `2 hours ago`, `3 days ago`, `2 months ago`, `1 year ago`.
pub fn relative_time(at_ms: i64, now_ms: i64) -> String {
    let seconds = (now_ms - at_ms).max(0) / 1000;
    let (count, unit) = match seconds {
        s if s < 60 => return "just now".to_string(),
        s if s < 3_600 => (s / 60, "minute"),
        s if s < 86_400 => (s / 3_600, "hour"),
        s if s < 30 * 86_400 => (s / 86_400, "day"),
        s if s < 365 * 86_400 => (s / (30 * 86_400), "month"),
        s => (s / (365 * 86_400), "year"),
    };
    if count == 1 {
        format!("1 {unit} ago")
    } else {
        format!("{count} {unit}s ago")
    }
}

/// The list filters shared by the list and the export.
#[derive(Debug, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct CallFilterQuery {
    /// Comma-separated raw statuses: queued, ringing, in-progress, completed, failed, no-answer, busy, canceled, voicemail.
    #[serde(default, deserialize_with = "call_statuses")]
    // Spaces around each value are trimmed; tabs and line breaks are refused
    // as in any query value, so the pattern's white space excludes controls.
    #[param(value_type = Option<String>, pattern = r"^[^\S\x00-\x1f\x7f-\x9f]*((queued|ringing|in-progress|completed|failed|no-answer|busy|canceled|voicemail)[^\S\x00-\x1f\x7f-\x9f]*)?(,[^\S\x00-\x1f\x7f-\x9f]*((queued|ringing|in-progress|completed|failed|no-answer|busy|canceled|voicemail)[^\S\x00-\x1f\x7f-\x9f]*)?)*$")]
    pub status: Vec<CallStatus>,
    /// Case-insensitive substring of the name, phone, email or agent name.
    #[serde(default, deserialize_with = "optional_line")]
    #[param(value_type = Option<String>, max_length = 200)]
    pub search: Option<Line<200>>,
    /// Also match transcript words of the last 90 days; needs a search of 3+ characters.
    #[serde(default, deserialize_with = "flag")]
    #[param(value_type = Option<bool>)]
    pub deep: bool,
    /// Telephony provider.
    #[serde(default, deserialize_with = "trimmed")]
    pub provider: Option<String>,
    /// `pass` or `fail`: calls whose analysis judged success so.
    #[serde(default)]
    #[param(value_type = Option<SuccessFilter>, inline)]
    pub success: Option<SuccessFilter>,
    /// `pending`, `done`, `failed` or `skipped`: calls whose analysis is in that state.
    #[serde(default, rename = "analysisStatus", alias = "analysis_status")]
    #[param(value_type = Option<AnalysisStatusFilter>, inline)]
    pub analysis_status: Option<AnalysisStatusFilter>,
    /// Calls of this agent (its id); an id of no agent matches nothing. The
    /// export filtered so also has the agent's analysis columns.
    #[serde(default, rename = "agentId", deserialize_with = "trimmed")]
    pub agent_id: Option<String>,
    /// `outbound` or `inbound`: calls that went that way.
    #[serde(default)]
    #[param(value_type = Option<CallDirection>, inline)]
    pub direction: Option<CallDirection>,
}

/// The `success` filter's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SuccessFilter {
    /// The verdict passed.
    Pass,
    /// The verdict did not pass.
    Fail,
}

/// The `analysisStatus` filter's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AnalysisStatusFilter {
    /// Waiting or running.
    Pending,
    /// Produced.
    Done,
    /// Given up.
    Failed,
    /// The call never connected.
    Skipped,
}

impl AnalysisStatusFilter {
    /// The stored status.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Done => "done",
            Self::Failed => "failed",
            Self::Skipped => "skipped",
        }
    }
}

/// A comma-separated status list, each known, repeats dropped.
fn call_statuses<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<CallStatus>, D::Error> {
    let raw = String::deserialize(d)?;
    let mut statuses = Vec::new();
    for value in raw.split(',').map(str::trim).filter(|v| !v.is_empty()) {
        let status = CallStatus::parse(value).ok_or_else(|| {
            let known: Vec<&str> = CallStatus::ALL.iter().map(|s| s.as_str()).collect();
            D::Error::custom(format!(
                "has an unknown value \"{value}\"; use a comma-separated list of {}",
                known.join(", ")
            ))
        })?;
        if !statuses.contains(&status) {
            statuses.push(status);
        }
    }
    Ok(statuses)
}

impl CallFilterQuery {
    /// The store filter; deep search reaches back from `now`.
    pub fn into_filter(self, now: DateTime<Utc>) -> ApiResult<CallFilter> {
        if self.deep
            && self
                .search
                .as_deref()
                .is_none_or(|s| s.chars().count() < DEEP_SEARCH_MIN_CHARS)
        {
            return Err(ApiError::BadRequest(format!(
                "search must be at least {DEEP_SEARCH_MIN_CHARS} characters when deep is true"
            )));
        }
        Ok(CallFilter {
            statuses: self.status.iter().map(|s| s.as_str().to_string()).collect(),
            search: self.search.map(Line::into_string),
            transcript_since_ms: self
                .deep
                .then(|| now.timestamp_millis() - DEEP_SEARCH_DAYS * 86_400_000),
            provider: self.provider,
            success: self.success.map(|s| s == SuccessFilter::Pass),
            analysis_status: self.analysis_status.map(AnalysisStatusFilter::as_str),
            // Calls store ids in the canonical form; anything else is compared as given.
            agent_id: self
                .agent_id
                .map(|raw| raw.parse::<AgentId>().map_or(raw, |id| id.to_string())),
            direction: self.direction,
            // The API has no batch or date filter; the console's list does.
            batch_id: None,
            created_from_ms: None,
            created_before_ms: None,
        })
    }
}

/// One page of calls and the counts for `filter`, as the list answers it.
pub async fn call_list(
    store: &Store,
    clock: &SharedClock,
    org_id: OrgId,
    filter: &CallFilter,
    page: PageRequest,
) -> ApiResult<CallList> {
    let (rows, counts) = store
        .list_calls_counted(org_id, filter, i64::from(page.limit), page.offset())
        .await?;
    let now = clock.now();
    let ids: Vec<CallId> = rows.iter().map(|row| row.id).collect();
    let analyses = store.analyses_of(org_id, &ids).await?;
    Ok(CallList {
        rows: rows
            .into_iter()
            .map(|row| {
                let analysis = analyses.iter().find(|a| a.call_id == row.id);
                let mut view = CallRowView::from_row(row, now);
                view.analysis = analysis.map(AnalysisView::from_row).transpose()?;
                Ok(view)
            })
            .collect::<StoreResult<_>>()?,
        total: counts.total,
        total_is_estimate: counts.capped,
        page: page.page,
        limit: page.limit,
        stats: CallListStats {
            total: counts.total,
            completed_count: counts.completed,
            failed_count: counts.failed,
        },
    })
}

/// List calls, newest first, with filters and stats for the same filter.
#[utoipa::path(get, path = "/api/calls", tag = "calls",
    params(PageRequest, CallFilterQuery),
    responses((status = 200, body = CallList), (status = 400, body = MessageBody)))]
async fn list_calls(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    ApiQuery(page): ApiQuery<PageRequest>,
    ApiQuery(query): ApiQuery<CallFilterQuery>,
) -> ApiResult<Json<CallList>> {
    let filter = query.into_filter(clock.now())?;
    Ok(Json(
        call_list(&store, &clock, caller.org_id, &filter, page).await?,
    ))
}

fn call_not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Call {id} not found"))
}

/// The call a path names, or 404 when it is not an id.
fn parse_call_id(id: &str) -> ApiResult<CallId> {
    id.parse::<CallId>().map_err(|_| call_not_found(id))
}

/// Parses the stored JSON column `column` of the call `id`.
fn stored_json(id: CallId, column: &'static str, text: &str) -> StoreResult<Value> {
    decode_json("calls", column, id, text)
}

/// Read one call with its transcript turns (Bot and Candidate) and status history.
#[utoipa::path(get, path = "/api/calls/{callId}", tag = "calls",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = CallDetailView), (status = 404, body = MessageBody)))]
async fn get_call(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    Path(call_id): Path<String>,
) -> ApiResult<Json<CallDetailView>> {
    let id = parse_call_id(&call_id)?;
    let org = caller.org_id;
    let detail = store
        .call_detail(org, id)
        .await?
        .ok_or_else(|| call_not_found(&call_id))?;
    let (turns, events, analysis, tool_calls) = tokio::try_join!(
        store.call_turns(org, id),
        store.call_events(id),
        store.analysis(org, id),
        store.tool_calls(id),
    )?;
    let from_number = detail.call.from_number.clone();
    let retry_of = detail.call.retry_of.map(|id| id.to_string());
    let answered_at = detail.call.answered_at.map(iso);
    let ended_at = detail.call.ended_at.map(iso);
    let mut call = CallRowView::from_row(detail.call, clock.now());
    // The call row and its analysis are read apart, so an analysis stored
    // in between would pair a done analysis with the template summary it
    // replaced; a done analysis' summary is the call's summary.
    if let Some(summary) = analysis
        .as_ref()
        .filter(|a| a.status == "done")
        .and_then(|a| a.summary.clone())
    {
        call.summary = summary;
    }
    call.analysis = analysis.as_ref().map(AnalysisView::from_row).transpose()?;
    call.transcript = turns
        .into_iter()
        .map(|turn| TranscriptLine {
            speaker: speaker_label(&turn.speaker).to_string(),
            text: turn.text,
        })
        .collect();
    Ok(Json(CallDetailView {
        call,
        variables: stored_json(id, "variables", &detail.variables)?,
        extracted: merged_extracted(
            &stored_json(id, "extracted", &detail.extracted)?,
            analysis.as_ref(),
        )?,
        latencies: stored_json(id, "latencies", &detail.latencies)?,
        from_number,
        retry_of,
        calling_hours_override: detail
            .calling_hours_override
            .map(|o| o.as_str().to_string()),
        carrier_call_id: detail.carrier_call_id,
        carrier_code: detail.carrier_code,
        answered_at,
        ended_at,
        status_history: events
            .into_iter()
            .map(|event| StatusEventView {
                status: event.status,
                at: iso(event.at),
            })
            .collect(),
        tool_calls: tool_calls
            .iter()
            .map(|row| ToolCallView::from_row(id, row))
            .collect::<StoreResult<_>>()?,
        usage: CallUsageView {
            conversation: TokenUsageView {
                prompt_tokens: detail.llm_prompt_tokens,
                completion_tokens: detail.llm_completion_tokens,
            },
            analysis: analysis
                .as_ref()
                .filter(|a| a.prompt_tokens > 0 || a.completion_tokens > 0)
                .map(|a| TokenUsageView {
                    prompt_tokens: a.prompt_tokens,
                    completion_tokens: a.completion_tokens,
                }),
        },
    }))
}

/// Read a call's transcript text and its turns.
#[utoipa::path(get, path = "/api/calls/{callId}/transcript", tag = "calls",
    params(("callId" = String, Path, description = "Call id")),
    responses((status = 200, body = TranscriptView), (status = 404, body = MessageBody)))]
async fn get_call_transcript(
    State(store): State<Store>,
    caller: Caller,
    Path(call_id): Path<String>,
) -> ApiResult<Json<TranscriptView>> {
    let id = parse_call_id(&call_id)?;
    let org = caller.org_id;
    let transcript_text = store
        .call_transcript_text(org, id)
        .await?
        .ok_or_else(|| call_not_found(&call_id))?;
    let (turns, analysis, tool_calls) = tokio::try_join!(
        store.call_turns(org, id),
        store.analysis(org, id),
        store.tool_calls(id),
    )?;
    Ok(Json(TranscriptView {
        analysis: analysis.as_ref().map(AnalysisView::from_row).transpose()?,
        transcript_text,
        turns: turns
            .into_iter()
            .map(|turn| {
                Ok(TranscriptTurnView {
                    tool_calls: tool_calls
                        .iter()
                        .filter(|call| call.turn_seq == turn.seq)
                        .map(|row| ToolCallView::from_row(id, row))
                        .collect::<StoreResult<_>>()?,
                    speaker: turn.speaker,
                    text: turn.text,
                    created_at: iso(turn.created_at),
                })
            })
            .collect::<StoreResult<_>>()?,
    }))
}

/// List a call's raw turn rows in order.
#[utoipa::path(get, path = "/api/calls/{callId}/turns", tag = "calls",
    params(
        ("callId" = String, Path, description = "Call id"),
        PageRequest,
    ),
    responses((status = 200, body = ListEnvelope<TurnRowView>), (status = 400, body = MessageBody), (status = 404, body = MessageBody)))]
async fn list_call_turns(
    State(store): State<Store>,
    caller: Caller,
    Path(call_id): Path<String>,
    ApiQuery(page): ApiQuery<PageRequest>,
) -> ApiResult<Json<ListEnvelope<TurnRowView>>> {
    let id = parse_call_id(&call_id)?;
    let org = caller.org_id;
    if !store.call_exists(org, id).await? {
        return Err(call_not_found(&call_id));
    }
    let (rows, total) = store
        .call_turns_page(org, id, i64::from(page.limit), page.offset())
        .await?;
    let rows = rows
        .into_iter()
        .map(|turn| TurnRowView {
            seq: turn.seq,
            speaker: turn.speaker,
            text: turn.text,
            created_at: iso(turn.created_at),
        })
        .collect();
    Ok(Json(ListEnvelope::new(rows, total, page)))
}

/// The call list export: the filtered calls in `(created_at, id)` order.
struct CallExport {
    store: Store,
    org_id: OrgId,
    filter: CallFilter,
    /// The agent's analysis columns, when the export is filtered to one agent.
    analysis: Option<AnalysisColumns>,
}

/// A call with its analysis, when the export has analysis columns and the call has one.
struct CallExportRow {
    call: CallReadRow,
    analysis: Option<AnalysisRow>,
}

/// The export's header: [`EXPORT_COLUMNS`], then `analysis`'s columns.
fn export_header(analysis: Option<&AnalysisColumns>) -> Vec<String> {
    match analysis {
        Some(columns) => columns.header(&EXPORT_COLUMNS),
        None => EXPORT_COLUMNS.map(String::from).to_vec(),
    }
}

/// A call's record; with analysis columns, it ends with them, filled from the
/// call's analysis (empty when it has none).
fn export_record(
    row: &CallReadRow,
    analysis: Option<(&AnalysisColumns, Option<&AnalysisRow>)>,
) -> StoreResult<Vec<String>> {
    let mut record = vec![
        row.id.to_string(),
        row.target_name.clone(),
        row.phone.clone(),
        row.agent_name.clone(),
        row.status.clone(),
        row.duration_seconds.to_string(),
        row.cost_paise.to_string(),
        row.provider.clone(),
        row.direction.as_str().to_string(),
        row.ended_reason.clone().unwrap_or_default(),
        iso(row.created_at),
        row.summary.clone(),
    ];
    if let Some((columns, found)) = analysis {
        let extracted =
            stored_structured_data(row.id, found.and_then(|a| a.structured_data.as_deref()))?;
        let verdict = stored_verdict(row.id, found.and_then(|a| a.success.as_deref()))?;
        record.extend(columns.cells(
            &extracted,
            verdict.as_ref(),
            found.and_then(|a| a.success_pass),
        ));
    }
    Ok(record)
}

impl CsvExport for CallExport {
    type Row = CallExportRow;
    type Key = (i64, CallId);
    const NAME: &'static str = "call";

    fn header(&self) -> Vec<String> {
        export_header(self.analysis.as_ref())
    }

    async fn page(
        &self,
        after: Option<&(i64, CallId)>,
        limit: i64,
    ) -> StoreResult<Vec<CallExportRow>> {
        let rows = self
            .store
            .calls_after(self.org_id, &self.filter, after.copied(), limit)
            .await?;
        let mut by_call: HashMap<CallId, AnalysisRow> = match self.analysis {
            Some(_) => {
                let ids: Vec<CallId> = rows.iter().map(|row| row.id).collect();
                let analyses = self.store.analyses_of(self.org_id, &ids).await?;
                analyses.into_iter().map(|a| (a.call_id, a)).collect()
            }
            None => HashMap::new(),
        };
        Ok(rows
            .into_iter()
            .map(|call| CallExportRow {
                analysis: by_call.remove(&call.id),
                call,
            })
            .collect())
    }

    fn key(row: &CallExportRow) -> (i64, CallId) {
        (row.call.created_at, row.call.id)
    }

    fn record(&self, row: &CallExportRow) -> StoreResult<Vec<String>> {
        let analysis = self
            .analysis
            .as_ref()
            .map(|columns| (columns, row.analysis.as_ref()));
        export_record(&row.call, analysis)
    }
}

/// Download the filtered call list as CSV, streamed page by page.
#[utoipa::path(get, path = "/api/calls/export.csv", tag = "calls",
    params(CallFilterQuery),
    responses(
        (status = 200, description = "CSV with columns id, name, phone, agent, status, duration_seconds, cost_paise, provider, ended_reason, created_at, summary. Filtered by agentId, then one column per extracted field of that agent's analysis plan (headed extracted.<name> when a column above has its name; the analysis' value: strings as they are, numbers and booleans as JSON text, empty when null), success (the verdict's value: true/false, 1-10, excellent/good/fair/poor, 0-100, or a checklist as name:pass;name:fail; empty when not judged) and success_pass (true, false or empty)", content_type = "text/csv", body = String),
        (status = 400, body = MessageBody),
    ))]
async fn export_calls_csv(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    caller: Caller,
    ApiQuery(query): ApiQuery<CallFilterQuery>,
) -> ApiResult<Response> {
    let filter = query.into_filter(clock.now())?;
    let analysis = match filter.agent_id.as_deref() {
        Some(agent_id) => {
            Some(AnalysisColumns::of_agent(&store, caller.org_id, agent_id, false).await?)
        }
        None => None,
    };
    let export = CallExport {
        store: store.clone(),
        org_id: caller.org_id,
        filter,
        analysis,
    };
    Ok(csv_export("calls.csv", export))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::csv_download::csv_chunk;
    use serde_json::json;

    #[test]
    fn durations_display_like_the_dashboard() {
        assert_eq!(display_duration(0), "0s");
        assert_eq!(display_duration(-3), "0s");
        assert_eq!(display_duration(45), "45s");
        assert_eq!(display_duration(125), "2m 05s");
        assert_eq!(display_duration(600), "10m 00s");
        assert_eq!(display_duration(3_725), "1h 02m 05s");
    }

    #[test]
    fn relative_times_round_down() {
        let now = 10_000_000_000;
        assert_eq!(relative_time(now, now), "just now");
        assert_eq!(relative_time(now + 5_000, now), "just now");
        assert_eq!(relative_time(now - 59_000, now), "just now");
        assert_eq!(relative_time(now - 60_000, now), "1 minute ago");
        assert_eq!(
            relative_time(now - 5 * 60_000 - 30_000, now),
            "5 minutes ago"
        );
        assert_eq!(relative_time(now - 2 * 3_600_000, now), "2 hours ago");
        assert_eq!(relative_time(now - 3 * 86_400_000, now), "3 days ago");
        assert_eq!(relative_time(now - 65 * 86_400_000, now), "2 months ago");
        assert_eq!(relative_time(now - 400 * 86_400_000, now), "1 year ago");
    }

    #[test]
    fn statuses_and_speakers_have_display_forms() {
        assert_eq!(display_status("no-answer"), "No Answer");
        assert_eq!(display_status("in-progress"), "In Progress");
        assert_eq!(display_status("mystery"), "mystery");
        assert_eq!(speaker_label("assistant"), "Bot");
        assert_eq!(speaker_label("user"), "Candidate");
    }

    #[test]
    fn analysis_columns_follow_the_plan_and_flatten_values() {
        let columns = AnalysisColumns::new(
            vec!["notice_days".into(), "summary".into(), "note".into()],
            true,
        );
        assert_eq!(
            columns.header(&["id", "summary"]),
            [
                "id",
                "summary",
                "notice_days",
                "extracted.summary",
                "note",
                "success",
                "success_pass",
                "other_extracted"
            ]
        );
        let call = CallId::new();
        let extracted = merged_object(
            call,
            Some(r#"{"choice": "2", "note": "pressed"}"#),
            Some(r#"{"notice_days": 30, "summary": null, "note": "said", "old": true}"#),
        )
        .unwrap();
        assert_eq!(
            columns.cells(
                &extracted,
                Some(&json!({"rubric": "passFail", "value": true, "pass": true, "reason": "ok"})),
                Some(true),
            ),
            [
                "30",
                "",
                "pressed",
                "true",
                "true",
                r#"{"choice":"2","old":true}"#
            ]
        );
        let verdict = |value: Value| verdict_text(Some(&json!({ "value": value })));
        assert_eq!(verdict(json!(7)), "7");
        assert_eq!(verdict(json!("good")), "good");
        assert_eq!(
            verdict(json!([{"name": "Relocation", "pass": true}, {"name": "Visa", "pass": false}])),
            "Relocation:pass;Visa:fail"
        );
        assert_eq!(verdict_text(None), "");
        let bare = AnalysisColumns::new(Vec::new(), false);
        assert_eq!(bare.header(&["id"]), ["id", "success", "success_pass"]);
        assert_eq!(bare.cells(&Map::new(), None, None), ["", ""]);
    }

    #[test]
    fn csv_chunks_quote_fields() {
        let row = CallReadRow {
            id: "0190f2c4-8b7a-7c3d-9e1f-2a3b4c5d6e7f".parse().unwrap(),
            agent_id: "a".into(),
            agent_name: "Agent, \"Smith\"".into(),
            phone: "+919876543210".into(),
            target_name: "Asha".into(),
            email: None,
            from_number: "+91".into(),
            direction: CallDirection::Outbound,
            to_number: None,
            provider: "sim".into(),
            status: "completed".into(),
            ended_reason: None,
            attempt: 1,
            retry_of: None,
            batch_id: None,
            campaign_id: None,
            campaign_name: None,
            duration_seconds: 61,
            cost_paise: crate::domain::Paise(200),
            summary: "line one\nline two".into(),
            created_at: 0,
            answered_at: None,
            ended_at: None,
            calendar_status: None,
            calendar_event_url: None,
            calendar_error: None,
            transferred_to: None,
            transferred_at: None,
            transfer_status: None,
            transfer_duration_seconds: None,
        };
        let chunk = csv_chunk(
            Some(&export_header(None)),
            [export_record(&row, None).unwrap()],
        )
        .unwrap();
        let text = String::from_utf8(chunk.to_vec()).unwrap();
        assert_eq!(
            text,
            "id,name,phone,agent,status,duration_seconds,cost_paise,provider,direction,ended_reason,created_at,summary\n\
             0190f2c4-8b7a-7c3d-9e1f-2a3b4c5d6e7f,Asha,+919876543210,\"Agent, \"\"Smith\"\"\",completed,61,200,sim,outbound,,1970-01-01T00:00:00.000Z,\"line one\nline two\"\n"
        );
    }
}
