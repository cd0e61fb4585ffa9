//! Identifier newtypes. Every id is a UUIDv7, so ids sort by creation time.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;
use uuid::Uuid;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub Uuid);

        impl $name {
            /// A fresh time-ordered id.
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.as_hyphenated().fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self)
            }
        }
    };
}

id_type!(
    /// A workspace (organization).
    OrgId
);
id_type!(
    /// An API key record (not the secret itself).
    ApiKeyId
);
id_type!(
    /// An agent.
    AgentId
);
id_type!(
    /// A rented phone number.
    NumberId
);
id_type!(
    /// A wallet transaction.
    WalletTxId
);
id_type!(
    /// A webhook subscription.
    WebhookId
);
id_type!(
    /// A call (each attempt is its own call).
    CallId
);
