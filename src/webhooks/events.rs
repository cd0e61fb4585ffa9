//! The webhook events' payloads as documented types: what `call.completed`,
//! `call.analyzed` and `rating.completed` carry, for the OpenAPI document's
//! `webhooks` section. The bodies are built in [`super::delivery`].

use crate::calls::tool_call_view::ToolCallView;
use crate::postcall::analysis::view::AnalysisView;
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// One transcript turn in an event.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventTurn {
    /// `assistant` (the agent) or `user` (the person called).
    pub speaker: String,
    /// What was said.
    pub text: String,
    /// When, ISO 8601.
    pub created_at: String,
    /// The tools the agent called in this turn.
    pub tool_calls: Vec<ToolCallView>,
}

/// `{overall}` once the call's scorecard is done.
#[derive(Debug, Serialize, ToSchema)]
pub struct EventRating {
    /// Mean of the scorecard's column scores, 0–10.
    pub overall: f64,
}

/// `call.completed` (and `call.analyzed`): the call as it is when sent.
///
/// Order: `call.completed` goes out once the call's analysis and rating are
/// settled, or when the agent's `analysis.timeoutSeconds` (default 60) has
/// passed since the call ended, whichever is first. When it went out before
/// the analysis was done, `call.analyzed` follows with the same payload once
/// it is (a failed analysis sends nothing more), and a late scorecard sends
/// `rating.completed`. A re-run analysis sends `call.analyzed` again. Calls
/// that never connected are sent at once with `analysis.status = skipped`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct CallCompletedEvent {
    /// `call.completed` or `call.analyzed`.
    pub event: String,
    /// Stable across retries and redeliveries of this event.
    pub event_id: String,
    /// When the event was queued, ISO 8601.
    pub created_at: String,
    /// The call.
    pub call_id: String,
    /// Raw terminal status: completed, failed, no-answer, busy, canceled or voicemail.
    pub status: String,
    /// `outbound` or `inbound`.
    pub direction: crate::domain::inbound::CallDirection,
    /// The person's number: the number dialed, or the inbound caller's.
    pub phone: String,
    /// Caller ID: ours on outbound calls, the caller's on inbound ones.
    pub from_number: String,
    /// On inbound calls, the workspace number the caller dialed.
    pub to_number: Option<String>,
    /// Billed talk time in seconds.
    pub duration_seconds: i64,
    /// Every turn in order.
    pub transcript: Vec<EventTurn>,
    /// The transcript as `Bot:`/`Candidate:` lines.
    pub transcript_text: String,
    /// The analysis' summary once done (until then a short template summary).
    pub summary: String,
    /// Extracted fields: the analysis' structured data with keypad choices merged in.
    #[schema(value_type = Object)]
    pub extracted: Value,
    /// The verdict `{rubric, value, pass, reason}`, when the plan judges success.
    #[schema(value_type = Option<Object>)]
    pub success: Option<Value>,
    /// The whole analysis; `status` says whether it was ready.
    pub analysis: Option<AnalysisView>,
    /// The scorecard's overall score, once rated.
    pub rating: Option<EventRating>,
    /// A signed link to the recording, valid 15 minutes; null without one.
    pub recording_url: Option<String>,
    /// Charge in paise.
    pub cost_paise: i64,
    /// Why the call ended.
    pub ended_reason: Option<String>,
    /// Agent id.
    pub agent_id: String,
    /// Batch, if any.
    pub batch_id: Option<String>,
    /// Campaign, if any.
    pub campaign_id: Option<String>,
    /// Variables the call was placed with.
    #[schema(value_type = Object)]
    pub variables: Value,
    /// Every tool the agent called, in order.
    pub tool_calls: Vec<ToolCallView>,
    /// The calendar booking: `booked`, `failed`, or null when none was tried.
    pub calendar_status: Option<String>,
    /// The booked event's page.
    pub calendar_event_url: Option<String>,
    /// Why the booking failed.
    pub calendar_error: Option<String>,
    /// Where the agent transferred the callee.
    pub transferred_to: Option<String>,
    /// When, ISO 8601.
    pub transferred_at: Option<String>,
    /// What the carrier reported about the bridged leg, when it has.
    pub transfer_status: Option<String>,
    /// How long the bridged leg lasted.
    pub transfer_duration_seconds: Option<i64>,
}

/// The scorecard in a `rating.completed` event.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventScorecard {
    /// Mean of the column scores.
    pub overall: Option<f64>,
    /// `done`.
    pub status: String,
    /// `{name, score, reason}` per template column.
    #[schema(value_type = Vec<Object>)]
    pub columns: Value,
    /// When it was produced, ISO 8601.
    pub rated_at: Option<String>,
}

/// `rating.completed`: a scorecard that landed after `call.completed` went
/// out, or a re-scoring.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct RatingCompletedEvent {
    /// `rating.completed`.
    pub event: String,
    /// Stable across retries.
    pub event_id: String,
    /// When queued, ISO 8601.
    pub created_at: String,
    /// The call.
    pub call_id: String,
    /// Its agent.
    pub agent_id: String,
    /// The scorecard.
    pub rating: EventScorecard,
}

/// `number.opted_out`: a callee asked not to be called again during a call.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct NumberOptedOutEvent {
    /// `number.opted_out`.
    pub event: String,
    /// Stable across retries of this event.
    pub event_id: String,
    /// When the event was queued, ISO 8601.
    pub created_at: String,
    /// The number, E.164: on the workspace's do-not-call list from then on.
    pub phone: String,
    /// The call in which the callee opted out.
    pub call_id: String,
    /// The agent of the call.
    pub agent_id: String,
    /// Batch, if any.
    pub batch_id: Option<String>,
    /// Campaign, if any.
    pub campaign_id: Option<String>,
    /// `opt-out`: the list entry's source.
    pub source: String,
    /// Whether the number is still on the list when the event is sent.
    pub listed: bool,
}
