//! Per-call media tokens: HMAC-signed and expiring, so only the carrier leg we
//! dialed can attach audio to a call. Single use is enforced by the call actor,
//! which accepts one media stream per call.

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

type HmacSha256 = Hmac<Sha256>;

/// Why a presented token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not `callId.expiry.signature`.
    #[error("malformed media token")]
    Malformed,
    /// Signature does not match.
    #[error("media token signature is invalid")]
    BadSignature,
    /// Past its expiry.
    #[error("media token has expired")]
    Expired,
}

/// Signs and verifies media tokens with the server secret.
#[derive(Clone)]
pub struct MediaTokens {
    key: Vec<u8>,
}

impl MediaTokens {
    /// A signer keyed by a secret derived for media tokens only.
    pub fn new(server_secret: &[u8]) -> Self {
        let mut key = b"voxline/media-token/v1\0".to_vec();
        key.extend_from_slice(server_secret);
        Self { key }
    }

    fn mac(&self, payload: &str) -> HmacSha256 {
        // HMAC accepts keys of any length, so construction cannot fail.
        let mut mac = match <HmacSha256 as KeyInit>::new_from_slice(&self.key) {
            Ok(m) => m,
            Err(_) => unreachable!("hmac takes any key length"),
        };
        mac.update(payload.as_bytes());
        mac
    }

    /// A token for `call_id` valid until `expires_unix` seconds.
    pub fn issue(&self, call_id: &str, expires_unix: i64) -> String {
        let payload = format!("{call_id}.{expires_unix}");
        let sig = hex::encode(self.mac(&payload).finalize().into_bytes());
        format!("{payload}.{sig}")
    }

    /// Checks signature and expiry; returns the call id.
    pub fn verify(&self, token: &str, now_unix: i64) -> Result<String, TokenError> {
        let mut parts = token.rsplitn(3, '.');
        let (Some(sig), Some(expiry), Some(call_id)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let expires: i64 = expiry.parse().map_err(|_| TokenError::Malformed)?;
        let sig = hex::decode(sig).map_err(|_| TokenError::Malformed)?;
        self.mac(&format!("{call_id}.{expires}"))
            .verify_slice(&sig)
            .map_err(|_| TokenError::BadSignature)?;
        if now_unix > expires {
            return Err(TokenError::Expired);
        }
        Ok(call_id.to_string())
    }
}

/// Tokens already used, with their expiry, so a reused token is refused even
/// after its call ended.
#[derive(Default)]
pub struct UsedTokens {
    used: std::sync::Mutex<std::collections::HashMap<String, i64>>,
}

impl UsedTokens {
    /// Marks `token` used; false when it already was.
    pub fn claim(&self, token: &str, now_unix: i64) -> bool {
        // A poisoned lock only means another claim panicked; the map is still whole.
        let mut used = self
            .used
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if used.len() > 10_000 {
            used.retain(|_, expires| *expires >= now_unix);
        }
        let expires = token
            .rsplit('.')
            .nth(1)
            .and_then(|e| e.parse().ok())
            .unwrap_or(now_unix);
        used.insert(token.to_string(), expires).is_none()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_verify_tamper_expire() {
        let tokens = MediaTokens::new(b"s");
        let t = tokens.issue("call-1", 100);
        assert_eq!(tokens.verify(&t, 50).unwrap(), "call-1");
        assert_eq!(tokens.verify(&t, 101), Err(TokenError::Expired));
        let forged = t.replace("call-1", "call-2");
        assert_eq!(tokens.verify(&forged, 50), Err(TokenError::BadSignature));
        assert_eq!(
            MediaTokens::new(b"other").verify(&t, 50),
            Err(TokenError::BadSignature)
        );
        assert_eq!(tokens.verify("nope", 0), Err(TokenError::Malformed));
    }
}
