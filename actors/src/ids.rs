//! The ids the engine is handed: a call, its workspace and its batch.
//!
//! The service parses ids once, at its edge, into its own types; it converts them to
//! these when it hands a call to the engine, and the engine gives them back unchanged
//! in its reports. Neither side parses text at the boundary, so a report can never
//! name a call that does not parse.

/// Declares a UUIDv7 id newtype: time-ordered, printed and parsed as the lowercase
/// hyphenated form, serialized as that text. The service declares its own ids with it
/// too (adding its database column impls), so the two kinds print and parse alike.
#[macro_export]
macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub uuid::Uuid);

        impl $name {
            /// A fresh time-ordered id.
            pub fn new() -> Self {
                Self(uuid::Uuid::now_v7())
            }
        }

        impl Default for $name {
            fn default() -> Self {
                Self::new()
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                std::fmt::Display::fmt(&self.0.as_hyphenated(), f)
            }
        }

        impl std::str::FromStr for $name {
            type Err = uuid::Error;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                uuid::Uuid::parse_str(s).map(Self)
            }
        }
    };
}

uuid_id!(
    /// A call (each attempt is its own call).
    CallId
);
uuid_id!(
    /// A workspace: its calls share its concurrency slots.
    OrgId
);
uuid_id!(
    /// A batch (or a campaign) whose items the engine pulls one at a time.
    BatchId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_print_as_the_hyphenated_uuid_they_parse_from() {
        let id: CallId = "0190F2C4-8B7A-7C3D-9E1F-2A3B4C5D6E7F".parse().unwrap();
        assert_eq!(id.to_string(), "0190f2c4-8b7a-7c3d-9e1f-2a3b4c5d6e7f");
        assert!("call-1".parse::<CallId>().is_err());
        assert_ne!(OrgId::new(), OrgId::new());
    }
}
