//! The name of one `voxline serve` process among several on one database.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A node's id: 1 to 64 ASCII letters, digits, `.`, `_` or `-`, so it is safe
/// in logs, metrics labels, file names and NOTIFY payloads.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct NodeId(String);

/// Why a text is not a node id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a node id is 1 to 64 ASCII letters, digits, '.', '_' or '-'")]
pub struct NodeIdError;

impl NodeId {
    /// A fresh id, `node-` and twelve hex digits of a random UUID.
    pub fn generate() -> Self {
        let hex = uuid::Uuid::new_v4().simple().to_string();
        Self(format!("node-{}", &hex[..12]))
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for NodeId {
    type Err = NodeIdError;
    fn from_str(raw: &str) -> Result<Self, NodeIdError> {
        let raw = raw.trim();
        let allowed = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if raw.is_empty() || raw.len() > 64 || !raw.chars().all(allowed) {
            return Err(NodeIdError);
        }
        Ok(Self(raw.to_string()))
    }
}

impl<'de> Deserialize<'de> for NodeId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        raw.parse().map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

text_column!(NodeId, |node| node.0.clone());

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_safe_names_and_refuses_the_rest() {
        assert_eq!(
            "node-a.1_x".parse::<NodeId>().unwrap().as_str(),
            "node-a.1_x"
        );
        assert!("".parse::<NodeId>().is_err());
        assert!("a b".parse::<NodeId>().is_err());
        assert!("a'b".parse::<NodeId>().is_err());
        assert!("x".repeat(65).parse::<NodeId>().is_err());
        let generated = NodeId::generate();
        assert_eq!(generated.as_str().parse::<NodeId>().unwrap(), generated);
    }
}
