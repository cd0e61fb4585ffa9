//! An agent's post-call analysis plan: the summary it wants, the fields to extract (a list,
//! or the user's own JSON Schema), how success is judged, and how long `call.completed`
//! waits for the result. Parsed and checked once when the agent is written; the worker
//! turns it into the engine's [`AnalysisRequest`](engine::AnalysisRequest).
//!
//! The field and rubric types mirror the engine's on purpose: these carry the
//! OpenAPI schema and the API's validation, which the engine crate must not
//! know about; [`AnalysisPlan::engine_request`] is the one crossing.

use crate::domain::text;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::ToSchema;
use voxline_actors::providers::analysis as engine;
use voxline_actors::providers::scorecard::ScorecardTurn;

/// The summary prompt used when the plan gives none.
pub const DEFAULT_SUMMARY_PROMPT: &str = "Summarize this phone call in two or three sentences \
for the person who will follow up: who was reached, what they said that matters (answers, \
commitments, objections) and what happens next. Use only what is in the transcript.";

/// How long `call.completed` waits for the analysis when the plan does not say.
pub const DEFAULT_TIMEOUT_SECONDS: u32 = 60;

/// Longest wait a plan may ask for.
pub const MAX_TIMEOUT_SECONDS: u32 = 600;

/// Most fields a plan may extract.
pub const MAX_FIELDS: usize = 50;

/// Whether and how the call is summarized.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SummaryPlan {
    /// Whether a summary is written (default true).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// What the summary should say; a general default when absent.
    #[serde(default = "default_summary_prompt")]
    pub prompt: String,
}

fn yes() -> bool {
    true
}

fn default_summary_prompt() -> String {
    DEFAULT_SUMMARY_PROMPT.to_owned()
}

impl Default for SummaryPlan {
    fn default() -> Self {
        Self {
            enabled: true,
            prompt: default_summary_prompt(),
        }
    }
}

/// The type of an extracted field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// Free text.
    #[default]
    String,
    /// Any number.
    Number,
    /// A whole number.
    Integer,
    /// Yes or no.
    Boolean,
    /// One of `options`.
    Enum,
    /// A calendar date (`YYYY-MM-DD`).
    Date,
}

/// One field to extract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PlanField {
    /// The key in `structuredData` and `extracted`: a letter or `_`, then letters, digits or `_`.
    pub name: String,
    /// The value's type (default `string`).
    #[serde(rename = "type", default)]
    pub kind: FieldType,
    /// What the field means; the model reads it (and the sim agent asks it).
    #[serde(default)]
    pub description: String,
    /// Whether a call that did not yield it fell short of its goal.
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

/// The scale success is judged on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub enum Rubric {
    /// Pass or fail.
    PassFail,
    /// 1 to 10.
    NumericScale,
    /// excellent, good, fair or poor.
    DescriptiveScale,
    /// 0 to 100.
    Percentage,
    /// Named criteria, each pass or fail.
    Checklist,
}

/// One criterion of a checklist.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Criterion {
    /// Its name.
    pub name: String,
    /// What it takes to pass.
    #[serde(default)]
    pub description: String,
}

/// How success is judged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SuccessPlan {
    /// The scale.
    pub rubric: Rubric,
    /// What success means for this agent's calls.
    #[serde(default)]
    pub prompt: String,
    /// The criteria of a checklist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub criteria: Vec<Criterion>,
}

/// An agent's post-call analysis plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AnalysisPlan {
    /// The summary.
    #[serde(default)]
    pub summary: SummaryPlan,
    /// The fields to extract (or give `schema` instead).
    #[serde(default)]
    pub fields: Vec<PlanField>,
    /// A JSON Schema object for the extracted data, instead of `fields`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<Object>)]
    pub schema: Option<Value>,
    /// How success is judged; not judged when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub success: Option<SuccessPlan>,
    /// How long `call.completed` waits for the analysis, 1–600 (default 60).
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u32,
}

fn default_timeout() -> u32 {
    DEFAULT_TIMEOUT_SECONDS
}

impl Default for AnalysisPlan {
    fn default() -> Self {
        Self {
            summary: SummaryPlan::default(),
            fields: Vec::new(),
            schema: None,
            success: None,
            timeout_seconds: DEFAULT_TIMEOUT_SECONDS,
        }
    }
}

/// Why a plan was refused: the path of the offending value, and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} {message}")]
pub struct PlanError {
    /// Where, e.g. `analysis.fields[2].options`.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

/// The most characters of a prompt (summary or success).
pub const MAX_PROMPT_CHARS: usize = 20_000;
/// The most characters of a field's or criterion's description.
pub const MAX_DESCRIPTION_CHARS: usize = 2_000;
/// The most characters of an enum option or a criterion name.
pub const MAX_LABEL_CHARS: usize = 200;

/// Refuses text at `path` that is not clean [`text`] of its kind (NUL and
/// control characters; line breaks in one-line text) or is over `max`.
fn clean(
    path: impl FnOnce() -> String,
    raw: &str,
    lines: text::Lines,
    max: usize,
) -> Result<(), PlanError> {
    match text::parse(raw, lines, max) {
        Ok(_) => Ok(()),
        Err(reason) => refuse(path(), reason.to_string()),
    }
}

fn refuse(path: impl Into<String>, message: impl Into<String>) -> Result<(), PlanError> {
    Err(PlanError {
        path: path.into(),
        message: message.into(),
    })
}

/// Whether `name` can key a JSON object in every consumer (a letter or `_`, then letters,
/// digits or `_`, at most 64 characters).
fn is_identifier(name: &str) -> bool {
    let mut chars = name.chars();
    name.len() <= 64
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl AnalysisPlan {
    /// Checks the plan; `root` prefixes every path (`analysis`, or `extraction` for the
    /// spec's spelling of the fields).
    pub fn validate(&self, root: &str) -> Result<(), PlanError> {
        if self.summary.enabled && self.summary.prompt.trim().is_empty() {
            return refuse(format!("{root}.summary.prompt"), "must not be blank");
        }
        clean(
            || format!("{root}.summary.prompt"),
            &self.summary.prompt,
            text::Lines::Many,
            MAX_PROMPT_CHARS,
        )?;
        if self.fields.len() > MAX_FIELDS {
            return refuse(
                format!("{root}.fields"),
                format!("may hold at most {MAX_FIELDS} fields"),
            );
        }
        if self.schema.is_some() && !self.fields.is_empty() {
            return refuse(
                format!("{root}.schema"),
                "cannot be given together with fields; use one or the other",
            );
        }
        for (i, field) in self.fields.iter().enumerate() {
            let at = format!("{root}.fields[{i}]");
            if !is_identifier(&field.name) {
                return refuse(
                    format!("{at}.name"),
                    "must start with a letter or _ and hold only letters, digits and _ (at most 64)",
                );
            }
            clean(
                || format!("{at}.description"),
                &field.description,
                text::Lines::Many,
                MAX_DESCRIPTION_CHARS,
            )?;
            if self.fields[..i].iter().any(|f| f.name == field.name) {
                return refuse(
                    format!("{at}.name"),
                    format!("repeats the field name {}", field.name),
                );
            }
            match field.kind {
                FieldType::Enum if field.options.iter().all(|o| o.trim().is_empty()) => {
                    return refuse(format!("{at}.options"), "must list at least one option");
                }
                FieldType::Enum => {
                    for (j, option) in field.options.iter().enumerate() {
                        if option.trim().is_empty() {
                            return refuse(format!("{at}.options[{j}]"), "must not be blank");
                        }
                        clean(
                            || format!("{at}.options[{j}]"),
                            option,
                            text::Lines::One,
                            MAX_LABEL_CHARS,
                        )?;
                        if field.options[..j].contains(option) {
                            return refuse(
                                format!("{at}.options[{j}]"),
                                format!("repeats the option {option}"),
                            );
                        }
                    }
                }
                _ if !field.options.is_empty() => {
                    return refuse(format!("{at}.options"), "is only allowed on enum fields");
                }
                _ => {}
            }
            let numeric = matches!(field.kind, FieldType::Number | FieldType::Integer);
            if !numeric && (field.minimum.is_some() || field.maximum.is_some()) {
                let which = if field.minimum.is_some() {
                    "minimum"
                } else {
                    "maximum"
                };
                return refuse(
                    format!("{at}.{which}"),
                    "is only allowed on number and integer fields",
                );
            }
            if let (Some(min), Some(max)) = (field.minimum, field.maximum)
                && min > max
            {
                return refuse(format!("{at}.minimum"), "must not be above maximum");
            }
        }
        if let Some(schema) = &self.schema {
            validate_schema(schema, &format!("{root}.schema"))?;
        }
        if let Some(success) = &self.success {
            let at = format!("{root}.success");
            clean(
                || format!("{at}.prompt"),
                &success.prompt,
                text::Lines::Many,
                MAX_PROMPT_CHARS,
            )?;
            match success.rubric {
                Rubric::Checklist if success.criteria.is_empty() => {
                    return refuse(format!("{at}.criteria"), "must list at least one criterion");
                }
                Rubric::Checklist => {
                    for (i, criterion) in success.criteria.iter().enumerate() {
                        if criterion.name.trim().is_empty() {
                            return refuse(format!("{at}.criteria[{i}].name"), "must not be blank");
                        }
                        clean(
                            || format!("{at}.criteria[{i}].name"),
                            &criterion.name,
                            text::Lines::One,
                            MAX_LABEL_CHARS,
                        )?;
                        clean(
                            || format!("{at}.criteria[{i}].description"),
                            &criterion.description,
                            text::Lines::Many,
                            MAX_DESCRIPTION_CHARS,
                        )?;
                        if success.criteria[..i]
                            .iter()
                            .any(|c| c.name == criterion.name)
                        {
                            return refuse(
                                format!("{at}.criteria[{i}].name"),
                                format!("repeats the criterion {}", criterion.name),
                            );
                        }
                    }
                }
                _ if !success.criteria.is_empty() => {
                    return refuse(
                        format!("{at}.criteria"),
                        "is only allowed with the checklist rubric",
                    );
                }
                _ => {}
            }
        }
        if !(1..=MAX_TIMEOUT_SECONDS).contains(&self.timeout_seconds) {
            return refuse(
                format!("{root}.timeoutSeconds"),
                format!("must be between 1 and {MAX_TIMEOUT_SECONDS}"),
            );
        }
        Ok(())
    }

    /// The fields the answer holds: the list, or those of the user's schema.
    pub fn field_names(&self) -> Vec<String> {
        match &self.schema {
            Some(schema) => engine::fields_from_schema(schema)
                .into_iter()
                .map(|f| f.name)
                .collect(),
            None => self.fields.iter().map(|f| f.name.clone()).collect(),
        }
    }

    /// The questions a sim agent asks during the call, one per field, in order.
    pub fn questions(&self) -> Vec<String> {
        let fields = match &self.schema {
            Some(schema) => engine::fields_from_schema(schema),
            None => self.fields.iter().map(engine_field).collect(),
        };
        fields.iter().map(engine::question_for).collect()
    }

    /// The question the engine's model answers for a call with this transcript.
    pub fn engine_request(
        &self,
        transcript: Vec<ScorecardTurn>,
        ended_reason: &str,
    ) -> engine::AnalysisRequest {
        engine::AnalysisRequest {
            summary_prompt: self.summary.enabled.then(|| self.summary.prompt.clone()),
            fields: self.fields.iter().map(engine_field).collect(),
            schema: self.schema.clone(),
            success: self.success.as_ref().map(|s| engine::SuccessPlan {
                rubric: match s.rubric {
                    Rubric::PassFail => engine::Rubric::PassFail,
                    Rubric::NumericScale => engine::Rubric::NumericScale,
                    Rubric::DescriptiveScale => engine::Rubric::DescriptiveScale,
                    Rubric::Percentage => engine::Rubric::Percentage,
                    Rubric::Checklist => engine::Rubric::Checklist,
                },
                prompt: s.prompt.clone(),
                criteria: s
                    .criteria
                    .iter()
                    .map(|c| engine::Criterion {
                        name: c.name.clone(),
                        description: c.description.clone(),
                    })
                    .collect(),
            }),
            transcript,
            ended_reason: ended_reason.to_owned(),
        }
    }
}

fn engine_field(field: &PlanField) -> engine::AnalysisField {
    engine::AnalysisField {
        name: field.name.clone(),
        kind: match field.kind {
            FieldType::String => engine::FieldType::String,
            FieldType::Number => engine::FieldType::Number,
            FieldType::Integer => engine::FieldType::Integer,
            FieldType::Boolean => engine::FieldType::Boolean,
            FieldType::Enum => engine::FieldType::Enum,
            FieldType::Date => engine::FieldType::Date,
        },
        description: field.description.clone(),
        required: field.required,
        options: field.options.clone(),
        minimum: field.minimum,
        maximum: field.maximum,
    }
}

/// A user's schema must be a valid JSON Schema describing an object with properties, each
/// named as a field can be.
fn validate_schema(schema: &Value, path: &str) -> Result<(), PlanError> {
    if let Err(err) = jsonschema::meta::validate(schema) {
        return refuse(path, format!("is not a valid JSON Schema: {err}"));
    }
    if let Err(err) = jsonschema::validator_for(schema) {
        return refuse(path, format!("is not a valid JSON Schema: {err}"));
    }
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return refuse(format!("{path}.type"), "must be \"object\"");
    }
    let Some(properties) = schema.get("properties").and_then(Value::as_object) else {
        return refuse(
            format!("{path}.properties"),
            "must describe at least one property",
        );
    };
    if properties.is_empty() {
        return refuse(
            format!("{path}.properties"),
            "must describe at least one property",
        );
    }
    if properties.len() > MAX_FIELDS {
        return refuse(
            format!("{path}.properties"),
            format!("may hold at most {MAX_FIELDS} properties"),
        );
    }
    for name in properties.keys() {
        if !is_identifier(name) {
            return refuse(
                format!("{path}.properties.{name}"),
                "must be named with a letter or _ then letters, digits and _ (at most 64)",
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(value: Value) -> AnalysisPlan {
        serde_json::from_value(value).expect("a plan")
    }

    fn refused(value: Value) -> PlanError {
        plan(value).validate("analysis").expect_err("refused")
    }

    #[test]
    fn a_full_plan_reads_back_with_its_defaults() {
        let p = plan(json!({
            "fields": [
                {"name": "years", "type": "integer", "required": true, "minimum": 0, "maximum": 60},
                {"name": "shift", "type": "enum", "options": ["day", "night"]},
                {"name": "start", "type": "date"},
            ],
            "success": {"rubric": "checklist", "criteria": [{"name": "Asked about shift"}]},
        }));
        assert_eq!(p.validate("analysis"), Ok(()));
        assert!(p.summary.enabled);
        assert_eq!(p.summary.prompt, DEFAULT_SUMMARY_PROMPT);
        assert_eq!(p.timeout_seconds, 60);
        assert_eq!(p.field_names(), ["years", "shift", "start"]);
        let again: AnalysisPlan =
            serde_json::from_value(serde_json::to_value(&p).expect("json")).expect("plan");
        assert_eq!(again, p);
    }

    #[test]
    fn bad_plans_are_refused_naming_the_path() {
        let cases = [
            (
                json!({"fields": [{"name": "a", "type": "string"}, {"name": "b", "type": "string"}, {"name": "c", "type": "enum"}]}),
                "analysis.fields[2].options",
            ),
            (
                json!({"fields": [{"name": "a", "type": "string"}, {"name": "a", "type": "number"}]}),
                "analysis.fields[1].name",
            ),
            (
                json!({"fields": [{"name": "2nd", "type": "string"}]}),
                "analysis.fields[0].name",
            ),
            (
                json!({"fields": [{"name": "first name", "type": "string"}]}),
                "analysis.fields[0].name",
            ),
            (
                json!({"fields": [{"name": "a", "type": "number", "minimum": 5, "maximum": 1}]}),
                "analysis.fields[0].minimum",
            ),
            (
                json!({"fields": [{"name": "a", "type": "string", "options": ["x"]}]}),
                "analysis.fields[0].options",
            ),
            (
                json!({"schema": {"type": "object", "properties": {"a": {"type": "strin"}}}}),
                "analysis.schema",
            ),
            (json!({"schema": {"type": "array"}}), "analysis.schema.type"),
            (
                json!({"schema": {"type": "object", "properties": {}}}),
                "analysis.schema.properties",
            ),
            (
                json!({"schema": {"type": "object", "properties": {"a": {}}}, "fields": [{"name": "a", "type": "string"}]}),
                "analysis.schema",
            ),
            (
                json!({"success": {"rubric": "checklist"}}),
                "analysis.success.criteria",
            ),
            (json!({"timeoutSeconds": 0}), "analysis.timeoutSeconds"),
            (
                json!({"summary": {"prompt": " "}}),
                "analysis.summary.prompt",
            ),
        ];
        for (value, path) in cases {
            let err = refused(value.clone());
            assert_eq!(err.path, path, "{value} → {err}");
        }
    }

    #[test]
    fn unknown_types_and_rubrics_do_not_parse() {
        assert!(
            serde_json::from_value::<AnalysisPlan>(
                json!({"fields": [{"name": "a", "type": "money"}]})
            )
            .is_err()
        );
        assert!(
            serde_json::from_value::<AnalysisPlan>(json!({"success": {"rubric": "stars"}}))
                .is_err()
        );
        assert!(serde_json::from_value::<AnalysisPlan>(json!({"extra": 1})).is_err());
    }

    #[test]
    fn a_users_schema_names_its_properties_as_fields() {
        let p = plan(json!({
            "schema": {"type": "object", "required": ["age"], "properties": {"age": {"type": "integer"}, "city": {"type": "string"}}},
        }));
        assert_eq!(p.validate("analysis"), Ok(()));
        assert_eq!(p.field_names(), ["age", "city"]);
    }
}
