//! Inbound load (`--inbound`, `--mode mixed`): the fleet's callers ring the load
//! workspace's number exactly as Twilio delivers a call (the signed Voice URL
//! request, the hold answers, then the media stream) and play the script on the
//! fleet runtime, so the server's CPU is measured without them. The answer
//! latency is the webhook sent → the agent's first audio at the caller.

use super::fleet::{Fleet, seed_for};
use super::metrics::CallObservation;
use super::observation::fill_from_report;
use crate::inbound::sim_phone::{self, Ring};
use serde_json::Value;
use std::sync::Arc;
use tokio::time::Instant;
use voxline_actors::sim::callee::{CalleeOptions, CalleeReport, ScriptStep};

/// What the callers ring: the in-process server's number and its workspace's sim account.
#[derive(Clone)]
pub(super) struct InboundLine {
    /// The server's base URL.
    pub(super) server: String,
    /// The number rung.
    pub(super) phone: String,
    /// The workspace's sim account (signs the webhooks).
    pub(super) account: Value,
    /// The callers' script, also sent to the server's sim ASR.
    pub(super) script: Option<Value>,
    /// The callers' script as steps.
    pub(super) steps: Vec<ScriptStep>,
    /// The callers' HTTP client (keep-alive pool) for the webhooks.
    pub(super) http: reqwest::Client,
}

/// One caller's call as the caller saw it.
pub(super) struct InboundCall {
    /// The server's call id, when the call was connected.
    pub(super) call_id: Option<String>,
    /// What the callee measured on the stream.
    pub(super) report: Option<CalleeReport>,
    /// Why the ring itself failed, or the server refused it.
    pub(super) refused: Option<String>,
    /// Webhook sent → stream answered (holds included).
    pub(super) answer_wait: std::time::Duration,
}

impl InboundLine {
    /// Rings the number from `caller` and plays the call, on the fleet runtime.
    pub(super) async fn call(&self, fleet: &Arc<Fleet>, caller: String) -> InboundCall {
        let line = self.clone();
        let http = self.http.clone();
        let fleet_for_call = Arc::clone(fleet);
        let voice = fleet.voice();
        let played = fleet.runtime().spawn(async move {
            fleet_for_call
                .on_line(async move {
                    let ring = Ring {
                        server: line.server.clone(),
                        provider: "sim".to_owned(),
                        account: line.account.clone(),
                        to: line.phone.clone(),
                        from: caller,
                        call_sid: sim_phone::new_call_sid(),
                        sim_script: line.script.clone(),
                    };
                    let started = Instant::now();
                    let (answer, _) = match sim_phone::ring(&http, &ring).await {
                        Ok(answered) => answered,
                        Err(error) => {
                            return InboundCall {
                                call_id: None,
                                report: None,
                                refused: Some(format!("ringing: {error}")),
                                answer_wait: started.elapsed(),
                            };
                        }
                    };
                    let answer_wait = started.elapsed();
                    let Some(call_id) = answer.call_id().map(str::to_owned) else {
                        return InboundCall {
                            call_id: None,
                            report: None,
                            refused: Some("ringing: refused by the server".to_owned()),
                            answer_wait,
                        };
                    };
                    let options = CalleeOptions {
                        seed: seed_for(&call_id),
                        ..CalleeOptions::default()
                    }
                    .with_voice(voice);
                    let report =
                        sim_phone::talk(&answer, &ring.call_sid, line.steps.clone(), options).await;
                    InboundCall {
                        call_id: Some(call_id),
                        report,
                        refused: None,
                        answer_wait,
                    }
                })
                .await
        });
        match played.await {
            Ok(call) => call,
            Err(error) => InboundCall {
                call_id: None,
                report: None,
                refused: Some(format!("the caller panicked: {error}")),
                answer_wait: std::time::Duration::ZERO,
            },
        }
    }
}

/// Fills an observation from what the caller saw.
pub(super) fn observe(call: &InboundCall, observation: &mut CallObservation) {
    observation.placed = true;
    if let Some(report) = &call.report {
        fill_from_report(observation, report);
        observation.answer_latency = report
            .greeting_latency
            .map(|greeting| call.answer_wait + greeting);
    }
}
