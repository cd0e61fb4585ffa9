//! A stored tool call as the API and the `call.completed` webhook show it.

use crate::domain::CallId;
use crate::store::tool_calls::ToolCallRow;
use crate::store::{StoreResult, decode_json};
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// One tool call the agent made during the call.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ToolCallView {
    /// The model's id for the call.
    pub id: String,
    /// The tool (`transfer_call`, `dtmf`, `check_availability`, `book_appointment`,
    /// `end_call`, or a function's name).
    pub name: String,
    /// The arguments the model gave.
    #[schema(value_type = Object)]
    pub arguments: Value,
    /// The result, when the tool succeeded.
    #[schema(value_type = Object)]
    pub result: Option<Value>,
    /// Why it failed (told to the model; the call went on).
    pub error: Option<String>,
    /// From the call to its result.
    pub latency_ms: i64,
    /// When it was called, ISO 8601.
    pub created_at: String,
    /// The transcript turn (its `seq`) of the agent turn that made it.
    pub turn_seq: i64,
}

impl ToolCallView {
    /// The view of a stored row of the call `call_id`; a JSON column that
    /// no longer parses is an error naming the row (`{call_id}#{seq}`).
    pub fn from_row(call_id: CallId, row: &ToolCallRow) -> StoreResult<Self> {
        let json = |column: &'static str, text: &str| {
            decode_json::<Value>(
                "call_tool_calls",
                column,
                format!("{call_id}#{}", row.seq),
                text,
            )
        };
        Ok(Self {
            id: row.tool_call_id.clone(),
            name: row.name.clone(),
            arguments: json("arguments", &row.arguments)?,
            result: row
                .result
                .as_deref()
                .map(|text| json("result", text))
                .transpose()?,
            error: row.error.clone(),
            latency_ms: row.latency_ms,
            created_at: DateTime::<Utc>::from_timestamp_millis(row.created_at)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            turn_seq: row.turn_seq,
        })
    }
}
