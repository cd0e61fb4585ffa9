//! Inbound calling's values: which way a call went, what a number does when
//! its workspace's slots are full, and a number's inbound settings, parsed
//! once where they enter (the API, the console, the admin CLI, the store).

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use utoipa::ToSchema;

/// Which way a call went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum CallDirection {
    /// We dialed the person.
    Outbound,
    /// The person called one of the workspace's numbers.
    Inbound,
}

impl CallDirection {
    /// The stored and shown form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Outbound => "outbound",
            Self::Inbound => "inbound",
        }
    }
}

impl fmt::Display for CallDirection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A direction that is neither `outbound` nor `inbound`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be outbound or inbound, not {0:?}")]
pub struct BadDirection(pub String);

impl FromStr for CallDirection {
    type Err = BadDirection;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "outbound" => Ok(Self::Outbound),
            "inbound" => Ok(Self::Inbound),
            other => Err(BadDirection(other.to_string())),
        }
    }
}

text_column!(CallDirection, |direction| direction.as_str().to_string());

/// What a number does with a caller when its workspace has no free slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum WhenBusy {
    /// Answer busy in the carrier's own form.
    #[default]
    Reject,
    /// Hold the caller (the hold message) until a slot frees, for at most
    /// the number's `queueSeconds`.
    Queue,
}

impl WhenBusy {
    /// The stored and shown form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Reject => "reject",
            Self::Queue => "queue",
        }
    }
}

/// A busy rule that is neither `reject` nor `queue`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be reject or queue, not {0:?}")]
pub struct BadWhenBusy(pub String);

impl FromStr for WhenBusy {
    type Err = BadWhenBusy;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "reject" => Ok(Self::Reject),
            "queue" => Ok(Self::Queue),
            other => Err(BadWhenBusy(other.to_string())),
        }
    }
}

text_column!(WhenBusy, |rule| rule.as_str().to_string());

/// Fewest seconds a held caller may wait for a slot.
pub const MIN_QUEUE_SECONDS: u32 = 5;
/// Most seconds a held caller may wait for a slot.
pub const MAX_QUEUE_SECONDS: u32 = 600;
/// Longest hold message, in characters.
pub const MAX_HOLD_MESSAGE_CHARS: usize = 500;
/// What a held caller hears when the number sets no hold message.
pub const DEFAULT_HOLD_MESSAGE: &str =
    "Thank you for calling. All our lines are busy; please stay on the line.";

/// A number's inbound settings, as stored and as the API shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundSettings {
    /// Whether the number answers at all.
    pub enabled: bool,
    /// What happens when the workspace's slots are full.
    pub when_busy: WhenBusy,
    /// How long a held caller waits for a slot before the call ends.
    pub queue_seconds: u32,
    /// What a held caller hears; `None` uses [`DEFAULT_HOLD_MESSAGE`].
    pub hold_message: Option<String>,
}

impl Default for InboundSettings {
    fn default() -> Self {
        Self {
            enabled: false,
            when_busy: WhenBusy::Reject,
            queue_seconds: 60,
            hold_message: None,
        }
    }
}

impl InboundSettings {
    /// The hold message a held caller hears.
    pub fn hold_message(&self) -> &str {
        self.hold_message.as_deref().unwrap_or(DEFAULT_HOLD_MESSAGE)
    }
}

/// A `queueSeconds` outside its bounds.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be between {MIN_QUEUE_SECONDS} and {MAX_QUEUE_SECONDS} seconds, not {0}")]
pub struct BadQueueSeconds(pub i64);

/// Parses a `queueSeconds` value.
pub fn queue_seconds(raw: i64) -> Result<u32, BadQueueSeconds> {
    u32::try_from(raw)
        .ok()
        .filter(|s| (MIN_QUEUE_SECONDS..=MAX_QUEUE_SECONDS).contains(s))
        .ok_or(BadQueueSeconds(raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directions_and_busy_rules_read_back_what_they_write() {
        for d in [CallDirection::Outbound, CallDirection::Inbound] {
            assert_eq!(d.as_str().parse::<CallDirection>(), Ok(d));
        }
        for w in [WhenBusy::Reject, WhenBusy::Queue] {
            assert_eq!(w.as_str().parse::<WhenBusy>(), Ok(w));
        }
        assert!("sideways".parse::<CallDirection>().is_err());
        assert!("wait".parse::<WhenBusy>().is_err());
    }

    #[test]
    fn queue_seconds_are_bounded() {
        assert_eq!(queue_seconds(5), Ok(5));
        assert_eq!(queue_seconds(600), Ok(600));
        assert_eq!(queue_seconds(4), Err(BadQueueSeconds(4)));
        assert_eq!(queue_seconds(601), Err(BadQueueSeconds(601)));
        assert_eq!(queue_seconds(-1), Err(BadQueueSeconds(-1)));
    }
}
