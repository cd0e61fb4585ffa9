//! Answering a ringing call: the number, its agent and its workspace decide
//! whether an agent takes it; a taken call is stored, given a slot and started
//! on the engine, waiting for the carrier's media stream like an answered
//! outbound call.

use super::routing_url::{RoutingAnswer, RoutingQuestion, RoutingUrlClient};
use crate::calls::job::job_for;
use crate::calls::ledger::INBOUND_SOURCE;
use crate::calls::service::CallService;
use crate::carriers::inbound::{
    InboundAnswer, InboundCarrier, InboundHost, InboundRing, Refusal, hold_poll_url, sim_account,
};
use crate::carriers::store_wiring::StoreCredentials;
use crate::domain::agent::AgentStatus;
use crate::domain::clock::ist_month_key;
use crate::domain::inbound::WhenBusy;
use crate::domain::{CallId, Paise, PhoneNumber};
use crate::store::NumberRow;
use crate::store::calls::NewCall;
use crate::store::inbound_calls::InboundSlot;
use async_trait::async_trait;
use serde_json::{Map, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::{
    Admission, CallEnd, CallJob, CallLedger, CallStatus, InboundLeg, InboundWait,
};
use voxline_actors::media_token::MediaTokens;

/// How long an inbound call's media token stays valid: the carrier opens the
/// stream right after our answer, so this only bounds a replay.
const TOKEN_SECONDS: i64 = 3600;

/// The variable that carries the caller's number into the agent's prompt and welcome.
pub const CALLER_NUMBER_VARIABLE: &str = "callerNumber";

/// A held caller who stopped asking is let go this long after their wait ended
/// (one who still asks is told at their next ask).
const SWEEP_GRACE_MS: i64 = 5_000;

/// The window of the per-caller cap.
const HOUR_MS: i64 = 3_600_000;

/// A held caller hears the hold message again after this many asks.
const SAY_AGAIN_EVERY_ROUNDS: u32 = 20;

/// An inbound call holding for a slot on a shared database: its job, started
/// once a slot is claimed for it in the store, and when the wait is over.
struct StoreHeld {
    job: CallJob,
    until_ms: i64,
    hold_message: String,
}

/// What inbound calling works with; cheap to clone.
#[derive(Clone)]
pub struct InboundService {
    calls: CallService,
    credentials: Arc<StoreCredentials>,
    secret: Arc<[u8]>,
    tokens: MediaTokens,
    /// Websocket base of the media endpoints, e.g. `wss://voxline.example.com/media`.
    media_base_url: String,
    /// The configured public base URL carriers sign with, if any.
    public_url: Option<String>,
    /// This node's base URL, where a held caller's carrier asks again.
    node_url: String,
    /// Callers this node holds on a shared database, by call.
    store_held: Arc<parking_lot::Mutex<HashMap<CallId, StoreHeld>>>,
    /// Asks workspaces' routing URLs.
    router: RoutingUrlClient,
}

/// The server's parts inbound calling is made from.
pub struct InboundParts {
    /// Placing and ending calls.
    pub calls: CallService,
    /// The server's secret (the sim carrier's per-workspace accounts).
    pub secret: Arc<[u8]>,
    /// The server's workspace carrier accounts, shared with its dials and callbacks.
    pub credentials: Arc<StoreCredentials>,
    /// Signs the media websocket URLs handed to carriers.
    pub tokens: MediaTokens,
    /// Websocket base of the media endpoints, e.g. `wss://voxline.example.com/media`.
    pub media_base_url: String,
    /// The configured public base URL carriers sign with, if any.
    pub public_url: Option<String>,
    /// This node's base URL, where a held caller's carrier asks again.
    pub node_url: String,
    /// Hosts a workspace's routing URL may name besides public ones.
    pub allow_hosts: Vec<String>,
}

impl InboundService {
    /// The service over the server's `parts`.
    pub fn new(parts: InboundParts) -> Self {
        Self {
            router: RoutingUrlClient::new(parts.allow_hosts),
            node_url: parts.node_url,
            store_held: Arc::default(),
            credentials: parts.credentials,
            calls: parts.calls,
            secret: parts.secret,
            tokens: parts.tokens,
            media_base_url: parts.media_base_url,
            public_url: parts.public_url,
        }
    }

    /// The rented number a carrier rang, on that carrier.
    async fn number(&self, carrier: InboundCarrier, to: &str) -> Option<NumberRow> {
        let phone = PhoneNumber::parse(to).ok()?;
        match self.calls.store.number_by_phone(phone.as_str()).await {
            Ok(Some(number)) if number.provider == carrier.as_str() => Some(number),
            Ok(_) => None,
            Err(err) => {
                tracing::error!(to, error = %err, "looking up an inbound number failed");
                None
            }
        }
    }

    /// Decides and, when an agent takes the call, starts it.
    async fn answer(&self, ring: InboundRing) -> Result<InboundAnswer, crate::store::StoreError> {
        let store = &self.calls.store;
        let Some(number) = self.number(ring.carrier, &ring.to).await else {
            return Ok(InboundAnswer::Refuse(Refusal::UnknownNumber));
        };
        let settings = number.inbound();
        let unavailable = |why: &str| {
            tracing::info!(number = %number.phone, why, "inbound number takes no calls now");
            Ok(InboundAnswer::Refuse(Refusal::Unavailable))
        };
        if number.status != "active" {
            return unavailable("the number is suspended");
        }
        if !settings.enabled {
            return unavailable("inbound calling is off for the number");
        }
        if store.is_caller_blocked(number.org_id, &ring.from).await? {
            return Ok(InboundAnswer::Refuse(Refusal::Blocked));
        }
        let cap = store.inbound_caller_hourly_cap(number.org_id).await?;
        if cap > 0 {
            let hour_ago = self.calls.clock.now().timestamp_millis() - HOUR_MS;
            let recent = store
                .inbound_calls_from(number.org_id, &ring.from, hour_ago)
                .await?;
            if recent >= cap {
                tracing::info!(number = %number.phone, recent, cap, "caller over the workspace's hourly cap");
                return Ok(InboundAnswer::Refuse(Refusal::CallerCap));
            }
        }
        let (routed_agent, routed_variables) = match self.route(&number, &ring).await? {
            Some(RoutingAnswer::Reject) => return Ok(InboundAnswer::Refuse(Refusal::Routed)),
            Some(RoutingAnswer::Route {
                agent_id,
                variables,
            }) => (agent_id, variables),
            None => (None, Map::new()),
        };
        let agent = match self
            .routed_agent(number.org_id, routed_agent.as_deref())
            .await?
        {
            Some(agent) => agent,
            None => {
                let Some(agent_id) = number.inbound_agent_id else {
                    return unavailable("no agent answers the number");
                };
                let Some(agent) = store.agent(number.org_id, agent_id).await? else {
                    return unavailable("the number's agent is gone");
                };
                agent
            }
        };
        if agent.status() != AgentStatus::Active {
            return unavailable("the number's agent is not active");
        }
        let spec = agent.spec()?;
        let Some(org) = store.org(number.org_id).await? else {
            return unavailable("the workspace is gone");
        };
        if org.wallet_paise <= Paise::ZERO {
            return unavailable("the wallet is empty");
        }
        let now = self.calls.clock.now();
        let used = store.minutes_used(org.id, &ist_month_key(now)).await?;
        if used >= org.minute_quota {
            return unavailable("the monthly minute quota is spent");
        }
        let now_ms = now.timestamp_millis();
        let mut variables = routed_variables;
        variables.insert(
            CALLER_NUMBER_VARIABLE.into(),
            Value::String(ring.from.clone()),
        );
        if let Some(script) = &ring.sim_script {
            variables.insert("simScript".into(), script.clone());
        }
        let call = NewCall {
            id: CallId::new(),
            org_id: org.id,
            agent_id: agent.id,
            agent_name: spec.name.clone(),
            engine: spec.conversation_engine.as_str().to_string(),
            phone: ring.from.clone(),
            target_name: String::new(),
            email: None,
            from_number: ring.from.clone(),
            provider: number.provider.clone(),
            variables: Value::Object(variables.clone()).to_string(),
            source: INBOUND_SOURCE.to_string(),
            attempt: 1,
            retry_of: None,
            batch_id: None,
            campaign_id: None,
            campaign_name: None,
            rate_paise: Paise(spec.inbound_rate_paise()),
            not_before: now_ms,
            dispatched: true,
            now_ms,
            calling_hours_override: None,
        };
        let slot = store
            .insert_inbound_call(&call, &number.phone, &self.calls.node_id)
            .await?;
        // The engine's job: `to` is the person (as on outbound calls, for tools and
        // transfers), `from` our number.
        let mut job = job_for(
            call.id,
            org.id,
            org.concurrency,
            &ring.from,
            &number.phone,
            &number.provider,
            &spec,
            &variables,
            self.calls.ring_seconds,
        );
        job.inbound = Some(InboundLeg {
            carrier_call_id: ring.carrier_call_id.clone(),
        });
        // Inbound calls always count against the slots, announcements included,
        // and nobody answers the phone with an answering machine to detect.
        job.detect_machine = false;
        job.bypass_slots = slot == InboundSlot::Taken;
        let hold = Duration::from_secs(u64::from(settings.queue_seconds));
        let wait = match settings.when_busy {
            WhenBusy::Reject => InboundWait::Reject,
            WhenBusy::Queue if ring.carrier.can_hold() => InboundWait::Hold(hold),
            // A carrier that cannot hold a caller gets a busy answer.
            WhenBusy::Queue => InboundWait::Reject,
        };
        let admission = match (slot, wait) {
            (InboundSlot::Full, InboundWait::Reject) => Admission::Busy,
            (InboundSlot::Full, InboundWait::Hold(_)) => {
                let until_ms = now_ms + i64::try_from(hold.as_millis()).unwrap_or(i64::MAX);
                self.store_held.lock().insert(
                    call.id,
                    StoreHeld {
                        job,
                        until_ms,
                        hold_message: settings.hold_message().to_string(),
                    },
                );
                Admission::Holding
            }
            (InboundSlot::ForEngine | InboundSlot::Taken, wait) => {
                match self.calls.engine.admit(job, wait).await {
                    Ok(admission) => admission,
                    Err(err) => {
                        tracing::error!(call = %call.id, error = %err, "engine refused an inbound call");
                        Admission::Busy
                    }
                }
            }
        };
        match admission {
            Admission::Busy => {
                self.end_unconnected(call.id, EndedReason::Busy).await;
                Ok(InboundAnswer::Refuse(Refusal::Busy))
            }
            Admission::Holding => {
                metrics::counter!("voxline_inbound_held_total").increment(1);
                Ok(InboundAnswer::Hold {
                    say: Some(settings.hold_message().to_string()),
                    poll_url: hold_poll_url(&self.node_url, ring.carrier, &call.id.to_string(), 1),
                })
            }
            Admission::Started => {
                metrics::counter!("voxline_inbound_calls_total", "carrier" => ring.carrier.as_str())
                    .increment(1);
                Ok(self.connect(ring.carrier, call.id))
            }
        }
    }

    /// What the workspace's routing URL says about a ringing call; `None` when
    /// it has none, or it failed (the number's agent takes the call then).
    async fn route(
        &self,
        number: &NumberRow,
        ring: &InboundRing,
    ) -> Result<Option<RoutingAnswer>, crate::store::StoreError> {
        let store = &self.calls.store;
        let Some((url, secret)) = store.inbound_routing(number.org_id).await? else {
            return Ok(None);
        };
        let known_caller = store
            .latest_call_between(number.org_id, &ring.from, &number.phone)
            .await?
            .map(|(name, variables)| {
                // A stored value that does not parse is shown as it is stored.
                let variables =
                    serde_json::from_str(&variables).unwrap_or(Value::String(variables));
                (name, variables)
            });
        let question = RoutingQuestion {
            to: &number.phone,
            from: &ring.from,
            carrier: ring.carrier.as_str(),
            known_caller,
        };
        match self.router.ask(&url, &secret, &question).await {
            Ok(answer) => Ok(Some(answer)),
            Err(err) => {
                metrics::counter!("voxline_inbound_routing_failures_total").increment(1);
                tracing::warn!(org = %number.org_id, error = %err, "inbound routing URL failed; the number's agent answers");
                Ok(None)
            }
        }
    }

    /// The agent a routing URL named, when it is the workspace's and not deleted.
    async fn routed_agent(
        &self,
        org_id: crate::domain::OrgId,
        agent_id: Option<&str>,
    ) -> Result<Option<crate::store::AgentRow>, crate::store::StoreError> {
        let Some(id) = agent_id.and_then(|raw| raw.parse::<crate::domain::AgentId>().ok()) else {
            if let Some(raw) = agent_id {
                tracing::warn!(%org_id, agent = raw, "inbound routing URL named no agent id; the number's agent answers");
            }
            return Ok(None);
        };
        let agent = self.calls.store.agent(org_id, id).await?;
        Ok(agent.filter(|a| a.status() != AgentStatus::Deleted))
    }

    /// Ends a call no agent took (busy, or the wait was over): not answered, not billed.
    async fn end_unconnected(&self, call_id: CallId, reason: EndedReason) {
        let end = CallEnd {
            call_id: call_id.into(),
            status: CallStatus::Busy,
            ended_reason: reason,
            answered_at: None,
            ended_at: self.calls.clock.now().timestamp_millis(),
        };
        if let Err(err) = self.calls.ledger.finish(end).await {
            tracing::error!(call = %call_id, error = %err, "could not record an unconnected inbound call");
        }
    }

    /// The stream answer of a started call: its media URL and a fresh token.
    fn connect(&self, carrier: InboundCarrier, call_id: CallId) -> InboundAnswer {
        let now_s = self.calls.clock.now().timestamp();
        InboundAnswer::Connect {
            call_id: call_id.to_string(),
            media_url: format!("{}/{}", self.media_base_url, carrier.media_segment()),
            token: self.tokens.issue(call_id.into(), now_s + TOKEN_SECONDS),
        }
    }

    /// The URL the workspace sets as `number`'s voice URL in its carrier's console
    /// (see [`crate::carriers::inbound::inbound_url_for`]).
    pub async fn inbound_url(&self, number: &NumberRow) -> Option<String> {
        self.inbound_urls(std::slice::from_ref(number))
            .await
            .pop()
            .flatten()
    }

    /// [`Self::inbound_url`] of each number, in order, opening each carrier's
    /// credential once (a workspace's numbers share their carrier's account).
    pub async fn inbound_urls(&self, numbers: &[NumberRow]) -> Vec<Option<String>> {
        let base = self.public_url.as_deref().unwrap_or(&self.node_url);
        let mut credentials: HashMap<(crate::domain::OrgId, &str), Option<Value>> = HashMap::new();
        let mut urls = Vec::with_capacity(numbers.len());
        for number in numbers {
            let provider = number.provider.as_str();
            // Only the carriers whose inbound URL is signed need the account.
            let credential = if matches!(provider, "exotel" | "vonage" | "telnyx") {
                match credentials.entry((number.org_id, provider)) {
                    std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
                    std::collections::hash_map::Entry::Vacant(slot) => {
                        slot.insert(self.credentials.load(number.org_id, provider).await)
                    }
                }
                .as_ref()
            } else {
                None
            };
            urls.push(crate::carriers::inbound::inbound_url_for(
                base,
                provider,
                &number.phone,
                credential,
            ));
        }
        urls
    }

    /// Shared database: ends the held callers whose wait is over but who did
    /// not ask again (they hung up), so their rows stop holding outbound calls back.
    pub async fn sweep_held(&self) {
        let now_ms = self.calls.clock.now().timestamp_millis();
        let over: Vec<CallId> = {
            let mut held = self.store_held.lock();
            let over: Vec<CallId> = held
                .iter()
                .filter(|(_, h)| h.until_ms + SWEEP_GRACE_MS <= now_ms)
                .map(|(id, _)| *id)
                .collect();
            for id in &over {
                held.remove(id);
            }
            over
        };
        for call_id in over {
            self.end_unconnected(call_id, EndedReason::QueueTimeout)
                .await;
        }
    }

    /// Whether this node holds callers in the store (the sweep has work).
    pub fn holds_callers(&self) -> bool {
        !self.store_held.lock().is_empty()
    }

    /// What a held caller's `round`-th ask gets.
    async fn poll(
        &self,
        carrier: InboundCarrier,
        call_id: CallId,
        round: u32,
    ) -> Result<InboundAnswer, crate::store::StoreError> {
        let engine = &self.calls.engine;
        if engine.is_live(call_id.into()) {
            return Ok(self.connect(carrier, call_id));
        }
        let say_again = round.is_multiple_of(SAY_AGAIN_EVERY_ROUNDS);
        let hold = |message: Option<String>| InboundAnswer::Hold {
            say: message.filter(|_| say_again),
            poll_url: hold_poll_url(&self.node_url, carrier, &call_id.to_string(), round + 1),
        };
        // One node: the org actor holds the caller and starts the call when a slot frees.
        let Some(org_id) = self.calls.store.call_org(call_id).await? else {
            return Ok(InboundAnswer::Refuse(Refusal::WaitOver));
        };
        if engine
            .is_holding(org_id.into(), call_id.into())
            .await
            .unwrap_or(false)
        {
            // Read only on the asks that say it again: a held caller asks every second.
            let message =
                if say_again {
                    let stored = self.calls.store.inbound_hold_message(call_id).await?;
                    Some(stored.unwrap_or_else(|| {
                        crate::domain::inbound::DEFAULT_HOLD_MESSAGE.to_string()
                    }))
                } else {
                    None
                };
            return Ok(hold(message));
        }
        // The org actor may have started the call between the two asks above.
        if engine.is_live(call_id.into()) {
            return Ok(self.connect(carrier, call_id));
        }
        // A shared database: this node claims a slot in the store for its held caller.
        let held = self.store_held.lock().remove(&call_id);
        let Some(held) = held else {
            return Ok(InboundAnswer::Refuse(Refusal::WaitOver));
        };
        if self.calls.store.claim_held_inbound_slot(call_id).await? {
            let mut job = held.job;
            job.bypass_slots = true;
            return Ok(match engine.admit(job, InboundWait::Reject).await {
                Ok(Admission::Started) => self.connect(carrier, call_id),
                Ok(_) | Err(_) => {
                    self.end_unconnected(call_id, EndedReason::EngineError)
                        .await;
                    InboundAnswer::Refuse(Refusal::WaitOver)
                }
            });
        }
        if self.calls.clock.now().timestamp_millis() >= held.until_ms {
            self.end_unconnected(call_id, EndedReason::QueueTimeout)
                .await;
            return Ok(InboundAnswer::Refuse(Refusal::WaitOver));
        }
        let message = held.hold_message.clone();
        self.store_held.lock().insert(call_id, held);
        Ok(hold(Some(message)))
    }
}

#[async_trait]
impl InboundHost for InboundService {
    fn public_base_url(&self) -> Option<String> {
        self.public_url.clone()
    }

    async fn number_credential(
        &self,
        carrier: InboundCarrier,
        to: &str,
    ) -> Option<serde_json::Value> {
        let number = self.number(carrier, to).await?;
        match carrier {
            InboundCarrier::Sim => Some(sim_account(&self.secret, &number.org_id.to_string())),
            InboundCarrier::Real(kind) => self.credentials.load(number.org_id, kind.as_str()).await,
            InboundCarrier::Sip => self.credentials.load(number.org_id, "sip").await,
        }
    }

    async fn call_credential(
        &self,
        carrier: InboundCarrier,
        call_id: &str,
    ) -> Option<serde_json::Value> {
        let call_id: CallId = call_id.parse().ok()?;
        let org_id = self.calls.store.call_org(call_id).await.ok()??;
        match carrier {
            InboundCarrier::Sim => Some(sim_account(&self.secret, &org_id.to_string())),
            InboundCarrier::Real(kind) => self.credentials.load(org_id, kind.as_str()).await,
            InboundCarrier::Sip => self.credentials.load(org_id, "sip").await,
        }
    }

    async fn poll_hold(&self, carrier: InboundCarrier, call_id: &str, round: u32) -> InboundAnswer {
        let Ok(id) = call_id.parse::<CallId>() else {
            return InboundAnswer::Refuse(Refusal::WaitOver);
        };
        match self.poll(carrier, id, round).await {
            Ok(answer) => answer,
            Err(err) => {
                tracing::error!(call = call_id, error = %err, "answering a held caller failed");
                InboundAnswer::Refuse(Refusal::WaitOver)
            }
        }
    }

    async fn ring(&self, ring: InboundRing) -> InboundAnswer {
        let to = ring.to.clone();
        match self.answer(ring).await {
            Ok(answer) => answer,
            Err(err) => {
                // Never a 5xx to the carrier: it would play its own error to the caller.
                tracing::error!(to, error = %err, "answering an inbound call failed");
                InboundAnswer::Refuse(Refusal::Unavailable)
            }
        }
    }
}
