//! One carrier callback request as it arrived (URL, headers, body), and how
//! its fields are read: what each carrier's own file verifies and parses.

use super::{CarriersError, verify_callback_sig, verify_transfer_callback_sig};
use crate::domain::text::{self, Lines};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, Uri};
use voxline_actors::signing::Signer;

/// One callback request as the carrier sent it.
#[derive(Debug, Clone)]
pub struct CallbackRequest {
    /// HTTP method (`GET` or `POST`).
    pub method: Method,
    /// The full public URL the carrier called, query included: what it signed.
    pub url: String,
    /// Request headers (signatures live here).
    pub headers: HeaderMap,
    /// Raw body (form-encoded or JSON).
    pub body: Bytes,
}

impl CallbackRequest {
    /// Rebuilds the public URL from the service's public base URL (e.g.
    /// `https://voxline.example.com`) and the request's original path and query;
    /// without a base, from the `X-Forwarded-Proto` and `Host` headers.
    pub fn new(
        public_base_url: Option<&str>,
        method: Method,
        original_uri: &Uri,
        headers: HeaderMap,
        body: Bytes,
    ) -> Self {
        let path_and_query = original_uri
            .path_and_query()
            .map(|pq| pq.as_str())
            .unwrap_or("/");
        let base = match public_base_url {
            Some(base) => base.trim_end_matches('/').to_string(),
            None => {
                let scheme = header_str(&headers, "x-forwarded-proto").unwrap_or("http");
                let host = header_str(&headers, "host").unwrap_or("localhost");
                format!("{scheme}://{host}")
            }
        };
        Self {
            method,
            url: format!("{base}{path_and_query}"),
            headers,
            body,
        }
    }

    /// The body's fields: form pairs, or a JSON object's scalar members as strings.
    pub fn fields(&self) -> Vec<(String, String)> {
        let trimmed = self.body.trim_ascii_start();
        if trimmed.starts_with(b"{") {
            let Ok(serde_json::Value::Object(map)) =
                serde_json::from_slice::<serde_json::Value>(trimmed)
            else {
                return Vec::new();
            };
            return map
                .into_iter()
                .filter_map(|(k, v)| match v {
                    serde_json::Value::String(s) => Some((k, s)),
                    serde_json::Value::Number(n) => Some((k, n.to_string())),
                    serde_json::Value::Bool(b) => Some((k, b.to_string())),
                    _ => None,
                })
                .collect();
        }
        form_urlencoded::parse(&self.body).into_owned().collect()
    }

    /// A body field by name (first occurrence).
    pub fn field(&self, name: &str) -> Option<String> {
        field(&self.fields(), name)
    }

    /// A query parameter of the URL by name (decoded).
    pub fn query_param(&self, name: &str) -> Option<String> {
        let query = self.url.split_once('?')?.1;
        form_urlencoded::parse(query.as_bytes())
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| text::parse(&v, Lines::One, MAX_FIELD_CHARS).ok())
    }

    /// A header's value, when it is text.
    pub fn header(&self, name: &str) -> Option<&str> {
        header_str(&self.headers, name)
    }
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Longest callback value read: statuses, ids, durations and signatures are short.
const MAX_FIELD_CHARS: usize = 1_024;

/// A field's value, trimmed; one holding NUL or a control character (or
/// absurdly long) reads as absent, so it never reaches the store. Signatures
/// are checked over the raw fields, not these.
pub(super) fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| text::parse(v, Lines::One, MAX_FIELD_CHARS).ok())
}

/// A callback that cannot be shown to come from the carrier account.
pub(super) fn unverifiable(message: &str) -> CarriersError {
    CarriersError::Unverifiable(message.to_string())
}

/// A whole number of seconds from a carrier field ("12", or "12.0" from lenient senders).
pub(super) fn seconds(text: Option<String>) -> Option<u32> {
    let text = text?;
    let text = text.trim();
    text.parse::<u32>().ok().or_else(|| {
        text.parse::<f64>()
            .ok()
            .filter(|s| s.is_finite() && *s >= 0.0 && *s <= f64::from(u32::MAX))
            // In range and non-negative, so the cast cannot wrap.
            .map(|s| s.round() as u32)
    })
}

/// Checks our own `sig` query parameter with `matches` (the carriers that do not
/// sign every request, or whose leg reports we sign ourselves).
fn require_sig(
    request: &CallbackRequest,
    matches: impl FnOnce(&str) -> bool,
) -> Result<(), CarriersError> {
    let sig = request
        .query_param("sig")
        .ok_or_else(|| unverifiable("missing callback sig"))?;
    if matches(&sig) {
        Ok(())
    } else {
        Err(unverifiable("callback sig does not match"))
    }
}

/// Which of our own URL signatures a callback must carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OurSig {
    /// The status (event, webhook) URL's `sig`.
    Status,
    /// A transferred call's leg-report URL's `sig`.
    Transfer,
}

/// Checks our own `sig` of kind `which`, keyed by `key`, in the callback's URL.
pub(super) fn require_our_sig(
    request: &CallbackRequest,
    key: &str,
    call_id: &str,
    which: OurSig,
) -> Result<(), CarriersError> {
    require_sig(request, |sig| match which {
        OurSig::Status => verify_callback_sig(key, call_id, sig),
        OurSig::Transfer => verify_transfer_callback_sig(key, call_id, sig),
    })
}

/// A required callback field, or a `BadCallback` naming it.
pub(super) fn required(fields: &[(String, String)], name: &str) -> Result<String, CarriersError> {
    field(fields, name).ok_or_else(|| CarriersError::BadCallback(format!("missing {name}")))
}

/// A phone number as a carrier wrote it, in E.164: Plivo, Vonage and Exotel
/// leave the `+` off (`918035740188`), which our numbers are stored with.
pub(super) fn carrier_phone(raw: &str) -> String {
    let trimmed = raw.trim();
    if !trimmed.is_empty() && trimmed.chars().all(|c| c.is_ascii_digit()) {
        format!("+{trimmed}")
    } else {
        trimmed.to_string()
    }
}

/// Prefixed to the number in [`inbound_sig`], so it is never a valid tag of
/// anything else signed with the same account secret.
const INBOUND_PURPOSE: &[u8] = b"voxline/carrier-inbound/v1\0";

/// Our signature of a number's inbound URL, for carriers that sign nothing on
/// that request (Exotel) or only when the account opts in (Vonage): keyed by the
/// workspace's carrier secret over the number in E.164, so the URL the customer
/// pastes rings only that number and only while the secret is unchanged.
pub fn inbound_sig(key: &str, number: &str) -> String {
    Signer::sha256(key).sign_hex(&[INBOUND_PURPOSE, number.as_bytes()])
}

/// The inbound URL a customer pastes for `number` on a carrier that needs our `sig`.
pub fn inbound_url(inbound_base: &str, key: &str, number: &str) -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("sig", &inbound_sig(key, number))
        .finish();
    format!("{inbound_base}?{query}")
}

/// Checks our `sig` of `number` (see [`inbound_sig`]) in the request's URL.
pub(super) fn require_inbound_sig(
    request: &CallbackRequest,
    key: &str,
    number: &str,
) -> Result<(), CarriersError> {
    require_sig(request, |sig| {
        Signer::sha256(key).verify_hex(&[INBOUND_PURPOSE, number.as_bytes()], sig)
    })
}
