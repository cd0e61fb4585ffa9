//! Post-call analysis: what a model is asked about a finished call (a summary, the fields of
//! the agent's plan, a success rubric), the JSON Schema its answer must follow, and the
//! question the sim agent asks for each field. The sim LLM's deterministic analyst, which
//! answers this contract, is [`crate::sim::analyst`].
//!
//! The request travels as the user message of a JSON-mode [`LlmRequest`](super::LlmRequest),
//! so every LLM provider, the sim included, answers it through the same trait as a turn.

use super::scorecard::ScorecardTurn;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The type of one extracted field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// Free text.
    String,
    /// Any number.
    Number,
    /// A whole number.
    Integer,
    /// Yes or no.
    Boolean,
    /// One of the field's `options`.
    Enum,
    /// A calendar date, `YYYY-MM-DD`.
    Date,
}

/// One field to extract from the conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisField {
    /// The key in `structuredData`.
    pub name: String,
    /// What kind of value it holds.
    #[serde(rename = "type")]
    pub kind: FieldType,
    /// What the field means, for the model (and the question the sim agent asks).
    #[serde(default)]
    pub description: String,
    /// Whether a call that did not yield it fell short.
    #[serde(default)]
    pub required: bool,
    /// The allowed values of an `enum` field.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<String>,
    /// Lowest allowed value of a number or integer field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minimum: Option<f64>,
    /// Highest allowed value of a number or integer field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub maximum: Option<f64>,
}

/// How success is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Rubric {
    /// `true` or `false`.
    PassFail,
    /// An integer from 1 to 10.
    NumericScale,
    /// `excellent`, `good`, `fair` or `poor`.
    DescriptiveScale,
    /// A number from 0 to 100.
    Percentage,
    /// Each named criterion passes or fails.
    Checklist,
}

/// The grades of [`Rubric::DescriptiveScale`], best first.
pub const DESCRIPTIVE_GRADES: [&str; 4] = ["excellent", "good", "fair", "poor"];

/// One criterion of a [`Rubric::Checklist`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Criterion {
    /// Its name, echoed in the answer.
    pub name: String,
    /// What it takes to pass.
    #[serde(default)]
    pub description: String,
}

/// What success means for the call, and on which scale it is judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SuccessPlan {
    /// The scale.
    pub rubric: Rubric,
    /// What success means, in the user's words.
    #[serde(default)]
    pub prompt: String,
    /// The checklist's criteria (only for [`Rubric::Checklist`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub criteria: Vec<Criterion>,
}

/// The user message of an analysis request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisRequest {
    /// How to summarize the call; `None` when no summary is wanted.
    #[serde(default)]
    pub summary_prompt: Option<String>,
    /// The fields to extract.
    pub fields: Vec<AnalysisField>,
    /// The user's own JSON Schema for `structuredData`, used instead of `fields`' schema.
    #[serde(default)]
    pub schema: Option<Value>,
    /// How to judge success; `None` when not judged.
    #[serde(default)]
    pub success: Option<SuccessPlan>,
    /// The conversation, oldest first.
    pub transcript: Vec<ScorecardTurn>,
    /// Why the call ended.
    pub ended_reason: String,
}

/// A model's answer: `{summary, structuredData, success: {value, reason}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AnalysisReply {
    /// The summary, when one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,
    /// The extracted values by field name (`null` where the call did not yield one).
    #[serde(default)]
    pub structured_data: Map<String, Value>,
    /// The verdict `{value, reason}`, when success was judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<Value>,
}

impl AnalysisRequest {
    /// The fields the answer holds: the plan's list, or those read off the user's schema.
    pub fn effective_fields(&self) -> Vec<AnalysisField> {
        match &self.schema {
            Some(schema) => fields_from_schema(schema),
            None => self.fields.clone(),
        }
    }

    /// The JSON Schema of the answer, in the strict form OpenAI's `json_schema` response
    /// format accepts: every property required, optional values nullable, no extra keys.
    pub fn answer_schema(&self) -> Value {
        let mut properties = Map::new();
        if self.summary_prompt.is_some() {
            properties.insert("summary".into(), json!({"type": "string"}));
        }
        let data = match &self.schema {
            Some(schema) => schema.clone(),
            None => {
                let mut props = Map::new();
                for field in &self.fields {
                    props.insert(field.name.clone(), field_schema(field));
                }
                json!({
                    "type": "object",
                    "additionalProperties": false,
                    "required": self.fields.iter().map(|f| f.name.clone()).collect::<Vec<_>>(),
                    "properties": props,
                })
            }
        };
        properties.insert("structuredData".into(), data);
        if let Some(success) = &self.success {
            properties.insert(
                "success".into(),
                json!({
                    "type": "object",
                    "additionalProperties": false,
                    "required": ["value", "reason"],
                    "properties": {
                        "value": success_value_schema(success),
                        "reason": {"type": "string"},
                    },
                }),
            );
        }
        let required: Vec<&String> = properties.keys().collect();
        json!({
            "type": "object",
            "additionalProperties": false,
            "required": required,
            "properties": properties,
        })
    }
}

/// The schema of one field's value. Every value may be `null`, required or not: a call that
/// did not yield a value answers `null` (the verdict counts a missing required field as a
/// shortfall), where a non-null type would make a model invent one.
pub fn field_schema(field: &AnalysisField) -> Value {
    let mut schema = Map::new();
    let base = match field.kind {
        FieldType::String | FieldType::Enum | FieldType::Date => "string",
        FieldType::Number => "number",
        FieldType::Integer => "integer",
        FieldType::Boolean => "boolean",
    };
    schema.insert("type".into(), json!([base, "null"]));
    if !field.description.is_empty() {
        schema.insert("description".into(), json!(field.description));
    }
    match field.kind {
        FieldType::Enum => {
            let mut options: Vec<Value> = field.options.iter().map(|o| json!(o)).collect();
            options.push(Value::Null);
            schema.insert("enum".into(), Value::Array(options));
        }
        FieldType::Date => {
            schema.insert("pattern".into(), json!(r"^\d{4}-\d{2}-\d{2}$"));
        }
        FieldType::Number | FieldType::Integer => {
            if let Some(min) = field.minimum {
                schema.insert("minimum".into(), json!(min));
            }
            if let Some(max) = field.maximum {
                schema.insert("maximum".into(), json!(max));
            }
        }
        FieldType::String | FieldType::Boolean => {}
    }
    Value::Object(schema)
}

/// The schema of the verdict's `value` for a rubric.
pub fn success_value_schema(success: &SuccessPlan) -> Value {
    match success.rubric {
        Rubric::PassFail => json!({"type": "boolean"}),
        Rubric::NumericScale => json!({"type": "integer", "minimum": 1, "maximum": 10}),
        Rubric::DescriptiveScale => json!({"type": "string", "enum": DESCRIPTIVE_GRADES}),
        Rubric::Percentage => json!({"type": "number", "minimum": 0, "maximum": 100}),
        Rubric::Checklist => json!({
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": false,
                "required": ["name", "pass"],
                "properties": {
                    "name": {"type": "string", "enum": success.criteria.iter().map(|c| c.name.clone()).collect::<Vec<_>>()},
                    "pass": {"type": "boolean"},
                },
            },
        }),
    }
}

/// Whether a verdict's `value` counts as a pass: pass/fail as given, 6 or more of 10, `good` or
/// better, 60 % or more, every checklist criterion passed.
pub fn verdict_passes(rubric: Rubric, value: &Value) -> Option<bool> {
    match rubric {
        Rubric::PassFail => value.as_bool(),
        Rubric::NumericScale => value.as_f64().map(|v| v >= 6.0),
        Rubric::DescriptiveScale => value.as_str().map(|g| g == "excellent" || g == "good"),
        Rubric::Percentage => value.as_f64().map(|v| v >= 60.0),
        Rubric::Checklist => value.as_array().map(|items| {
            items
                .iter()
                .all(|i| i.get("pass").and_then(Value::as_bool) == Some(true))
        }),
    }
}

/// The fields a user's JSON Schema describes (its top-level properties).
pub fn fields_from_schema(schema: &Value) -> Vec<AnalysisField> {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return Vec::new();
    };
    properties
        .iter()
        .map(|(name, prop)| {
            let types: Vec<&str> = match prop.get("type") {
                Some(Value::String(t)) => vec![t.as_str()],
                Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            let options: Vec<String> = prop
                .get("enum")
                .and_then(Value::as_array)
                .map(|o| {
                    o.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default();
            let kind = if !options.is_empty() {
                FieldType::Enum
            } else if types.contains(&"integer") {
                FieldType::Integer
            } else if types.contains(&"number") {
                FieldType::Number
            } else if types.contains(&"boolean") {
                FieldType::Boolean
            } else if prop.get("format").and_then(Value::as_str) == Some("date") {
                FieldType::Date
            } else {
                FieldType::String
            };
            AnalysisField {
                name: name.clone(),
                kind,
                description: prop
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                required: required.contains(&name.as_str()),
                options,
                minimum: prop.get("minimum").and_then(Value::as_f64),
                maximum: prop.get("maximum").and_then(Value::as_f64),
            }
        })
        .collect()
}

/// The question the sim agent asks to learn `field`: its description as a question.
pub fn question_for(field: &AnalysisField) -> String {
    let description = field.description.trim().trim_end_matches(['.', '?']);
    let subject = if description.is_empty() {
        split_name(&field.name).join(" ")
    } else {
        description.to_owned()
    };
    match field.kind {
        FieldType::Enum => format!(
            "Could you tell me {}: {}?",
            lowercase_first(&subject),
            field.options.join(", ")
        ),
        _ => format!("Could you tell me {}?", lowercase_first(&subject)),
    }
}

fn lowercase_first(text: &str) -> String {
    let mut chars = text.chars();
    match (chars.next(), text.chars().nth(1)) {
        // An acronym ("CTC", "GST") keeps its case.
        (Some(first), Some(second)) if !second.is_uppercase() => {
            first.to_lowercase().chain(chars).collect()
        }
        _ => text.to_owned(),
    }
}

/// `noticePeriodDays` or `notice_period_days` → `["notice", "period", "days"]`.
pub(crate) fn split_name(name: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut current = String::new();
    for ch in name.chars() {
        if ch == '_' || ch == '-' || ch == ' ' {
            if !current.is_empty() {
                words.push(std::mem::take(&mut current));
            }
        } else if ch.is_uppercase() && !current.is_empty() {
            words.push(std::mem::take(&mut current));
            current.extend(ch.to_lowercase());
        } else {
            current.extend(ch.to_lowercase());
        }
    }
    if !current.is_empty() {
        words.push(current);
    }
    words
}

/// The contract's tests, and the requests the sim analyst's tests share.
#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A required field with no options or bounds.
    pub(crate) fn field(name: &str, kind: FieldType, description: &str) -> AnalysisField {
        AnalysisField {
            name: name.into(),
            kind,
            description: description.into(),
            required: true,
            options: Vec::new(),
            minimum: None,
            maximum: None,
        }
    }

    /// A transcript from `(speaker, text)` pairs.
    pub(crate) fn turns(lines: &[(&str, &str)]) -> Vec<ScorecardTurn> {
        lines
            .iter()
            .map(|(s, t)| ScorecardTurn {
                speaker: (*s).into(),
                text: (*t).into(),
            })
            .collect()
    }

    /// A screening call's analysis request: six fields, one of each type (the notes
    /// optional), a pass/fail rubric and a transcript that answers every question.
    pub(crate) fn screening() -> AnalysisRequest {
        let mut shift = field(
            "preferredShift",
            FieldType::Enum,
            "Which shift the candidate prefers",
        );
        shift.options = vec!["morning".into(), "night".into(), "weekend".into()];
        let mut notes = field(
            "notes",
            FieldType::String,
            "Anything else the candidate wants us to know",
        );
        notes.required = false;
        AnalysisRequest {
            summary_prompt: Some("Summarize the call.".into()),
            fields: vec![
                field(
                    "yearsOfExperience",
                    FieldType::Integer,
                    "How many years of Rust experience",
                ),
                field(
                    "expectedSalary",
                    FieldType::Number,
                    "Expected monthly salary in rupees",
                ),
                field(
                    "willingToRelocate",
                    FieldType::Boolean,
                    "Whether willing to relocate to Bengaluru",
                ),
                shift,
                field(
                    "startDate",
                    FieldType::Date,
                    "The date the candidate can start",
                ),
                notes,
            ],
            schema: None,
            success: Some(SuccessPlan {
                rubric: Rubric::PassFail,
                prompt: "The candidate answered every screening question.".into(),
                criteria: Vec::new(),
            }),
            transcript: turns(&[
                ("agent", "Hello Asha, do you have a minute?"),
                ("callee", "Yes, I have a minute."),
                ("agent", "How many years of Rust experience do you have?"),
                ("callee", "About five years."),
                ("agent", "What is your expected monthly salary in rupees?"),
                ("callee", "Around 1,20,000 rupees a month, so 120000."),
                ("agent", "Are you willing to relocate to Bengaluru?"),
                ("callee", "Yes, that works for me."),
                (
                    "agent",
                    "Which shift do you prefer: morning, night or weekend?",
                ),
                ("callee", "The night shift, please."),
                ("agent", "What date can you start?"),
                ("callee", "I can start on the 3rd of March 2027."),
                ("agent", "Is there anything else you want us to know?"),
                ("callee", "I prefer remote work on Fridays."),
                ("agent", "Thank you. Goodbye!"),
            ]),
            ended_reason: "agent-hangup".into(),
        }
    }

    #[test]
    fn the_answer_schema_is_strict_and_carries_the_bounds() {
        let mut request = screening();
        request.fields[0].minimum = Some(0.0);
        request.fields[0].maximum = Some(50.0);
        let schema = request.answer_schema();
        assert_eq!(schema["additionalProperties"], json!(false));
        let mut required: Vec<&str> = schema["required"]
            .as_array()
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        required.sort_unstable();
        assert_eq!(required, ["structuredData", "success", "summary"]);
        let data = &schema["properties"]["structuredData"];
        assert_eq!(data["required"].as_array().map(Vec::len), Some(6));
        assert_eq!(
            data["properties"]["yearsOfExperience"],
            json!({"type": ["integer", "null"], "description": "How many years of Rust experience", "minimum": 0.0, "maximum": 50.0})
        );
        assert_eq!(
            data["properties"]["notes"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            data["properties"]["preferredShift"]["enum"],
            json!(["morning", "night", "weekend", null])
        );
        assert_eq!(
            schema["properties"]["success"]["properties"]["value"],
            json!({"type": "boolean"})
        );
    }

    #[test]
    fn an_analysis_request_is_not_mistaken_for_a_scorecard() {
        let text = serde_json::to_string(&screening()).unwrap_or_default();
        assert!(
            serde_json::from_str::<crate::providers::scorecard::ScorecardRequest>(&text).is_err()
        );
        assert_eq!(
            serde_json::from_str::<AnalysisRequest>(&text).ok(),
            Some(screening())
        );
    }
}
