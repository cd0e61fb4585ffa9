//! An agent's in-call tools (`tools` on the agent): what a client sends, as
//! types. Each entry is an object with a `type` and that type's fields.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// One place a `transferCall` tool can send the callee.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TransferDestination {
    /// E.164 number the callee is bridged to.
    pub number: String,
    /// When the agent should choose it.
    #[serde(default)]
    pub description: String,
    /// What the agent says before the bridge.
    #[serde(default)]
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
    pub event_type_id: u64,
    /// IANA time zone slots are shown and booked in (`Asia/Kolkata`).
    pub time_zone: String,
    /// Said while the calendar is asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

fn default_calendar_provider() -> String {
    "calcom".to_owned()
}

/// A customer's own tool: we POST the arguments to its URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FunctionTool {
    /// The name the model calls (`[a-zA-Z0-9_-]{1,64}`).
    pub name: String,
    /// What it does and when to call it, for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    #[schema(value_type = Object)]
    pub parameters: serde_json::Value,
    /// Where the signed request goes (http or https; private addresses refused).
    pub url: String,
    /// How long to wait for the answer (1–60, default 10).
    #[serde(default = "default_function_timeout")]
    pub timeout_seconds: u32,
    /// Said while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Fire and forget: the model does not wait for the answer.
    #[serde(default, rename = "async")]
    pub is_async: bool,
}

fn default_function_timeout() -> u32 {
    10
}

/// One entry of an agent's `tools`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "type")]
pub enum AgentTool {
    /// Hang up, after an optional goodbye.
    #[serde(rename = "endCall", rename_all = "camelCase")]
    EndCall {
        /// Said before hanging up.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Bridge the callee to a person.
    #[serde(rename = "transferCall", rename_all = "camelCase")]
    TransferCall {
        /// Where the callee can be sent.
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
}
