//! How an analysis reads to clients: the `analysis` object of call reads and
//! webhooks, and `extracted` with the keypad choices merged in.

use crate::domain::clock::iso;
use crate::store::analyses::AnalysisRow;
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

fn stored(text: Option<&str>) -> Option<Value> {
    text.and_then(|t| serde_json::from_str(t).ok())
}

impl AnalysisView {
    /// The view of a stored analysis.
    pub fn from_row(row: &AnalysisRow) -> Self {
        Self {
            status: row.status.clone(),
            summary: row.summary.clone(),
            structured_data: stored(row.structured_data.as_deref()),
            success: stored(row.success.as_deref()),
            error: row.error.clone(),
            model: row.model.clone(),
            prompt_tokens: row.prompt_tokens,
            completion_tokens: row.completion_tokens,
            latency_ms: row.latency_ms,
            completed_at: row.completed_at.map(iso),
        }
    }
}

/// A call's `extracted`: its keypad choices, with the analysis' structured
/// data merged in (a keypad choice is what the callee pressed, so it wins).
pub fn merged_extracted(keypad: &Value, analysis: Option<&AnalysisRow>) -> Value {
    let mut merged: Map<String, Value> = analysis
        .and_then(|a| stored(a.structured_data.as_deref()))
        .and_then(|v| match v {
            Value::Object(map) => Some(map),
            _ => None,
        })
        .unwrap_or_default();
    if let Value::Object(choices) = keypad {
        for (k, v) in choices {
            merged.insert(k.clone(), v.clone());
        }
    }
    Value::Object(merged)
}
