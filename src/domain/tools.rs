//! An agent's in-call tools (`tools` on the agent): what a client sends, as
//! types. Each entry is an object with a `type` and that type's fields.

use crate::domain::phone::{PhoneError, PhoneNumber};
use crate::domain::text::{self, Lines, TextError};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One place a `transferCall` tool can send the callee.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TransferDestination {
    /// E.164 number the callee is bridged to; stored in E.164 form.
    #[schema(example = "+919845012310")]
    pub number: String,
    /// When the agent should choose it.
    #[serde(default)]
    pub description: String,
    /// What the agent says before the bridge (at most 500 characters).
    #[serde(default)]
    #[schema(max_length = 500)]
    pub message: String,
}

/// A calendar tool's settings (`checkAvailability`, `bookAppointment`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CalendarTool {
    /// The calendar vendor; only `calcom` today.
    #[serde(default = "default_calendar_provider")]
    pub provider: String,
    /// The Cal.com event type booked or searched.
    #[schema(minimum = 1)]
    pub event_type_id: u64,
    /// IANA time zone slots are shown and booked in (`Asia/Kolkata`).
    #[schema(example = "Asia/Kolkata")]
    pub time_zone: String,
    /// Said while the calendar is asked (at most 500 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500)]
    pub message: Option<String>,
}

fn default_calendar_provider() -> String {
    "calcom".to_owned()
}

/// A customer's own tool: we POST the arguments to its URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionTool {
    /// The name the model calls (`[a-zA-Z0-9_-]{1,64}`), unique among the
    /// agent's tools and none of the built-in names.
    #[schema(pattern = "^[a-zA-Z0-9_-]{1,64}$")]
    pub name: String,
    /// What it does and when to call it, for the model (at most 1000 characters).
    #[schema(min_length = 1, max_length = 1000)]
    pub description: String,
    /// JSON Schema of the arguments: an object schema (`"type": "object"`).
    #[schema(value_type = Object)]
    pub parameters: serde_json::Value,
    /// Where the signed request goes (http or https; private addresses refused).
    pub url: String,
    /// How long to wait for the answer (1–60, default 10).
    #[serde(default = "default_function_timeout")]
    #[schema(minimum = 1, maximum = 60, default = 10)]
    pub timeout_seconds: u32,
    /// Said while it runs (at most 500 characters).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(max_length = 500)]
    pub message: Option<String>,
    /// Fire and forget: the model does not wait for the answer.
    #[serde(default, rename = "async")]
    pub is_async: bool,
    /// Signs each request as our webhooks are signed (16–128 characters).
    /// Generated when a client sends none; kept across updates that send the
    /// same-named function back without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 16, max_length = 128)]
    pub secret: Option<String>,
}

fn default_function_timeout() -> u32 {
    10
}

/// One entry of an agent's `tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type", deny_unknown_fields)]
pub enum AgentTool {
    /// Hang up, after an optional goodbye.
    #[serde(rename = "endCall", rename_all = "camelCase")]
    EndCall {
        /// Said before hanging up (at most 500 characters).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        #[schema(max_length = 500)]
        message: Option<String>,
    },
    /// Bridge the callee to a person.
    #[serde(rename = "transferCall", rename_all = "camelCase")]
    TransferCall {
        /// Where the callee can be sent (1–10, numbers unique).
        #[schema(min_items = 1, max_items = 10)]
        destinations: Vec<TransferDestination>,
    },
    /// Press keys to get through a phone menu (tones in-band).
    #[serde(rename = "dtmf")]
    Dtmf {},
    /// Look up free slots in the calendar.
    #[serde(rename = "checkAvailability")]
    CheckAvailability(CalendarTool),
    /// Book a slot in the calendar.
    #[serde(rename = "bookAppointment")]
    BookAppointment(CalendarTool),
    /// A customer's own function.
    #[serde(rename = "function")]
    Function(FunctionTool),
}

impl AgentTool {
    /// The name the model calls it by.
    pub fn name(&self) -> &str {
        match self {
            Self::EndCall { .. } => "end_call",
            Self::TransferCall { .. } => "transfer_call",
            Self::Dtmf {} => "dtmf",
            Self::CheckAvailability(_) => "check_availability",
            Self::BookAppointment(_) => "book_appointment",
            Self::Function(f) => &f.name,
        }
    }

    /// The wire `type`.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::EndCall { .. } => "endCall",
            Self::TransferCall { .. } => "transferCall",
            Self::Dtmf {} => "dtmf",
            Self::CheckAvailability(_) => "checkAvailability",
            Self::BookAppointment(_) => "bookAppointment",
            Self::Function(_) => "function",
        }
    }

    /// The customer function, when this is one.
    pub fn as_function(&self) -> Option<&FunctionTool> {
        match self {
            Self::Function(f) => Some(f),
            _ => None,
        }
    }
}

/// How many tool calls the model may make (`toolLimits`); stored agents
/// without it read the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ToolLimits {
    /// Tool calls in one reply of the model (1–10, default 4).
    #[schema(minimum = 1, maximum = 10, default = 4)]
    pub per_turn: u32,
    /// Tool calls in the whole call (1–50, default 16).
    #[schema(minimum = 1, maximum = 50, default = 16)]
    pub per_call: u32,
}

impl Default for ToolLimits {
    fn default() -> Self {
        Self {
            per_turn: 4,
            per_call: 16,
        }
    }
}

impl ToolLimits {
    /// Refuses limits outside their ranges, naming `toolLimits.<field>`.
    pub fn validate(&self) -> Result<(), ToolsError> {
        within("toolLimits.perTurn".into(), self.per_turn.into(), 1, 10)?;
        within("toolLimits.perCall".into(), self.per_call.into(), 1, 50)
    }
}

/// Most tools one agent may have: each one's schema goes to the model every turn.
pub const MAX_TOOLS: usize = 32;
/// Longest spoken `message`, in characters.
pub const MAX_MESSAGE_CHARS: usize = 500;
/// Longest function `description`, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 1_000;
/// Most destinations of one `transferCall`.
pub const MAX_DESTINATIONS: usize = 10;
/// The names of the built-in tools, which functions may not take.
pub const BUILT_IN_NAMES: &[&str] = &[
    "end_call",
    "transfer_call",
    "dtmf",
    "check_availability",
    "book_appointment",
];
/// Length of a client-chosen function secret, in characters.
pub const SECRET_CHARS: std::ops::RangeInclusive<usize> = 16..=128;

/// Why an agent's tools are refused: the JSON path of the bad value and what
/// is wrong with it, shown as `tools[1].destinations[0].number must be an E.164 number`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{path} {problem}")]
pub struct ToolsError {
    /// Where the bad value is, from the agent's root (`tools[2].url`).
    pub path: String,
    /// What is wrong with it.
    pub problem: ToolProblem,
}

/// What is wrong with one value of an agent's tools.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ToolProblem {
    /// More than [`MAX_TOOLS`] entries.
    #[error("must hold at most {MAX_TOOLS} tools")]
    TooManyTools,
    /// A second tool of a built-in type.
    #[error("is a second {0} tool; each built-in tool may appear once")]
    RepeatedBuiltIn(&'static str),
    /// A function named like a built-in tool.
    #[error("\"{0}\" is the name of a built-in tool")]
    ReservedName(String),
    /// Two functions with one name.
    #[error("\"{name}\" is already the name of {first}")]
    RepeatedName {
        /// The name.
        name: String,
        /// The path of the tool that has it first.
        first: String,
    },
    /// Text over its cap.
    #[error("must be at most {0} characters")]
    TooLong(usize),
    /// Text that must hold something.
    #[error("must not be blank")]
    Blank,
    /// A number outside its range.
    #[error("must be between {0} and {1}")]
    OutOfRange(i64, i64),
    /// A transfer with no or too many places to go.
    #[error("must hold 1 to {MAX_DESTINATIONS} destinations")]
    DestinationCount,
    /// Not a dialable E.164 number.
    #[error("must be an E.164 number{0}")]
    NotE164(&'static str),
    /// The same number twice in one transfer.
    #[error("repeats {0}")]
    RepeatedNumber(String),
    /// A calendar vendor we do not speak to.
    #[error("must be calcom")]
    Provider,
    /// An event type id of 0.
    #[error("must be greater than 0")]
    NotPositive,
    /// Not in the IANA time zone database.
    #[error("must be an IANA time zone such as Asia/Kolkata, not \"{0}\"")]
    TimeZone(String),
    /// A function name the model APIs refuse.
    #[error("must match ^[a-zA-Z0-9_-]{{1,64}}$")]
    FunctionName,
    /// Not a JSON Schema the validator can compile.
    #[error("is not a valid JSON Schema: {0}")]
    Schema(String),
    /// A schema of something other than an object of arguments.
    #[error("must be \"object\"")]
    SchemaNotObject,
    /// Not an http or https URL with a host.
    #[error("must be an http or https URL with a host")]
    Url,
    /// The URL leads somewhere functions may not be called (checked when saved).
    #[error("is refused: {0}")]
    UrlRefused(String),
    /// Text holding NUL or a control character (a line break in one-line text).
    #[error("{0}")]
    Text(TextError),
    /// A client-chosen secret of the wrong length.
    #[error("must be {} to {} characters", SECRET_CHARS.start(), SECRET_CHARS.end())]
    SecretLength,
}

impl ToolsError {
    fn new(path: impl Into<String>, problem: ToolProblem) -> Self {
        Self {
            path: path.into(),
            problem,
        }
    }

    /// A refused function URL of `tools[index]`.
    pub fn url_refused(index: usize, why: impl Into<String>) -> Self {
        Self::new(
            format!("tools[{index}].url"),
            ToolProblem::UrlRefused(why.into()),
        )
    }
}

fn within(path: String, value: i64, min: i64, max: i64) -> Result<(), ToolsError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(ToolsError::new(path, ToolProblem::OutOfRange(min, max)))
    }
}

/// Refuses `raw` over `max` characters, or holding NUL or a control character
/// other than the tab and line breaks that spoken or descriptive text may hold.
fn at_most(path: impl FnOnce() -> String, raw: &str, max: usize) -> Result<(), ToolsError> {
    match text::parse(raw, Lines::Many, max) {
        Ok(_) => Ok(()),
        Err(TextError::TooLong(_)) => Err(ToolsError::new(path(), ToolProblem::TooLong(max))),
        Err(reason) => Err(ToolsError::new(path(), ToolProblem::Text(reason))),
    }
}

fn spoken(at: &str, message: Option<&String>) -> Result<(), ToolsError> {
    match message {
        Some(text) => at_most(|| format!("{at}.message"), text, MAX_MESSAGE_CHARS),
        None => Ok(()),
    }
}

/// Checks an agent's tools: each entry on its own, then the list (size, names).
/// Every error names the JSON path of the bad value.
pub fn validate_tools(tools: &[AgentTool]) -> Result<(), ToolsError> {
    if tools.len() > MAX_TOOLS {
        return Err(ToolsError::new("tools", ToolProblem::TooManyTools));
    }
    // Name → path of the first tool that has it.
    let mut names: std::collections::HashMap<&str, String> = std::collections::HashMap::new();
    for (index, tool) in tools.iter().enumerate() {
        let at = format!("tools[{index}]");
        validate_tool(&at, tool)?;
        let name = tool.name();
        if let Some(first) = names.get(name) {
            return Err(match tool {
                AgentTool::Function(_) => ToolsError::new(
                    format!("{at}.name"),
                    ToolProblem::RepeatedName {
                        name: name.to_owned(),
                        first: first.clone(),
                    },
                ),
                built_in => ToolsError::new(at, ToolProblem::RepeatedBuiltIn(built_in.kind())),
            });
        }
        names.insert(name, at);
    }
    Ok(())
}

/// Checks an agent's tools as [`validate_tools`] does and writes every
/// transfer number in its E.164 form, so the carrier dials what was checked.
pub fn parse_tools(mut tools: Vec<AgentTool>) -> Result<Vec<AgentTool>, ToolsError> {
    validate_tools(&tools)?;
    for tool in &mut tools {
        if let AgentTool::TransferCall { destinations } = tool {
            for destination in destinations {
                if let Ok(number) = PhoneNumber::parse(&destination.number) {
                    destination.number = number.as_str().to_owned();
                }
            }
        }
    }
    Ok(tools)
}

fn validate_tool(at: &str, tool: &AgentTool) -> Result<(), ToolsError> {
    match tool {
        AgentTool::EndCall { message } => spoken(at, message.as_ref()),
        AgentTool::TransferCall { destinations } => validate_transfer(at, destinations),
        AgentTool::Dtmf {} => Ok(()),
        AgentTool::CheckAvailability(calendar) | AgentTool::BookAppointment(calendar) => {
            validate_calendar(at, calendar)
        }
        AgentTool::Function(function) => validate_function(at, function),
    }
}

fn validate_transfer(at: &str, destinations: &[TransferDestination]) -> Result<(), ToolsError> {
    if !(1..=MAX_DESTINATIONS).contains(&destinations.len()) {
        return Err(ToolsError::new(
            format!("{at}.destinations"),
            ToolProblem::DestinationCount,
        ));
    }
    // Compared in E.164 form: "+91 98450 12310" and "+919845012310" are one number.
    let mut seen: Vec<PhoneNumber> = Vec::with_capacity(destinations.len());
    for (index, destination) in destinations.iter().enumerate() {
        let here = format!("{at}.destinations[{index}]");
        let number = PhoneNumber::parse(&destination.number).map_err(|err| {
            let detail = match err {
                PhoneError::Malformed => "",
                PhoneError::Placeholder => ", not a placeholder",
            };
            ToolsError::new(format!("{here}.number"), ToolProblem::NotE164(detail))
        })?;
        if let Some(first) = seen.iter().position(|n| *n == number) {
            return Err(ToolsError::new(
                format!("{here}.number"),
                ToolProblem::RepeatedNumber(format!("{at}.destinations[{first}].number")),
            ));
        }
        seen.push(number);
        at_most(
            || format!("{here}.description"),
            &destination.description,
            MAX_DESCRIPTION_CHARS,
        )?;
        at_most(
            || format!("{here}.message"),
            &destination.message,
            MAX_MESSAGE_CHARS,
        )?;
    }
    Ok(())
}

fn validate_calendar(at: &str, calendar: &CalendarTool) -> Result<(), ToolsError> {
    if calendar.provider != "calcom" {
        return Err(ToolsError::new(
            format!("{at}.provider"),
            ToolProblem::Provider,
        ));
    }
    if calendar.event_type_id == 0 {
        return Err(ToolsError::new(
            format!("{at}.eventTypeId"),
            ToolProblem::NotPositive,
        ));
    }
    if calendar.time_zone.parse::<chrono_tz::Tz>().is_err() {
        return Err(ToolsError::new(
            format!("{at}.timeZone"),
            ToolProblem::TimeZone(calendar.time_zone.clone()),
        ));
    }
    spoken(at, calendar.message.as_ref())
}

fn validate_function(at: &str, function: &FunctionTool) -> Result<(), ToolsError> {
    let name_ok = (1..=64).contains(&function.name.len())
        && function
            .name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !name_ok {
        return Err(ToolsError::new(
            format!("{at}.name"),
            ToolProblem::FunctionName,
        ));
    }
    if BUILT_IN_NAMES.contains(&function.name.as_str()) {
        return Err(ToolsError::new(
            format!("{at}.name"),
            ToolProblem::ReservedName(function.name.clone()),
        ));
    }
    if function.description.trim().is_empty() {
        return Err(ToolsError::new(
            format!("{at}.description"),
            ToolProblem::Blank,
        ));
    }
    at_most(
        || format!("{at}.description"),
        &function.description,
        MAX_DESCRIPTION_CHARS,
    )?;
    validate_parameters(&format!("{at}.parameters"), &function.parameters)?;
    if !is_web_url(&function.url) {
        return Err(ToolsError::new(format!("{at}.url"), ToolProblem::Url));
    }
    within(
        format!("{at}.timeoutSeconds"),
        function.timeout_seconds.into(),
        1,
        60,
    )?;
    spoken(at, function.message.as_ref())?;
    if let Some(secret) = &function.secret
        && !SECRET_CHARS.contains(&secret.chars().count())
    {
        return Err(ToolsError::new(
            format!("{at}.secret"),
            ToolProblem::SecretLength,
        ));
    }
    Ok(())
}

/// The arguments' schema must compile and describe an object, since the
/// model's arguments always arrive as one JSON object.
fn validate_parameters(at: &str, schema: &serde_json::Value) -> Result<(), ToolsError> {
    if !schema.is_object() {
        return Err(ToolsError::new(
            at,
            ToolProblem::Schema("a schema of arguments must be a JSON object".into()),
        ));
    }
    if let Err(err) = jsonschema::meta::validate(schema) {
        return Err(ToolsError::new(at, ToolProblem::Schema(err.to_string())));
    }
    if let Err(err) = jsonschema::validator_for(schema) {
        return Err(ToolsError::new(at, ToolProblem::Schema(err.to_string())));
    }
    if schema.get("type").and_then(serde_json::Value::as_str) != Some("object") {
        return Err(ToolsError::new(
            format!("{at}.type"),
            ToolProblem::SchemaNotObject,
        ));
    }
    Ok(())
}

fn is_web_url(raw: &str) -> bool {
    reqwest::Url::parse(raw).is_ok_and(|url| {
        matches!(url.scheme(), "http" | "https") && url.host_str().is_some_and(|h| !h.is_empty())
    })
}

/// A fresh function secret: 16 random bytes as 32 hex characters, from the
/// thread's cryptographic RNG like the server's own secret.
pub fn new_function_secret() -> String {
    hex::encode(rand::random::<[u8; 16]>())
}

/// Gives every function tool without a secret one: the secret the same-named
/// function had in `previous` (so an edit that sends the tools back without
/// their secrets does not break the customer's signature checks), else a
/// fresh one from `fresh`.
pub fn fill_function_secrets(
    tools: &mut [AgentTool],
    previous: &[AgentTool],
    mut fresh: impl FnMut() -> String,
) {
    for tool in tools {
        let AgentTool::Function(function) = tool else {
            continue;
        };
        if function.secret.is_some() {
            continue;
        }
        let kept = previous
            .iter()
            .filter_map(AgentTool::as_function)
            .find(|old| old.name == function.name)
            .and_then(|old| old.secret.clone());
        function.secret = Some(kept.unwrap_or_else(&mut fresh));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools(value: serde_json::Value) -> Vec<AgentTool> {
        serde_json::from_value(value).unwrap()
    }

    fn refusal(value: serde_json::Value) -> String {
        validate_tools(&tools(value)).unwrap_err().to_string()
    }

    fn function(name: &str) -> serde_json::Value {
        json!({"type": "function", "name": name, "description": "d",
               "parameters": {"type": "object"}, "url": "https://example.com/f"})
    }

    #[test]
    fn refusals_name_the_path() {
        assert_eq!(
            refusal(json!([{"type": "dtmf"},
                {"type": "transferCall", "destinations": [{"number": "12345"}]}])),
            "tools[1].destinations[0].number must be an E.164 number"
        );
        assert_eq!(
            refusal(json!([function("a"), function("a")])),
            "tools[1].name \"a\" is already the name of tools[0]"
        );
        assert_eq!(
            refusal(json!([{"type": "dtmf"}, {"type": "dtmf"}])),
            "tools[1] is a second dtmf tool; each built-in tool may appear once"
        );
        assert_eq!(
            refusal(json!([function("book_appointment")])),
            "tools[0].name \"book_appointment\" is the name of a built-in tool"
        );
        assert_eq!(
            refusal(
                json!([{"type": "checkAvailability", "eventTypeId": 1, "timeZone": "Asia/Calcutta2"}])
            ),
            "tools[0].timeZone must be an IANA time zone such as Asia/Kolkata, not \"Asia/Calcutta2\""
        );
        let mut bad_schema = function("f");
        bad_schema["parameters"] = json!({"type": "object", "required": "x"});
        assert!(
            refusal(json!([bad_schema]))
                .starts_with("tools[0].parameters is not a valid JSON Schema: ")
        );
        let limits = ToolLimits {
            per_turn: 4,
            per_call: 0,
        };
        assert_eq!(
            limits.validate().unwrap_err().to_string(),
            "toolLimits.perCall must be between 1 and 50"
        );
    }

    #[test]
    fn parsing_writes_numbers_in_e164() {
        let parsed = parse_tools(tools(json!([{"type": "transferCall",
            "destinations": [{"number": "+91 98450-12310"}]}])))
        .unwrap();
        let AgentTool::TransferCall { destinations } = &parsed[0] else {
            panic!("{parsed:?}");
        };
        assert_eq!(destinations[0].number, "+919845012310");
    }

    #[test]
    fn unknown_fields_and_types_are_refused() {
        for bad in [
            json!({"type": "endCall", "goodbye": "x"}),
            json!({"type": "dtmf", "digits": "1"}),
            json!({"type": "teleport"}),
            json!({"type": "bookAppointment", "eventTypeId": 1, "timeZone": "UTC", "x": 1}),
        ] {
            assert!(
                serde_json::from_value::<AgentTool>(bad.clone()).is_err(),
                "{bad}"
            );
        }
        let limits: ToolLimits = serde_json::from_value(json!({})).unwrap();
        assert_eq!(limits, ToolLimits::default());
    }

    #[test]
    fn secrets_are_kept_by_name_or_drawn_fresh() {
        let mut old = tools(json!([function("keep"), function("gone")]));
        fill_function_secrets(&mut old, &[], || "old".to_owned());
        let mut next = tools(json!([function("keep"), function("new")]));
        let mut own = function("own");
        own["secret"] = json!("chosen-by-the-client");
        next.extend(tools(json!([own])));
        fill_function_secrets(&mut next, &old, || "fresh".to_owned());
        let secrets: Vec<_> = next
            .iter()
            .filter_map(AgentTool::as_function)
            .map(|f| f.secret.as_deref().unwrap_or_default())
            .collect();
        assert_eq!(secrets, ["old", "fresh", "chosen-by-the-client"]);
        let drawn = new_function_secret();
        assert_eq!(drawn.len(), 32);
        assert!(drawn.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(drawn, new_function_secret());
    }
}
