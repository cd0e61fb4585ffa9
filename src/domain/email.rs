//! Email addresses of the people called, parsed once at the edge: a CSV
//! cell, a batch item's `email`, a call's `email` variable.

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;
use std::str::FromStr;

/// Most characters an address may have (RFC 5321's path limit less the brackets).
pub const MAX_EMAIL_CHARS: usize = 254;

/// A syntactically valid address `local@domain.tld`, trimmed: no display
/// name, no IP-literal domain, a domain of at least two labels. Whether a
/// mailbox exists is not (and cannot be) checked here.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Email(String);

/// Why a text is not an [`Email`]; reads after the field's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EmailError {
    /// Not of the form `local@domain.tld`.
    #[error("is not an email address ({0})")]
    Invalid(String),
    /// Longer than [`MAX_EMAIL_CHARS`].
    #[error("is longer than {MAX_EMAIL_CHARS} characters")]
    TooLong,
}

impl Email {
    /// Parses `raw`, trimmed.
    pub fn parse(raw: &str) -> Result<Self, EmailError> {
        let text = raw.trim();
        if text.chars().count() > MAX_EMAIL_CHARS {
            return Err(EmailError::TooLong);
        }
        let options = email_address::Options {
            minimum_sub_domains: 2,
            allow_domain_literal: false,
            allow_display_text: false,
            ..email_address::Options::default()
        };
        email_address::EmailAddress::parse_with_options(text, options)
            .map(|address| Self(address.as_str().to_string()))
            .map_err(|e| EmailError::Invalid(e.to_string()))
    }

    /// A cell or value that may be empty: blank means no address.
    pub fn parse_optional(raw: &str) -> Result<Option<Self>, EmailError> {
        if raw.trim().is_empty() {
            Ok(None)
        } else {
            Self::parse(raw).map(Some)
        }
    }

    /// The address.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The address, owned.
    pub fn into_string(self) -> String {
        self.0
    }
}

impl FromStr for Email {
    type Err = EmailError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Email {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Serialize for Email {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> Deserialize<'de> for Email {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

impl utoipa::PartialSchema for Email {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        utoipa::openapi::ObjectBuilder::new()
            .schema_type(utoipa::openapi::schema::Type::String)
            .format(Some(utoipa::openapi::SchemaFormat::KnownFormat(
                utoipa::openapi::KnownFormat::Email,
            )))
            .max_length(Some(MAX_EMAIL_CHARS))
            .description(Some("An email address, local@domain.tld"))
            .into()
    }
}

impl utoipa::ToSchema for Email {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_trimmed_and_checked() {
        assert_eq!(
            Email::parse("  asha@example.com ").unwrap().as_str(),
            "asha@example.com"
        );
        assert!(Email::parse("asha.rao+jobs@mail.example.co.in").is_ok());
        for bad in [
            "asha",
            "asha@",
            "@example.com",
            "asha@localhost",
            "asha@[127.0.0.1]",
            "Asha <asha@example.com>",
            "as ha@example.com",
            "asha@@example.com",
        ] {
            assert!(
                matches!(Email::parse(bad), Err(EmailError::Invalid(_))),
                "{bad}"
            );
        }
        let long = format!("{}@example.com", "a".repeat(250));
        assert_eq!(Email::parse(&long), Err(EmailError::TooLong));
        assert_eq!(Email::parse_optional("  "), Ok(None));
        assert!(Email::parse_optional("x").is_err());
    }

    #[test]
    fn deserializing_refuses_a_bad_address() {
        let ok: Email = serde_json::from_str(r#""a@b.co""#).unwrap();
        assert_eq!(ok.to_string(), "a@b.co");
        let err = serde_json::from_str::<Email>(r#""nope""#).unwrap_err();
        assert!(err.to_string().contains("not an email address"), "{err}");
    }
}
