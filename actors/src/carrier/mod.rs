//! Carriers: place a call, hang it up, report its progress.
//!
//! Real carriers report progress through HTTP status callbacks that the service
//! routes to [`crate::engine::Engine::carrier_status`]; the simulated carrier
//! reports through the [`StatusSink`] it is handed when dialing.

use async_trait::async_trait;
use std::sync::Arc;

/// Progress of a dialed call as the carrier reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CarrierStatus {
    /// The callee's phone is ringing.
    Ringing,
    /// The callee picked up.
    Answered,
    /// Nobody answered before the ring timeout.
    NoAnswer,
    /// The line was busy.
    Busy,
    /// The carrier could not complete the call.
    Failed(String),
    /// The call ended on the carrier side (the callee hung up).
    Completed,
    /// The carrier's answering-machine detection reached a verdict.
    AnsweredBy(AnsweredBy),
}

/// What a carrier's answering-machine detection concluded (the engine's own detector reaches
/// the same verdicts from the audio; the first verdict of either wins).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AnsweredBy {
    /// A person answered.
    Human,
    /// An answering machine is playing its greeting.
    Machine,
    /// The machine's greeting ended with a beep: it is recording now.
    Beep,
    /// The machine's greeting ended without a beep the carrier heard.
    GreetingEnded,
}

impl AnsweredBy {
    /// The wire name used between nodes (`human`, `machine`, `beep`, `greeting-ended`).
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Human => "human",
            Self::Machine => "machine",
            Self::Beep => "beep",
            Self::GreetingEnded => "greeting-ended",
        }
    }

    /// Parses [`AnsweredBy::as_str`].
    pub fn parse(raw: &str) -> Option<Self> {
        Some(match raw {
            "human" => Self::Human,
            "machine" => Self::Machine,
            "beep" => Self::Beep,
            "greeting-ended" => Self::GreetingEnded,
            _ => return None,
        })
    }
}

/// Everything a carrier needs to place one call.
#[derive(Debug, Clone)]
pub struct DialRequest {
    /// Our call id.
    pub call_id: String,
    /// The workspace placing the call (chooses its own carrier credentials).
    pub org_id: String,
    /// E.164 number dialed.
    pub to: String,
    /// E.164 caller ID.
    pub from: String,
    /// Websocket URL the carrier streams the answered call's audio to.
    pub media_url: String,
    /// The per-call media token, also sent as a stream parameter.
    pub media_token: String,
    /// URL for status callbacks.
    pub status_url: String,
    /// Seconds to ring before giving up.
    pub ring_timeout_seconds: u32,
    /// Hard limit on the call's length.
    pub time_limit_seconds: u32,
    /// Caller script for the simulated callee (JSON array), if any.
    pub sim_script: Option<serde_json::Value>,
    /// Ask the carrier for answering-machine detection (verdicts come to `status_url`).
    pub detect_machine: bool,
}

/// Why a carrier request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CarrierError {
    /// The carrier refused the request.
    #[error("carrier rejected the request: {0}")]
    Rejected(String),
    /// The carrier could not be reached.
    #[error("carrier unreachable: {0}")]
    Unreachable(String),
    /// No credentials are configured for this carrier.
    #[error("carrier not configured: {0}")]
    NotConfigured(String),
}

/// Where a carrier pushes progress for one call.
#[derive(Clone)]
pub struct StatusSink(Arc<dyn Fn(CarrierStatus) + Send + Sync>);

impl StatusSink {
    /// Wraps a callback.
    pub fn new(f: impl Fn(CarrierStatus) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Reports progress.
    pub fn send(&self, status: CarrierStatus) {
        (self.0)(status)
    }
}

/// A telephony provider.
#[async_trait]
pub trait Carrier: Send + Sync + 'static {
    /// Places a call; returns the carrier's id for it.
    async fn place(&self, req: DialRequest, status: StatusSink) -> Result<String, CarrierError>;

    /// Hangs up a call; a call that already ended is not an error.
    async fn hangup(&self, carrier_call_id: &str) -> Result<(), CarrierError>;

    /// Takes on a call a person placed to a number of `org_id`, which the carrier has
    /// already answered: remembers whose account it is on, so that [`Carrier::hangup`]
    /// and [`Carrier::transfer`] can act on it for at most `time_limit_seconds` and a
    /// margin. Carriers that keep nothing per call need not do anything.
    fn adopt(&self, _carrier_call_id: &str, _org_id: &str, _time_limit_seconds: u32) {}

    /// Bridges an answered call's callee to another number, ending our media stream. The
    /// carrier later reports the bridged leg to [`TransferRequest::leg_status_url`] (the sim
    /// carrier to its [`TransferLegSink`](crate::sim::carrier::TransferLegSink)). Carriers
    /// that cannot transfer refuse.
    async fn transfer(&self, req: TransferRequest) -> Result<(), CarrierError> {
        Err(CarrierError::Rejected(format!(
            "this carrier cannot transfer call {} to {}",
            req.carrier_call_id, req.to
        )))
    }
}

/// Everything a carrier needs to bridge an answered call to a person.
#[derive(Debug, Clone)]
pub struct TransferRequest {
    /// Our call id.
    pub call_id: String,
    /// The workspace (chooses its carrier credentials).
    pub org_id: String,
    /// The carrier's id for the call.
    pub carrier_call_id: String,
    /// The E.164 number the callee is bridged to.
    pub to: String,
    /// The caller ID shown on the bridged leg (the call's own number).
    pub from: String,
    /// Where the carrier reports the bridged leg's outcome.
    pub leg_status_url: String,
}

/// What the carrier reported about a transfer's bridged leg.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransferLeg {
    /// Our call id.
    pub call_id: String,
    /// The carrier's status for the leg (`completed`, `no-answer`, `busy`, `failed`, …).
    pub status: String,
    /// How long the bridged leg lasted, when it was answered.
    pub duration_seconds: Option<u32>,
}
