//! A stored tool call as the API and the `call.completed` webhook show it.

use crate::store::tool_calls::ToolCallRow;
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
    /// The view of a stored row.
    pub fn from_row(row: &ToolCallRow) -> Self {
        let json = |text: &str| serde_json::from_str(text).unwrap_or(Value::Null);
        Self {
            id: row.tool_call_id.clone(),
            name: row.name.clone(),
            arguments: json(&row.arguments),
            result: row.result.as_deref().map(json),
            error: row.error.clone(),
            latency_ms: row.latency_ms,
            created_at: DateTime::<Utc>::from_timestamp_millis(row.created_at)
                .unwrap_or_default()
                .to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            turn_seq: row.turn_seq,
        }
    }
}
