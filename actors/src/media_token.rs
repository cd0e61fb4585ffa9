//! Per-call media tokens: HMAC-signed and expiring, so only the carrier leg we
//! dialed can attach audio to a call. Single use is enforced by the call actor,
//! which accepts one media stream per call.

use crate::ids::CallId;
use crate::signing::Signer;

/// Why a presented token was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Not `callId.expiry.signature` (or the call id is no id).
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
    signer: Signer,
}

impl MediaTokens {
    /// A signer keyed by a secret derived for media tokens only.
    pub fn new(server_secret: &[u8]) -> Self {
        Self {
            signer: Signer::derived("voxline/media-token/v1", server_secret),
        }
    }

    /// A token for `call_id` valid until `expires_unix` seconds.
    pub fn issue(&self, call_id: CallId, expires_unix: i64) -> String {
        let payload = format!("{call_id}.{expires_unix}");
        let sig = self.signer.sign_hex(&[payload.as_bytes()]);
        format!("{payload}.{sig}")
    }

    /// Checks signature and expiry; returns the call id.
    pub fn verify(&self, token: &str, now_unix: i64) -> Result<CallId, TokenError> {
        let mut parts = token.rsplitn(3, '.');
        let (Some(sig), Some(expiry), Some(call_id)) = (parts.next(), parts.next(), parts.next())
        else {
            return Err(TokenError::Malformed);
        };
        let expires: i64 = expiry.parse().map_err(|_| TokenError::Malformed)?;
        let sig = hex::decode(sig).map_err(|_| TokenError::Malformed)?;
        if !self
            .signer
            .verify(&[format!("{call_id}.{expires}").as_bytes()], &sig)
        {
            return Err(TokenError::BadSignature);
        }
        if now_unix > expires {
            return Err(TokenError::Expired);
        }
        // Only we sign tokens, and only for ids we hold, so a signed text that is no id
        // means the secret signed something else: refused like any malformed token.
        call_id.parse().map_err(|_| TokenError::Malformed)
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
        let (call, other) = (CallId::new(), CallId::new());
        let t = tokens.issue(call, 100);
        assert_eq!(tokens.verify(&t, 50).unwrap(), call);
        assert_eq!(tokens.verify(&t, 101), Err(TokenError::Expired));
        let forged = t.replace(&call.to_string(), &other.to_string());
        assert_eq!(tokens.verify(&forged, 50), Err(TokenError::BadSignature));
        assert_eq!(
            MediaTokens::new(b"other").verify(&t, 50),
            Err(TokenError::BadSignature)
        );
        assert_eq!(tokens.verify("nope", 0), Err(TokenError::Malformed));
    }
}
