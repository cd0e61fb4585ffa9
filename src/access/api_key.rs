//! API key material: generation, hashing and the display prefix.

use sha2::{Digest, Sha256};

/// Every key starts with this.
pub const KEY_PREFIX: &str = "acai_";
const BASE62: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
/// 43 base62 characters carry 256 bits, i.e. 32 random bytes.
const SECRET_CHARS: usize = 43;
/// Characters kept for display: `acai_` and the first seven secret characters.
const DISPLAY_LEN: usize = 12;

/// A freshly generated key; the full text exists only until it is shown once.
#[derive(Debug, Clone)]
pub struct GeneratedKey {
    /// The full key, `acai_` + base62 secret.
    pub full: String,
    /// The display prefix stored for lists.
    pub prefix: String,
    /// Hex SHA-256 of the full key, the only form stored.
    pub hash: String,
}

impl GeneratedKey {
    /// Draws a new key from the thread's cryptographic RNG.
    pub fn generate() -> Self {
        let mut full = String::with_capacity(KEY_PREFIX.len() + SECRET_CHARS);
        full.push_str(KEY_PREFIX);
        for _ in 0..SECRET_CHARS {
            full.push(char::from(BASE62[rand::random_range(0..BASE62.len())]));
        }
        let prefix = full[..DISPLAY_LEN].to_string();
        let hash = hash_key(&full);
        Self { full, prefix, hash }
    }
}

/// Hex SHA-256 of a presented key.
pub fn hash_key(key: &str) -> String {
    hex::encode(Sha256::digest(key.as_bytes()))
}

/// Whether `key` has the shape of one of our keys (cheap pre-check before a lookup).
pub fn looks_like_key(key: &str) -> bool {
    key.len() == KEY_PREFIX.len() + SECRET_CHARS
        && key.starts_with(KEY_PREFIX)
        && key[KEY_PREFIX.len()..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_long_unique_and_hash_stably() {
        let a = GeneratedKey::generate();
        let b = GeneratedKey::generate();
        assert_ne!(a.full, b.full);
        assert!(looks_like_key(&a.full));
        assert!(a.full.starts_with(&a.prefix));
        assert_eq!(a.hash, hash_key(&a.full));
        assert_eq!(a.hash.len(), 64);
        assert!(!looks_like_key("acai_short"));
    }
}
