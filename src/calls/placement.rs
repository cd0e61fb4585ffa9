//! Placing calls: the refusals that happen before anything is enqueued
//! (agent, wallet, minute quota, caller ID), then one stored call per target,
//! handed to the engine in the same request.

use crate::app::state::AppState;
use crate::domain::agent::{AgentSpec, AgentStatus};
use crate::domain::clock::ist_month_key;
use crate::domain::{AgentId, CallId, OrgId, Paise, PhoneNumber};
use crate::http::error::{ApiError, ApiResult};
use crate::store::calls::NewCall;
use crate::store::{AgentRow, NumberRow, OrgRow};
use serde_json::{Map, Value};
use std::fmt::Display;

/// An agent cleared for dialing, with everything the calls need.
#[derive(Debug, Clone)]
pub struct DialPlan {
    /// The workspace.
    pub org: OrgRow,
    /// The agent's row.
    pub agent: AgentRow,
    /// The agent's spec.
    pub spec: AgentSpec,
    /// Caller ID.
    pub from: NumberRow,
    /// Per-minute rate.
    pub rate_paise: Paise,
}

/// One person to call.
#[derive(Debug, Clone)]
pub struct CallTarget {
    /// Number to dial.
    pub phone: PhoneNumber,
    /// Their name, shown on call records.
    pub name: String,
    /// Variables for placeholders.
    pub variables: Map<String, Value>,
}

/// Where a call came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallSource {
    /// `POST /api/agents/{id}/test-call`.
    TestCall,
    /// `POST /api/calls`.
    Api,
    /// `POST /api/alert`.
    Alert,
}

impl CallSource {
    fn as_str(self) -> &'static str {
        match self {
            Self::TestCall => "test-call",
            Self::Api => "api",
            Self::Alert => "alert",
        }
    }
}

/// 404 for an agent the workspace does not have (or a text that names none).
fn agent_not_found(agent: impl Display) -> ApiError {
    ApiError::NotFound(format!("Agent {agent} not found"))
}

/// The agent a request names by `raw`: a text that is no agent id is a 404,
/// like an agent the workspace does not have.
pub fn agent_id(raw: &str) -> ApiResult<AgentId> {
    raw.parse().map_err(|_| agent_not_found(raw))
}

/// Checks everything that must hold before a call is enqueued.
pub async fn plan(
    state: &AppState,
    org_id: OrgId,
    agent_id: AgentId,
    from_override: Option<&str>,
) -> ApiResult<DialPlan> {
    let agent = state
        .store
        .agent(org_id, agent_id)
        .await?
        .ok_or_else(|| agent_not_found(agent_id))?;
    match agent.status() {
        AgentStatus::Deleted => {
            return Err(agent_not_found(agent_id));
        }
        AgentStatus::Inactive => {
            return Err(ApiError::BadRequest(format!(
                "agentId {agent_id} is inactive; activate it before dialing"
            )));
        }
        AgentStatus::Active => {}
    }
    let spec = agent.spec()?;
    let org = state
        .store
        .org(org_id)
        .await?
        .ok_or_else(|| ApiError::NotFound("Workspace not found".into()))?;
    if org.wallet_paise <= Paise::ZERO {
        return Err(ApiError::PaymentRequired(
            "Wallet balance is not positive; add credit to place calls".into(),
        ));
    }
    let used = state
        .store
        .minutes_used(org_id, &ist_month_key(state.clock.now()))
        .await?;
    if used >= org.minute_quota {
        return Err(ApiError::Forbidden(format!(
            "Monthly minute quota exhausted ({used} of {} minutes used)",
            org.minute_quota
        )));
    }
    let from = resolve_from(state, org_id, &spec, from_override).await?;
    let rate_paise = Paise(spec.per_minute_rate_paise);
    Ok(DialPlan {
        org,
        agent,
        spec,
        from,
        rate_paise,
    })
}

/// fromNumber override, else the agent's carrier's number, else the default,
/// else any active number: always one the workspace owns and is not suspended.
async fn resolve_from(
    state: &AppState,
    org_id: OrgId,
    spec: &AgentSpec,
    from_override: Option<&str>,
) -> ApiResult<NumberRow> {
    let numbers = state.store.numbers(org_id).await?;
    if numbers.is_empty() {
        return Err(ApiError::BadRequest(
            "The workspace owns no phone number; rent one before dialing".into(),
        ));
    }
    if let Some(raw) = from_override {
        let phone =
            PhoneNumber::parse(raw).map_err(|e| ApiError::BadRequest(format!("fromNumber {e}")))?;
        let number = numbers
            .into_iter()
            .find(|n| n.phone == phone.as_str())
            .ok_or_else(|| {
                ApiError::BadRequest(format!(
                    "fromNumber {phone} is not a number this workspace owns"
                ))
            })?;
        if number.status != "active" {
            return Err(ApiError::BadRequest(format!(
                "fromNumber {phone} is suspended"
            )));
        }
        return Ok(number);
    }
    let active: Vec<&NumberRow> = numbers.iter().filter(|n| n.status == "active").collect();
    let chosen = active
        .iter()
        .find(|n| n.provider == spec.telephony_provider && n.is_default)
        .or_else(|| {
            active
                .iter()
                .find(|n| n.provider == spec.telephony_provider)
        })
        .or_else(|| active.iter().find(|n| n.is_default))
        .or_else(|| active.first())
        .copied()
        .cloned();
    chosen.ok_or_else(|| {
        ApiError::BadRequest("Every phone number of the workspace is suspended".into())
    })
}

/// Stores one queued call per target and hands them all to the engine.
pub async fn place(
    state: &AppState,
    plan: &DialPlan,
    targets: Vec<CallTarget>,
    source: CallSource,
) -> ApiResult<Vec<(CallId, String)>> {
    let now_ms = state.clock.now().timestamp_millis();
    let calls: Vec<NewCall> = targets
        .into_iter()
        .map(|t| NewCall {
            id: CallId::new(),
            org_id: plan.org.id,
            agent_id: plan.agent.id,
            agent_name: plan.spec.name.clone(),
            engine: plan.spec.conversation_engine.as_str().to_string(),
            phone: t.phone.as_str().to_string(),
            target_name: t.name,
            from_number: plan.from.phone.clone(),
            provider: plan.from.provider.clone(),
            variables: Value::Object(t.variables).to_string(),
            source: source.as_str().to_string(),
            attempt: 1,
            retry_of: None,
            batch_id: None,
            campaign_id: None,
            campaign_name: None,
            rate_paise: plan.rate_paise,
            not_before: now_ms,
            dispatched: true,
            now_ms,
        })
        .collect();
    state.store.insert_calls(&calls).await?;
    let mut placed = Vec::with_capacity(calls.len());
    for call in &calls {
        let job = super::job::job_for(
            call.id,
            call.org_id,
            plan.org.concurrency,
            &call.phone,
            &call.from_number,
            &call.provider,
            &plan.spec,
            &call.variables,
            state.settings.sim.ring_seconds,
        );
        if let Err(err) = state.engine.enqueue(job) {
            // The call stays queued in the database; the dispatcher retries it.
            tracing::error!(call = %call.id, error = %err, "engine refused a call; left for the dispatcher");
            state.store.release_queued_calls(Some(call.org_id)).await?;
        }
        placed.push((call.id, call.phone.clone()));
    }
    Ok(placed)
}
