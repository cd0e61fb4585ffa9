//! Why a call ended: its `endedReason`, one closed set that the conversation, the
//! engine and the service's recovery all end calls with.

use crate::providers::ProviderKind;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a call ended (its `endedReason`): what the conversation reports, and what the
/// engine and the service add around it (the dial, the media wait, a restart).
///
/// One closed set, so a reason is checked by the compiler where it is made and
/// compared as a value where it is read; the service stores [`EndedReason::as_str`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndedReason {
    /// The caller hung up (carrier `stop` or the socket closed).
    CallerHangup,
    /// The agent hung up (`end_call`, an end-call phrase, the end of an announcement or menu).
    AgentHangup,
    /// The call reached its maximum duration.
    MaxDuration,
    /// The caller stayed silent too long.
    SilenceTimeout,
    /// The call was canceled from our side.
    Canceled,
    /// Speech recognition failed.
    AsrError,
    /// The language model failed.
    LlmError,
    /// Speech synthesis failed.
    TtsError,
    /// The media stream failed or never started.
    CarrierError,
    /// The agent transferred the callee to a person.
    Transferred,
    /// An answering machine answered (the agent hung up, or left its message first).
    Voicemail,
    /// Nobody answered before the ring timeout (or the carrier said so).
    NoAnswer,
    /// The line was busy.
    Busy,
    /// The call was answered but its media stream never arrived.
    MediaTimeout,
    /// The media stream arrived in a form the service could not run.
    MediaError,
    /// The engine or the service failed the call (its actor died, its agent is gone).
    EngineError,
    /// The process stopped and a later start found the call.
    ServiceRestart,
    /// The process was asked to stop while the call was live.
    ServiceShutdown,
    /// The node running the call stopped heartbeating; a peer ended it.
    NodeLost,
    /// The call's agent was paused or deleted before the call could be dialed.
    AgentUnavailable,
    /// An inbound caller held for a slot gave up, or waited the number's `queueSeconds`.
    QueueTimeout,
    /// The callee asked not to be called again; the agent confirmed and hung up.
    OptOut,
    /// The number was put on the workspace's do-not-call list before the call was dialed.
    DoNotCall,
    /// The number reached the workspace's attempt cap (per 24 h or 7 days) before it was dialed.
    AttemptCap,
    /// The number's calling hours had no window the call could wait for (its
    /// candidate time zones share none) before it was dialed.
    CallingHours,
}

impl EndedReason {
    /// Every reason, in declaration order.
    pub const ALL: [EndedReason; 25] = [
        EndedReason::CallerHangup,
        EndedReason::AgentHangup,
        EndedReason::MaxDuration,
        EndedReason::SilenceTimeout,
        EndedReason::Canceled,
        EndedReason::AsrError,
        EndedReason::LlmError,
        EndedReason::TtsError,
        EndedReason::CarrierError,
        EndedReason::Transferred,
        EndedReason::Voicemail,
        EndedReason::NoAnswer,
        EndedReason::Busy,
        EndedReason::MediaTimeout,
        EndedReason::MediaError,
        EndedReason::EngineError,
        EndedReason::ServiceRestart,
        EndedReason::ServiceShutdown,
        EndedReason::NodeLost,
        EndedReason::AgentUnavailable,
        EndedReason::QueueTimeout,
        EndedReason::OptOut,
        EndedReason::DoNotCall,
        EndedReason::AttemptCap,
        EndedReason::CallingHours,
    ];

    /// The wire value (`caller-hangup`, `asr-error`, …).
    pub const fn as_str(self) -> &'static str {
        match self {
            EndedReason::CallerHangup => "caller-hangup",
            EndedReason::AgentHangup => "agent-hangup",
            EndedReason::MaxDuration => "max-duration",
            EndedReason::SilenceTimeout => "silence-timeout",
            EndedReason::Canceled => "canceled",
            EndedReason::AsrError => "asr-error",
            EndedReason::LlmError => "llm-error",
            EndedReason::TtsError => "tts-error",
            EndedReason::CarrierError => "carrier-error",
            EndedReason::Transferred => "transferred",
            EndedReason::Voicemail => "voicemail",
            EndedReason::NoAnswer => "no-answer",
            EndedReason::Busy => "busy",
            EndedReason::MediaTimeout => "media-timeout",
            EndedReason::MediaError => "media-error",
            EndedReason::EngineError => "engine-error",
            EndedReason::ServiceRestart => "service-restart",
            EndedReason::ServiceShutdown => "service-shutdown",
            EndedReason::NodeLost => "node-lost",
            EndedReason::AgentUnavailable => "agent-unavailable",
            EndedReason::QueueTimeout => "queue-timeout",
            EndedReason::OptOut => "opt-out",
            EndedReason::DoNotCall => "do-not-call",
            EndedReason::AttemptCap => "attempt-cap",
            EndedReason::CallingHours => "calling-hours",
        }
    }

    /// Parses the wire value; None for text no call ends with.
    pub fn parse(raw: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.as_str() == raw)
    }

    /// The reason a failure of `provider` ends a call with.
    pub const fn for_provider(provider: ProviderKind) -> Self {
        match provider {
            ProviderKind::Asr => EndedReason::AsrError,
            ProviderKind::Llm => EndedReason::LlmError,
            ProviderKind::Tts => EndedReason::TtsError,
        }
    }
}

impl fmt::Display for EndedReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ended_reason_parses_back_from_its_wire_value() {
        for reason in EndedReason::ALL {
            assert_eq!(EndedReason::parse(reason.as_str()), Some(reason));
            let json = serde_json::to_value(reason).unwrap();
            assert_eq!(json, serde_json::json!(reason.as_str()));
        }
        assert_eq!(EndedReason::parse("hung-up"), None);
    }
}
