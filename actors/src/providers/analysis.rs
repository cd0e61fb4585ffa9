//! Post-call analysis: what a model is asked about a finished call (a summary, the fields of
//! the agent's plan, a success rubric), the JSON Schema its answer must follow, and the sim
//! LLM's deterministic analyzer, which reads the transcript for the values the callee said.
//!
//! The request travels as the user message of a JSON-mode [`LlmRequest`](super::LlmRequest),
//! so every LLM provider, the sim included, answers it through the same trait as a turn.

use super::scorecard::{CALLEE, ScorecardTurn};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use std::time::{SystemTime, UNIX_EPOCH};

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
fn split_name(name: &str) -> Vec<String> {
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

/// Words too common to tie a question to a field.
const FILLER: &[&str] = &[
    "the",
    "and",
    "for",
    "you",
    "your",
    "are",
    "was",
    "what",
    "which",
    "how",
    "many",
    "much",
    "does",
    "did",
    "have",
    "has",
    "with",
    "this",
    "that",
    "from",
    "about",
    "tell",
    "could",
    "would",
    "please",
    "their",
    "they",
    "them",
    "whether",
    "callee",
    "caller",
    "candidate",
    "person",
    "call",
    "any",
    "can",
    "will",
    "when",
    "who",
    "also",
    "yes",
    "not",
    "ask",
    "asked",
];

/// Lowercase words of `text`, inner apostrophes, dots and hyphens kept (`don't`, `2.5`).
fn words(text: &str) -> Vec<String> {
    text.replace('\u{2019}', "'")
        .split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '.' || c == '-'))
        .map(|w| w.trim_matches(|c| c == '.' || c == '-' || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A crude stem, so "experience" and "experienced" meet.
fn stem(word: &str) -> &str {
    let end = word.char_indices().nth(5).map_or(word.len(), |(at, _)| at);
    &word[..end]
}

fn topic_stems(text: &str) -> Vec<String> {
    let mut stems: Vec<String> = words(text)
        .into_iter()
        .filter(|w| w.chars().count() >= 3 && !FILLER.contains(&w.as_str()))
        .filter(|w| !w.chars().all(|c| c.is_ascii_digit()))
        .map(|w| stem(&w).to_owned())
        .collect();
    stems.sort();
    stems.dedup();
    stems
}

fn hits(topic: &[String], text: &str) -> usize {
    let stems: Vec<String> = words(text).iter().map(|w| stem(w).to_owned()).collect();
    topic.iter().filter(|t| stems.contains(t)).count()
}

/// The stems that tie a turn to `field`: those of its name's words and its description.
fn field_topic(field: &AnalysisField) -> Vec<String> {
    topic_stems(&format!(
        "{} {}",
        split_name(&field.name).join(" "),
        field.description
    ))
}

/// `text` lowercased with its whitespace collapsed, to find one text inside another.
fn normalized(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .to_lowercase()
}

/// The agent turns that ask `field`'s own question ([`question_for`], what the sim agent asks).
fn asked_at(field: &AnalysisField, transcript: &[ScorecardTurn]) -> Vec<usize> {
    let question = normalized(&question_for(field));
    transcript
        .iter()
        .enumerate()
        .filter(|(_, t)| t.speaker != CALLEE && normalized(&t.text).contains(&question))
        .map(|(at, _)| at)
        .collect()
}

/// The callee's non-empty turns right after the agent turn at `at`, up to the next agent turn.
fn answer_after(transcript: &[ScorecardTurn], at: usize) -> Vec<usize> {
    transcript
        .iter()
        .enumerate()
        .skip(at + 1)
        .take_while(|(_, t)| t.speaker == CALLEE)
        .filter(|(_, t)| !t.text.trim().is_empty())
        .map(|(i, _)| i)
        .collect()
}

fn joined(transcript: &[ScorecardTurn], turns: &[usize]) -> String {
    turns
        .iter()
        .map(|&i| transcript[i].text.trim())
        .collect::<Vec<_>>()
        .join(" ")
}

/// What the call yielded for one field: the value, and the callee's words it was read from.
#[derive(Debug, Clone, PartialEq)]
struct Found {
    value: Value,
    said: String,
}

/// Reads every field's value from the transcript. For each field, in order of trust:
/// 1. the callee's answer to an agent turn that asks the field's own question
///    ([`question_for`], as the sim agent does), the latest one that holds a value;
/// 2. when that question was never asked, the answer to the agent turn that shares the most
///    words with the field (never a turn asking another field's own question);
/// 3. a callee turn anywhere in the call that names the field itself ("5 years of
///    experience", "my notice period is 30 days", "I prefer hybrid work"), the value read
///    nearest the field's words. A text field takes a turn only when it says "my … is". A
///    turn that answered another field's own question is read only when it said nothing for
///    that field (a value given out of order); one that did answer it stays that field's.
fn extract(
    fields: &[AnalysisField],
    transcript: &[ScorecardTurn],
    today: Ymd,
) -> Vec<Option<Found>> {
    let asked: Vec<Vec<usize>> = fields.iter().map(|f| asked_at(f, transcript)).collect();
    // Per field, the callee turns of the answers to its own question that spoke to it.
    let claimed: Vec<Vec<usize>> = fields
        .iter()
        .zip(&asked)
        .map(|(field, questions)| {
            let topic = field_topic(field);
            questions
                .iter()
                .map(|&at| answer_after(transcript, at))
                .filter(|turns| speaks_to(field, &topic, &joined(transcript, turns), today))
                .flatten()
                .collect()
        })
        .collect();
    fields
        .iter()
        .enumerate()
        .map(|(n, field)| {
            let topic = field_topic(field);
            let others_questions: Vec<usize> = asked
                .iter()
                .enumerate()
                .filter(|(m, _)| *m != n)
                .flat_map(|(_, turns)| turns.iter().copied())
                .filter(|at| !asked[n].contains(at))
                .collect();
            let others_answers: Vec<usize> = claimed
                .iter()
                .enumerate()
                .filter(|(m, _)| *m != n)
                .flat_map(|(_, turns)| turns.iter().copied())
                .collect();
            for &at in asked[n].iter().rev() {
                let answer = joined(transcript, &answer_after(transcript, at));
                if let Some(found) = read(field, &topic, &answer, today, false) {
                    return Some(found);
                }
            }
            if topic.is_empty() {
                return None;
            }
            if asked[n].is_empty() {
                let mut best: Option<(usize, usize)> = None;
                for (at, turn) in transcript.iter().enumerate() {
                    if turn.speaker == CALLEE || others_questions.contains(&at) {
                        continue;
                    }
                    let n = hits(&topic, &turn.text);
                    if n > 0 && best.is_none_or(|(_, most)| n > most) {
                        best = Some((at, n));
                    }
                }
                if let Some((at, _)) = best {
                    let answer = joined(transcript, &answer_after(transcript, at));
                    if let Some(found) = read(field, &topic, &answer, today, false) {
                        return Some(found);
                    }
                }
            }
            let mut naming: Vec<(usize, usize)> = transcript
                .iter()
                .enumerate()
                .filter(|(at, t)| t.speaker == CALLEE && !others_answers.contains(at))
                .map(|(at, t)| (hits(&topic, &t.text), at))
                .filter(|(n, _)| *n > 0 && n * 2 >= topic.len())
                .collect();
            // Most of the field's words first, then the latest (a correction wins).
            naming.sort_by(|a, b| b.cmp(a));
            naming
                .into_iter()
                .find_map(|(_, at)| read(field, &topic, &transcript[at].text, today, true))
        })
        .collect()
}

/// Whether `answer`, given to `field`'s own question, spoke to it: it holds the field's value,
/// or, for a number, a number the field's bounds refuse (the answer was about the field all
/// the same, so the number beside it is not another field's).
fn speaks_to(field: &AnalysisField, topic: &[String], answer: &str, today: Ymd) -> bool {
    match field.kind {
        FieldType::Number | FieldType::Integer => {
            !numbers_in(&words(&answer.replace(',', ""))).is_empty()
        }
        _ => read(field, topic, answer, today, false).is_some(),
    }
}

/// The value of `field` in `answer`; `naming` when the text is not an answer to the field's
/// question but a turn that happens to name it.
fn read(
    field: &AnalysisField,
    topic: &[String],
    answer: &str,
    today: Ymd,
    naming: bool,
) -> Option<Found> {
    let answer = answer.trim();
    if answer.is_empty() {
        return None;
    }
    let value = match field.kind {
        FieldType::Number => nearest_number(field, topic, answer).map(number_value),
        FieldType::Integer => nearest_number(field, topic, answer).map(|n| json!(n.round() as i64)),
        FieldType::Boolean => yes_no(answer).map(Value::Bool),
        FieldType::Enum => named_option(&field.options, answer).map(Value::String),
        FieldType::Date => first_date(answer, today).map(Value::String),
        FieldType::String => string_value(answer, topic, naming).map(Value::String),
    }?;
    Some(Found {
        value,
        said: answer.to_owned(),
    })
}

/// A number as JSON: whole numbers without a fraction (`30`, not `30.0`).
fn number_value(n: f64) -> Value {
    if n.fract() == 0.0 && n.abs() < 9.0e15 {
        json!(n as i64)
    } else {
        json!(n)
    }
}

/// The number in `text` nearest the field's words (the first one when the text does not name
/// the field), when it fits the field's bounds: a number out of bounds is no value, and
/// another number said beside it is not taken in its place.
fn nearest_number(field: &AnalysisField, topic: &[String], text: &str) -> Option<f64> {
    let tokens = words(&text.replace(',', ""));
    let named: Vec<usize> = tokens
        .iter()
        .enumerate()
        .filter(|(_, w)| topic.iter().any(|t| t == stem(w)))
        .map(|(at, _)| at)
        .collect();
    let fits = |n: f64| {
        let n = if field.kind == FieldType::Integer {
            n.round()
        } else {
            n
        };
        field.minimum.is_none_or(|min| n >= min) && field.maximum.is_none_or(|max| n <= max)
    };
    numbers_in(&tokens)
        .into_iter()
        .min_by_key(|(at, _)| named.iter().map(|w| w.abs_diff(*at)).min().unwrap_or(0))
        .map(|(_, n)| n)
        .filter(|n| fits(*n))
}

const SMALL_NUMBERS: &[&str] = &[
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
];
const TENS: &[&str] = &[
    "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
];

/// The numbers said in `tokens` (from [`words`], commas removed), with the token each starts
/// at: digits (`45000`, `2.5`, `45k`, `3 lakh`) or words (`twenty five`, `three thousand`).
/// Ordinals (`15th`) are days, not quantities, and are skipped.
fn numbers_in(tokens: &[String]) -> Vec<(usize, f64)> {
    let mut found = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let raw = tokens[i].as_str();
        let digits = raw.trim_end_matches(['k', '%']);
        if let Ok(value) = digits.parse::<f64>()
            && value.is_finite()
            && digits.starts_with(|c: char| c.is_ascii_digit())
        {
            let (scale, used) = if raw.ends_with('k') {
                (1_000.0, 1)
            } else {
                match tokens.get(i + 1).map(String::as_str) {
                    Some("thousand") => (1_000.0, 2),
                    Some("lakh" | "lakhs") => (100_000.0, 2),
                    Some("million") => (1_000_000.0, 2),
                    Some("crore" | "crores") => (10_000_000.0, 2),
                    _ => (1.0, 1),
                }
            };
            found.push((i, value * scale));
            i += used;
            continue;
        }
        if let Some((value, used)) = word_number(&tokens[i..]) {
            found.push((i, value));
            i += used;
            continue;
        }
        i += 1;
    }
    found
}

/// A number spelled out at the start of `tokens`, and how many tokens it takes.
fn word_number(tokens: &[String]) -> Option<(f64, usize)> {
    let mut total = 0.0;
    let mut current = 0.0;
    let mut used = 0;
    for (at, token) in tokens.iter().enumerate() {
        let t = token.as_str();
        if let Some(n) = SMALL_NUMBERS.iter().position(|w| *w == t) {
            current += n as f64;
        } else if let Some(n) = TENS.iter().position(|w| !w.is_empty() && *w == t) {
            current += (n * 10) as f64;
        } else if t == "hundred" && used > 0 {
            current *= 100.0;
        } else if t == "thousand" && used > 0 {
            total += current * 1_000.0;
            current = 0.0;
        } else if (t == "lakh" || t == "lakhs") && used > 0 {
            total += current * 100_000.0;
            current = 0.0;
        } else if t == "and" && used > 0 {
            continue;
        } else {
            break;
        }
        used = at + 1;
    }
    (used > 0).then_some((total + current, used))
}

const YES: &[&str] = &[
    "yes",
    "yeah",
    "yep",
    "yup",
    "sure",
    "correct",
    "definitely",
    "absolutely",
    "certainly",
    "okay",
    "ok",
    "haan",
    "gladly",
];
const NO: &[&str] = &[
    "no",
    "nope",
    "nah",
    "not",
    "never",
    "don't",
    "dont",
    "can't",
    "cant",
    "cannot",
    "won't",
    "wont",
    "wouldn't",
    "isn't",
    "aren't",
    "nahi",
    "neither",
    "unable",
    "unwilling",
];
/// Phrases with a "no" in them that mean yes.
const YES_PHRASES: &[&[&str]] = &[
    &["no", "problem"],
    &["not", "a", "problem"],
    &["no", "worries"],
    &["no", "issue"],
    &["no", "issues"],
    &["why", "not"],
    &["of", "course"],
];
/// Phrases that leave the question open.
const UNSURE: &[&[&str]] = &[
    &["not", "sure"],
    &["don't", "know"],
    &["dont", "know"],
    &["no", "idea"],
    &["maybe"],
    &["perhaps"],
    &["not", "decided"],
    &["let", "me", "think"],
    &["think", "about", "it"],
    &["depends"],
];
/// Statements that agree without a yes ("I can relocate").
const AFFIRMATIONS: &[&[&str]] = &[
    &["i", "can"],
    &["i", "will"],
    &["i'll"],
    &["i", "would"],
    &["i'd"],
    &["i", "am"],
    &["i'm"],
    &["i", "do"],
    &["happy", "to"],
    &["willing", "to"],
    &["works"],
];

/// Whether `tokens` holds `phrase` at `at`.
fn phrase_at(tokens: &[String], at: usize, phrase: &[&str]) -> bool {
    tokens
        .get(at..at + phrase.len())
        .is_some_and(|w| w.iter().zip(phrase).all(|(a, b)| a == b))
}

/// The yes or no `text` gives, whichever comes first; an affirmative statement with neither is
/// a yes, and an unsure answer ("not sure", "maybe") gives nothing.
fn yes_no(text: &str) -> Option<bool> {
    let tokens = words(text);
    for (at, word) in tokens.iter().enumerate() {
        if YES_PHRASES.iter().any(|p| phrase_at(&tokens, at, p)) {
            return Some(true);
        }
        if UNSURE.iter().any(|p| phrase_at(&tokens, at, p)) {
            return None;
        }
        if YES.contains(&word.as_str()) {
            return Some(true);
        }
        if NO.contains(&word.as_str()) {
            return Some(false);
        }
    }
    (0..tokens.len())
        .any(|at| AFFIRMATIONS.iter().any(|p| phrase_at(&tokens, at, p)))
        .then_some(true)
}

/// Words that turn down the option after them ("not the night shift").
const NEGATIONS: &[&str] = &[
    "not", "no", "never", "don't", "dont", "than", "except", "without", "nor",
];

/// The option `text` names: the first one named that is not turned down ("not morning,
/// evening" names evening), the longer one when two start at the same word. Matching is by
/// word stems, so "evenings" names "Evening" and "full time" names "Full-time".
fn named_option(options: &[String], text: &str) -> Option<String> {
    let said = words(&text.replace('-', " "));
    let stems: Vec<&str> = said.iter().map(|w| stem(w)).collect();
    let option_stems: Vec<Vec<String>> = options
        .iter()
        .map(|o| {
            words(&o.replace('-', " "))
                .iter()
                .map(|w| stem(w).to_owned())
                .collect()
        })
        .collect();
    let is_option_word = |w: &str| option_stems.iter().flatten().any(|s| s == w);
    let mut best: Option<(usize, usize)> = None;
    for (n, wanted) in option_stems.iter().enumerate() {
        if wanted.is_empty() || wanted.len() > stems.len() {
            continue;
        }
        let first = (0..=stems.len() - wanted.len()).find(|&at| {
            let matches = stems[at..at + wanted.len()]
                .iter()
                .zip(wanted)
                .all(|(a, b)| a == b);
            // A negation reaches back over at most two words, and not past another option.
            let negated = said[at.saturating_sub(2)..at]
                .iter()
                .rev()
                .take_while(|w| !is_option_word(stem(w)))
                .any(|w| NEGATIONS.contains(&w.as_str()));
            matches && !negated
        });
        if let Some(at) = first {
            let better = best.is_none_or(|(best_at, best_n)| {
                at < best_at || (at == best_at && options[n].len() > options[best_n].len())
            });
            if better {
                best = Some((at, n));
            }
        }
    }
    best.map(|(_, n)| options[n].clone())
}

/// A calendar day.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Ymd {
    year: u32,
    month: u32,
    day: u32,
}

/// Today in UTC, the reference for a date said without its year.
fn today_utc() -> Ymd {
    let days = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() / 86_400);
    civil_from_days(days)
}

/// The date `days` after 1970-01-01 (Howard Hinnant's `civil_from_days`).
fn civil_from_days(days: u64) -> Ymd {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    Ymd {
        year: u32::try_from(year).unwrap_or(u32::MAX),
        month: month as u32,
        day: day as u32,
    }
}

const MONTHS: [&str; 12] = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
];

/// The month `word` names, in full or as its first three letters (`mar`, also `sept`), 1–12.
fn month_of(word: &str) -> Option<u32> {
    let word = if word == "sept" { "sep" } else { word };
    MONTHS
        .iter()
        .position(|m| *m == word || (word.len() == 3 && m.starts_with(word)))
        .and_then(|m| u32::try_from(m + 1).ok())
}

const ORDINALS: [&str; 20] = [
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
    "twentieth",
];

/// A day of the month in one word: `15`, `15th`, `3rd`, `fifteenth`, `twenty-first`.
fn day_of(word: &str) -> Option<u32> {
    let digits = word.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let suffix = &word[digits.len()..];
    let day = if !digits.is_empty() && digits.len() <= 2 {
        if !matches!(suffix, "" | "st" | "nd" | "rd" | "th") {
            return None;
        }
        digits.parse::<u32>().ok()?
    } else if let Some(at) = ORDINALS.iter().position(|o| *o == word) {
        u32::try_from(at + 1).ok()?
    } else if word == "thirtieth" {
        30
    } else {
        let (tens, unit) = word.split_once('-')?;
        let tens = match tens {
            "twenty" => 20,
            "thirty" => 30,
            _ => return None,
        };
        tens + u32::try_from(ORDINALS.iter().position(|o| *o == unit)? + 1).ok()?
    };
    (1..=31).contains(&day).then_some(day)
}

/// A year said as four digits, 1900–2200.
fn year_of(word: &str) -> Option<u32> {
    (word.len() == 4)
        .then(|| word.parse::<u32>().ok())
        .flatten()
        .filter(|y| (1900..=2200).contains(y))
}

fn ymd(year: u32, month: u32, day: u32) -> Option<String> {
    valid_date(year, month, day).then(|| format!("{year:04}-{month:02}-{day:02}"))
}

/// A date said in `text`, as `YYYY-MM-DD`: `2027-03-15`, `15/03/2027` (when the day cannot
/// be the month), `15 March 2027`, `the 15th of March, 2027`, `March 15th 2027`, or without
/// a year (`March 15`, `15th of March`): the next such day on or after `today`.
fn first_date(text: &str, today: Ymd) -> Option<String> {
    for token in text.split(|c: char| c.is_whitespace() || c == ',') {
        let token = token.trim_matches(|c: char| !c.is_ascii_digit());
        let parts: Vec<&str> = token.split(['-', '/', '.']).collect();
        let [a, b, c] = parts[..] else { continue };
        let (Ok(x), Ok(y), Ok(z)) = (a.parse::<u32>(), b.parse::<u32>(), c.parse::<u32>()) else {
            continue;
        };
        let date = if a.len() == 4 {
            ymd(x, y, z)
        } else if c.len() == 4 && (x > 12 || x == y) {
            ymd(z, y, x)
        } else if c.len() == 4 && y > 12 {
            ymd(z, x, y)
        } else {
            None
        };
        if date.is_some() {
            return date;
        }
    }
    let tokens = words(text);
    for (at, token) in tokens.iter().enumerate() {
        let Some(month) = month_of(token) else {
            continue;
        };
        // "15 March", "the 15th of March", "twenty first of March"
        let end = if at > 0 && tokens[at - 1] == "of" {
            at - 1
        } else {
            at
        };
        let before = end.checked_sub(1).and_then(|b| {
            let joined = b
                .checked_sub(1)
                .map(|a| format!("{}-{}", tokens[a], tokens[b]));
            joined
                .and_then(|j| day_of(&j))
                .or_else(|| day_of(&tokens[b]))
        });
        // "March 15", "March the 15th"
        let start = if tokens.get(at + 1).is_some_and(|t| t == "the") {
            at + 2
        } else {
            at + 1
        };
        let after = tokens.get(start).and_then(|t| {
            let two = tokens
                .get(start + 1)
                .and_then(|u| day_of(&format!("{t}-{u}")));
            two.map(|d| (d, 2)).or_else(|| day_of(t).map(|d| (d, 1)))
        });
        let (day, year_at) = match (before, after) {
            (Some(day), _) => (day, at + 1),
            (None, Some((day, used))) => (day, start + used),
            (None, None) => continue,
        };
        let year_at = if tokens.get(year_at).is_some_and(|t| t == "of") {
            year_at + 1
        } else {
            year_at
        };
        if let Some(year) = tokens.get(year_at).and_then(|t| year_of(t)) {
            if let Some(date) = ymd(year, month, day) {
                return Some(date);
            }
            continue;
        }
        let this_year = Ymd {
            year: today.year,
            month,
            day,
        };
        let year = if this_year >= today {
            today.year
        } else {
            today.year + 1
        };
        // 29 February said in a year without one: the next year that has it.
        if let Some(date) = (year..year + 8).find_map(|y| ymd(y, month, day)) {
            return Some(date);
        }
    }
    None
}

fn valid_date(year: u32, month: u32, day: u32) -> bool {
    let days = match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (year.is_multiple_of(4) && !year.is_multiple_of(100)) || year.is_multiple_of(400) => {
            29
        }
        2 => 28,
        _ => return false,
    };
    (1900..=2200).contains(&year) && (1..=days).contains(&day)
}

/// Words that are no answer on their own ("Yes.", "Okay, thanks.").
const NOT_AN_ANSWER: &[&str] = &[
    "yes", "yeah", "yep", "no", "nope", "sure", "okay", "ok", "well", "so", "um", "uh", "umm",
    "hmm", "oh", "hi", "hello", "sorry", "thanks", "thank", "you", "bye", "goodbye", "alright",
    "right", "fine", "please",
];
/// Answers that decline to give the value.
const REFUSALS: &[&str] = &[
    "rather not",
    "prefer not",
    "don't know",
    "dont know",
    "no idea",
    "not sure",
    "can't say",
    "cannot say",
    "won't say",
    "not telling",
];

/// The whitespace-separated words of `text` with where each starts, lowercased and without
/// the punctuation around them.
fn spans(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut start = None;
    for (at, c) in text.char_indices().chain([(text.len(), ' ')]) {
        if c.is_whitespace() {
            if let Some(from) = start.take() {
                let word = text[from..at]
                    .replace('\u{2019}', "'")
                    .trim_matches(|c: char| !c.is_alphanumeric())
                    .to_lowercase();
                out.push((from, word));
            }
        } else if start.is_none() {
            start = Some(at);
        }
    }
    out
}

/// `text` up to the end of its first clause: a sentence end (not the dot of an initial or a
/// title: "A. Rao", "Dr. Rao"), `;`, or a comma that starts "and", "but" or "so".
fn clause(text: &str) -> &str {
    let mut end = text.len();
    for (at, c) in text.char_indices() {
        let rest = &text[at + c.len_utf8()..];
        let stop = match c {
            ';' => true,
            '.' | '!' | '?' => {
                let word = text[..at]
                    .rsplit(|c: char| !c.is_alphanumeric())
                    .next()
                    .unwrap_or_default();
                let abbreviation = word.chars().count() == 1
                    || ["dr", "mr", "mrs", "ms", "prof", "st", "jr", "sr"]
                        .iter()
                        .any(|t| word.eq_ignore_ascii_case(t));
                (rest.is_empty() || rest.starts_with(' ')) && !abbreviation
            }
            ',' => {
                let next = rest.split_whitespace().next().unwrap_or_default();
                ["and", "but", "so"]
                    .iter()
                    .any(|w| next.eq_ignore_ascii_case(w))
            }
            _ => false,
        };
        if stop {
            end = at;
            break;
        }
    }
    &text[..end]
}

/// The text answer in `answer`, without what leads into it ("Yes, my name is", "It's") or
/// closes it ("thanks"); `None` for a refusal or a bare "yes". A turn that merely names the
/// field (`naming`) counts only when it says "my <field> is …".
fn string_value(answer: &str, topic: &[String], naming: bool) -> Option<String> {
    let flat = format!(" {} ", words(answer).join(" "));
    if REFUSALS.iter().any(|r| flat.contains(&format!(" {r} "))) {
        return None;
    }
    let spans = spans(answer);
    let word = |at: usize| spans.get(at).map_or("", |(_, w)| w.as_str());
    let in_topic = |w: &str| topic.iter().any(|t| t == stem(w.trim_end_matches("'s")));
    let mut from = 0;
    while from < spans.len() && NOT_AN_ANSWER.contains(&word(from)) {
        from += 1;
    }
    let mut said_my = false;
    if word(from) == "my" {
        // "my notice period is", "my name's"
        for verb in from + 1..(from + 6).min(spans.len()) {
            let w = word(verb);
            let contracted = w.ends_with("'s");
            if !(contracted || matches!(w, "is" | "are" | "was" | "will" | "would")) {
                continue;
            }
            let named = (from + 1..verb).any(|m| in_topic(word(m))) || (contracted && in_topic(w));
            if named {
                from = verb + 1;
                if word(from) == "be" {
                    from += 1;
                }
                said_my = true;
            }
            break;
        }
    }
    if !said_my {
        let mut lead_ins: Vec<&[&str]> = vec![
            &["it's"],
            &["it", "is"],
            &["that's"],
            &["that", "is"],
            &["it", "would", "be"],
            &["it", "will", "be"],
            &["that", "would", "be"],
        ];
        if topic.iter().any(|t| t == "name") {
            lead_ins.extend([&["i", "am"][..], &["i'm"], &["this", "is"], &["call", "me"]]);
        }
        if let Some(lead) = lead_ins
            .iter()
            .find(|l| l.iter().enumerate().all(|(k, w)| word(from + k) == *w))
        {
            from += lead.len();
        }
    }
    if naming && !said_my {
        return None;
    }
    let mut text = spans.get(from).map_or("", |(at, _)| &answer[*at..]);
    if said_my {
        // "My name is Asha Rao, and I have …": the value ends with its clause.
        text = clause(text);
    }
    loop {
        text = text.trim_end_matches(['.', '!', '?', ',', ';', ' ']);
        let closing = [" thank you", " thanks"].iter().find(|s| {
            text.len()
                .checked_sub(s.len())
                .and_then(|at| text.get(at..))
                .is_some_and(|end| end.eq_ignore_ascii_case(s))
        });
        match closing {
            Some(s) => text = &text[..text.len() - s.len()],
            None => break,
        }
    }
    let meaningful = words(text)
        .iter()
        .any(|w| !NOT_AN_ANSWER.contains(&w.as_str()));
    meaningful.then(|| text.to_owned())
}

/// How well a call that ended for `reason` ran to its natural end, 0–1.
fn ending_quality(reason: &str) -> f64 {
    match reason {
        "agent-hangup" => 1.0,
        "caller-hangup" => 0.8,
        "max-duration" => 0.6,
        "silence-timeout" => 0.4,
        _ => 0.5,
    }
}

/// How a call that ended for `reason` ended, in words.
fn ending_words(reason: &str) -> &'static str {
    match reason {
        "agent-hangup" => "the agent closed the call",
        "caller-hangup" => "the callee hung up",
        "max-duration" => "it reached its time limit",
        "silence-timeout" => "the callee went silent",
        "canceled" => "it was canceled",
        r if r.ends_with("-error") => "a technical failure",
        _ => "",
    }
}

/// Whether a schema lets a value be `null` (no type, or one that lists `null`; no `enum`, or
/// one that lists `null`).
fn allows_null(schema: &Value) -> bool {
    let typed = match schema.get("type") {
        Some(Value::String(t)) => t == "null",
        Some(Value::Array(types)) => types.iter().any(|t| t == "null"),
        _ => true,
    };
    typed
        && schema
            .get("enum")
            .and_then(Value::as_array)
            .is_none_or(|options| options.contains(&Value::Null))
}

/// The sim LLM's analysis: values read from the callee's answers (see [`extract`]), a summary
/// built from what the callee said, and a verdict from how many of the plan's fields (required
/// ones above all) the call yielded and how it ended. Deterministic: the same request always
/// gets the same answer, except that a date said without its year is read as the next such day
/// from today (UTC).
pub fn sim_analysis(request: &AnalysisRequest) -> AnalysisReply {
    analyze(request, today_utc())
}

fn analyze(request: &AnalysisRequest, today: Ymd) -> AnalysisReply {
    let fields = request.effective_fields();
    let found = extract(&fields, &request.transcript, today);
    let user_properties = request
        .schema
        .as_ref()
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object);
    let mut data = Map::new();
    for (field, found) in fields.iter().zip(&found) {
        match found {
            Some(found) => {
                data.insert(field.name.clone(), found.value.clone());
            }
            None => {
                // A user's schema may not allow null: a key it does not require is left out
                // rather than break it; one it requires stays null, as nothing true fits there.
                let leave_out = !field.required
                    && user_properties
                        .and_then(|p| p.get(&field.name))
                        .is_some_and(|p| !allows_null(p));
                if !leave_out {
                    data.insert(field.name.clone(), Value::Null);
                }
            }
        }
    }
    let summary = request
        .summary_prompt
        .as_ref()
        .map(|_| summarize(&fields, &found, request));
    let success = request
        .success
        .as_ref()
        .map(|plan| verdict(plan, request, &fields, &found));
    AnalysisReply {
        summary,
        structured_data: data,
        success,
    }
}

/// A field's name as words (`noticePeriodDays` → "notice period days").
fn label(field: &AnalysisField) -> String {
    split_name(&field.name).join(" ")
}

/// A value as the summary says it.
fn spoken(value: &Value) -> String {
    match value {
        Value::Bool(true) => "yes".to_owned(),
        Value::Bool(false) => "no".to_owned(),
        Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

fn says_goodbye(text: &str) -> bool {
    words(text)
        .iter()
        .any(|w| w == "bye" || w == "goodbye" || w == "good-bye")
}

fn summarize(
    fields: &[AnalysisField],
    found: &[Option<Found>],
    request: &AnalysisRequest,
) -> String {
    let ended = &request.ended_reason;
    let how = match ending_words(ended) {
        "" => format!("The call ended by {ended}."),
        words => format!("The call ended by {ended} ({words})."),
    };
    let answers: Vec<&str> = request
        .transcript
        .iter()
        .filter(|t| t.speaker == CALLEE && !t.text.trim().is_empty())
        .map(|t| t.text.trim())
        .collect();
    let agent_turns = request
        .transcript
        .iter()
        .filter(|t| t.speaker != CALLEE && !t.text.trim().is_empty())
        .count();
    if answers.is_empty() {
        return format!(
            "The agent spoke {agent_turns} time(s) but the callee never answered. {how}"
        );
    }
    let mut parts = Vec::new();
    if fields.is_empty() {
        let quoted: Vec<String> = answers
            .iter()
            .take(3)
            .map(|a| {
                let mut a = (*a).to_owned();
                if a.chars().count() > 80 {
                    a = a.chars().take(77).collect::<String>() + "...";
                }
                format!("\"{a}\"")
            })
            .collect();
        parts.push(format!(
            "The callee spoke {} time(s), saying {}.",
            answers.len(),
            quoted.join(", then ")
        ));
    } else {
        let labels: Vec<String> = fields.iter().map(label).collect();
        parts.push(format!("The agent asked about {}.", labels.join(", ")));
        let given: Vec<String> = fields
            .iter()
            .zip(found)
            .filter_map(|(f, v)| {
                v.as_ref()
                    .map(|v| format!("{} {}", label(f), spoken(&v.value)))
            })
            .collect();
        let missing: Vec<String> = fields
            .iter()
            .zip(found)
            .filter(|(_, v)| v.is_none())
            .map(|(f, _)| label(f))
            .collect();
        if !given.is_empty() {
            parts.push(format!("The callee gave {}.", given.join(", ")));
        }
        if !missing.is_empty() {
            parts.push(format!("The callee did not give {}.", missing.join(", ")));
        }
    }
    if answers.iter().any(|a| says_goodbye(a)) {
        parts.push("The callee said goodbye.".to_owned());
    }
    parts.push(how);
    parts.join(" ")
}

/// The verdict. The call scores a percentage: the share of fields yielded, each required field
/// weighing three times an optional one, times how well the call ended ([`ending_quality`]),
/// at most 45 % while a required field is missing or the callee never spoke. Every rubric reads
/// that one score, so they agree on [`verdict_passes`]: pass at 60 % or more, `score / 10` on
/// the 1–10 scale, `excellent` from 85 %, `good` from 60 %, `fair` from 35 %. A checklist
/// criterion passes when the field it names was yielded, or, naming no field, when the call
/// talked about it and the callee answered.
fn verdict(
    plan: &SuccessPlan,
    request: &AnalysisRequest,
    fields: &[AnalysisField],
    found: &[Option<Found>],
) -> Value {
    let callee_spoke = request
        .transcript
        .iter()
        .any(|t| t.speaker == CALLEE && !t.text.trim().is_empty());
    let weight = |f: &AnalysisField| if f.required { 3.0 } else { 1.0 };
    let total: f64 = fields.iter().map(weight).sum();
    let yielded: f64 = fields
        .iter()
        .zip(found)
        .filter(|(_, v)| v.is_some())
        .map(|(f, _)| weight(f))
        .sum();
    let coverage = if fields.is_empty() {
        if callee_spoke { 1.0 } else { 0.0 }
    } else {
        yielded / total
    };
    let missing_required: Vec<&str> = fields
        .iter()
        .zip(found)
        .filter(|(f, v)| f.required && v.is_none())
        .map(|(f, _)| f.name.as_str())
        .collect();
    let missing_optional: Vec<&str> = fields
        .iter()
        .zip(found)
        .filter(|(f, v)| !f.required && v.is_none())
        .map(|(f, _)| f.name.as_str())
        .collect();
    let mut score = coverage * ending_quality(&request.ended_reason);
    if !missing_required.is_empty() || !callee_spoke {
        score = score.min(0.45);
    }
    let percent = (score * 100.0).round().clamp(0.0, 100.0) as i64;
    let got = found.iter().filter(|v| v.is_some()).count();
    let mut reason = if fields.is_empty() {
        if callee_spoke {
            "The callee took part".to_owned()
        } else {
            "The callee never spoke".to_owned()
        }
    } else if missing_required.is_empty() && missing_optional.is_empty() {
        format!("The call yielded every field ({got} of {})", fields.len())
    } else {
        format!("The call yielded {got} of {} fields", fields.len())
    };
    if !missing_required.is_empty() {
        reason.push_str(&format!(
            "; missing required {}",
            missing_required.join(", ")
        ));
    }
    if !missing_optional.is_empty() {
        reason.push_str(&format!("; missing {}", missing_optional.join(", ")));
    }
    let value = match plan.rubric {
        Rubric::PassFail => json!(percent >= 60),
        Rubric::NumericScale => json!((percent / 10).clamp(1, 10)),
        Rubric::DescriptiveScale => json!(match percent {
            85.. => "excellent",
            60.. => "good",
            35.. => "fair",
            _ => "poor",
        }),
        Rubric::Percentage => json!(percent as f64),
        Rubric::Checklist => {
            let checks: Vec<(String, bool)> = plan
                .criteria
                .iter()
                .map(|c| {
                    let topic = topic_stems(&format!("{} {}", c.name, c.description));
                    (
                        c.name.clone(),
                        criterion_met(&topic, request, fields, found),
                    )
                })
                .collect();
            let met = checks.iter().filter(|(_, pass)| *pass).count();
            reason.push_str(&format!("; {met} of {} criteria met", checks.len()));
            Value::Array(
                checks
                    .into_iter()
                    .map(|(name, pass)| json!({"name": name, "pass": pass && callee_spoke}))
                    .collect(),
            )
        }
    };
    reason.push_str(&format!("; it ended by {}.", request.ended_reason));
    json!({"value": value, "reason": reason})
}

/// Whether a checklist criterion about `topic` was met: the field sharing the most of its
/// words was yielded; with no such field, an agent turn about it got an answer or the callee
/// spoke of it.
fn criterion_met(
    topic: &[String],
    request: &AnalysisRequest,
    fields: &[AnalysisField],
    found: &[Option<Found>],
) -> bool {
    if topic.is_empty() {
        return false;
    }
    let mut best: Option<(usize, bool)> = None;
    for (field, value) in fields.iter().zip(found) {
        let shared = field_topic(field)
            .iter()
            .filter(|s| topic.contains(s))
            .count();
        if shared > 0 && best.is_none_or(|(most, _)| shared > most) {
            best = Some((shared, value.is_some()));
        }
    }
    if let Some((_, yielded)) = best {
        return yielded;
    }
    let transcript = &request.transcript;
    transcript.iter().enumerate().any(|(at, t)| {
        hits(topic, &t.text) > 0
            && (t.speaker == CALLEE || !answer_after(transcript, at).is_empty())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(name: &str, kind: FieldType, description: &str) -> AnalysisField {
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

    fn turns(lines: &[(&str, &str)]) -> Vec<ScorecardTurn> {
        lines
            .iter()
            .map(|(s, t)| ScorecardTurn {
                speaker: (*s).into(),
                text: (*t).into(),
            })
            .collect()
    }

    fn screening() -> AnalysisRequest {
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
    fn the_sim_analyzer_reads_each_value_the_callee_said() {
        let reply = sim_analysis(&screening());
        let data = &reply.structured_data;
        assert_eq!(data["yearsOfExperience"], json!(5));
        assert_eq!(data["willingToRelocate"], json!(true));
        assert_eq!(data["preferredShift"], json!("night"));
        assert_eq!(data["startDate"], json!("2027-03-03"));
        assert_eq!(data["notes"], json!("I prefer remote work on Fridays"));
        assert!(data["expectedSalary"].as_f64().is_some(), "{data:?}");
        assert_eq!(
            reply.success.as_ref().map(|s| &s["value"]),
            Some(&json!(true))
        );
        let summary = reply.summary.unwrap_or_default();
        assert!(summary.contains("years of experience 5"), "{summary}");
        assert!(summary.contains("preferred shift \"night\""), "{summary}");
        assert!(summary.contains("agent-hangup"), "{summary}");
        // Deterministic.
        assert_eq!(sim_analysis(&screening()), sim_analysis(&screening()));
    }

    #[test]
    fn unanswered_fields_are_null_and_fail_the_call() {
        let mut request = screening();
        request.transcript = turns(&[
            ("agent", "Hello Asha, do you have a minute?"),
            ("callee", "No, I am busy."),
            ("agent", "Goodbye!"),
        ]);
        request.ended_reason = "caller-hangup".into();
        let reply = sim_analysis(&request);
        assert_eq!(reply.structured_data["yearsOfExperience"], Value::Null);
        assert_eq!(reply.structured_data["startDate"], Value::Null);
        let success = reply.success.unwrap_or_default();
        assert_eq!(success["value"], json!(false));
        assert!(
            success["reason"]
                .as_str()
                .unwrap_or_default()
                .contains("yearsOfExperience")
        );
    }

    #[test]
    fn every_rubric_gives_a_value_its_schema_allows() {
        for rubric in [
            Rubric::PassFail,
            Rubric::NumericScale,
            Rubric::DescriptiveScale,
            Rubric::Percentage,
            Rubric::Checklist,
        ] {
            let mut request = screening();
            request.success = Some(SuccessPlan {
                rubric,
                prompt: String::new(),
                criteria: vec![
                    Criterion {
                        name: "Relocation".into(),
                        description: "Asked about relocating".into(),
                    },
                    Criterion {
                        name: "Visa".into(),
                        description: "Asked about visa sponsorship".into(),
                    },
                ],
            });
            let verdict = sim_analysis(&request).success.unwrap_or_default();
            let value = &verdict["value"];
            match rubric {
                Rubric::PassFail => assert_eq!(value, &json!(true)),
                Rubric::NumericScale => assert_eq!(value, &json!(10)),
                Rubric::DescriptiveScale => assert_eq!(value, &json!("excellent")),
                Rubric::Percentage => assert_eq!(value, &json!(100.0)),
                Rubric::Checklist => assert_eq!(
                    value,
                    &json!([{"name": "Relocation", "pass": true}, {"name": "Visa", "pass": false}])
                ),
            }
            assert_eq!(
                verdict_passes(rubric, value),
                Some(rubric != Rubric::Checklist)
            );
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
    fn a_users_schema_names_the_fields() {
        let mut request = screening();
        request.schema = Some(json!({
            "type": "object",
            "required": ["age"],
            "properties": {
                "age": {"type": "integer", "description": "The candidate's age"},
                "city": {"type": "string", "enum": ["Pune", "Delhi"]},
            },
        }));
        request.transcript = turns(&[
            ("agent", "What is your age?"),
            ("callee", "I am thirty two."),
            ("agent", "Which city, Pune or Delhi?"),
            ("callee", "Delhi."),
        ]);
        let reply = sim_analysis(&request);
        assert_eq!(reply.structured_data["age"], json!(32));
        assert_eq!(reply.structured_data["city"], json!("Delhi"));
        assert_eq!(
            request.answer_schema()["properties"]["structuredData"],
            request.schema.clone().unwrap_or_default()
        );
    }

    fn first_number(text: &str) -> Option<f64> {
        numbers_in(&words(&text.replace(',', "")))
            .first()
            .map(|(_, n)| *n)
    }

    const TODAY: Ymd = Ymd {
        year: 2026,
        month: 6,
        day: 10,
    };

    #[test]
    fn numbers_dates_and_questions_read_like_people_say_them() {
        assert_eq!(first_number("twenty five years"), Some(25.0));
        assert_eq!(first_number("about 45k"), Some(45_000.0));
        assert_eq!(first_number("3 lakh"), Some(300_000.0));
        assert_eq!(first_number("two thousand and five hundred"), Some(2_500.0));
        assert_eq!(first_number("Around 1,20,000 rupees"), Some(120_000.0));
        assert_eq!(first_number("the 5th, then 7"), Some(7.0));
        assert_eq!(first_number("none at all, nan"), None);
        assert_eq!(
            first_date("March 5th, 2027 works", TODAY),
            Some("2027-03-05".into())
        );
        assert_eq!(
            first_date("from 2027-11-30", TODAY),
            Some("2027-11-30".into())
        );
        assert_eq!(
            first_date("I can join on 15 March 2027.", TODAY),
            Some("2027-03-15".into())
        );
        assert_eq!(
            first_date("the 15th of March, 2027", TODAY),
            Some("2027-03-15".into())
        );
        assert_eq!(
            first_date("on 15/03/2027", TODAY),
            Some("2027-03-15".into())
        );
        assert_eq!(first_date("on 03/04/2027", TODAY), None);
        assert_eq!(
            first_date("Sept the twenty-first 2027", TODAY),
            Some("2027-09-21".into())
        );
        assert_eq!(first_date("the 31st of February 2027", TODAY), None);
        // Without a year: the next such day on or after today.
        assert_eq!(first_date("March 15", TODAY), Some("2027-03-15".into()));
        assert_eq!(
            first_date("from the 10th of June", TODAY),
            Some("2026-06-10".into())
        );
        assert_eq!(first_date("July 1st", TODAY), Some("2026-07-01".into()));
        assert_eq!(first_date("29 February", TODAY), Some("2028-02-29".into()));
        assert_eq!(first_date("I may join in March", TODAY), None);
        assert_eq!(
            civil_from_days(0),
            Ymd {
                year: 1970,
                month: 1,
                day: 1
            }
        );
        assert_eq!(
            civil_from_days(20_527),
            Ymd {
                year: 2026,
                month: 3,
                day: 15
            }
        );
        assert_eq!(
            civil_from_days(11_016),
            Ymd {
                year: 2000,
                month: 2,
                day: 29
            }
        );
        assert_eq!(yes_no("Nope, sorry"), Some(false));
        assert_eq!(yes_no("Yes, I can relocate."), Some(true));
        assert_eq!(yes_no("I can relocate."), Some(true));
        assert_eq!(yes_no("No problem at all."), Some(true));
        assert_eq!(yes_no("I can't, my family is here."), Some(false));
        assert_eq!(yes_no("I'd rather not."), Some(false));
        assert_eq!(yes_no("I'm not sure yet."), None);
        assert_eq!(yes_no("Let me think about it."), None);
        let shifts: Vec<String> = ["morning", "evening", "night"].map(String::from).into();
        assert_eq!(
            named_option(&shifts, "Evening works best."),
            Some("evening".into())
        );
        assert_eq!(
            named_option(&shifts, "Not mornings, evenings."),
            Some("evening".into())
        );
        assert_eq!(
            named_option(&shifts, "Night, not the morning one."),
            Some("night".into())
        );
        assert_eq!(named_option(&shifts, "Any is fine."), None);
        let kinds: Vec<String> = ["Full-time", "Part-time"].map(String::from).into();
        assert_eq!(
            named_option(&kinds, "part time, please"),
            Some("Part-time".into())
        );
        let name = field_topic(&field("candidateName", FieldType::String, "Your full name"));
        assert_eq!(
            string_value("My name is Asha Rao.", &name, false),
            Some("Asha Rao".into())
        );
        assert_eq!(
            string_value("Sure, it's Asha Rao, thanks!", &name, false),
            Some("Asha Rao".into())
        );
        assert_eq!(string_value("I'm Asha.", &name, false), Some("Asha".into()));
        assert_eq!(string_value("Yes.", &name, false), None);
        assert_eq!(string_value("I'd rather not say.", &name, false), None);
        assert_eq!(string_value("Asha Rao", &name, true), None);
        assert_eq!(
            string_value("Well, my full name is Asha Rao", &name, true),
            Some("Asha Rao".into())
        );
        assert_eq!(
            string_value(
                "My name is Dr. Asha Rao. I applied last week.",
                &name,
                false
            ),
            Some("Dr. Asha Rao".into())
        );
        assert_eq!(
            string_value("My name's Asha; Rao is my surname", &name, false),
            Some("Asha".into())
        );
        let notes = field_topic(&field("notes", FieldType::String, "Anything else"));
        assert_eq!(
            string_value(
                "I prefer remote work, and Fridays off. Thanks.",
                &notes,
                false
            ),
            Some("I prefer remote work, and Fridays off".into())
        );
        let f = field(
            "willingToRelocate",
            FieldType::Boolean,
            "Whether willing to relocate",
        );
        assert_eq!(
            question_for(&f),
            "Could you tell me whether willing to relocate?"
        );
        let f = field("noticePeriodDays", FieldType::Integer, "");
        assert_eq!(question_for(&f), "Could you tell me notice period days?");
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

    /// Checks `value` against `schema` for the JSON Schema keywords the answer schemas use
    /// (`type`, `enum`, `pattern` for dates, `minimum`, `maximum`, `required`, `properties`,
    /// `additionalProperties: false`, `items`), as a strict validator would.
    fn check(schema: &Value, value: &Value, path: &str) -> Result<(), String> {
        let fail = |why: &str| Err(format!("{path}: {why} ({value})"));
        if let Some(kind) = schema.get("type") {
            let kinds: Vec<&str> = match kind {
                Value::String(k) => vec![k.as_str()],
                Value::Array(ks) => ks.iter().filter_map(Value::as_str).collect(),
                _ => return fail("unreadable type"),
            };
            let is = |k: &str| match k {
                "null" => value.is_null(),
                "boolean" => value.is_boolean(),
                "string" => value.is_string(),
                "number" => value.is_number(),
                "integer" => value.is_i64() || value.is_u64(),
                "object" => value.is_object(),
                "array" => value.is_array(),
                _ => false,
            };
            if !kinds.iter().any(|k| is(k)) {
                return fail(&format!("not of type {kinds:?}"));
            }
        }
        if let Some(options) = schema.get("enum").and_then(Value::as_array)
            && !options.contains(value)
        {
            return fail("not one of the enum");
        }
        if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
            && let Some(text) = value.as_str()
        {
            assert_eq!(
                pattern, r"^\d{4}-\d{2}-\d{2}$",
                "only the date pattern is checked"
            );
            let shape: String = text
                .chars()
                .map(|c| if c.is_ascii_digit() { 'd' } else { c })
                .collect();
            if shape != "dddd-dd-dd" {
                return fail("does not match the date pattern");
            }
        }
        if let Some(n) = value.as_f64() {
            if schema
                .get("minimum")
                .and_then(Value::as_f64)
                .is_some_and(|min| n < min)
            {
                return fail("below the minimum");
            }
            if schema
                .get("maximum")
                .and_then(Value::as_f64)
                .is_some_and(|max| n > max)
            {
                return fail("above the maximum");
            }
        }
        if let Some(object) = value.as_object() {
            let properties = schema.get("properties").and_then(Value::as_object);
            for key in schema
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if !object.contains_key(key) {
                    return fail(&format!("missing {key}"));
                }
            }
            for (key, item) in object {
                match properties.and_then(|p| p.get(key)) {
                    Some(sub) => check(sub, item, &format!("{path}.{key}"))?,
                    None if schema.get("additionalProperties") == Some(&json!(false)) => {
                        return fail(&format!("unexpected {key}"));
                    }
                    None => {}
                }
            }
        }
        if let (Some(items), Some(array)) = (schema.get("items"), value.as_array()) {
            for (at, item) in array.iter().enumerate() {
                check(items, item, &format!("{path}[{at}]"))?;
            }
        }
        Ok(())
    }

    fn assert_valid(request: &AnalysisRequest, reply: &AnalysisReply) {
        let value = serde_json::to_value(reply).unwrap();
        if let Err(error) = check(&request.answer_schema(), &value, "$") {
            panic!("{error}\nschema: {}", request.answer_schema());
        }
    }

    #[test]
    fn the_schema_check_catches_wrong_answers() {
        let request = screening();
        let schema = request.answer_schema();
        let mut good = serde_json::to_value(sim_analysis(&request)).unwrap();
        assert_eq!(check(&schema, &good, "$"), Ok(()));
        for (pointer, wrong) in [
            ("/structuredData/yearsOfExperience", json!(2.5)),
            ("/structuredData/preferredShift", json!("evening")),
            ("/structuredData/startDate", json!("3 March 2027")),
            ("/success/value", json!("yes")),
        ] {
            let mut bad = good.clone();
            *bad.pointer_mut(pointer).unwrap() = wrong;
            assert!(check(&schema, &bad, "$").is_err(), "{pointer}");
        }
        good["structuredData"]["extra"] = json!(1);
        assert!(check(&schema, &good, "$").is_err());
    }

    /// One field of each type, the questions the sim agent asks for them, and a rubric.
    fn interview(rubric: Rubric) -> AnalysisRequest {
        let mut notice = field(
            "noticePeriodDays",
            FieldType::Number,
            "Your notice period in days",
        );
        notice.minimum = Some(0.0);
        notice.maximum = Some(180.0);
        let mut years = field(
            "yearsOfExperience",
            FieldType::Integer,
            "Years of experience",
        );
        years.minimum = Some(0.0);
        years.maximum = Some(50.0);
        years.required = false;
        let mut shift = field("preferredShift", FieldType::Enum, "Preferred shift");
        shift.options = vec!["morning".into(), "evening".into(), "night".into()];
        AnalysisRequest {
            summary_prompt: Some("Summarize the call.".into()),
            fields: vec![
                field("candidateName", FieldType::String, "Your full name"),
                notice,
                years,
                field(
                    "willingToRelocate",
                    FieldType::Boolean,
                    "Whether you can relocate to Pune",
                ),
                shift,
                field("joiningDate", FieldType::Date, "The date you can join"),
            ],
            schema: None,
            success: Some(SuccessPlan {
                rubric,
                prompt: "The candidate answered the screening.".into(),
                criteria: vec![
                    Criterion {
                        name: "Relocation".into(),
                        description: "Asked whether they can relocate".into(),
                    },
                    Criterion {
                        name: "Joining date".into(),
                        description: "Confirmed when they can join".into(),
                    },
                ],
            }),
            transcript: Vec::new(),
            ended_reason: "agent-hangup".into(),
        }
    }

    /// The transcript of a sim call: the welcome, then each scripted line followed by the
    /// sim LLM's reply (asking the plan's questions), until it hangs up.
    fn sim_call(request: &AnalysisRequest, script: &[&str]) -> (Vec<ScorecardTurn>, bool) {
        use crate::providers::{ChatMessage, ChatRole, LlmRequest, SimLlm};
        let welcome = "Hello, this is Meera from Acme Hiring. Do you have a minute?";
        let mut llm = LlmRequest {
            history: vec![ChatMessage::new(ChatRole::Assistant, welcome)],
            sim_script: script.iter().map(|s| (*s).to_owned()).collect(),
            sim_questions: request
                .effective_fields()
                .iter()
                .map(question_for)
                .collect(),
            ..LlmRequest::default()
        };
        let mut transcript = turns(&[("agent", welcome)]);
        for line in script {
            llm.history.push(ChatMessage::new(ChatRole::User, *line));
            transcript.extend(turns(&[("callee", line)]));
            let (reply, end) = SimLlm::reply_for(&llm);
            llm.history
                .push(ChatMessage::new(ChatRole::Assistant, reply.clone()));
            transcript.extend(turns(&[("agent", &reply)]));
            if end {
                return (transcript, true);
            }
        }
        (transcript, false)
    }

    const ANSWERS: [&str; 7] = [
        "Yes, I have a minute.",
        "My name is Asha Rao.",
        "About 30 days.",
        "5 years.",
        "Yes, I can relocate.",
        "Evening works best.",
        "I can join on 15 March 2027.",
    ];

    #[test]
    fn a_sim_call_asks_every_question_and_the_analyzer_reads_every_answer() {
        for rubric in [
            Rubric::PassFail,
            Rubric::NumericScale,
            Rubric::DescriptiveScale,
            Rubric::Percentage,
            Rubric::Checklist,
        ] {
            let mut request = interview(rubric);
            let (transcript, hung_up) = sim_call(&request, &ANSWERS);
            assert!(hung_up);
            let agent: Vec<&str> = transcript
                .iter()
                .filter(|t| t.speaker != CALLEE)
                .map(|t| t.text.as_str())
                .collect();
            assert_eq!(
                agent[1..],
                [
                    "Thank you. Could you tell me your full name?",
                    "Got it, thanks. Could you tell me your notice period in days?",
                    "Understood. Could you tell me years of experience?",
                    "Okay, noted. Could you tell me whether you can relocate to Pune?",
                    "Thank you. Could you tell me preferred shift: morning, evening, night?",
                    "Got it, thanks. Could you tell me the date you can join?",
                    "Thank you, that is everything I needed. Have a great day. Goodbye!",
                ]
            );
            request.transcript = transcript;
            let reply = analyze(&request, TODAY);
            assert_eq!(
                Value::Object(reply.structured_data.clone()),
                json!({
                    "candidateName": "Asha Rao",
                    "noticePeriodDays": 30,
                    "yearsOfExperience": 5,
                    "willingToRelocate": true,
                    "preferredShift": "evening",
                    "joiningDate": "2027-03-15",
                })
            );
            let verdict = reply.success.clone().unwrap_or_default();
            let expected = match rubric {
                Rubric::PassFail => json!(true),
                Rubric::NumericScale => json!(10),
                Rubric::DescriptiveScale => json!("excellent"),
                Rubric::Percentage => json!(100.0),
                Rubric::Checklist => json!([
                    {"name": "Relocation", "pass": true},
                    {"name": "Joining date", "pass": true},
                ]),
            };
            assert_eq!(verdict["value"], expected, "{rubric:?}");
            assert_eq!(verdict_passes(rubric, &verdict["value"]), Some(true));
            assert_eq!(
                verdict["reason"],
                json!(match rubric {
                    Rubric::Checklist =>
                        "The call yielded every field (6 of 6); 2 of 2 criteria met; it ended by agent-hangup.",
                    _ => "The call yielded every field (6 of 6); it ended by agent-hangup.",
                })
            );
            assert_eq!(
                reply.summary.as_deref(),
                Some(
                    "The agent asked about candidate name, notice period days, years of \
                     experience, willing to relocate, preferred shift, joining date. The callee \
                     gave candidate name \"Asha Rao\", notice period days 30, years of \
                     experience 5, willing to relocate yes, preferred shift \"evening\", joining \
                     date \"2027-03-15\". The call ended by agent-hangup (the agent closed the \
                     call)."
                )
            );
            assert_valid(&request, &reply);
            // The sim LLM answers the same through its JSON mode.
            assert_eq!(
                serde_json::from_str::<AnalysisReply>(&crate::providers::SimLlm::json_reply_for(
                    &crate::providers::LlmRequest {
                        history: vec![crate::providers::ChatMessage::new(
                            crate::providers::ChatRole::User,
                            serde_json::to_string(&request).unwrap(),
                        )],
                        ..crate::providers::LlmRequest::default()
                    }
                ))
                .unwrap()
                .structured_data,
                reply.structured_data
            );
        }
    }

    #[test]
    fn a_sim_call_cut_short_leaves_the_rest_null_and_fails() {
        for rubric in [
            Rubric::PassFail,
            Rubric::NumericScale,
            Rubric::DescriptiveScale,
            Rubric::Percentage,
            Rubric::Checklist,
        ] {
            let mut request = interview(rubric);
            let (transcript, hung_up) = sim_call(
                &request,
                &[
                    "Yes, I have a minute.",
                    "My name is Asha Rao.",
                    "About 30 days.",
                    "Sorry, I have to go. Bye.",
                ],
            );
            assert!(hung_up);
            request.transcript = transcript;
            request.ended_reason = "agent-hangup".into();
            let reply = analyze(&request, TODAY);
            assert_eq!(
                Value::Object(reply.structured_data.clone()),
                json!({
                    "candidateName": "Asha Rao",
                    "noticePeriodDays": 30,
                    "yearsOfExperience": null,
                    "willingToRelocate": null,
                    "preferredShift": null,
                    "joiningDate": null,
                })
            );
            let verdict = reply.success.clone().unwrap_or_default();
            let expected = match rubric {
                Rubric::PassFail => json!(false),
                // 6 of 16 weighted points is 38 %, held under 45 % anyway.
                Rubric::NumericScale => json!(3),
                Rubric::DescriptiveScale => json!("fair"),
                Rubric::Percentage => json!(38.0),
                Rubric::Checklist => json!([
                    {"name": "Relocation", "pass": false},
                    {"name": "Joining date", "pass": false},
                ]),
            };
            assert_eq!(verdict["value"], expected, "{rubric:?}");
            assert_eq!(verdict_passes(rubric, &verdict["value"]), Some(false));
            let reason = verdict["reason"].as_str().unwrap_or_default();
            assert!(
                reason.contains(
                    "yielded 2 of 6 fields; missing required willingToRelocate, preferredShift, \
                     joiningDate; missing yearsOfExperience"
                ),
                "{reason}"
            );
            let summary = reply.summary.clone().unwrap_or_default();
            assert!(
                summary.contains(
                    "The callee did not give years of experience, willing to relocate, \
                     preferred shift, joining date. The callee said goodbye."
                ),
                "{summary}"
            );
            assert_valid(&request, &reply);
        }
    }

    #[test]
    fn answers_out_of_bounds_refusals_and_other_fields_answers_stay_null() {
        let mut request = interview(Rubric::Percentage);
        let (transcript, _) = sim_call(
            &request,
            &[
                "Sure.",
                "I'd rather not say.",
                "About 200 days, I have 5 years of experience by the way.",
                "Hmm.",
                "I'm not sure.",
                "Whichever.",
                "Soon.",
            ],
        );
        request.transcript = transcript;
        let reply = analyze(&request, TODAY);
        assert_eq!(
            Value::Object(reply.structured_data.clone()),
            json!({
                "candidateName": null,
                // 200 days is past the 180-day maximum, and the 5 beside it is years.
                "noticePeriodDays": null,
                // Named only in the answer to the notice-period question, which is not its own.
                "yearsOfExperience": null,
                "willingToRelocate": null,
                "preferredShift": null,
                "joiningDate": null,
            })
        );
        assert_valid(&request, &reply);
    }

    #[test]
    fn a_turn_that_names_a_field_fills_it_when_its_question_got_no_value() {
        let mut request = interview(Rubric::PassFail);
        request.transcript = turns(&[
            ("agent", "Hello, is this Asha?"),
            (
                "callee",
                "Yes. My full name is Asha Rao, and I have 7 years of experience.",
            ),
            ("agent", "Could you tell me your notice period in days?"),
            ("callee", "Two months, so about 60 days."),
            ("agent", "Could you tell me years of experience?"),
            ("callee", "As I said."),
            ("agent", "Thanks, bye."),
        ]);
        let reply = analyze(&request, TODAY);
        let data = &reply.structured_data;
        assert_eq!(data["candidateName"], json!("Asha Rao"));
        // The first number is the two months; the one beside "days" is 60.
        assert_eq!(data["noticePeriodDays"], json!(60));
        assert_eq!(data["yearsOfExperience"], json!(7));
        assert_valid(&request, &reply);
    }

    /// Issue 28.3: the callee gives the work mode as the answer to the question about
    /// interest (already answered at the welcome), and only "thanks, bye" to the work-mode
    /// question. The answer that held nothing for its own field is read for the others.
    #[test]
    fn a_value_given_out_of_order_is_read_from_the_answer_that_held_none_for_its_question() {
        let mut mode = field("workMode", FieldType::Enum, "Preferred work mode");
        mode.options = vec!["remote".into(), "hybrid".into(), "office".into()];
        for described in [true, false] {
            let mut fields = vec![
                field(
                    "yearsOfExperience",
                    FieldType::Integer,
                    "Years of Rust experience",
                ),
                field(
                    "noticePeriodDays",
                    FieldType::Integer,
                    "Notice period in days",
                ),
                field(
                    "interested",
                    FieldType::Boolean,
                    "Whether interested in the role",
                ),
                mode.clone(),
            ];
            if !described {
                fields.iter_mut().for_each(|f| f.description.clear());
            }
            let mut request = AnalysisRequest {
                summary_prompt: None,
                fields,
                schema: None,
                success: None,
                transcript: Vec::new(),
                ended_reason: "agent-hangup".into(),
            };
            let (transcript, _) = sim_call(
                &request,
                &[
                    "Yes, I am interested in the role",
                    "I have 5 years of Rust experience",
                    "My notice period is 30 days",
                    "I prefer hybrid work",
                    "Thanks, bye",
                ],
            );
            request.transcript = transcript;
            let reply = analyze(&request, TODAY);
            assert_eq!(
                Value::Object(reply.structured_data.clone()),
                json!({
                    "yearsOfExperience": 5,
                    "noticePeriodDays": 30,
                    "interested": true,
                    "workMode": "hybrid",
                }),
                "described: {described}; transcript {:?}",
                request.transcript
            );
            assert_valid(&request, &reply);
        }
    }

    /// Reading the whole call means the callee's part of it: an option the agent names, or
    /// one in an answer that gave its own question a value, fills nothing.
    #[test]
    fn an_unanswered_field_takes_no_value_from_the_agent_or_from_another_fields_answer() {
        let mut mode = field("workMode", FieldType::Enum, "Preferred work mode");
        mode.options = vec!["remote".into(), "hybrid".into(), "office".into()];
        let request = AnalysisRequest {
            summary_prompt: None,
            fields: vec![
                field("notes", FieldType::String, "Anything else about work"),
                mode,
            ],
            schema: None,
            success: None,
            transcript: turns(&[
                (
                    "agent",
                    "We work hybrid here. Could you tell me anything else about work?",
                ),
                ("callee", "I liked the remote work in my last job."),
                (
                    "agent",
                    "Could you tell me preferred work mode: remote, hybrid, office?",
                ),
                ("callee", "Thanks, bye."),
                ("agent", "Most of us are in the office. Goodbye!"),
            ]),
            ended_reason: "agent-hangup".into(),
        };
        let reply = analyze(&request, TODAY);
        assert_eq!(
            Value::Object(reply.structured_data.clone()),
            json!({"notes": "I liked the remote work in my last job", "workMode": null})
        );
    }

    #[test]
    fn a_users_schema_that_forbids_null_gets_no_key_for_a_missing_optional_value() {
        let mut request = screening();
        request.schema = Some(json!({
            "type": "object",
            "required": ["age"],
            "properties": {
                "age": {"type": "integer"},
                "city": {"type": "string", "enum": ["Pune", "Delhi"]},
                "pets": {"type": ["boolean", "null"]},
            },
        }));
        request.transcript = turns(&[("agent", "What is your age?"), ("callee", "Thirty.")]);
        let reply = analyze(&request, TODAY);
        assert_eq!(
            Value::Object(reply.structured_data.clone()),
            json!({"age": 30, "pets": null})
        );
        assert_valid(&request, &reply);
    }

    #[test]
    fn a_call_without_fields_is_summarized_from_what_the_callee_said() {
        let mut request = screening();
        request.fields.clear();
        request.transcript = turns(&[
            ("agent", "Hello, this is the school."),
            ("callee", "Hi, is the fee due this week?"),
            (
                "agent",
                "Let me note that down for the team. Is there anything else I can help you with?",
            ),
            ("callee", "No, bye."),
        ]);
        request.ended_reason = "caller-hangup".into();
        let reply = analyze(&request, TODAY);
        assert_eq!(
            reply.summary.as_deref(),
            Some(
                "The callee spoke 2 time(s), saying \"Hi, is the fee due this week?\", then \
                 \"No, bye.\". The callee said goodbye. The call ended by caller-hangup (the \
                 callee hung up)."
            )
        );
        assert_eq!(
            reply.success.as_ref().map(|s| &s["value"]),
            Some(&json!(true))
        );
        assert_valid(&request, &reply);
        request.transcript = turns(&[("agent", "Hello?")]);
        request.ended_reason = "silence-timeout".into();
        let reply = analyze(&request, TODAY);
        assert_eq!(
            reply.summary.as_deref(),
            Some(
                "The agent spoke 1 time(s) but the callee never answered. The call ended by \
                 silence-timeout (the callee went silent)."
            )
        );
        assert_eq!(
            reply.success.as_ref().map(|s| &s["value"]),
            Some(&json!(false))
        );
    }
}
