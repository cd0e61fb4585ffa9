//! How an analysis reads to clients: the `analysis` object of call reads and
//! webhooks, and `extracted` with the keypad choices merged in.

use crate::domain::CallId;
use crate::domain::clock::iso;
use crate::store::analyses::AnalysisRow;
use crate::store::{StoreResult, decode_json};
use serde::Serialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// A call's post-call analysis, as every call read shows it.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisView {
    /// `pending`, `done`, `failed` or `skipped` (the call never connected).
    pub status: String,
    /// The model's summary, when the plan asks for one.
    pub summary: Option<String>,
    /// The extracted fields by name; `null` where the call did not yield one.
    #[schema(value_type = Option<Object>)]
    pub structured_data: Option<Value>,
    /// The verdict: `{rubric, value, pass, reason}`, when the plan judges success.
    #[schema(value_type = Option<Object>)]
    pub success: Option<Value>,
    /// Why the analysis failed.
    pub error: Option<String>,
    /// The model that answered.
    pub model: Option<String>,
    /// Prompt tokens the analysis took.
    pub prompt_tokens: i64,
    /// Tokens the model generated.
    pub completion_tokens: i64,
    /// Time spent waiting for the model, ms.
    pub latency_ms: i64,
    /// When the current analysis was produced, ISO 8601.
    pub completed_at: Option<String>,
}

/// The call's analysis column `column` (`None` while it has none); text
/// that no longer parses is an error, not a missing value.
fn stored(call_id: CallId, column: &'static str, text: Option<&str>) -> StoreResult<Option<Value>> {
    text.map(|t| decode_json("call_analyses", column, call_id, t))
        .transpose()
}

/// The stored verdict `{rubric, value, pass, reason}` of `call_id`'s analysis,
/// `None` when it has none.
pub fn stored_verdict(call_id: CallId, success: Option<&str>) -> StoreResult<Option<Value>> {
    stored(call_id, "success", success)
}

/// The stored structured data of `call_id`'s analysis as an object (empty
/// when it has none).
pub fn stored_structured_data(
    call_id: CallId,
    structured_data: Option<&str>,
) -> StoreResult<Map<String, Value>> {
    Ok(match stored(call_id, "structured_data", structured_data)? {
        Some(Value::Object(map)) => map,
        _ => Map::new(),
    })
}

impl AnalysisView {
    /// The view of a stored analysis.
    pub fn from_row(row: &AnalysisRow) -> StoreResult<Self> {
        Ok(Self {
            status: row.status.clone(),
            summary: row.summary.clone(),
            structured_data: stored(
                row.call_id,
                "structured_data",
                row.structured_data.as_deref(),
            )?,
            success: stored_verdict(row.call_id, row.success.as_deref())?,
            error: row.error.clone(),
            model: row.model.clone(),
            prompt_tokens: row.prompt_tokens,
            completion_tokens: row.completion_tokens,
            latency_ms: row.latency_ms,
            completed_at: row.completed_at.map(iso),
        })
    }
}

/// A call's `extracted`: its keypad choices, with the analysis' structured
/// data merged in (a keypad choice is what the callee pressed, so it wins).
pub fn merged_extracted(keypad: &Value, analysis: Option<&AnalysisRow>) -> StoreResult<Value> {
    let mut merged = match analysis {
        Some(a) => stored_structured_data(a.call_id, a.structured_data.as_deref())?,
        None => Map::new(),
    };
    if let Value::Object(choices) = keypad {
        for (k, v) in choices {
            merged.insert(k.clone(), v.clone());
        }
    }
    Ok(Value::Object(merged))
}
