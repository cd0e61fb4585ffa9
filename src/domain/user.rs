//! The people of a workspace as the web console knows them: a [`Role`] that
//! decides what they may see and change, and a [`Password`] parsed once.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// What a person may do in the console; later variants may do everything
/// earlier ones may (`Viewer < Member < Admin < Owner`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Reads calls, agents, batches and ratings; changes nothing.
    Viewer,
    /// Also places test calls and edits agents, batches and ratings.
    Member,
    /// Also manages API keys, webhooks, credentials and numbers.
    Admin,
    /// Also manages the workspace's people.
    Owner,
}

impl Role {
    /// Every role, lowest first.
    pub const ALL: [Role; 4] = [Role::Viewer, Role::Member, Role::Admin, Role::Owner];

    /// The stored and displayed name.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Viewer => "viewer",
            Role::Member => "member",
            Role::Admin => "admin",
            Role::Owner => "owner",
        }
    }
}

impl fmt::Display for Role {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a text is not a [`Role`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("must be one of owner, admin, member or viewer (got {0:?})")]
pub struct RoleError(pub String);

impl FromStr for Role {
    type Err = RoleError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "viewer" => Ok(Role::Viewer),
            "member" => Ok(Role::Member),
            "admin" => Ok(Role::Admin),
            "owner" => Ok(Role::Owner),
            _ => Err(RoleError(s.to_string())),
        }
    }
}

// Stored as its lowercase name.
text_column!(Role, |role| role.as_str().to_string());

/// Fewest characters a password may have.
pub const MIN_PASSWORD_CHARS: usize = 10;
/// Most characters a password may have (argon2 takes any length; this bounds
/// the work a sign-in request can ask for).
pub const MAX_PASSWORD_CHARS: usize = 256;

/// A password of acceptable length. It is never printed by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

/// Why a text is not a [`Password`]; reads after the field's name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PasswordError {
    /// Shorter than [`MIN_PASSWORD_CHARS`].
    #[error("must have at least {MIN_PASSWORD_CHARS} characters")]
    TooShort,
    /// Longer than [`MAX_PASSWORD_CHARS`].
    #[error("must have at most {MAX_PASSWORD_CHARS} characters")]
    TooLong,
}

impl Password {
    /// Parses `raw` as given (no trimming: spaces are characters of a password).
    pub fn parse(raw: &str) -> Result<Self, PasswordError> {
        match raw.chars().count() {
            n if n < MIN_PASSWORD_CHARS => Err(PasswordError::TooShort),
            n if n > MAX_PASSWORD_CHARS => Err(PasswordError::TooLong),
            _ => Ok(Self(raw.to_string())),
        }
    }

    /// The password's text, for hashing and verifying only.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Password {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Password(…)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_order_and_parse() {
        assert!(Role::Viewer < Role::Member && Role::Admin < Role::Owner);
        assert_eq!(" Admin ".parse::<Role>(), Ok(Role::Admin));
        assert!("root".parse::<Role>().is_err());
        for role in Role::ALL {
            assert_eq!(role.as_str().parse::<Role>(), Ok(role));
        }
    }

    #[test]
    fn passwords_are_bounded_and_hidden() {
        assert_eq!(Password::parse("short"), Err(PasswordError::TooShort));
        assert_eq!(
            Password::parse(&"x".repeat(MAX_PASSWORD_CHARS + 1)),
            Err(PasswordError::TooLong)
        );
        let p = Password::parse("correct horse").unwrap();
        assert_eq!(p.expose(), "correct horse");
        assert_eq!(format!("{p:?}"), "Password(…)");
    }
}
