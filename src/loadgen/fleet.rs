//! The carrier fleet: simulated callees that answer the server's dials over real Twilio Media
//! Streams websockets, and the API client that places calls and reads their outcomes.
//!
//! In-process, the server's sim carrier hands each answered call to [`Fleet::launcher`], which
//! runs the callee on the fleet's own runtime (threads named [`FLEET_THREAD`], so their CPU is
//! told apart from the server's) and hands its report to whoever watches that call.

use futures::future::BoxFuture;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot};
use voxline_actors::sim::callee::{CalleeOptions, CalleeReport, CalleeVoice, SimCallee};
use voxline_actors::sim::carrier::{CalleeLauncher, CalleeStart};

use super::metrics::RtpCallStats;

/// Name of the fleet's threads.
pub const FLEET_THREAD: &str = "loadgen-fleet";

/// Where a call's callee report goes: to a waiting watcher, or kept until one asks.
enum ReportSlot {
    Waiting(oneshot::Sender<CalleeReport>),
    Arrived(Box<CalleeReport>),
}

/// The simulated callees of one load run.
pub struct Fleet {
    runtime: Handle,
    voice: Option<CalleeVoice>,
    slots: Mutex<HashMap<String, ReportSlot>>,
    /// What the SIP callees measured of the agent's RTP, by report key, until taken.
    rtp: Mutex<HashMap<String, RtpCallStats>>,
    active: AtomicU64,
    answered_tx: mpsc::UnboundedSender<String>,
}

impl Fleet {
    /// A fleet running its callees on `runtime`; answered call ids are sent to `answered_tx`.
    pub fn new(
        runtime: Handle,
        answered_tx: mpsc::UnboundedSender<String>,
        voice: Option<CalleeVoice>,
    ) -> Arc<Self> {
        Arc::new(Self {
            runtime,
            voice,
            slots: Mutex::new(HashMap::new()),
            rtp: Mutex::new(HashMap::new()),
            active: AtomicU64::new(0),
            answered_tx,
        })
    }

    /// Calls whose callee is on the line now.
    pub fn active_calls(&self) -> u64 {
        self.active.load(Ordering::Relaxed)
    }

    /// The runtime the callees run on (their CPU is told apart from the server's).
    pub fn runtime(&self) -> &Handle {
        &self.runtime
    }

    /// The voice the callees speak in (`None`: the synthetic one).
    pub fn voice(&self) -> Option<CalleeVoice> {
        self.voice.clone()
    }

    /// Counts a caller of the fleet's own (an inbound call) on the line until `f` is done.
    pub async fn on_line<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.active.fetch_add(1, Ordering::Relaxed);
        let out = f.await;
        self.active.fetch_sub(1, Ordering::Relaxed);
        out
    }

    /// The sim carrier's launcher: plays each answered call on the fleet runtime.
    pub fn launcher(self: &Arc<Self>) -> CalleeLauncher {
        let fleet = Arc::clone(self);
        Arc::new(move |start: CalleeStart| -> BoxFuture<'static, ()> {
            let fleet = Arc::clone(&fleet);
            Box::pin(async move {
                let runtime = fleet.runtime.clone();
                let played = runtime.spawn(Arc::clone(&fleet).play(start));
                // A panicking callee ends its call; the watcher reports the missing report.
                let _ = played.await;
            })
        })
    }

    async fn play(self: Arc<Self>, start: CalleeStart) {
        self.active.fetch_add(1, Ordering::Relaxed);
        let _ = self.answered_tx.send(start.call_id.clone());
        let steps = crate::calls::sim_callee::script_steps(&start.script);
        let options = CalleeOptions {
            call_sid: start.carrier_call_id.clone(),
            cancel: start.hangup.clone(),
            seed: seed_for(&start.call_id),
            ..CalleeOptions::default()
        }
        .with_voice(self.voice.clone());
        let report = SimCallee::run(
            start.media_url,
            start.params,
            steps,
            start.behaviour,
            options,
        )
        .await;
        self.active.fetch_sub(1, Ordering::Relaxed);
        self.deliver(start.call_id, report, None);
    }

    /// Says a call was answered: `key` is what its report is filed under.
    pub fn answered(&self, key: String) {
        let _ = self.answered_tx.send(key);
    }

    /// Files the report of the call under `key` (its call id; a SIP callee's: the number
    /// it was dialed on), with what it measured of the agent's RTP when it had some.
    pub fn deliver(&self, key: String, report: CalleeReport, rtp: Option<RtpCallStats>) {
        if let Some(rtp) = rtp {
            self.rtp.lock().insert(key.clone(), rtp);
        }
        let mut slots = self.slots.lock();
        // A watcher that stopped waiting (its --duration ran out) dropped its receiver:
        // the report is kept for the one it asks again after hanging up.
        let unsent = match slots.remove(&key) {
            Some(ReportSlot::Waiting(tx)) => tx.send(report).err(),
            _ => Some(report),
        };
        if let Some(report) = unsent {
            slots.insert(key, ReportSlot::Arrived(Box::new(report)));
        }
    }

    /// Takes the RTP figures filed under `key` (a SIP callee's), once its report came.
    pub fn take_rtp(&self, key: &str) -> Option<RtpCallStats> {
        self.rtp.lock().remove(key)
    }

    /// Waits for the report of `call_id`'s callee.
    pub async fn report(&self, call_id: &str) -> Option<CalleeReport> {
        let rx = {
            let mut slots = self.slots.lock();
            match slots.remove(call_id) {
                Some(ReportSlot::Arrived(report)) => return Some(*report),
                _ => {
                    let (tx, rx) = oneshot::channel();
                    slots.insert(call_id.to_owned(), ReportSlot::Waiting(tx));
                    rx
                }
            }
        };
        rx.await.ok()
    }

    /// Stops waiting for `call_id` (its watcher gave up).
    pub fn forget(&self, call_id: &str) {
        self.slots.lock().remove(call_id);
        self.rtp.lock().remove(call_id);
    }
}

/// A stable per-call voice seed (FNV-1a of the call id).
pub fn seed_for(call_id: &str) -> u64 {
    call_id.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The `index`-th number the fleet answers: distinct, valid Indian mobile numbers whose last
/// two digits (00–79) make the sim callee a human following the script (decisions §11).
pub fn callee_number(index: u64) -> String {
    format!("+9198{:08}", 10_000_000 + (index / 80) * 100 + index % 80)
}

/// How calls are placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PlaceMode {
    /// `POST /api/agents/{id}/test-call`, one request per call.
    TestCall,
    /// `POST /api/calls`, one request per call.
    Calls,
    /// `POST /api/alert`, many numbers per request.
    Alert,
    /// `POST /api/batches`, items, then start; the server paces dialing.
    Batch,
    /// Callers ring the workspace's number through the Twilio-protocol inbound webhook
    /// and talk on the media stream it answers (in-process server only).
    Inbound,
    /// Inbound and outbound (`calls`) in turn, half each.
    Mixed,
}

impl PlaceMode {
    /// The mode's name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::TestCall => "test-call",
            Self::Calls => "calls",
            Self::Alert => "alert",
            Self::Batch => "batch",
            Self::Inbound => "inbound",
            Self::Mixed => "mixed",
        }
    }
}

/// Why an API request failed.
#[derive(Debug, thiserror::Error)]
pub enum ApiFailure {
    /// No response.
    #[error("request failed: {0}")]
    Transport(String),
    /// A non-success status.
    #[error("HTTP {status}: {message}")]
    Status {
        /// The status code.
        status: u16,
        /// The body's `message`, or the body.
        message: String,
    },
}

impl ApiFailure {
    /// A short reason for the failure table (no ids, so equal failures group).
    pub fn reason(&self) -> String {
        match self {
            Self::Transport(_) => "placing: no response".to_owned(),
            Self::Status { status, .. } => format!("placing: HTTP {status}"),
        }
    }
}

/// The Voxline API, as the load generator uses it.
#[derive(Clone)]
pub struct Api {
    http: reqwest::Client,
    base: String,
    key: String,
}

impl Api {
    /// A client for the server at `base` (no trailing slash) with bearer `key`.
    pub fn new(base: &str, key: &str) -> Result<Self, reqwest::Error> {
        Ok(Self {
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .pool_max_idle_per_host(256)
                .build()?,
            base: base.trim_end_matches('/').to_owned(),
            key: key.to_owned(),
        })
    }

    /// The server's base URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Result<Value, ApiFailure> {
        let response = request
            .bearer_auth(&self.key)
            .send()
            .await
            .map_err(|e| ApiFailure::Transport(e.to_string()))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .map_err(|e| ApiFailure::Transport(e.to_string()))?;
        let body: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        if status.is_success() {
            Ok(body)
        } else {
            let message = body["message"].as_str().map_or(text, str::to_owned);
            Err(ApiFailure::Status {
                status: status.as_u16(),
                message,
            })
        }
    }

    /// `POST path` with a JSON body.
    pub async fn post(&self, path: &str, body: &Value) -> Result<Value, ApiFailure> {
        self.send(self.http.post(format!("{}{path}", self.base)).json(body))
            .await
    }

    /// `PATCH path` with a JSON body.
    pub async fn patch(&self, path: &str, body: &Value) -> Result<Value, ApiFailure> {
        self.send(self.http.patch(format!("{}{path}", self.base)).json(body))
            .await
    }

    /// `GET path`.
    pub async fn get(&self, path: &str) -> Result<Value, ApiFailure> {
        self.send(self.http.get(format!("{}{path}", self.base)))
            .await
    }

    /// Creates the load agent (sim providers, a short greeting) with `tools` (none: the
    /// implicit hang-up only) and returns its id.
    pub async fn create_agent(
        &self,
        body: Option<&Value>,
        tools: &[Value],
    ) -> Result<String, ApiFailure> {
        let mut body = body.cloned().unwrap_or_else(agent_body);
        if !tools.is_empty() {
            body["tools"] = Value::Array(tools.to_vec());
        }
        let agent = self.post("/api/agents", &body).await?;
        agent["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| ApiFailure::Status {
                status: 201,
                message: "the created agent has no id".to_owned(),
            })
    }

    /// Places calls to `numbers` the way `mode` says; returns their call ids.
    pub async fn place(
        &self,
        mode: PlaceMode,
        agent_id: &str,
        numbers: &[String],
        variables: &Value,
    ) -> Result<Vec<String>, ApiFailure> {
        let missing_id = || ApiFailure::Status {
            status: 200,
            message: "response has no call id".to_owned(),
        };
        match mode {
            PlaceMode::TestCall | PlaceMode::Calls => {
                let mut ids = Vec::with_capacity(numbers.len());
                for number in numbers {
                    let placed = if mode == PlaceMode::TestCall {
                        self.post(
                            &format!("/api/agents/{agent_id}/test-call"),
                            &json!({"phoneNumber": number, "variables": variables}),
                        )
                        .await?
                    } else {
                        self.post(
                            "/api/calls",
                            &json!({"agentId": agent_id, "to": number, "variables": variables}),
                        )
                        .await?
                    };
                    ids.push(placed["callId"].as_str().ok_or_else(missing_id)?.to_owned());
                }
                Ok(ids)
            }
            PlaceMode::Alert => {
                let placed = self
                    .post(
                        "/api/alert",
                        &json!({"agentId": agent_id, "phones": numbers, "variables": variables}),
                    )
                    .await?;
                placed["calls"]
                    .as_array()
                    .ok_or_else(missing_id)?
                    .iter()
                    .map(|call| {
                        call["callId"]
                            .as_str()
                            .map(str::to_owned)
                            .ok_or_else(missing_id)
                    })
                    .collect()
            }
            PlaceMode::Inbound | PlaceMode::Mixed => Err(ApiFailure::Status {
                status: 0,
                message: "inbound calls are rung, not placed through the API".to_owned(),
            }),
            PlaceMode::Batch => {
                let batch = self
                    .post(
                        "/api/batches",
                        &json!({"name": "loadgen", "agentId": agent_id}),
                    )
                    .await?;
                let id = batch["id"].as_str().ok_or_else(missing_id)?.to_owned();
                for chunk in numbers.chunks(1000) {
                    let items: Vec<Value> = chunk
                        .iter()
                        .map(
                            |phone| json!({"name": "Load", "phone": phone, "variables": variables}),
                        )
                        .collect();
                    self.post(
                        &format!("/api/batches/{id}/items"),
                        &json!({"items": items}),
                    )
                    .await?;
                }
                self.post(&format!("/api/batches/{id}/start"), &json!({}))
                    .await?;
                // Batch call ids are learned as the fleet answers them.
                Ok(Vec::new())
            }
        }
    }

    /// Hangs up or cancels a call (best effort: it may already have ended).
    pub async fn cancel(&self, call_id: &str) {
        let _ = self
            .post(&format!("/api/calls/{call_id}/cancel"), &json!({}))
            .await;
    }
}

/// The agent the load generator creates: sim providers, a one-sentence greeting, and a hang-up
/// when the caller says goodbye.
pub fn agent_body() -> Value {
    json!({
        "name": "Loadgen Interviewer",
        "welcomeMessage": "Hello, this is Voxline calling about your application. Do you have a minute?",
        "prompt": "You are a friendly recruiter. Keep answers short and end the call politely.",
        "maxDurationSeconds": 300,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::PhoneNumber;
    use std::collections::HashSet;
    use voxline_actors::sim::carrier::{CalleeBehaviour, SimOutcome};

    #[test]
    fn fleet_numbers_are_distinct_valid_humans() {
        let numbers: Vec<String> = (0..2_000).map(callee_number).collect();
        let distinct: HashSet<&String> = numbers.iter().collect();
        assert_eq!(distinct.len(), numbers.len());
        for number in &numbers {
            assert!(PhoneNumber::parse(number).is_ok(), "{number}");
            assert_eq!(
                SimOutcome::for_number(number),
                SimOutcome::Answer(CalleeBehaviour::Human),
                "{number}"
            );
        }
    }

    #[test]
    fn seeds_differ_per_call() {
        assert_ne!(seed_for("call_a"), seed_for("call_b"));
        assert_eq!(seed_for("call_a"), seed_for("call_a"));
    }
}
