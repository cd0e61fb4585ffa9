//! The do-not-call list's values: where an entry came from, and the rule a
//! skipped item or a refused call names.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use utoipa::ToSchema;

/// The `skipReason` of a batch item or campaign row whose number is listed.
pub const SKIP_REASON: &str = "do-not-call";

/// Longest reason an entry may carry.
pub const MAX_REASON_CHARS: usize = 200;

/// Where a do-not-call entry came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum DncSource {
    /// Added through `POST /api/numbers/do-not-call`.
    Api,
    /// The callee asked not to be called again, during a call.
    OptOut,
    /// A row of a CSV import.
    Import,
    /// Added in the console.
    Console,
}

impl DncSource {
    /// The stored and shown form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Api => "api",
            Self::OptOut => "opt-out",
            Self::Import => "import",
            Self::Console => "console",
        }
    }
}

impl fmt::Display for DncSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A source that is none of `api`, `opt-out`, `import`, `console`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be api, opt-out, import or console, not {0:?}")]
pub struct BadDncSource(pub String);

impl FromStr for DncSource {
    type Err = BadDncSource;

    fn from_str(raw: &str) -> Result<Self, Self::Err> {
        match raw {
            "api" => Ok(Self::Api),
            "opt-out" => Ok(Self::OptOut),
            "import" => Ok(Self::Import),
            "console" => Ok(Self::Console),
            other => Err(BadDncSource(other.to_string())),
        }
    }
}

text_column!(DncSource, |source| source.as_str().to_string());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse_back_from_their_stored_form() {
        for source in [
            DncSource::Api,
            DncSource::OptOut,
            DncSource::Import,
            DncSource::Console,
        ] {
            assert_eq!(source.as_str().parse::<DncSource>(), Ok(source));
            assert_eq!(
                serde_json::to_value(source).unwrap(),
                serde_json::json!(source.as_str())
            );
        }
        assert!("optout".parse::<DncSource>().is_err());
    }
}
