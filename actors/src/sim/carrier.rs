//! The simulated carrier (decisions §11): dials nobody, but answers by opening
//! a real websocket to our own `/media/twilio` endpoint and speaking the Twilio
//! Media Streams protocol. The dialed number's last two digits choose the
//! callee's behaviour.

use crate::carrier::{
    Carrier, CarrierError, CarrierStatus, DialRequest, StatusSink, TransferLeg, TransferRequest,
};
use async_trait::async_trait;
use futures::future::BoxFuture;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How the simulated callee behaves once the call is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CalleeBehaviour {
    /// Follows the caller script.
    Human,
    /// Answers and says nothing.
    Silent,
    /// A voicemail greeting, then a beep.
    AnsweringMachine,
}

/// What the callee simulator needs to join an answered call.
#[derive(Debug, Clone)]
pub struct CalleeStart {
    /// Our call id.
    pub call_id: String,
    /// The carrier's id for the call.
    pub carrier_call_id: String,
    /// Websocket URL to connect to.
    pub media_url: String,
    /// `start.customParameters` to send (holds the media token).
    pub params: Vec<(String, String)>,
    /// The caller script (JSON array of lines and `{"dtmf":"1"}` steps).
    pub script: Option<serde_json::Value>,
    /// Behaviour chosen by the dialed number.
    pub behaviour: CalleeBehaviour,
    /// Cancelled when the call is hung up from our side.
    pub hangup: CancellationToken,
}

/// Runs a simulated callee until the call ends.
pub type CalleeLauncher = Arc<dyn Fn(CalleeStart) -> BoxFuture<'static, ()> + Send + Sync>;

/// The sim carrier's timings.
#[derive(Debug, Clone)]
pub struct SimCarrierConfig {
    /// Ringing time before a human callee answers (about 1 s).
    pub answer_after: Duration,
    /// Ringing time before an unanswered call gives up (`VOXLINE_SIM_RING_SECONDS`).
    pub ring_timeout: Duration,
    /// Time before a busy signal.
    pub busy_after: Duration,
    /// Time before a carrier failure.
    pub fail_after: Duration,
}

impl Default for SimCarrierConfig {
    fn default() -> Self {
        Self {
            answer_after: Duration::from_millis(1000),
            ring_timeout: Duration::from_secs(3),
            busy_after: Duration::from_millis(500),
            fail_after: Duration::from_millis(300),
        }
    }
}

/// What the last two digits of a dialed number make the sim callee do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimOutcome {
    /// Answers after about a second; follows the script.
    Answer(CalleeBehaviour),
    /// Rings out.
    NoAnswer,
    /// Busy.
    Busy,
    /// Carrier failure.
    Failure,
}

impl SimOutcome {
    /// The behaviour for a number ending in `last_two` (00–99).
    pub fn for_last_two_digits(last_two: u8) -> Self {
        match last_two {
            0..=79 => Self::Answer(CalleeBehaviour::Human),
            80..=84 => Self::NoAnswer,
            85..=89 => Self::Busy,
            90..=94 => Self::Failure,
            95..=97 => Self::Answer(CalleeBehaviour::Silent),
            _ => Self::Answer(CalleeBehaviour::AnsweringMachine),
        }
    }

    /// The behaviour for an E.164 number.
    pub fn for_number(e164: &str) -> Self {
        let digits: Vec<u8> = e164
            .bytes()
            .filter(u8::is_ascii_digit)
            .map(|b| b - b'0')
            .collect();
        let last_two = match digits.as_slice() {
            [.., a, b] => a * 10 + b,
            _ => 0,
        };
        Self::for_last_two_digits(last_two)
    }
}

/// Where the sim carrier reports a transferred call's bridged leg (real carriers call back
/// over HTTP instead).
pub type TransferLegSink = Arc<dyn Fn(TransferLeg) + Send + Sync>;

/// How long the simulated person a call is transferred to talks before hanging up.
pub const SIM_TRANSFER_TALK: Duration = Duration::from_secs(3);

/// The simulated carrier.
pub struct SimCarrier {
    config: SimCarrierConfig,
    launcher: CalleeLauncher,
    live: Mutex<HashMap<String, CancellationToken>>,
    legs: Mutex<Option<TransferLegSink>>,
}

impl SimCarrier {
    /// A sim carrier whose answered calls run `launcher`.
    pub fn new(config: SimCarrierConfig, launcher: CalleeLauncher) -> Arc<Self> {
        Arc::new(Self {
            config,
            launcher,
            live: Mutex::new(HashMap::new()),
            legs: Mutex::new(None),
        })
    }

    /// Reports transferred calls' bridged legs to `sink`.
    pub fn report_transfers_to(&self, sink: TransferLegSink) {
        if let Ok(mut legs) = self.legs.lock() {
            *legs = Some(sink);
        }
    }

    fn forget(&self, carrier_call_id: &str) {
        if let Ok(mut live) = self.live.lock() {
            live.remove(carrier_call_id);
        }
    }
}

#[async_trait]
impl Carrier for SimCarrier {
    async fn place(&self, req: DialRequest, status: StatusSink) -> Result<String, CarrierError> {
        let carrier_call_id = format!("SIM{}", uuid::Uuid::new_v4().simple());
        let hangup = CancellationToken::new();
        if let Ok(mut live) = self.live.lock() {
            live.insert(carrier_call_id.clone(), hangup.clone());
        }
        let outcome = SimOutcome::for_number(&req.to);
        let config = self.config.clone();
        let launcher = Arc::clone(&self.launcher);
        let id = carrier_call_id.clone();
        let this_live = hangup.clone();
        tokio::spawn(async move {
            let wait = |d: Duration| {
                let token = this_live.clone();
                async move {
                    tokio::select! {
                        _ = tokio::time::sleep(d) => true,
                        _ = token.cancelled() => false,
                    }
                }
            };
            status.send(CarrierStatus::Ringing);
            match outcome {
                SimOutcome::NoAnswer => {
                    if wait(config.ring_timeout).await {
                        status.send(CarrierStatus::NoAnswer);
                    }
                }
                SimOutcome::Busy => {
                    if wait(config.busy_after).await {
                        status.send(CarrierStatus::Busy);
                    }
                }
                SimOutcome::Failure => {
                    if wait(config.fail_after).await {
                        status.send(CarrierStatus::Failed("sim carrier failure".into()));
                    }
                }
                SimOutcome::Answer(behaviour) => {
                    if !wait(config.answer_after).await {
                        return;
                    }
                    status.send(CarrierStatus::Answered);
                    let start = CalleeStart {
                        call_id: req.call_id.clone(),
                        carrier_call_id: id.clone(),
                        media_url: req.media_url.clone(),
                        params: vec![
                            ("token".into(), req.media_token.clone()),
                            ("callId".into(), req.call_id.clone()),
                        ],
                        script: req.sim_script.clone(),
                        behaviour,
                        hangup: this_live.clone(),
                    };
                    let run = launcher(start);
                    let limit = Duration::from_secs(u64::from(req.time_limit_seconds) + 30);
                    tokio::select! {
                        _ = run => {}
                        _ = tokio::time::sleep(limit) => {}
                    }
                    status.send(CarrierStatus::Completed);
                }
            }
        });
        Ok(carrier_call_id)
    }

    async fn hangup(&self, carrier_call_id: &str) -> Result<(), CarrierError> {
        let token = self
            .live
            .lock()
            .ok()
            .and_then(|mut live| live.remove(carrier_call_id));
        if let Some(token) = token {
            token.cancel();
        }
        self.forget(carrier_call_id);
        Ok(())
    }

    /// Hands the callee to a simulated person at `to`: the destination's last two digits
    /// decide as for a dialed call (a human answers after the usual ring, talks for
    /// [`SIM_TRANSFER_TALK`] and hangs up), and the leg is reported to the sink.
    async fn transfer(&self, req: TransferRequest) -> Result<(), CarrierError> {
        let sink = self.legs.lock().ok().and_then(|legs| legs.clone());
        let config = self.config.clone();
        tokio::spawn(async move {
            let (after, status, duration_seconds) = match SimOutcome::for_number(&req.to) {
                SimOutcome::Answer(_) => (
                    config.answer_after + SIM_TRANSFER_TALK,
                    "completed",
                    Some(u32::try_from(SIM_TRANSFER_TALK.as_secs()).unwrap_or(u32::MAX)),
                ),
                SimOutcome::NoAnswer => (config.ring_timeout, "no-answer", None),
                SimOutcome::Busy => (config.busy_after, "busy", None),
                SimOutcome::Failure => (config.fail_after, "failed", None),
            };
            tokio::time::sleep(after).await;
            if let Some(sink) = sink {
                sink(TransferLeg {
                    call_id: req.call_id,
                    status: status.to_owned(),
                    duration_seconds,
                });
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_two_digits_choose_the_outcome() {
        assert_eq!(
            SimOutcome::for_number("+919876543200"),
            SimOutcome::Answer(CalleeBehaviour::Human)
        );
        assert_eq!(
            SimOutcome::for_number("+919876543279"),
            SimOutcome::Answer(CalleeBehaviour::Human)
        );
        assert_eq!(
            SimOutcome::for_number("+919876543280"),
            SimOutcome::NoAnswer
        );
        assert_eq!(SimOutcome::for_number("+919876543287"), SimOutcome::Busy);
        assert_eq!(SimOutcome::for_number("+919876543291"), SimOutcome::Failure);
        assert_eq!(
            SimOutcome::for_number("+919876543296"),
            SimOutcome::Answer(CalleeBehaviour::Silent)
        );
        assert_eq!(
            SimOutcome::for_number("+919876543299"),
            SimOutcome::Answer(CalleeBehaviour::AnsweringMachine)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn busy_number_reports_ringing_then_busy() {
        let launcher: CalleeLauncher = Arc::new(|_| Box::pin(async {}));
        let carrier = SimCarrier::new(SimCarrierConfig::default(), launcher);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let sink = StatusSink::new(move |s| {
            let _ = tx.send(s);
        });
        let req = DialRequest {
            call_id: "c".into(),
            org_id: "o".into(),
            to: "+919876543286".into(),
            from: "+918035740101".into(),
            media_url: "ws://127.0.0.1:1/media/twilio".into(),
            media_token: "t".into(),
            status_url: String::new(),
            ring_timeout_seconds: 3,
            time_limit_seconds: 60,
            sim_script: None,
            detect_machine: false,
        };
        carrier.place(req, sink).await.unwrap();
        assert_eq!(rx.recv().await, Some(CarrierStatus::Ringing));
        assert_eq!(rx.recv().await, Some(CarrierStatus::Busy));
    }
}
