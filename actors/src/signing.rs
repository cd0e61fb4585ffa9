//! HMAC signing for everything Voxline signs or checks: media tokens, recording
//! links, carrier callbacks and outgoing webhooks.
//!
//! It lives in the actors crate because the engine issues media tokens and the
//! binary crate (links, carriers, webhooks) depends on this crate, so every
//! user imports it without a cycle. Checks always go through the MAC's own
//! constant-time comparison, never through `==` on tags.

use hmac::{Hmac, KeyInit, Mac};
use sha1::Sha1;
use sha2::Sha256;

/// The hash under the HMAC: SHA-256 for everything of ours, SHA-1 only where a
/// carrier (Twilio) fixes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hash {
    /// HMAC-SHA1.
    Sha1,
    /// HMAC-SHA256.
    Sha256,
}

/// A key and a hash: signs messages given as parts (signed as if concatenated)
/// and checks tags in constant time.
#[derive(Clone)]
pub struct Signer {
    hash: Hash,
    key: Vec<u8>,
}

impl std::fmt::Debug for Signer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("hash", &self.hash)
            .finish_non_exhaustive()
    }
}

/// Feeds `parts` to a fresh MAC keyed by `key`.
fn keyed<M: Mac + KeyInit>(key: &[u8], parts: &[&[u8]]) -> M {
    // HMAC accepts keys of any length, so construction cannot fail.
    let mut mac = match <M as KeyInit>::new_from_slice(key) {
        Ok(mac) => mac,
        Err(_) => unreachable!("hmac takes any key length"),
    };
    for part in parts {
        mac.update(part);
    }
    mac
}

impl Signer {
    /// HMAC-SHA256 keyed by `key` as given (a carrier's or a webhook's secret).
    pub fn sha256(key: impl AsRef<[u8]>) -> Self {
        Self {
            hash: Hash::Sha256,
            key: key.as_ref().to_vec(),
        }
    }

    /// HMAC-SHA1 keyed by `key`, for carriers that still sign with it.
    pub fn sha1(key: impl AsRef<[u8]>) -> Self {
        Self {
            hash: Hash::Sha1,
            key: key.as_ref().to_vec(),
        }
    }

    /// HMAC-SHA256 keyed by `purpose`, a NUL and `secret`: each use of the
    /// server secret gets its own key, so a tag made for one purpose (a media
    /// token) never verifies as another (a recording link).
    pub fn derived(purpose: &str, secret: &[u8]) -> Self {
        let mut key = Vec::with_capacity(purpose.len() + 1 + secret.len());
        key.extend_from_slice(purpose.as_bytes());
        key.push(0);
        key.extend_from_slice(secret);
        Self {
            hash: Hash::Sha256,
            key,
        }
    }

    /// The tag of the concatenation of `parts`.
    pub fn sign(&self, parts: &[&[u8]]) -> Vec<u8> {
        match self.hash {
            Hash::Sha1 => keyed::<Hmac<Sha1>>(&self.key, parts)
                .finalize()
                .into_bytes()
                .to_vec(),
            Hash::Sha256 => keyed::<Hmac<Sha256>>(&self.key, parts)
                .finalize()
                .into_bytes()
                .to_vec(),
        }
    }

    /// [`Signer::sign`] as lowercase hex.
    pub fn sign_hex(&self, parts: &[&[u8]]) -> String {
        hex::encode(self.sign(parts))
    }

    /// Whether `tag` is the tag of `parts`, compared in constant time.
    pub fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        match self.hash {
            Hash::Sha1 => keyed::<Hmac<Sha1>>(&self.key, parts)
                .verify_slice(tag)
                .is_ok(),
            Hash::Sha256 => keyed::<Hmac<Sha256>>(&self.key, parts)
                .verify_slice(tag)
                .is_ok(),
        }
    }

    /// [`Signer::verify`] for a hex tag; malformed hex never verifies.
    pub fn verify_hex(&self, parts: &[&[u8]], tag: &str) -> bool {
        hex::decode(tag.trim()).is_ok_and(|tag| self.verify(parts, &tag))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vectors() {
        // RFC 4231 test case 2 and RFC 2202 test case 2.
        let parts: [&[u8]; 2] = [b"what do ya want ", b"for nothing?"];
        assert_eq!(
            Signer::sha256("Jefe").sign_hex(&parts),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            Signer::sha1("Jefe").sign_hex(&parts),
            "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79"
        );
    }

    #[test]
    fn verification_needs_the_same_key_parts_and_hash() {
        let signer = Signer::sha256("k");
        let tag = signer.sign(&[b"a", b"b"]);
        assert!(signer.verify(&[b"ab"], &tag));
        assert!(!signer.verify(&[b"ab", b"c"], &tag));
        assert!(!Signer::sha256("other").verify(&[b"ab"], &tag));
        assert!(!Signer::sha1("k").verify(&[b"ab"], &tag));
        assert!(!signer.verify(&[b"ab"], &tag[..16]));
        assert!(!signer.verify_hex(&[b"ab"], "zz"));
        assert!(signer.verify_hex(&[b"ab"], &hex::encode(&tag)));
    }

    #[test]
    fn derived_keys_keep_purposes_apart() {
        let tag = Signer::derived("voxline/a/v1", b"s").sign(&[b"x"]);
        assert!(Signer::derived("voxline/a/v1", b"s").verify(&[b"x"], &tag));
        assert!(!Signer::derived("voxline/b/v1", b"s").verify(&[b"x"], &tag));
        assert!(Signer::sha256(b"voxline/a/v1\0s").verify(&[b"x"], &tag));
    }
}
