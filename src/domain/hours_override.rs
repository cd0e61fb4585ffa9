//! How a call came to be dialed outside its calling hours (issue 32): the
//! only two permitted ways, recorded on the call so an audit can find them.

use std::fmt;
use std::str::FromStr;

/// A permitted way past the calling hours, stored on the call it placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoursOverride {
    /// `POST /api/calls` with `"respectCallingHours": false`, and the agent's
    /// `compliance.allowCallingHoursOverride` on.
    Request,
    /// An alert dial whose agent sets `compliance.bypassCallingHours` (emergencies).
    EmergencyAlert,
}

impl HoursOverride {
    /// The stored and returned form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::EmergencyAlert => "emergency-alert",
        }
    }
}

impl fmt::Display for HoursOverride {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Stored text that is no override.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a calling-hours override")]
pub struct UnknownOverride(String);

impl FromStr for HoursOverride {
    type Err = UnknownOverride;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "request" => Ok(Self::Request),
            "emergency-alert" => Ok(Self::EmergencyAlert),
            other => Err(UnknownOverride(other.to_string())),
        }
    }
}

text_column!(HoursOverride, |value| value.as_str().to_string());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_form_round_trips() {
        for o in [HoursOverride::Request, HoursOverride::EmergencyAlert] {
            assert_eq!(o.as_str().parse::<HoursOverride>().unwrap(), o);
        }
        assert!("always".parse::<HoursOverride>().is_err());
    }
}
