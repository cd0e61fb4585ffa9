//! Putting an agent on a number: a change to a number's inbound routing,
//! checked against the workspace (the agent must be its own and not deleted,
//! an enabled number must have one) and written whole.

use crate::domain::agent::AgentStatus;
use crate::domain::inbound::{InboundSettings, MAX_HOLD_MESSAGE_CHARS, WhenBusy};
use crate::domain::text::{self, Lines, TextError};
use crate::domain::{AgentId, NumberId, OrgId};
use crate::store::numbers::InboundRouting;
use crate::store::{NumberRow, Store, StoreError};

/// A change to a number's inbound routing; `None` keeps what is stored.
#[derive(Debug, Clone, Default)]
pub struct RoutingChange {
    /// The agent that answers (`Some(None)` takes it off).
    pub agent_id: Option<Option<String>>,
    /// Answer calls or not.
    pub enabled: Option<bool>,
    /// Busy rule.
    pub when_busy: Option<WhenBusy>,
    /// Seconds a held caller waits, already bounded.
    pub queue_seconds: Option<u32>,
    /// Hold message (`Some(None)`: back to the default), already parsed.
    pub hold_message: Option<Option<String>>,
}

/// Why a routing change is refused; each message names the field to fix.
#[derive(Debug, thiserror::Error)]
pub enum RoutingError {
    /// No such number in the workspace.
    #[error("Number {0} not found")]
    NumberNotFound(String),
    /// The agent is not the workspace's, or it is deleted.
    #[error("inboundAgentId: agent {0} not found")]
    AgentNotFound(String),
    /// Enabling a number that no agent answers.
    #[error("inbound.enabled: set inboundAgentId before enabling inbound calls")]
    EnabledWithoutAgent,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A hold message as typed (the API's `holdMessage`, the console's form):
/// checked and trimmed; empty means the default message (`None`).
pub fn parse_hold_message(raw: &str) -> Result<Option<String>, TextError> {
    let text = text::parse(raw, Lines::Many, MAX_HOLD_MESSAGE_CHARS)?;
    Ok((!text.is_empty()).then_some(text))
}

/// Applies `change` to the workspace's number `number_id` and returns it as stored.
pub async fn set_routing(
    store: &Store,
    org_id: OrgId,
    number_id: &str,
    change: RoutingChange,
) -> Result<NumberRow, RoutingError> {
    let not_found = || RoutingError::NumberNotFound(number_id.to_string());
    let id: NumberId = number_id.parse().map_err(|_| not_found())?;
    let number = store.number(org_id, id).await?.ok_or_else(not_found)?;
    let agent_id = match change.agent_id {
        None => number.inbound_agent_id,
        Some(None) => None,
        Some(Some(raw)) => {
            let missing = || RoutingError::AgentNotFound(raw.clone());
            let agent_id: AgentId = raw.parse().map_err(|_| missing())?;
            let agent = store.agent(org_id, agent_id).await?.ok_or_else(missing)?;
            if agent.status() == AgentStatus::Deleted {
                return Err(missing());
            }
            Some(agent_id)
        }
    };
    let current = number.inbound();
    let settings = InboundSettings {
        enabled: change.enabled.unwrap_or(current.enabled),
        when_busy: change.when_busy.unwrap_or(current.when_busy),
        queue_seconds: change.queue_seconds.unwrap_or(current.queue_seconds),
        hold_message: change.hold_message.unwrap_or(current.hold_message),
    };
    if settings.enabled && agent_id.is_none() {
        return Err(RoutingError::EnabledWithoutAgent);
    }
    store
        .set_inbound_routing(org_id, id, &InboundRouting { agent_id, settings })
        .await?
        .ok_or_else(not_found)
}
