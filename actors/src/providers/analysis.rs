//! Post-call analysis: what a model is asked about a finished call (a summary, the fields of
//! the agent's plan, a success rubric), the JSON Schema its answer must follow, and the sim
//! LLM's deterministic analyzer, which reads the transcript for the values the callee said.
//!
//! The request travels as the user message of a JSON-mode [`LlmRequest`](super::LlmRequest),
//! so every LLM provider, the sim included, answers it through the same trait as a turn.

use super::scorecard::{CALLEE, ScorecardTurn};
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

/// The schema of one field's value; optional fields may be `null`.
pub fn field_schema(field: &AnalysisField) -> Value {
    let mut schema = Map::new();
    let base = match field.kind {
        FieldType::String | FieldType::Enum | FieldType::Date => "string",
        FieldType::Number => "number",
        FieldType::Integer => "integer",
        FieldType::Boolean => "boolean",
    };
    schema.insert(
        "type".into(),
        if field.required {
            json!(base)
        } else {
            json!([base, "null"])
        },
    );
    if !field.description.is_empty() {
        schema.insert("description".into(), json!(field.description));
    }
    match field.kind {
        FieldType::Enum => {
            let mut options: Vec<Value> = field.options.iter().map(|o| json!(o)).collect();
            if !field.required {
                options.push(Value::Null);
            }
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

/// Lowercase words of `text`, apostrophes kept.
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\'' || c == '.' || c == '-'))
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

/// The callee's answer to the agent turn that asks about `field`: the callee turns after the
/// best-matching agent turn, up to the next agent turn; else the callee turn that mentions it.
fn answer_for(field: &AnalysisField, transcript: &[ScorecardTurn]) -> Option<String> {
    let topic = topic_stems(&format!(
        "{} {}",
        split_name(&field.name).join(" "),
        field.description
    ));
    if topic.is_empty() {
        return None;
    }
    let mut best: Option<(usize, usize)> = None;
    for (at, turn) in transcript.iter().enumerate() {
        if turn.speaker == CALLEE {
            continue;
        }
        let n = hits(&topic, &turn.text);
        if n > 0 && best.is_none_or(|(_, most)| n > most) {
            best = Some((at, n));
        }
    }
    if let Some((at, _)) = best {
        let answer: Vec<&str> = transcript[at + 1..]
            .iter()
            .take_while(|t| t.speaker == CALLEE)
            .map(|t| t.text.trim())
            .filter(|t| !t.is_empty())
            .collect();
        if !answer.is_empty() {
            return Some(answer.join(" "));
        }
    }
    transcript
        .iter()
        .filter(|t| t.speaker == CALLEE)
        .map(|t| (hits(&topic, &t.text), t))
        .filter(|(n, _)| *n > 0)
        .max_by_key(|(n, _)| *n)
        .map(|(_, t)| t.text.trim().to_owned())
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

/// The first number said in `text`, in digits (`45,000`, `2.5`) or words (`twenty five`,
/// `three thousand`).
fn first_number(text: &str) -> Option<f64> {
    let tokens = words(&text.replace(',', ""));
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].trim_end_matches(['k', '%']);
        if let Ok(value) = token.parse::<f64>() {
            let scale = match tokens[i].chars().last() {
                Some('k') => 1_000.0,
                _ => match tokens.get(i + 1).map(String::as_str) {
                    Some("thousand") => 1_000.0,
                    Some("lakh" | "lakhs") => 100_000.0,
                    Some("million") => 1_000_000.0,
                    _ => 1.0,
                },
            };
            return Some(value * scale);
        }
        if let Some(value) = word_number(&tokens[i..]) {
            return Some(value);
        }
        i += 1;
    }
    None
}

/// A number spelled out at the start of `tokens`.
fn word_number(tokens: &[String]) -> Option<f64> {
    let mut total = 0.0;
    let mut current = 0.0;
    let mut seen = false;
    for token in tokens {
        let t = token.as_str();
        if let Some(n) = SMALL_NUMBERS.iter().position(|w| *w == t) {
            current += n as f64;
        } else if let Some(n) = TENS.iter().position(|w| !w.is_empty() && *w == t) {
            current += (n * 10) as f64;
        } else if t == "hundred" && seen {
            current *= 100.0;
        } else if t == "thousand" && seen {
            total += current * 1_000.0;
            current = 0.0;
        } else if (t == "lakh" || t == "lakhs") && seen {
            total += current * 100_000.0;
            current = 0.0;
        } else if t == "and" && seen {
            continue;
        } else {
            break;
        }
        seen = true;
    }
    seen.then_some(total + current)
}

const YES: &[&str] = &[
    "yes",
    "yeah",
    "yep",
    "sure",
    "correct",
    "definitely",
    "absolutely",
    "certainly",
    "right",
    "okay",
    "ok",
    "haan",
];
const NO: &[&str] = &[
    "no", "nope", "not", "never", "don't", "dont", "can't", "cannot", "won't", "nahi", "neither",
];

/// A yes or a no in `text`, whichever comes first.
fn first_yes_no(text: &str) -> Option<bool> {
    words(text).iter().find_map(|w| {
        if YES.contains(&w.as_str()) {
            Some(true)
        } else if NO.contains(&w.as_str()) {
            Some(false)
        } else {
            None
        }
    })
}

/// The option named in `text` (the longest one named, case-insensitively).
fn named_option(options: &[String], text: &str) -> Option<String> {
    let said = format!(" {} ", words(text).join(" "));
    options
        .iter()
        .filter(|o| {
            let option = words(o).join(" ");
            !option.is_empty() && said.contains(&format!(" {option} "))
        })
        .max_by_key(|o| o.len())
        .cloned()
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

/// A date said in `text`: `2027-03-05`, `5 March 2027`, `March 5th, 2027` or `the 5th of March 2027`.
fn first_date(text: &str) -> Option<String> {
    for token in text.split(|c: char| c.is_whitespace() || c == ',') {
        let token = token.trim_matches(|c: char| !c.is_ascii_digit());
        let parts: Vec<&str> = token.split('-').collect();
        if parts.len() == 3
            && parts[0].len() == 4
            && let (Ok(y), Ok(m), Ok(d)) = (
                parts[0].parse::<u32>(),
                parts[1].parse::<u32>(),
                parts[2].parse::<u32>(),
            )
            && valid_date(y, m, d)
        {
            return Some(format!("{y:04}-{m:02}-{d:02}"));
        }
    }
    let tokens = words(text);
    let day_of = |t: &str| -> Option<u32> {
        let digits = t.trim_end_matches(|c: char| c.is_ascii_alphabetic());
        digits.parse::<u32>().ok().filter(|d| (1..=31).contains(d))
    };
    let year_of = |t: Option<&String>| -> Option<u32> {
        t.and_then(|t| t.parse::<u32>().ok())
            .filter(|y| (1900..=2200).contains(y))
    };
    for (at, token) in tokens.iter().enumerate() {
        let Some(month) = MONTHS.iter().position(|m| m == token).map(|m| m as u32 + 1) else {
            continue;
        };
        // "5 March 2027", "the 5th of March 2027"
        let before = at
            .checked_sub(1)
            .and_then(|b| {
                if tokens[b] == "of" {
                    b.checked_sub(1)
                } else {
                    Some(b)
                }
            })
            .and_then(|b| day_of(&tokens[b]));
        if let Some(day) = before
            && let Some(year) = year_of(tokens.get(at + 1))
            && valid_date(year, month, day)
        {
            return Some(format!("{year:04}-{month:02}-{day:02}"));
        }
        // "March 5th 2027"
        if let Some(day) = tokens.get(at + 1).and_then(|t| day_of(t))
            && let Some(year) = year_of(tokens.get(at + 2))
            && valid_date(year, month, day)
        {
            return Some(format!("{year:04}-{month:02}-{day:02}"));
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

/// The value of `field` in the callee's `answer`, or `None` when the answer does not hold one.
fn value_in(field: &AnalysisField, answer: &str) -> Option<Value> {
    match field.kind {
        FieldType::Number => first_number(answer).map(|n| json!(n)),
        FieldType::Integer => first_number(answer).map(|n| json!(n.round() as i64)),
        FieldType::Boolean => first_yes_no(answer).map(Value::Bool),
        FieldType::Enum => named_option(&field.options, answer).map(Value::String),
        FieldType::Date => first_date(answer).map(Value::String),
        FieldType::String => {
            let text = answer.trim().trim_end_matches(['.', '!', '?']).trim();
            (!text.is_empty()).then(|| Value::String(text.to_owned()))
        }
    }
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

/// The sim LLM's analysis: values read from the callee's answers, a summary built from the
/// conversation, and a verdict from how many of the plan's fields the call yielded.
pub fn sim_analysis(request: &AnalysisRequest) -> AnalysisReply {
    let fields = request.effective_fields();
    let mut data = Map::new();
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for field in &fields {
        let value = answer_for(field, &request.transcript).and_then(|a| value_in(field, &a));
        match &value {
            Some(_) => found.push(field.name.as_str()),
            None => missing.push(field.name.as_str()),
        }
        data.insert(field.name.clone(), value.unwrap_or(Value::Null));
    }
    let answers: Vec<&str> = request
        .transcript
        .iter()
        .filter(|t| t.speaker == CALLEE && !t.text.trim().is_empty())
        .map(|t| t.text.trim())
        .collect();
    let summary = request
        .summary_prompt
        .as_ref()
        .map(|_| summarize(&fields, &answers, &found, &request.ended_reason));
    let success = request
        .success
        .as_ref()
        .map(|plan| verdict(plan, request, &fields, &found, &missing, &answers));
    AnalysisReply {
        summary,
        structured_data: data,
        success,
    }
}

fn summarize(fields: &[AnalysisField], answers: &[&str], found: &[&str], ended: &str) -> String {
    if answers.is_empty() {
        return format!("The callee did not speak; the call ended by {ended}.");
    }
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
    let asked = if fields.is_empty() {
        String::new()
    } else {
        format!(
            " The agent asked about {}; the call yielded {} of {}.",
            fields
                .iter()
                .map(|f| split_name(&f.name).join(" "))
                .collect::<Vec<_>>()
                .join(", "),
            found.len(),
            fields.len()
        )
    };
    format!(
        "The callee answered {} time(s): {}.{asked} The call ended by {ended}.",
        answers.len(),
        quoted.join(", ")
    )
}

fn verdict(
    plan: &SuccessPlan,
    request: &AnalysisRequest,
    fields: &[AnalysisField],
    found: &[&str],
    missing: &[&str],
    answers: &[&str],
) -> Value {
    let counted: Vec<&AnalysisField> = if fields.iter().any(|f| f.required) {
        fields.iter().filter(|f| f.required).collect()
    } else {
        fields.iter().collect()
    };
    let yielded = counted
        .iter()
        .filter(|f| found.contains(&f.name.as_str()))
        .count();
    let coverage = if counted.is_empty() {
        if answers.is_empty() { 0.0 } else { 1.0 }
    } else {
        yielded as f64 / counted.len() as f64
    };
    let score = coverage * ending_quality(&request.ended_reason);
    let reason = if missing.is_empty() {
        format!(
            "The call yielded every field ({}); it ended by {}.",
            found.len(),
            request.ended_reason
        )
    } else {
        format!(
            "Missing {}; it ended by {}.",
            missing.join(", "),
            request.ended_reason
        )
    };
    let value = match plan.rubric {
        Rubric::PassFail => json!(score >= 0.5),
        Rubric::NumericScale => json!(1 + (score * 9.0).round() as i64),
        Rubric::DescriptiveScale => json!(match score {
            s if s >= 0.85 => "excellent",
            s if s >= 0.6 => "good",
            s if s >= 0.35 => "fair",
            _ => "poor",
        }),
        Rubric::Percentage => json!((score * 100.0).round()),
        Rubric::Checklist => Value::Array(
            plan.criteria
                .iter()
                .map(|c| {
                    let topic = topic_stems(&format!("{} {}", c.name, c.description));
                    let pass = !topic.is_empty()
                        && request.transcript.iter().any(|t| hits(&topic, &t.text) > 0)
                        && !answers.is_empty();
                    json!({"name": c.name, "pass": pass})
                })
                .collect(),
        ),
    };
    json!({"value": value, "reason": reason})
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
        assert!(summary.contains("About five years"), "{summary}");
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
            json!({"type": "integer", "description": "How many years of Rust experience", "minimum": 0.0, "maximum": 50.0})
        );
        assert_eq!(
            data["properties"]["notes"]["type"],
            json!(["string", "null"])
        );
        assert_eq!(
            data["properties"]["preferredShift"]["enum"],
            json!(["morning", "night", "weekend"])
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

    #[test]
    fn numbers_dates_and_questions_read_like_people_say_them() {
        assert_eq!(first_number("twenty five years"), Some(25.0));
        assert_eq!(first_number("about 45k"), Some(45_000.0));
        assert_eq!(first_number("3 lakh"), Some(300_000.0));
        assert_eq!(first_number("two thousand and five hundred"), Some(2_500.0));
        assert_eq!(first_number("none at all"), None);
        assert_eq!(
            first_date("March 5th, 2027 works"),
            Some("2027-03-05".into())
        );
        assert_eq!(first_date("from 2027-11-30"), Some("2027-11-30".into()));
        assert_eq!(first_date("the 31st of February 2027"), None);
        assert_eq!(first_yes_no("Nope, sorry"), Some(false));
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
}
