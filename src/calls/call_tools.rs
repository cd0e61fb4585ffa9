//! One call's tools: the agent's `tools` turned into what the engine offers
//! the model, and the [`ToolService`] that runs the ones leaving the engine —
//! the calendar, the customer's functions and the carrier's transfer — with
//! the arguments checked against the tool's schema before anything is sent.
//! It remembers the calendar outcome the call record shows.

use crate::carriers::store_wiring::StoreCredentials;
use crate::carriers::{CarrierKind, transfer_status_url};
use crate::domain::agent::AgentSpec;
use crate::domain::tools::{AgentTool, CalendarTool, FunctionTool};
use crate::domain::{CallId, OrgId};
use crate::store::Store;
use crate::tools::calendar::calcom::CalCom;
use crate::tools::calendar::{BookingRequest, Calendar, SlotQuery};
use crate::tools::function::{FunctionCall, FunctionCaller};
use async_trait::async_trait;
use chrono::{DateTime, NaiveDate, TimeZone, Utc};
use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use voxline_actors::carrier::{Carrier, TransferRequest};
use voxline_actors::providers::{ToolCallRequest, ToolSpec};
use voxline_actors::tools::{
    CallTool, CallTools, ToolBehavior, ToolError, ToolLimits, ToolService,
    TransferDestination as EngineDestination,
};

/// Free slots told to the model at most (a day of 15-minute slots is 96).
const MAX_SLOTS: usize = 24;

/// What the call's calendar tools achieved, for the call record.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CalendarOutcome {
    /// `booked`, `failed`, or `None` when no booking was tried.
    pub status: Option<&'static str>,
    /// The booked event's page.
    pub event_url: Option<String>,
    /// Why the last booking failed (when none succeeded).
    pub error: Option<String>,
}

/// Everything a call's tools reach besides the engine.
#[derive(Clone)]
pub struct ToolDeps {
    /// The store (credentials, the call's carrier id).
    pub store: Store,
    /// Workspace credentials (the `calcom` account).
    pub credentials: Arc<StoreCredentials>,
    /// Carriers by name, for transfers.
    pub carriers: Arc<HashMap<String, Arc<dyn Carrier>>>,
    /// Sends function requests through the egress guard.
    pub functions: Arc<FunctionCaller>,
    /// For the calendar.
    pub http: reqwest::Client,
    /// This server's public base URL (carrier leg reports come back to it).
    pub public_url: String,
}

/// The call a tool service works for.
#[derive(Debug, Clone)]
pub struct ToolCallContext {
    /// Our call id.
    pub call_id: CallId,
    /// Its workspace.
    pub org_id: OrgId,
    /// The call's variables (sent to functions; the callee's name and email for bookings).
    pub variables: Map<String, Value>,
    /// The number called.
    pub phone: String,
    /// The caller ID.
    pub from: String,
    /// The carrier name.
    pub provider: String,
}

/// Runs one call's outside tools.
pub struct CallToolService {
    deps: ToolDeps,
    context: ToolCallContext,
    functions: HashMap<String, (FunctionTool, jsonschema::Validator)>,
    availability: Option<CalendarTool>,
    booking: Option<CalendarTool>,
    calendar: Mutex<CalendarOutcome>,
}

/// The engine's tools for an agent, and the service behind them (kept to read the calendar
/// outcome after the call).
pub fn call_tools(
    spec: &AgentSpec,
    deps: ToolDeps,
    context: ToolCallContext,
) -> (CallTools, Arc<CallToolService>) {
    let mut tools = Vec::new();
    let mut functions = HashMap::new();
    let mut availability = None;
    let mut booking = None;
    for tool in &spec.tools {
        match tool {
            AgentTool::EndCall { message } => tools.push(CallTool {
                spec: ToolSpec::end_call(),
                behavior: ToolBehavior::EndCall {
                    goodbye: message.clone(),
                },
            }),
            AgentTool::TransferCall { destinations } => {
                let destinations: Vec<EngineDestination> = destinations
                    .iter()
                    .map(|d| EngineDestination {
                        number: d.number.clone(),
                        description: d.description.clone(),
                        message: d.message.clone(),
                    })
                    .collect();
                tools.push(CallTool {
                    spec: ToolSpec::transfer_call(&destinations),
                    behavior: ToolBehavior::Transfer { destinations },
                });
            }
            AgentTool::Dtmf {} => tools.push(CallTool {
                spec: ToolSpec::dtmf(),
                behavior: ToolBehavior::Dtmf,
            }),
            AgentTool::CheckAvailability(calendar) => {
                availability = Some(calendar.clone());
                tools.push(CallTool {
                    spec: ToolSpec::check_availability(),
                    behavior: ToolBehavior::Service {
                        message: calendar.message.clone(),
                        fire_and_forget: false,
                    },
                });
            }
            AgentTool::BookAppointment(calendar) => {
                booking = Some(calendar.clone());
                tools.push(CallTool {
                    spec: ToolSpec::book_appointment(),
                    behavior: ToolBehavior::Service {
                        message: calendar.message.clone(),
                        fire_and_forget: false,
                    },
                });
            }
            AgentTool::Function(function) => {
                // Checked when the agent was saved; one that no longer compiles is left out.
                let Ok(validator) = jsonschema::validator_for(&function.parameters) else {
                    tracing::warn!(tool = %function.name, "function schema does not compile");
                    continue;
                };
                tools.push(CallTool {
                    spec: ToolSpec {
                        name: function.name.clone(),
                        description: function.description.clone(),
                        parameters: function.parameters.clone(),
                    },
                    behavior: ToolBehavior::Service {
                        message: function.message.clone(),
                        fire_and_forget: function.is_async,
                    },
                });
                functions.insert(function.name.clone(), (function.clone(), validator));
            }
        }
    }
    // Agents that name no way to hang up keep the implicit one.
    if !spec
        .tools
        .iter()
        .any(|t| matches!(t, AgentTool::EndCall { .. }))
    {
        tools.insert(
            0,
            CallTool {
                spec: ToolSpec::end_call(),
                behavior: ToolBehavior::EndCall { goodbye: None },
            },
        );
    }
    // The callee may ask never to be called again (compliance.optOut, on by default).
    if spec.compliance.opt_out {
        tools.push(CallTool {
            spec: ToolSpec::opt_out(),
            behavior: ToolBehavior::OptOut,
        });
    }
    let service = Arc::new(CallToolService {
        deps,
        context,
        functions,
        availability,
        booking,
        calendar: Mutex::new(CalendarOutcome::default()),
    });
    let tools = CallTools {
        tools,
        service: Arc::clone(&service) as Arc<dyn ToolService>,
        limits: ToolLimits {
            per_turn: spec.tool_limits.per_turn,
            per_call: spec.tool_limits.per_call,
        },
    };
    (tools, service)
}

impl CallToolService {
    /// What the calendar tools achieved so far.
    pub fn calendar_outcome(&self) -> CalendarOutcome {
        self.calendar.lock().clone()
    }

    async fn calendar(&self) -> Result<CalCom, ToolError> {
        let credential = self
            .deps
            .credentials
            .load(self.context.org_id, "calcom")
            .await
            .ok_or_else(|| ToolError("the workspace has no calcom credential".into()))?;
        CalCom::from_credential(&credential, self.deps.http.clone())
            .map_err(|e| ToolError(e.to_string()))
    }

    async fn check_availability(
        &self,
        tool: &CalendarTool,
        arguments: &Value,
    ) -> Result<Value, ToolError> {
        let date = arguments
            .get("date")
            .and_then(Value::as_str)
            .and_then(|d| NaiveDate::parse_from_str(d, "%Y-%m-%d").ok())
            .ok_or_else(|| ToolError("date must be a day, YYYY-MM-DD".into()))?;
        let (start, end) = day_bounds(date, &tool.time_zone)?;
        let query = SlotQuery {
            event_type_id: tool.event_type_id,
            time_zone: tool.time_zone.clone(),
            start,
            end,
        };
        let slots = self
            .calendar()
            .await?
            .available_slots(&query)
            .await
            .map_err(|e| ToolError(e.to_string()))?;
        let starts: Vec<&str> = slots
            .iter()
            .take(MAX_SLOTS)
            .map(|s| s.start.as_str())
            .collect();
        Ok(json!({ "date": date.to_string(), "timeZone": tool.time_zone, "slots": starts }))
    }

    async fn book(&self, tool: &CalendarTool, arguments: &Value) -> Result<Value, ToolError> {
        let result = self.try_book(tool, arguments).await;
        let mut outcome = self.calendar.lock();
        match &result {
            Ok(booked) => {
                outcome.status = Some("booked");
                outcome.event_url = booked
                    .get("eventUrl")
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                outcome.error = None;
            }
            Err(ToolError(error)) if outcome.status != Some("booked") => {
                outcome.status = Some("failed");
                outcome.error = Some(error.clone());
            }
            Err(_) => {}
        }
        result
    }

    async fn try_book(&self, tool: &CalendarTool, arguments: &Value) -> Result<Value, ToolError> {
        let start_text = arguments
            .get("start")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError("start is required".into()))?;
        let start = DateTime::parse_from_rfc3339(start_text)
            .map_err(|_| ToolError("start must be a slot start from check_availability".into()))?
            .with_timezone(&Utc);
        let variable = |names: &[&str]| {
            names.iter().find_map(|name| {
                self.context
                    .variables
                    .get(*name)
                    .and_then(Value::as_str)
                    .filter(|v| !v.trim().is_empty())
                    .map(str::to_owned)
            })
        };
        let named = arguments
            .get("name")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| variable(&["name", "studentName", "candidateName"]));
        let attendee_name = match named {
            Some(name) => name,
            // The name the call was placed with, else the number.
            None => self
                .deps
                .store
                .call_target_name(self.context.call_id)
                .await
                .ok()
                .flatten()
                .unwrap_or_else(|| self.context.phone.clone()),
        };
        let attendee_email = arguments
            .get("email")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .or_else(|| variable(&["email"]));
        let mut metadata = Map::new();
        metadata.insert("callId".into(), json!(self.context.call_id.to_string()));
        let request = BookingRequest {
            event_type_id: tool.event_type_id,
            start,
            time_zone: tool.time_zone.clone(),
            attendee_name,
            attendee_email,
            attendee_phone: Some(self.context.phone.clone()),
            metadata,
        };
        let booking = self
            .calendar()
            .await?
            .book(&request)
            .await
            .map_err(|e| ToolError(e.to_string()))?;
        Ok(json!({
            "booked": true,
            "start": start_text,
            "uid": booking.uid,
            "status": booking.status,
            "eventUrl": booking.event_url,
        }))
    }

    async fn function(
        &self,
        call: &ToolCallRequest,
        tool: &FunctionTool,
        validator: &jsonschema::Validator,
        arguments: &Value,
    ) -> Result<Value, ToolError> {
        if let Some(error) = validator.iter_errors(arguments).next() {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() {
                "/".to_owned()
            } else {
                path
            };
            return Err(ToolError(format!("invalid arguments at {at}: {error}")));
        }
        let call_id = self.context.call_id.to_string();
        let secret = tool.secret.as_deref().unwrap_or_default();
        self.deps
            .functions
            .call(FunctionCall {
                url: &tool.url,
                timeout: Duration::from_secs(u64::from(tool.timeout_seconds)),
                secret,
                call_id: &call_id,
                tool_name: &tool.name,
                tool_call_id: &call.id,
                variables: &self.context.variables,
                arguments,
            })
            .await
            .map_err(|e| ToolError(e.to_string()))
    }
}

/// The UTC instants of a day's start and end in an IANA time zone.
fn day_bounds(date: NaiveDate, zone: &str) -> Result<(DateTime<Utc>, DateTime<Utc>), ToolError> {
    let tz: chrono_tz::Tz = zone
        .parse()
        .map_err(|_| ToolError(format!("unknown time zone {zone}")))?;
    let at_midnight = |day: NaiveDate| {
        day.and_hms_opt(0, 0, 0)
            .and_then(|t| tz.from_local_datetime(&t).earliest())
            .map(|t| t.with_timezone(&Utc))
    };
    let next = date
        .succ_opt()
        .ok_or_else(|| ToolError("date out of range".into()))?;
    match (at_midnight(date), at_midnight(next)) {
        (Some(start), Some(end)) => Ok((start, end)),
        _ => Err(ToolError("the day does not exist in that time zone".into())),
    }
}

#[async_trait]
impl ToolService for CallToolService {
    async fn run(&self, call: &ToolCallRequest, arguments: &Value) -> Result<Value, ToolError> {
        use voxline_actors::tools::{AVAILABILITY_TOOL, BOOKING_TOOL};
        match call.name.as_str() {
            AVAILABILITY_TOOL => match &self.availability {
                Some(tool) => self.check_availability(tool, arguments).await,
                None => Err(ToolError("check_availability is not available".into())),
            },
            BOOKING_TOOL => match &self.booking {
                Some(tool) => self.book(tool, arguments).await,
                None => Err(ToolError("book_appointment is not available".into())),
            },
            name => match self.functions.get(name) {
                Some((tool, validator)) => self.function(call, tool, validator, arguments).await,
                None => Err(ToolError(format!("there is no tool named {name}"))),
            },
        }
    }

    async fn transfer(&self, number: &str) -> Result<(), ToolError> {
        let carrier = self
            .deps
            .carriers
            .get(&self.context.provider)
            .ok_or_else(|| ToolError(format!("no carrier {}", self.context.provider)))?;
        let carrier_call_id = self
            .deps
            .store
            .carrier_call_id(self.context.call_id)
            .await
            .map_err(|e| ToolError(format!("reading the call: {e}")))?
            .ok_or_else(|| ToolError("the carrier has not named the call yet".into()))?;
        let leg_status_url = match CarrierKind::parse(&self.context.provider) {
            Some(kind) => transfer_status_url(&self.deps.public_url, kind, self.context.call_id),
            None => String::new(),
        };
        carrier
            .transfer(TransferRequest {
                call_id: self.context.call_id.to_string(),
                org_id: self.context.org_id.to_string(),
                carrier_call_id,
                to: number.to_owned(),
                from: self.context.from.clone(),
                leg_status_url,
            })
            .await
            .map_err(|e| ToolError(e.to_string()))
    }
}
