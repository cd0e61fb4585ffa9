//! The agent form: what each input holds, how a posted form becomes the same
//! JSON body `POST /api/agents` takes (so the API's parser and validation
//! judge it), and which input a refusal's field path belongs to.

use crate::domain::agent::{AgentInput, AgentSpec, AgentSpecError};
use crate::domain::text;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// How an input is drawn and read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One line of text, sent as a string.
    Text,
    /// Several lines of text, sent as a string.
    Prose,
    /// A number; blank leaves the field out (its default, or the stored value).
    Number,
    /// A number; blank sends null (the server's default).
    NullableNumber,
    /// One of a closed list.
    Choice(&'static [&'static str]),
    /// One of a closed list, or blank for the server's default (left out of the body).
    OptionalChoice(&'static [&'static str]),
    /// Several of a closed list (checkboxes), sent as an array.
    Choices(&'static [&'static str]),
    /// A checkbox, sent as a boolean.
    Flag,
    /// One entry per line, sent as an array of strings.
    Lines,
    /// One entry per line, sent as an array of strings; blank leaves it out (the default
    /// list).
    OptionalLines,
    /// A JSON value; blank sends `blank`.
    Json(Blank),
}

/// What a blank JSON textarea means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Blank {
    /// null: clears the setting.
    Null,
    /// An empty list.
    EmptyList,
    /// An empty object: every default.
    EmptyObject,
}

/// One input of the form.
struct Input {
    /// The API's field path, also the input's `name`.
    path: &'static str,
    label: &'static str,
    help: &'static str,
    kind: Kind,
}

const ENGINES: &[&str] = &["pipeline", "announcement", "keypad"];
const LLMS: &[&str] = &["sim", "openai"];
const ASRS: &[&str] = &["sim", "deepgram", "openai", "whisper"];
const TTSS: &[&str] = &["sim", "openai", "elevenlabs", "espeak", "piper"];
const CARRIERS: &[&str] = &[
    "sim", "twilio", "plivo", "exotel", "vonage", "telnyx", "sip",
];
const RETRY_ON: &[&str] = &["no-answer", "busy", "failed", "voicemail"];
const VOICEMAIL_ACTIONS: &[&str] = &["hangup", "leaveMessage"];
const TURN_MODES: &[&str] = &["smart", "silence"];
const INTERRUPTION_MODES: &[&str] = &["words", "duration"];

/// The form's sections and inputs, in the order shown.
const SECTIONS: &[(&str, &[Input])] = &[
    (
        "Agent",
        &[
            Input {
                path: "name",
                label: "Name",
                help: "Shown on call records.",
                kind: Kind::Text,
            },
            Input {
                path: "conversationEngine",
                label: "Type",
                help: "pipeline: a conversation; announcement: one message; keypad: a key menu.",
                kind: Kind::Choice(ENGINES),
            },
            Input {
                path: "language",
                label: "Language",
                help: "A BCP 47 tag such as en-IN.",
                kind: Kind::Text,
            },
            Input {
                path: "welcomeMessage",
                label: "Welcome message",
                help: "Spoken when the call connects; may hold {placeholders}.",
                kind: Kind::Prose,
            },
            Input {
                path: "prompt",
                label: "Prompt",
                help: "Instructions for the rest of the call; may hold {placeholders}.",
                kind: Kind::Prose,
            },
            Input {
                path: "endCallPhrases",
                label: "End-call phrases",
                help: "One per line: the call ends when the agent says one.",
                kind: Kind::Lines,
            },
        ],
    ),
    (
        "Voice and providers",
        &[
            Input {
                path: "llmProvider",
                label: "LLM provider",
                help: "",
                kind: Kind::Choice(LLMS),
            },
            Input {
                path: "llmModel",
                label: "LLM model",
                help: "",
                kind: Kind::Text,
            },
            Input {
                path: "maxTokens",
                label: "Max tokens per reply",
                help: "1 to 4096.",
                kind: Kind::Number,
            },
            Input {
                path: "temperature",
                label: "Temperature",
                help: "0 to 2; blank for the model's default.",
                kind: Kind::NullableNumber,
            },
            Input {
                path: "asrProvider",
                label: "Speech recognition",
                help: "",
                kind: Kind::Choice(ASRS),
            },
            Input {
                path: "ttsProvider",
                label: "Speech synthesis",
                help: "",
                kind: Kind::Choice(TTSS),
            },
            Input {
                path: "voice",
                label: "Voice",
                help: "",
                kind: Kind::Text,
            },
            Input {
                path: "telephonyProvider",
                label: "Carrier",
                help: "",
                kind: Kind::Choice(CARRIERS),
            },
        ],
    ),
    (
        "Call limits",
        &[
            Input {
                path: "maxDurationSeconds",
                label: "Max duration (s)",
                help: "10 to 14400.",
                kind: Kind::Number,
            },
            Input {
                path: "silenceTimeoutSeconds",
                label: "Silence timeout (s)",
                help: "2 to 3600.",
                kind: Kind::Number,
            },
            Input {
                path: "perMinuteRatePaise",
                label: "Rate (paise per minute)",
                help: "0 to 100000.",
                kind: Kind::Number,
            },
            Input {
                path: "announcement.repeat",
                label: "Announcement repeats",
                help: "Announcement agents: 1 to 10.",
                kind: Kind::Number,
            },
        ],
    ),
    (
        "Turn-taking",
        &[
            Input {
                path: "turnDetection.mode",
                label: "End of the caller's turn",
                help: "smart: the words, the end-of-turn model and silence; silence: 600 ms of silence. Default: smart when the model is installed.",
                kind: Kind::OptionalChoice(TURN_MODES),
            },
            Input {
                path: "turnDetection.minSilenceMs",
                label: "Short pause (ms)",
                help: "Smart: when the turn is judged, 100 to 1000.",
                kind: Kind::Number,
            },
            Input {
                path: "turnDetection.maxSilenceMs",
                label: "Longest wait (ms)",
                help: "Smart: on a pause that is not the end, 500 to 5000.",
                kind: Kind::Number,
            },
            Input {
                path: "turnDetection.threshold",
                label: "Model threshold",
                help: "Smart: the probability that ends the turn, 0 to 1.",
                kind: Kind::Number,
            },
            Input {
                path: "interruptible",
                label: "The caller can interrupt the agent",
                help: "",
                kind: Kind::Flag,
            },
            Input {
                path: "interruption.mode",
                label: "Interruptions",
                help: "words: the agent pauses at once, goes on after a backchannel, stops for more; duration: it stops after the time below. Default: words with a streaming recognizer.",
                kind: Kind::OptionalChoice(INTERRUPTION_MODES),
            },
            Input {
                path: "interruptionMs",
                label: "Stop after (ms)",
                help: "Duration: caller speech that stops the agent, 100 to 2000.",
                kind: Kind::Number,
            },
            Input {
                path: "interruption.minWords",
                label: "Most backchannel words",
                help: "Words: more words than this stop the agent, 1 to 20.",
                kind: Kind::Number,
            },
            Input {
                path: "interruption.backchannels",
                label: "Backchannels",
                help: "Words: one per line; blank for the English and Hindi defaults (uh-huh, yeah, okay, haan, achha…).",
                kind: Kind::OptionalLines,
            },
            Input {
                path: "interruption.resumeAfterMs",
                label: "Resume after (ms)",
                help: "Words: quiet without a word before the agent goes on, 200 to 5000.",
                kind: Kind::Number,
            },
        ],
    ),
    (
        "Retries and voicemail",
        &[
            Input {
                path: "retryPolicy.maxAttempts",
                label: "Attempts",
                help: "Including the first, 1 to 10.",
                kind: Kind::Number,
            },
            Input {
                path: "retryPolicy.retryAfterSeconds",
                label: "Wait between attempts (s)",
                help: "At most 604800.",
                kind: Kind::Number,
            },
            Input {
                path: "retryPolicy.retryOn",
                label: "Retry on",
                help: "",
                kind: Kind::Choices(RETRY_ON),
            },
            Input {
                path: "voicemail.action",
                label: "On an answering machine",
                help: "hangup, or leaveMessage after the beep.",
                kind: Kind::Choice(VOICEMAIL_ACTIONS),
            },
            Input {
                path: "voicemail.message",
                label: "Voicemail message",
                help: "Required for leaveMessage.",
                kind: Kind::Prose,
            },
            Input {
                path: "voicemail.detect",
                label: "Detect answering machines",
                help: "",
                kind: Kind::Flag,
            },
        ],
    ),
    (
        "Analysis, tools and menus (JSON)",
        &[
            Input {
                path: "analysis",
                label: "Analysis plan",
                help: "summary, fields, success, timeoutSeconds; blank for the default (a summary).",
                kind: Kind::Json(Blank::Null),
            },
            Input {
                path: "tools",
                label: "Tools",
                help: "A list: endCall, transferCall, dtmf, checkAvailability, bookAppointment, function. Function secrets are kept and never shown.",
                kind: Kind::Json(Blank::EmptyList),
            },
            Input {
                path: "toolLimits",
                label: "Tool limits",
                help: "perTurn, perCall; blank for the defaults.",
                kind: Kind::Json(Blank::EmptyObject),
            },
            Input {
                path: "ratingTemplate",
                label: "Rating template",
                help: "{\"columns\": [{\"name\", \"description\"}]}; blank for the default scorecard.",
                kind: Kind::Json(Blank::Null),
            },
            Input {
                path: "keypad",
                label: "Keypad menu",
                help: "Keypad agents: prompt, options, timeoutSeconds, attempts, optOutDigit (a key that opts the callee out).",
                kind: Kind::Json(Blank::Null),
            },
        ],
    ),
];

/// One choice of a select or a checkbox group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChoiceView {
    /// The wire value.
    pub value: &'static str,
    /// What it is shown as.
    pub label: &'static str,
    /// Selected or checked.
    pub selected: bool,
}

/// One input as the template draws it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldView {
    /// The `name` (the API's field path).
    pub name: &'static str,
    /// The element id (the path with `.` as `-`).
    pub id: String,
    /// The label.
    pub label: &'static str,
    /// A hint under the input (may be empty).
    pub help: &'static str,
    /// text, number, textarea, json, select, checkbox or checkboxes.
    pub kind: &'static str,
    /// The text shown in it.
    pub value: String,
    /// For checkbox: whether it is ticked.
    pub checked: bool,
    /// For select and checkboxes.
    pub choices: Vec<ChoiceView>,
    /// The refusal shown beside it.
    pub error: Option<String>,
}

/// A group of inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionView {
    /// Its heading.
    pub title: &'static str,
    /// Its inputs.
    pub fields: Vec<FieldView>,
}

/// The form's values as text, keyed by input path, with the refusals to show.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentForm {
    values: BTreeMap<&'static str, String>,
    choices: BTreeMap<&'static str, Vec<String>>,
    errors: BTreeMap<&'static str, String>,
    /// A refusal that belongs to no one input.
    pub form_error: Option<String>,
}

/// A refusal of a posted form: the input it belongs to (none: the whole form) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRefusal {
    /// The input's path, when one matches.
    pub input: Option<&'static str>,
    /// The message, naming the field as the API does.
    pub message: String,
}

fn inputs() -> impl Iterator<Item = &'static Input> {
    SECTIONS.iter().flat_map(|(_, inputs)| inputs.iter())
}

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

/// The number's text without a trailing `.0` for whole floats.
fn number_text(value: &Value) -> String {
    match value {
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

impl AgentForm {
    /// The form of a new agent: every default.
    pub fn blank() -> Self {
        Self::from_spec(&AgentSpec::with_name(""))
    }

    /// The form filled with a stored agent's settings. Function secrets are left
    /// out: they are kept by name when the form is saved, and never shown.
    pub fn from_spec(spec: &AgentSpec) -> Self {
        let whole = serde_json::to_value(spec).unwrap_or(Value::Null);
        let mut form = Self::default();
        for input in inputs() {
            let at = lookup(&whole, input.path);
            match input.kind {
                Kind::Text | Kind::Prose | Kind::Choice(_) | Kind::OptionalChoice(_) => {
                    let text = at.and_then(Value::as_str).unwrap_or_default();
                    form.values.insert(input.path, text.to_string());
                }
                Kind::Number | Kind::NullableNumber => {
                    form.values
                        .insert(input.path, at.map(number_text).unwrap_or_default());
                }
                Kind::Flag => {
                    let on = at.and_then(Value::as_bool).unwrap_or(false);
                    form.values
                        .insert(input.path, if on { "on".into() } else { String::new() });
                }
                Kind::Lines | Kind::OptionalLines => {
                    let lines: Vec<&str> = at
                        .and_then(Value::as_array)
                        .map(|items| items.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    form.values.insert(input.path, lines.join("\n"));
                }
                Kind::Choices(_) => {
                    let picked = at
                        .and_then(Value::as_array)
                        .map(|items| {
                            items
                                .iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default();
                    form.choices.insert(input.path, picked);
                }
                Kind::Json(blank) => {
                    let text = match at {
                        None | Some(Value::Null) => String::new(),
                        Some(Value::Array(items))
                            if items.is_empty() && blank == Blank::EmptyList =>
                        {
                            String::new()
                        }
                        Some(value) if input.path == "tools" => pretty(&without_secrets(value)),
                        Some(value) => pretty(value),
                    };
                    form.values.insert(input.path, text);
                }
            }
        }
        form
    }

    /// The form as posted (urlencoded pairs). An input that is not posted at
    /// all is left out of the body (a new agent takes its default, an edit
    /// keeps the stored value); checkboxes post a hidden blank beside them,
    /// so an unticked box still counts as sent.
    pub fn from_pairs(pairs: &[(String, String)]) -> Self {
        let mut form = Self::default();
        for input in inputs() {
            let mut sent = pairs
                .iter()
                .filter(|(name, _)| name == input.path)
                .map(|(_, value)| value.clone())
                .peekable();
            if sent.peek().is_none() {
                continue;
            }
            match input.kind {
                Kind::Choices(_) => {
                    let picked = sent.filter(|v| !v.is_empty()).collect();
                    form.choices.insert(input.path, picked);
                }
                Kind::Flag => {
                    let on = sent.any(|v| !v.is_empty());
                    form.values
                        .insert(input.path, if on { "on".into() } else { String::new() });
                }
                _ => {
                    form.values
                        .insert(input.path, sent.next().unwrap_or_default());
                }
            }
        }
        form
    }

    /// The JSON body the API would take for this form, or the first input whose
    /// text cannot even become JSON (a JSON textarea that does not parse).
    pub fn to_body(&self) -> Result<Value, FieldRefusal> {
        let mut body = Map::new();
        for input in inputs() {
            let sent = match input.kind {
                Kind::Choices(_) => self.choices.contains_key(input.path),
                _ => self.values.contains_key(input.path),
            };
            if !sent {
                continue;
            }
            let raw = self
                .values
                .get(input.path)
                .map(String::as_str)
                .unwrap_or("");
            let value = match input.kind {
                Kind::Text | Kind::Prose | Kind::Choice(_) => Some(Value::String(raw.to_string())),
                Kind::OptionalChoice(_) | Kind::OptionalLines if raw.trim().is_empty() => None,
                Kind::OptionalChoice(_) => Some(Value::String(raw.to_string())),
                Kind::Number => number(raw),
                Kind::NullableNumber => Some(number(raw).unwrap_or(Value::Null)),
                Kind::Flag => Some(Value::Bool(!raw.is_empty())),
                Kind::Lines | Kind::OptionalLines => Some(Value::Array(
                    raw.lines()
                        .map(str::trim)
                        .filter(|line| !line.is_empty())
                        .map(|line| Value::String(line.to_string()))
                        .collect(),
                )),
                Kind::Choices(_) => Some(Value::Array(
                    self.choices
                        .get(input.path)
                        .into_iter()
                        .flatten()
                        .map(|v| Value::String(v.clone()))
                        .collect(),
                )),
                Kind::Json(blank) if raw.trim().is_empty() => Some(match blank {
                    Blank::Null => Value::Null,
                    Blank::EmptyList => Value::Array(Vec::new()),
                    Blank::EmptyObject => Value::Object(Map::new()),
                }),
                Kind::Json(_) => {
                    let parsed: Value = serde_json::from_str(raw).map_err(|err| FieldRefusal {
                        input: Some(input.path),
                        message: format!("{}: is not valid JSON: {err}", input.path),
                    })?;
                    Some(parsed)
                }
            };
            if let Some(value) = value {
                insert(&mut body, input.path, value);
            }
        }
        // A blank voicemail message is no message (required only for leaveMessage).
        if let Some(Value::Object(voicemail)) = body.get_mut("voicemail")
            && voicemail
                .get("message")
                .and_then(Value::as_str)
                .is_some_and(|m| m.trim().is_empty())
        {
            voicemail.remove("message");
        }
        Ok(Value::Object(body))
    }

    /// Parses the form as the API parses its body: text rules first, then the
    /// typed input (each refusal names its field path).
    pub fn to_input(&self) -> Result<AgentInput, FieldRefusal> {
        let body = self.to_body()?;
        if let Some((path, reason)) = text::first_refused(&body) {
            return Err(refusal(&path, &format!("{path}: {reason}")));
        }
        serde_path_to_error::deserialize(body).map_err(|err| {
            let path = err.path().to_string();
            let detail = err.into_inner().to_string();
            refusal(&path, &format!("{path}: {detail}"))
        })
    }

    /// Records a refusal beside its input (or on the form).
    pub fn refuse(&mut self, refusal: FieldRefusal) {
        match refusal.input {
            Some(input) => {
                self.errors.insert(input, refusal.message);
            }
            None => self.form_error = Some(refusal.message),
        }
    }

    /// Whether any refusal is recorded.
    pub fn has_errors(&self) -> bool {
        !self.errors.is_empty() || self.form_error.is_some()
    }

    /// The sections as the template draws them.
    pub fn sections(&self) -> Vec<SectionView> {
        SECTIONS
            .iter()
            .map(|(title, inputs)| SectionView {
                title,
                fields: inputs.iter().map(|input| self.field(input)).collect(),
            })
            .collect()
    }

    fn field(&self, input: &Input) -> FieldView {
        let value = self.values.get(input.path).cloned().unwrap_or_default();
        let (kind, choices) = match input.kind {
            Kind::Text => ("text", Vec::new()),
            Kind::Prose | Kind::Lines | Kind::OptionalLines => ("textarea", Vec::new()),
            Kind::Number | Kind::NullableNumber => ("number", Vec::new()),
            Kind::Flag => ("checkbox", Vec::new()),
            Kind::Json(_) => ("json", Vec::new()),
            Kind::Choice(options) => (
                "select",
                options
                    .iter()
                    .map(|option| ChoiceView {
                        value: option,
                        label: option,
                        selected: *option == value,
                    })
                    .collect(),
            ),
            Kind::OptionalChoice(options) => (
                "select",
                std::iter::once(ChoiceView {
                    value: "",
                    label: "default",
                    selected: value.is_empty(),
                })
                .chain(options.iter().map(|option| ChoiceView {
                    value: option,
                    label: option,
                    selected: *option == value,
                }))
                .collect(),
            ),
            Kind::Choices(options) => {
                let picked = self.choices.get(input.path);
                (
                    "checkboxes",
                    options
                        .iter()
                        .map(|option| ChoiceView {
                            value: option,
                            label: option,
                            selected: picked.is_some_and(|p| p.iter().any(|v| v == option)),
                        })
                        .collect(),
                )
            }
        };
        FieldView {
            name: input.path,
            id: format!("f-{}", input.path.replace('.', "-")),
            label: input.label,
            help: input.help,
            kind,
            checked: !value.is_empty(),
            value,
            choices,
            error: self.errors.get(input.path).cloned(),
        }
    }
}

/// The refusal of a spec, placed at the input its field path belongs to.
pub fn spec_refusal(err: &AgentSpecError) -> FieldRefusal {
    refusal(&err.field(), &err.to_string())
}

fn refusal(path: &str, message: &str) -> FieldRefusal {
    FieldRefusal {
        input: input_for(path),
        message: message.to_string(),
    }
}

/// The input a field path belongs to: the longest input path it starts with
/// (`analysis.fields[0].options` → `analysis`), else the first input under it
/// (`voicemail` → `voicemail.action`). `extraction` is the analysis plan's
/// other spelling, edited in the analysis input.
pub fn input_for(path: &str) -> Option<&'static str> {
    let path = match path.strip_prefix("extraction") {
        Some(rest) => return input_for(&format!("analysis{rest}")),
        None => path,
    };
    let within = |name: &str| {
        path == name
            || path
                .strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
    };
    let holding = inputs()
        .map(|input| input.path)
        .filter(|name| within(name))
        .max_by_key(|name| name.len());
    holding.or_else(|| {
        let prefix = format!("{path}.");
        inputs()
            .map(|input| input.path)
            .find(|name| !path.is_empty() && name.starts_with(&prefix))
    })
}

/// A number's text as JSON: an integer or a float when it reads as one, else
/// the text itself, so the API's parser refuses it at its path ("expected an integer").
fn number(raw: &str) -> Option<Value> {
    let raw = raw.trim();
    if raw.is_empty() {
        return None;
    }
    if let Ok(whole) = raw.parse::<i64>() {
        return Some(Value::from(whole));
    }
    match raw.parse::<f64>() {
        Ok(float) if float.is_finite() => serde_json::Number::from_f64(float).map(Value::Number),
        _ => Some(Value::String(raw.to_string())),
    }
}

/// Sets `value` at a dotted path, making the objects on the way.
fn insert(body: &mut Map<String, Value>, path: &str, value: Value) {
    match path.split_once('.') {
        None => {
            body.insert(path.to_string(), value);
        }
        Some((head, rest)) => {
            let child = body
                .entry(head.to_string())
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(child) = child {
                insert(child, rest, value);
            }
        }
    }
}

fn lookup<'v>(value: &'v Value, path: &str) -> Option<&'v Value> {
    path.split('.').try_fold(value, |at, key| at.get(key))
}

/// The tools with every function's secret removed.
fn without_secrets(tools: &Value) -> Value {
    let mut tools = tools.clone();
    if let Value::Array(items) = &mut tools {
        for item in items {
            if let Value::Object(tool) = item {
                tool.remove("secret");
            }
        }
    }
    tools
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::agent::{
        AsrVendor, ConversationEngine, LlmVendor, TelephonyProvider, TtsVendor,
    };

    fn posted(form: &AgentForm) -> Vec<(String, String)> {
        let mut pairs = Vec::new();
        for input in inputs() {
            match input.kind {
                Kind::Choices(_) | Kind::Flag => {
                    pairs.push((input.path.to_string(), String::new()));
                    for v in form.choices.get(input.path).into_iter().flatten() {
                        pairs.push((input.path.to_string(), v.clone()));
                    }
                    if let Some(v) = form.values.get(input.path).filter(|v| !v.is_empty()) {
                        pairs.push((input.path.to_string(), v.clone()));
                    }
                }
                _ => pairs.push((
                    input.path.to_string(),
                    form.values.get(input.path).cloned().unwrap_or_default(),
                )),
            }
        }
        pairs
    }

    #[test]
    fn a_stored_spec_round_trips_through_the_form() {
        let mut spec = AgentSpec::with_name("Screener");
        spec.prompt = "Ask about {role}".into();
        spec.temperature = Some(0.5);
        spec.end_call_phrases = vec!["bye".into(), "goodbye".into()];
        spec.retry_policy.retry_on = vec!["busy".into()];
        let form = AgentForm::from_pairs(&posted(&AgentForm::from_spec(&spec)));
        let again = form.to_input().unwrap().into_new_spec().unwrap();
        assert_eq!(again.name, "Screener");
        assert_eq!(again.temperature, Some(0.5));
        assert_eq!(again.end_call_phrases, spec.end_call_phrases);
        assert_eq!(again.retry_policy, spec.retry_policy);
        assert_eq!(again.voicemail, spec.voicemail);
        assert_eq!(again.tool_limits, spec.tool_limits);
        // Unset turn-taking modes and backchannels stay unset (decided per call).
        assert_eq!(again.turn_detection, spec.turn_detection);
        assert_eq!(again.interruption, spec.interruption);

        spec.turn_detection.mode = Some(crate::domain::agent::TurnDetectionMode::Smart);
        spec.turn_detection.threshold = 0.7;
        spec.interruption.mode = Some(crate::domain::agent::InterruptionMode::Words);
        spec.interruption.backchannels = Some(vec!["haan ji".into(), "uh-huh".into()]);
        spec.interruption_ms = 700;
        let form = AgentForm::from_pairs(&posted(&AgentForm::from_spec(&spec)));
        let again = form.to_input().unwrap().into_new_spec().unwrap();
        assert_eq!(again.turn_detection, spec.turn_detection);
        assert_eq!(again.interruption, spec.interruption);
        assert_eq!(again.interruption_ms, 700);
    }

    #[test]
    fn inputs_not_posted_keep_their_defaults_and_unticked_boxes_count() {
        let pairs = vec![
            ("name".to_string(), "Only a name".to_string()),
            ("interruptible".to_string(), String::new()),
            ("retryPolicy.retryOn".to_string(), String::new()),
        ];
        let spec = AgentForm::from_pairs(&pairs)
            .to_input()
            .unwrap()
            .into_new_spec()
            .unwrap();
        assert_eq!(spec.language, "en-IN");
        assert_eq!(spec.max_duration_seconds, 600);
        assert!(!spec.interruptible);
        assert!(spec.retry_policy.retry_on.is_empty());
    }

    #[test]
    fn refusals_land_at_their_input() {
        assert_eq!(input_for("analysis.fields[0].options"), Some("analysis"));
        assert_eq!(input_for("extraction.fields"), Some("analysis"));
        assert_eq!(
            input_for("retryPolicy.maxAttempts"),
            Some("retryPolicy.maxAttempts")
        );
        assert_eq!(input_for("tools[2].url"), Some("tools"));
        assert_eq!(input_for("voicemail"), Some("voicemail.action"));
        assert_eq!(input_for("keypad.options[].digit"), Some("keypad"));
        assert_eq!(input_for("."), None);
        let mut pairs = posted(&AgentForm::blank());
        for (name, value) in &mut pairs {
            match name.as_str() {
                "name" => *value = "A".into(),
                "maxDurationSeconds" => *value = "ten".into(),
                _ => {}
            }
        }
        let err = AgentForm::from_pairs(&pairs).to_input().unwrap_err();
        assert_eq!(err.input, Some("maxDurationSeconds"), "{err:?}");
        for (name, value) in &mut pairs {
            match name.as_str() {
                "maxDurationSeconds" => *value = "600".into(),
                "analysis" => *value = "{not json".into(),
                _ => {}
            }
        }
        let err = AgentForm::from_pairs(&pairs).to_input().unwrap_err();
        assert_eq!(err.input, Some("analysis"));
        assert!(err.message.contains("not valid JSON"), "{err:?}");
    }

    #[test]
    fn function_secrets_are_never_shown() {
        let input: AgentInput = serde_json::from_value(serde_json::json!({
            "name": "A",
            "tools": [{"type": "function", "name": "lookup", "description": "d",
                       "parameters": {"type": "object", "properties": {}},
                       "url": "https://example.com/f", "secret": "0123456789abcdef0123456789abcdef"}],
        }))
        .unwrap();
        let spec = input.into_new_spec().unwrap();
        let form = AgentForm::from_spec(&spec);
        let tools = form.values.get("tools").cloned().unwrap_or_default();
        assert!(tools.contains("lookup"));
        assert!(!tools.contains("0123456789abcdef"), "{tools}");
    }

    /// The wire names the selects offer, checked against the domain's own lists so
    /// a new vendor cannot be forgotten here.
    fn offered_names_match_the_domain() -> bool {
        let same = |offered: &[&str], domain: Vec<&str>| offered == domain.as_slice();
        same(LLMS, LlmVendor::ALL.iter().map(|v| v.as_str()).collect())
            && same(ASRS, AsrVendor::ALL.iter().map(|v| v.as_str()).collect())
            && same(TTSS, TtsVendor::ALL.iter().map(|v| v.as_str()).collect())
            && same(
                CARRIERS,
                TelephonyProvider::ALL.iter().map(|v| v.as_str()).collect(),
            )
            && same(
                ENGINES,
                [
                    ConversationEngine::Pipeline,
                    ConversationEngine::Announcement,
                    ConversationEngine::Keypad,
                ]
                .iter()
                .map(|e| e.as_str())
                .collect(),
            )
    }

    #[test]
    fn every_vendor_is_offered() {
        assert!(offered_names_match_the_domain());
    }
}
