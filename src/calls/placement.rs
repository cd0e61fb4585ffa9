//! Placing calls: the refusals that happen before anything is enqueued
//! (agent, wallet, minute quota, caller ID), then one stored call per target,
//! handed to the engine in the same request.

use super::service::CallService;
use crate::domain::agent::{AgentSpec, AgentStatus};
use crate::domain::clock::ist_month_key;
use crate::domain::hours_override::HoursOverride;
use crate::domain::phone::PhoneError;
use crate::domain::{AgentId, CallId, Email, OrgId, Paise, PhoneNumber};
use crate::store::attempt_caps::CapHit;
use crate::store::calls::NewCall;
use crate::store::{AgentRow, NumberRow, OrgRow, StoreError};
use serde_json::{Map, Value};

/// Why a call cannot be placed; each message says what to fix.
#[derive(Debug, thiserror::Error)]
pub enum PlacementError {
    /// No such agent in the workspace, or it is deleted.
    #[error("Agent {0} not found")]
    AgentNotFound(String),
    /// The agent is deactivated.
    #[error("agentId {0} is inactive; activate it before dialing")]
    AgentInactive(String),
    /// The workspace row is gone.
    #[error("Workspace not found")]
    WorkspaceNotFound,
    /// The wallet has no credit.
    #[error("Wallet balance is not positive; add credit to place calls")]
    WalletEmpty,
    /// This month's minutes are spent.
    #[error("Monthly minute quota exhausted ({used} of {quota} minutes used)")]
    QuotaExhausted {
        /// Minutes used this IST month.
        used: i64,
        /// The workspace's monthly minutes.
        quota: i64,
    },
    /// The workspace has no caller ID at all.
    #[error("The workspace owns no phone number; rent one before dialing")]
    NoNumbers,
    /// The fromNumber override is not a phone number.
    #[error("fromNumber {0}")]
    FromMalformed(PhoneError),
    /// The fromNumber override belongs to no number of the workspace.
    #[error("fromNumber {0} is not a number this workspace owns")]
    FromNotOwned(PhoneNumber),
    /// The fromNumber override is suspended.
    #[error("fromNumber {0} is suspended")]
    FromSuspended(PhoneNumber),
    /// Every number of the workspace is suspended.
    #[error("Every phone number of the workspace is suspended")]
    AllNumbersSuspended,
    /// The number is on the workspace's do-not-call list.
    #[error(
        "{0} is on the workspace's do-not-call list; it is not dialed (take it off the list at /api/numbers/do-not-call to call it)"
    )]
    DoNotCall(PhoneNumber),
    /// The number reached the workspace's attempt cap; the message says when it may be dialed again.
    #[error("{0}")]
    AttemptCap(String),
    /// The callee's calling hours are closed and no permitted override waived them.
    #[error("{0}")]
    OutsideCallingHours(String),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

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
    /// Their email address, shown on call records and searched.
    pub email: Option<Email>,
    /// Variables for placeholders.
    pub variables: Map<String, Value>,
    /// The permitted override placing it outside its calling hours, if one does.
    pub calling_hours_override: Option<HoursOverride>,
}

/// What `place` stored.
#[derive(Debug, Default)]
pub struct Placed {
    /// The calls stored and handed over: `(id, phone)`.
    pub calls: Vec<(CallId, String)>,
    /// The numbers not stored because they reached the attempt cap.
    pub capped: Vec<(String, CapHit)>,
}

impl Placed {
    /// The one call of a single placement, or the refusal of its capped number.
    pub fn single(self) -> Result<Option<CallId>, PlacementError> {
        if let Some((phone, hit)) = self.capped.first() {
            return Err(PlacementError::AttemptCap(hit.message(phone)));
        }
        Ok(self.calls.into_iter().next().map(|(id, _)| id))
    }
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

/// The name a call's record shows: the one given, else the `name` variable.
pub fn target_name(variables: &Map<String, Value>, explicit: Option<String>) -> String {
    explicit
        .filter(|n| !n.trim().is_empty())
        .or_else(|| {
            variables
                .get("name")
                .and_then(|v| v.as_str())
                .map(str::to_string)
        })
        .unwrap_or_default()
}

/// The agent a request names by `raw`: a text that is no agent id is
/// refused like an agent the workspace does not have.
pub fn agent_id(raw: &str) -> Result<AgentId, PlacementError> {
    raw.parse()
        .map_err(|_| PlacementError::AgentNotFound(raw.to_string()))
}

impl CallService {
    /// Checks everything that must hold before a call is enqueued.
    pub async fn plan(
        &self,
        org_id: OrgId,
        agent_id: AgentId,
        from_override: Option<&str>,
    ) -> Result<DialPlan, PlacementError> {
        let agent_missing = || PlacementError::AgentNotFound(agent_id.to_string());
        let agent = self
            .store
            .agent(org_id, agent_id)
            .await?
            .ok_or_else(agent_missing)?;
        match agent.status() {
            AgentStatus::Deleted => return Err(agent_missing()),
            AgentStatus::Inactive => {
                return Err(PlacementError::AgentInactive(agent_id.to_string()));
            }
            AgentStatus::Active => {}
        }
        let spec = agent.spec()?;
        let org = self
            .store
            .org(org_id)
            .await?
            .ok_or(PlacementError::WorkspaceNotFound)?;
        if org.wallet_paise <= Paise::ZERO {
            return Err(PlacementError::WalletEmpty);
        }
        let used = self
            .store
            .minutes_used(org_id, &ist_month_key(self.clock.now()))
            .await?;
        if used >= org.minute_quota {
            return Err(PlacementError::QuotaExhausted {
                used,
                quota: org.minute_quota,
            });
        }
        let from = self.resolve_from(org_id, &spec, from_override).await?;
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
        &self,
        org_id: OrgId,
        spec: &AgentSpec,
        from_override: Option<&str>,
    ) -> Result<NumberRow, PlacementError> {
        let numbers = self.store.numbers(org_id).await?;
        if numbers.is_empty() {
            return Err(PlacementError::NoNumbers);
        }
        if let Some(raw) = from_override {
            let phone = PhoneNumber::parse(raw).map_err(PlacementError::FromMalformed)?;
            let Some(number) = numbers.into_iter().find(|n| n.phone == phone.as_str()) else {
                return Err(PlacementError::FromNotOwned(phone));
            };
            if number.status != "active" {
                return Err(PlacementError::FromSuspended(phone));
            }
            return Ok(number);
        }
        let active: Vec<&NumberRow> = numbers.iter().filter(|n| n.status == "active").collect();
        let chosen = active
            .iter()
            .find(|n| n.provider == spec.telephony_provider.as_str() && n.is_default)
            .or_else(|| {
                active
                    .iter()
                    .find(|n| n.provider == spec.telephony_provider.as_str())
            })
            .or_else(|| active.iter().find(|n| n.is_default))
            .or_else(|| active.first())
            .copied()
            .cloned();
        chosen.ok_or(PlacementError::AllNumbersSuspended)
    }

    /// Stores one queued call per target whose number is under the
    /// workspace's attempt caps (counted and stored atomically, see
    /// `store::attempt_caps`) and hands them all to the engine; on a shared
    /// database they wait for whichever node's dispatcher claims them within
    /// the workspace's slots (a trigger wakes the dispatchers).
    pub async fn place(
        &self,
        plan: &DialPlan,
        targets: Vec<CallTarget>,
        source: CallSource,
    ) -> Result<Placed, StoreError> {
        let now_ms = self.clock.now().timestamp_millis();
        let shared = self.store.is_shared();
        // Each call's variables stay a map on the way to the engine; the row stores their text.
        let variables: Vec<Map<String, Value>> =
            targets.iter().map(|t| t.variables.clone()).collect();
        let all: Vec<NewCall> = targets
            .into_iter()
            .map(|t| NewCall {
                id: CallId::new(),
                org_id: plan.org.id,
                agent_id: plan.agent.id,
                agent_name: plan.spec.name.clone(),
                engine: plan.spec.conversation_engine.as_str().to_string(),
                phone: t.phone.as_str().to_string(),
                target_name: t.name,
                email: t.email.map(Email::into_string),
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
                dispatched: !shared,
                now_ms,
                calling_hours_override: t.calling_hours_override,
            })
            .collect();
        let hits = self.store.insert_calls_capped(&all, now_ms).await?;
        let mut capped = Vec::new();
        let mut calls = Vec::with_capacity(all.len());
        let mut kept_variables = Vec::with_capacity(all.len());
        for ((call, variables), hit) in all.into_iter().zip(variables).zip(hits) {
            match hit {
                Some(hit) => capped.push((call.phone, hit)),
                None => {
                    calls.push(call);
                    kept_variables.push(variables);
                }
            }
        }
        if shared {
            return Ok(Placed {
                calls: calls.into_iter().map(|c| (c.id, c.phone)).collect(),
                capped,
            });
        }
        let mut placed = Vec::with_capacity(calls.len());
        for (call, variables) in calls.iter().zip(&kept_variables) {
            let job = super::job::job_for(
                call.id,
                call.org_id,
                plan.org.concurrency,
                &call.phone,
                &call.from_number,
                &call.provider,
                &plan.spec,
                variables,
                self.ring_seconds,
            );
            if let Err(err) = self.engine.enqueue(job) {
                // The call stays queued in the database; the dispatcher retries it.
                tracing::error!(call = %call.id, error = %err, "engine refused a call; left for the dispatcher");
                self.store.release_queued_calls(Some(call.org_id)).await?;
            }
            placed.push((call.id, call.phone.clone()));
        }
        Ok(Placed {
            calls: placed,
            capped,
        })
    }
}
