//! How the sim LLM uses tools, deterministically, so tests and the load generator exercise
//! them:
//! - a caller who asks for a person is transferred (to the first destination);
//! - a phone menu that says "press 2" gets a 2 (the option whose words the prompt shares, or
//!   the first);
//! - a caller who names a day and a time gets availability checked, then the slot at that
//!   time (or the first) booked;
//! - a function is called when the caller's words match its description;
//! - each result is put into words in the next reply (an error is said as such).

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::providers::{
    AVAILABILITY_TOOL, BOOKING_TOOL, ChatMessage, ChatRole, DTMF_TOOL, END_CALL_TOOL, LlmRequest,
    TRANSFER_TOOL, ToolCallRequest, ToolSpec,
};

/// What the sim agent does this turn when a tool is involved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SimToolTurn {
    /// Call a tool, saying nothing first.
    Call(ToolCallRequest),
    /// Say this (possibly nothing); `true` when the script is done, so the caller's close
    /// follows and the call ends.
    Say(String, bool),
}

/// Words that ask for a person.
const PERSON_WORDS: [&str; 8] = [
    "person",
    "human",
    "someone",
    "somebody",
    "representative",
    "manager",
    "operator",
    "agent",
];

/// Words too common to tie a caller's words to a function's description.
const STOP_WORDS: [&str; 16] = [
    "that", "this", "with", "from", "have", "what", "when", "where", "your", "about", "would",
    "could", "should", "there", "their", "which",
];

/// What the sim agent does with tools this turn, or `None` when tools play no part (the
/// ordinary reply follows).
pub fn sim_tool_turn(request: &LlmRequest, script_done: bool) -> Option<SimToolTurn> {
    let last = request.history.last()?;
    match last.role {
        ChatRole::Tool => Some(after_result(request, last, script_done)),
        ChatRole::User => before_reply(request, last.content.trim()),
        ChatRole::System | ChatRole::Assistant => None,
    }
}

/// The caller just spoke: a tool to call, if their words ask for one.
fn before_reply(request: &LlmRequest, said: &str) -> Option<SimToolTurn> {
    let words = words_of(said);
    if words.iter().any(|w| w == "bye" || w == "goodbye") {
        return None;
    }
    let calls = request
        .history
        .iter()
        .filter(|m| m.role == ChatRole::Tool)
        .count();
    let call = |name: &str, arguments: Value| {
        Some(SimToolTurn::Call(ToolCallRequest {
            id: format!("sim_{name}_{calls}"),
            name: name.to_owned(),
            arguments_json: arguments.to_string(),
        }))
    };
    if let Some(spec) = tool(request, TRANSFER_TOOL)
        && words.iter().any(|w| PERSON_WORDS.contains(&w.as_str()))
    {
        let destination = spec.parameters["properties"]["destination"]["enum"]
            .get(0)
            .cloned()
            .unwrap_or(Value::Null);
        return call(TRANSFER_TOOL, json!({ "destination": destination }));
    }
    if tool(request, DTMF_TOOL).is_some()
        && let Some(digit) = menu_choice(said, &request.system_prompt)
    {
        return call(DTMF_TOOL, json!({ "digits": digit.to_string() }));
    }
    if tool(request, AVAILABILITY_TOOL).is_some()
        && time_of_day(said).is_some()
        && let Some(date) = named_day(&words, today_days())
    {
        return call(AVAILABILITY_TOOL, json!({ "date": date }));
    }
    let function = request
        .tools
        .iter()
        .filter(|t| !is_builtin(&t.name))
        .find(|t| matches_description(&words, &t.description))?;
    call(
        &function.name,
        function_arguments(&function.parameters, said),
    )
}

/// A tool's result came back: the next call it leads to, or what to say about it.
fn after_result(request: &LlmRequest, result: &ChatMessage, script_done: bool) -> SimToolTurn {
    let name = request
        .history
        .iter()
        .flat_map(|m| m.tool_calls.iter())
        .find(|c| Some(c.id.as_str()) == result.tool_call_id.as_deref())
        .map(|c| c.name.as_str())
        .unwrap_or_default();
    let value: Value = serde_json::from_str(&result.content).unwrap_or(Value::Null);
    let error = value.get("error").and_then(Value::as_str);
    let anything_else = "Is there anything else I can help you with?";
    let text = match (name, error) {
        (DTMF_TOOL, None) => return SimToolTurn::Say(String::new(), false),
        (TRANSFER_TOOL, _) => {
            format!("I'm sorry, I could not transfer you right now. {anything_else}")
        }
        (AVAILABILITY_TOOL, Some(error)) => {
            format!("I'm sorry, I could not check the calendar: {error}. {anything_else}")
        }
        (AVAILABILITY_TOOL, None) => {
            let slots: Vec<&str> = value["slots"]
                .as_array()
                .map(|slots| {
                    slots
                        .iter()
                        .filter_map(|s| s.as_str().or_else(|| s["start"].as_str()))
                        .collect()
                })
                .unwrap_or_default();
            let wanted = last_user_words(request).and_then(time_of_day);
            let slot = wanted
                .and_then(|(h, m)| {
                    let at = format!("T{h:02}:{m:02}");
                    slots.iter().find(|s| s.contains(&at))
                })
                .or(slots.first());
            match slot {
                Some(start) if tool(request, BOOKING_TOOL).is_some() => {
                    let calls = request
                        .history
                        .iter()
                        .filter(|m| m.role == ChatRole::Tool)
                        .count();
                    return SimToolTurn::Call(ToolCallRequest {
                        id: format!("sim_{BOOKING_TOOL}_{calls}"),
                        name: BOOKING_TOOL.to_owned(),
                        arguments_json: json!({ "start": start }).to_string(),
                    });
                }
                Some(start) => format!("The first free slot is {start}. {anything_else}"),
                None => format!("I'm sorry, there are no free slots that day. {anything_else}"),
            }
        }
        (BOOKING_TOOL, Some(error)) => {
            format!("I'm sorry, I could not book that appointment: {error}. {anything_else}")
        }
        (BOOKING_TOOL, None) => {
            let start = value["start"].as_str().unwrap_or("the time you asked for");
            format!("You are booked for {start}. {anything_else}")
        }
        (_, Some(error)) => format!("I'm sorry, I could not get that: {error}. {anything_else}"),
        (_, None) => format!("Here is what I found: {}. {anything_else}", summary(&value)),
    };
    SimToolTurn::Say(text, script_done)
}

fn tool<'a>(request: &'a LlmRequest, name: &str) -> Option<&'a ToolSpec> {
    request.tools.iter().find(|t| t.name == name)
}

fn is_builtin(name: &str) -> bool {
    [
        TRANSFER_TOOL,
        DTMF_TOOL,
        AVAILABILITY_TOOL,
        BOOKING_TOOL,
        END_CALL_TOOL,
    ]
    .contains(&name)
}

fn last_user_words(request: &LlmRequest) -> Option<&str> {
    request
        .history
        .iter()
        .rev()
        .find(|m| m.role == ChatRole::User)
        .map(|m| m.content.as_str())
}

/// Lowercase words (letters and digits).
fn words_of(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A result in a few words: its `message`, `result`, `answer` or `status` text, else the
/// JSON itself.
fn summary(value: &Value) -> String {
    ["message", "result", "answer", "status"]
        .iter()
        .find_map(|key| value.get(key).and_then(Value::as_str))
        .map_or_else(|| value.to_string(), str::to_owned)
}

/// The key a phone menu's "press N" offers for the option the prompt is after: the option
/// whose words the prompt shares, else the first one offered.
fn menu_choice(said: &str, prompt: &str) -> Option<char> {
    let prompt_words = words_of(prompt);
    let lower = said.to_lowercase();
    let mut first = None;
    let mut clause_start = 0;
    let mut from = 0;
    while let Some(at) = lower[from..].find("press") {
        let at = from + at;
        let digit = lower[at + "press".len()..]
            .trim_start()
            .chars()
            .next()
            .filter(|c| c.is_ascii_digit() || *c == '*' || *c == '#');
        if let Some(digit) = digit {
            let clause = &lower[clause_start..at];
            let shared = words_of(clause)
                .iter()
                .any(|w| w.len() >= 4 && prompt_words.contains(w));
            if shared {
                return Some(digit);
            }
            first.get_or_insert(digit);
        }
        from = at + "press".len();
        clause_start = lower[from..]
            .find(['.', ',', ';'])
            .map_or(from, |end| from + end + 1);
    }
    first
}

/// An hour and minute named in the text (`3 pm`, `10:30 am`, `15:00`).
fn time_of_day(text: &str) -> Option<(u32, u32)> {
    let lower = text
        .to_lowercase()
        .replace("a.m.", "am")
        .replace("p.m.", "pm");
    let bytes = lower.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if !bytes[i].is_ascii_digit() || (i > 0 && bytes[i - 1].is_ascii_alphanumeric()) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        let hour: u32 = lower[start..i].parse().ok()?;
        let mut minute = 0;
        let mut explicit = false;
        if i + 2 < bytes.len() && bytes[i] == b':' {
            minute = lower[i + 1..i + 3].parse().unwrap_or(0);
            i += 3;
            explicit = true;
        }
        let rest = lower[i..].trim_start();
        let hour = if rest.starts_with("pm") && hour < 12 {
            Some(hour + 12)
        } else if rest.starts_with("am") && hour == 12 {
            Some(0)
        } else if explicit
            || rest.starts_with("am")
            || rest.starts_with("pm")
            || rest.starts_with("o'clock")
        {
            Some(hour)
        } else {
            None
        };
        if let Some(hour) = hour.filter(|h| *h < 24 && minute < 60) {
            return Some((hour, minute));
        }
    }
    None
}

/// Days since 1970-01-01 (UTC) today.
fn today_days() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs() / 86_400).unwrap_or(0))
}

/// The date (YYYY-MM-DD) a caller's words name: today, tomorrow, or the next weekday of that
/// name (a week ahead when it is today's).
fn named_day(words: &[String], today: i64) -> Option<String> {
    const WEEKDAYS: [&str; 7] = [
        "sunday",
        "monday",
        "tuesday",
        "wednesday",
        "thursday",
        "friday",
        "saturday",
    ];
    // 1970-01-01 was a Thursday.
    let weekday_today = (today + 4).rem_euclid(7);
    let day = words.iter().find_map(|w| match w.as_str() {
        "today" => Some(today),
        "tomorrow" => Some(today + 1),
        name => WEEKDAYS.iter().position(|d| *d == name).map(|wanted| {
            let ahead = (i64::try_from(wanted).unwrap_or(0) - weekday_today).rem_euclid(7);
            today + if ahead == 0 { 7 } else { ahead }
        }),
    })?;
    let (y, m, d) = civil_from_days(day);
    Some(format!("{y:04}-{m:02}-{d:02}"))
}

/// The calendar date of a day count since 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// Whether the caller's words call for a function with this description: two shared words of
/// four letters or more (one, for a description that short).
fn matches_description(said: &[String], description: &str) -> bool {
    let described: Vec<String> = words_of(description)
        .into_iter()
        .filter(|w| w.len() >= 4 && !STOP_WORDS.contains(&w.as_str()))
        .collect();
    let shared = described.iter().filter(|w| said.contains(w)).count();
    shared >= 2 || (shared == 1 && described.len() <= 3)
}

/// Arguments for a function from the caller's words, following its schema: an id-like
/// string gets the first token with a digit, another string the whole text, a number the
/// first number, a boolean `true`.
fn function_arguments(parameters: &Value, said: &str) -> Value {
    let mut arguments = Map::new();
    let Some(properties) = parameters["properties"].as_object() else {
        return Value::Object(arguments);
    };
    let token_with_digit = said
        .split_whitespace()
        .map(|t| t.trim_matches(|c: char| !c.is_alphanumeric() && c != '-'))
        .find(|t| t.chars().any(|c| c.is_ascii_digit()));
    let number = said
        .split(|c: char| !c.is_ascii_digit() && c != '.')
        .find_map(|t| t.parse::<f64>().ok());
    for (name, schema) in properties {
        let lower = name.to_lowercase();
        let value = match schema["type"].as_str() {
            Some("string")
                if ["id", "number", "code"].iter().any(|k| lower.contains(k))
                    && token_with_digit.is_some() =>
            {
                token_with_digit.map(|t| Value::String(t.to_owned()))
            }
            Some("string") => Some(Value::String(said.to_owned())),
            Some("integer") => number.map(|n| json!(n as i64)),
            Some("number") => number.map(|n| json!(n)),
            Some("boolean") => Some(Value::Bool(true)),
            _ => None,
        };
        if let Some(value) = value {
            arguments.insert(name.clone(), value);
        }
    }
    Value::Object(arguments)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, description: &str, parameters: Value) -> ToolSpec {
        ToolSpec {
            name: name.to_owned(),
            description: description.to_owned(),
            parameters,
        }
    }

    fn user(request: &mut LlmRequest, text: &str) {
        request.history.push(ChatMessage::new(ChatRole::User, text));
    }

    fn called(turn: Option<SimToolTurn>) -> (String, Value) {
        match turn {
            Some(SimToolTurn::Call(call)) => (
                call.name,
                serde_json::from_str(&call.arguments_json).unwrap(),
            ),
            other => panic!("expected a call, got {other:?}"),
        }
    }

    #[test]
    fn asking_for_a_person_transfers_to_the_first_destination() {
        let mut request = LlmRequest {
            tools: vec![ToolSpec::transfer_call(&[
                crate::tools::TransferDestination {
                    number: "+14155550100".into(),
                    description: "sales".into(),
                    message: "Connecting you.".into(),
                },
            ])],
            ..LlmRequest::default()
        };
        user(&mut request, "Can I talk to a real person please?");
        assert_eq!(
            called(sim_tool_turn(&request, false)),
            (
                TRANSFER_TOOL.to_owned(),
                json!({"destination": "+14155550100"})
            )
        );
    }

    #[test]
    fn a_menu_gets_the_key_of_the_option_the_prompt_wants() {
        let mut request = LlmRequest {
            system_prompt: "Reach the support team and report the outage.".into(),
            tools: vec![ToolSpec::dtmf()],
            ..LlmRequest::default()
        };
        user(
            &mut request,
            "For sales, press 1. For support, press 2. For billing, press 3.",
        );
        assert_eq!(
            called(sim_tool_turn(&request, false)),
            (DTMF_TOOL.to_owned(), json!({"digits": "2"}))
        );
        request.system_prompt = "Say hello.".into();
        assert_eq!(
            called(sim_tool_turn(&request, false)).1,
            json!({"digits": "1"})
        );
    }

    #[test]
    fn a_day_and_a_time_check_availability_then_book_the_slot_at_that_time() {
        let mut request = LlmRequest {
            tools: vec![ToolSpec::check_availability(), ToolSpec::book_appointment()],
            ..LlmRequest::default()
        };
        user(&mut request, "Tomorrow at 3 pm works for me.");
        let (name, arguments) = called(sim_tool_turn(&request, false));
        assert_eq!(name, AVAILABILITY_TOOL);
        let (y, m, d) = civil_from_days(today_days() + 1);
        assert_eq!(arguments, json!({"date": format!("{y:04}-{m:02}-{d:02}")}));
        let call = ToolCallRequest {
            id: "a".into(),
            name: AVAILABILITY_TOOL.into(),
            arguments_json: arguments.to_string(),
        };
        request.history.push(ChatMessage::tool_calls(vec![call]));
        request.history.push(ChatMessage::tool_result(
            "a",
            json!({"slots": ["2026-12-01T14:00:00+05:30", "2026-12-01T15:00:00+05:30"]})
                .to_string(),
        ));
        assert_eq!(
            called(sim_tool_turn(&request, false)),
            (
                BOOKING_TOOL.to_owned(),
                json!({"start": "2026-12-01T15:00:00+05:30"})
            )
        );
    }

    #[test]
    fn a_booking_error_is_told_to_the_caller() {
        let mut request = LlmRequest {
            tools: vec![ToolSpec::book_appointment()],
            ..LlmRequest::default()
        };
        request
            .history
            .push(ChatMessage::tool_calls(vec![ToolCallRequest {
                id: "b".into(),
                name: BOOKING_TOOL.into(),
                arguments_json: "{}".into(),
            }]));
        request.history.push(ChatMessage::tool_result(
            "b",
            json!({"error": "the slot is taken"}).to_string(),
        ));
        let Some(SimToolTurn::Say(text, false)) = sim_tool_turn(&request, false) else {
            panic!("expected words");
        };
        assert!(text.contains("the slot is taken"), "{text}");
    }

    #[test]
    fn a_function_is_called_when_the_words_match_its_description() {
        let mut request = LlmRequest {
            tools: vec![spec(
                "order_status",
                "Look up the delivery status of an order",
                json!({"type": "object", "properties": {"orderId": {"type": "string"}}}),
            )],
            ..LlmRequest::default()
        };
        user(
            &mut request,
            "What is the status of my order? The order number is A-1234.",
        );
        assert_eq!(
            called(sim_tool_turn(&request, false)),
            ("order_status".to_owned(), json!({"orderId": "A-1234"}))
        );
        request.history.clear();
        user(&mut request, "I have a question about my bill.");
        assert_eq!(sim_tool_turn(&request, false), None);
    }

    #[test]
    fn times_and_days_parse() {
        assert_eq!(time_of_day("at 3 pm"), Some((15, 0)));
        assert_eq!(time_of_day("10:30 a.m. please"), Some((10, 30)));
        assert_eq!(time_of_day("at 15:00"), Some((15, 0)));
        assert_eq!(time_of_day("I have 3 kids"), None);
        // 2026-11-25 is a Wednesday: day 20782.
        assert_eq!(civil_from_days(20_782), (2026, 11, 25));
        let words = words_of("next Friday");
        assert_eq!(named_day(&words, 20_782).as_deref(), Some("2026-11-27"));
        let words = words_of("on Wednesday");
        assert_eq!(named_day(&words, 20_782).as_deref(), Some("2026-12-02"));
    }
}
