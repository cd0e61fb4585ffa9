//! Console passwords: hashing (argon2id with the crate's defaults: 19 MiB, 2 passes)
//! and the one-time passwords the CLI and the team page hand out.

use crate::domain::Password;
use argon2::Argon2;
use argon2::password_hash::{PasswordHasher, PasswordVerifier};

/// Why a password could not be hashed or a stored hash not read.
#[derive(Debug, thiserror::Error)]
#[error("password hashing failed: {0}")]
pub struct HashError(String);

/// The PHC string (`$argon2id$v=19$…`) of `password`, with a fresh salt.
pub fn hash(password: &Password) -> Result<String, HashError> {
    Argon2::default()
        .hash_password(password.expose().as_bytes())
        .map(|h| h.to_string())
        .map_err(|e| HashError(e.to_string()))
}

/// Whether `given` matches the stored PHC string `stored`. A stored value
/// that does not parse matches nothing.
pub fn verify(given: &str, stored: &str) -> bool {
    let Ok(parsed) = argon2::password_hash::phc::PasswordHash::new(stored) else {
        return false;
    };
    Argon2::default()
        .verify_password(given.as_bytes(), &parsed)
        .is_ok()
}

/// A hash to verify against when no person has the email given, so a
/// sign-in takes as long whether or not the address exists.
pub fn decoy_hash() -> &'static str {
    static DECOY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DECOY.get_or_init(|| {
        Password::parse("decoy password never used")
            .ok()
            .and_then(|p| hash(&p).ok())
            .unwrap_or_default()
    })
}

/// Letters and digits that cannot be mistaken for each other when read aloud
/// or copied by hand (no 0/O, 1/l/I).
const ALPHABET: &[u8] = b"abcdefghijkmnpqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";

/// A random 16-character one-time password (about 93 bits).
pub fn one_time() -> Password {
    let text: String = (0..16)
        .map(|_| char::from(ALPHABET[rand::random_range(0..ALPHABET.len())]))
        .collect();
    // 16 characters are always within the bounds.
    Password::parse(&text).unwrap_or_else(|_| unreachable!("16 characters fit the bounds"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_verifies_its_password_only() {
        let p = Password::parse("correct horse battery").unwrap();
        let h = hash(&p).unwrap();
        assert!(h.starts_with("$argon2id$"));
        assert!(verify("correct horse battery", &h));
        assert!(!verify("correct horse batterz", &h));
        assert!(!verify("correct horse battery", "not a phc string"));
    }

    #[test]
    fn one_time_passwords_differ_and_fit() {
        let a = one_time();
        let b = one_time();
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 16);
        assert!(a.expose().bytes().all(|c| ALPHABET.contains(&c)));
    }
}
