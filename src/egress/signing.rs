//! How our outgoing requests prove they are ours: webhooks and function
//! tools carry `x-service-timestamp` and `x-service-signature`, the HMAC of
//! the timestamp and the body under the receiver's secret. It lives here,
//! a leaf, so every sender can use it without depending on another sender.

use voxline_actors::signing::Signer;

/// The `X-Service-Signature` value: `v1=` hex HMAC-SHA256 of `"<timestamp>.<body>"`.
pub fn signature(secret: &str, timestamp: i64, body: &[u8]) -> String {
    let tag = Signer::sha256(secret).sign_hex(&[timestamp.to_string().as_bytes(), b".", body]);
    format!("v1={tag}")
}
