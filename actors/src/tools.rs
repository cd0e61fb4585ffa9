//! In-call tools as the conversation engine sees them: what each tool does to the call
//! (hang up, bridge to a person, press keys, or run outside the engine), the service that
//! runs the outside ones, the limits, and the record every call of a tool leaves.
//!
//! The engine owns the behaviours that touch the media (`endCall`, `transferCall`, `dtmf`);
//! everything that talks to the outside world (a calendar, the customer's own functions, the
//! carrier's transfer API) goes through [`ToolService`], which the service implements.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use serde_json::Value;

use crate::providers::{ToolCallRequest, ToolSpec};
// The built-in tools' names live with `END_CALL_TOOL` in `providers`, beside the `ToolSpec`
// the LLM is offered, so `tools` → `providers` is the only arrow between the two rooms (the
// sim LLM, `sim/providers/tool_use.rs`, reads them there too). Re-exported so
// `tools::TRANSFER_TOOL` and the like keep working.
pub use crate::providers::{
    AVAILABILITY_TOOL, BOOKING_TOOL, DTMF_TOOL, OPT_OUT_TOOL, TRANSFER_TOOL,
};

/// One place a `transferCall` tool can bridge the callee to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferDestination {
    /// The E.164 number dialed.
    pub number: String,
    /// When to choose it, for the model.
    pub description: String,
    /// What the agent says before the bridge.
    pub message: String,
}

/// What the engine does when the model calls a tool.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolBehavior {
    /// Hang up once the reply has been heard, after an optional goodbye.
    EndCall {
        /// Said before hanging up, when set.
        goodbye: Option<String>,
    },
    /// The callee asked not to be called again: hang up once the reply (the confirmation)
    /// has been heard, ending the call with `opt-out`.
    OptOut,
    /// Say the destination's message, then bridge the callee to it (`{"destination": number}`).
    Transfer {
        /// Where the callee can be sent.
        destinations: Vec<TransferDestination>,
    },
    /// Press keys in-band (`{"digits": "12#"}`), to get through a phone menu.
    Dtmf,
    /// Run outside the engine through [`ToolService::run`] (a calendar or a function).
    Service {
        /// Said while the tool runs.
        message: Option<String>,
        /// Fire and forget: the model is told it started and does not wait for the result.
        fire_and_forget: bool,
    },
}

/// One tool an agent offers the model.
#[derive(Debug, Clone, PartialEq)]
pub struct CallTool {
    /// Name, description and argument schema, as the model sees them.
    pub spec: ToolSpec,
    /// What calling it does.
    pub behavior: ToolBehavior,
}

/// How many tool calls a call may make.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolLimits {
    /// Tool calls within one agent turn (calls, then the model's answer, then more calls…).
    pub per_turn: u32,
    /// Tool calls over the whole call.
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

/// Why a tool could not do what was asked; goes back to the model as an error result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ToolError(pub String);

/// Runs the tools that leave the engine; implemented by the service.
///
/// Both methods may take long (a calendar, a customer's server, a carrier API). The engine
/// runs them in tasks of their own, so neither a barge-in nor the end of the reply cancels
/// one that has begun.
#[async_trait]
pub trait ToolService: Send + Sync {
    /// Runs the service tool `call` names with `arguments` (already JSON, not yet checked
    /// against the tool's schema: the service checks them before sending anything).
    async fn run(&self, call: &ToolCallRequest, arguments: &Value) -> Result<Value, ToolError>;

    /// Asks the carrier to bridge the callee to `number`; the media stream ends when it does.
    async fn transfer(&self, number: &str) -> Result<(), ToolError>;
}

/// A service that runs nothing: for agents without outside tools.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoToolService;

#[async_trait]
impl ToolService for NoToolService {
    async fn run(&self, call: &ToolCallRequest, _arguments: &Value) -> Result<Value, ToolError> {
        Err(ToolError(format!("tool {} is not available", call.name)))
    }

    async fn transfer(&self, _number: &str) -> Result<(), ToolError> {
        Err(ToolError(
            "transfers are not available on this call".to_owned(),
        ))
    }
}

/// An agent's tools for one call.
#[derive(Clone)]
pub struct CallTools {
    /// The tools offered to the model, in the agent's order.
    pub tools: Vec<CallTool>,
    /// Runs the outside ones.
    pub service: Arc<dyn ToolService>,
    /// Per-turn and per-call limits.
    pub limits: ToolLimits,
}

impl std::fmt::Debug for CallTools {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallTools")
            .field("tools", &self.tools)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl Default for CallTools {
    /// Only `end_call`, as agents that name no tools have always had.
    fn default() -> Self {
        Self {
            tools: vec![CallTool {
                spec: ToolSpec::end_call(),
                behavior: ToolBehavior::EndCall { goodbye: None },
            }],
            service: Arc::new(NoToolService),
            limits: ToolLimits::default(),
        }
    }
}

impl CallTools {
    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&CallTool> {
        self.tools.iter().find(|tool| tool.spec.name == name)
    }

    /// What the model is offered.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.iter().map(|tool| tool.spec.clone()).collect()
    }
}

/// One call of a tool, as recorded on the call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCallRecord {
    /// The model's id for the call.
    pub id: String,
    /// The tool.
    pub name: String,
    /// The arguments (the raw text as a JSON string when they were not JSON).
    pub arguments: Value,
    /// The result, when the tool succeeded.
    pub result: Option<Value>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// From the call to its result.
    pub latency: Duration,
    /// When it was called.
    pub at: SystemTime,
    /// The index in the transcript of the agent turn that made it.
    pub turn_index: usize,
}

/// The built-in tools' specs, as the model sees them.
impl ToolSpec {
    /// `transfer_call`: the destination is one of `destinations`' numbers.
    pub fn transfer_call(destinations: &[TransferDestination]) -> Self {
        let numbers: Vec<&str> = destinations.iter().map(|d| d.number.as_str()).collect();
        let choices = destinations
            .iter()
            .map(|d| format!("{} ({})", d.number, d.description))
            .collect::<Vec<_>>()
            .join("; ");
        Self {
            name: TRANSFER_TOOL.to_owned(),
            description: format!(
                "Transfer the caller to a person when they ask for one or when the conversation \
                 needs a human. Destinations: {choices}."
            ),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"destination": {"type": "string", "enum": numbers,
                    "description": "The E.164 number to transfer to."}},
                "required": ["destination"],
            }),
        }
    }

    /// `dtmf`: press keys to get through a phone menu.
    pub fn dtmf() -> Self {
        Self {
            name: DTMF_TOOL.to_owned(),
            description: "Press keys on the phone keypad, to choose an option of an automated \
                          phone menu (\"press 2 for support\")."
                .to_owned(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"digits": {"type": "string", "pattern": "^[0-9*#]{1,32}$",
                    "description": "The keys to press, in order (0-9, * and #)."}},
                "required": ["digits"],
            }),
        }
    }

    /// `check_availability`: free slots on one day.
    pub fn check_availability() -> Self {
        Self {
            name: AVAILABILITY_TOOL.to_owned(),
            description: "List the free appointment slots on a day, before booking one.".to_owned(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {"date": {"type": "string", "format": "date",
                    "description": "The day, YYYY-MM-DD, in the calendar's time zone."}},
                "required": ["date"],
            }),
        }
    }

    /// `book_appointment`: book one of the slots `check_availability` listed.
    pub fn book_appointment() -> Self {
        Self {
            name: BOOKING_TOOL.to_owned(),
            description: "Book an appointment in a free slot found with check_availability, once \
                          the caller has agreed to it."
                .to_owned(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "start": {"type": "string", "format": "date-time",
                        "description": "The slot's start, exactly as check_availability gave it."},
                    "name": {"type": "string", "description": "The caller's name."},
                    "email": {"type": "string", "description": "The caller's email, if given."},
                },
                "required": ["start"],
            }),
        }
    }
}

/// Whether `digits` can be pressed: 1–32 of `0-9`, `*`, `#`.
pub fn valid_dtmf_digits(digits: &str) -> bool {
    (1..=32).contains(&digits.len())
        && digits
            .chars()
            .all(|c| c.is_ascii_digit() || c == '*' || c == '#')
}
