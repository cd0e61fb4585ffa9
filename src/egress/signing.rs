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

/// The `X-Service-Signature` value signed under each of `secrets` (the current
/// one first), comma-separated: `v1=<current>,v1=<previous>` while a rotated
/// webhook secret's overlap lasts, as Stripe does. With one secret it is
/// exactly [`signature`], so receivers that compare the whole header keep
/// working until a rotation; a receiver accepts any `v1=` entry that matches.
pub fn signatures(secrets: &[&str], timestamp: i64, body: &[u8]) -> String {
    secrets
        .iter()
        .map(|secret| signature(secret, timestamp, body))
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_secrets_give_one_v1_entry_each_current_first() {
        let body = br#"{"a":1}"#;
        let one = signatures(&["whsec_new"], 1_700_000_000, body);
        assert_eq!(one, signature("whsec_new", 1_700_000_000, body));
        let both = signatures(&["whsec_new", "whsec_old"], 1_700_000_000, body);
        assert_eq!(
            both,
            format!(
                "{},{}",
                signature("whsec_new", 1_700_000_000, body),
                signature("whsec_old", 1_700_000_000, body)
            )
        );
    }
}
