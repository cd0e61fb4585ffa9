//! Real telephony carriers (Twilio, Plivo, Exotel, Vonage, Telnyx) behind the
//! call engine's [`Carrier`](voxline_actors::carrier::Carrier) trait, and the
//! handlers for their status callbacks and transferred calls' leg reports.
//!
//! Each workspace brings its own carrier account, so every carrier looks the
//! account up per call through [`CarrierCredentials`]. The credential JSON's
//! optional `baseUrl` replaces the carrier's public API host, which is how the
//! tests point a carrier at a local fake.

pub mod callback_request;
pub mod callbacks;
pub mod exotel;
pub mod inbound;
pub mod plivo;
pub mod rest_carrier;
pub mod store_wiring;
pub mod telnyx;
pub mod twilio;
pub mod vonage;

pub use exotel::{ExotelAccount, ExotelCarrier};
pub use plivo::{PlivoAccount, PlivoCarrier};
pub use telnyx::{TelnyxAccount, TelnyxCarrier};
pub use twilio::{TwilioAccount, TwilioCarrier};
pub use vonage::{VonageAccount, VonageCarrier};

use crate::domain::CallId;
use async_trait::async_trait;
use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use voxline_actors::carrier::CarrierError;
use voxline_actors::signing::Signer;

/// The carriers this module speaks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CarrierKind {
    /// Twilio Programmable Voice.
    Twilio,
    /// Plivo Voice API.
    Plivo,
    /// Exotel voicebot calls.
    Exotel,
    /// Vonage Voice API.
    Vonage,
    /// Telnyx Call Control v2.
    Telnyx,
}

impl CarrierKind {
    /// Every kind, in a fixed order.
    pub const ALL: [CarrierKind; 5] = [
        Self::Twilio,
        Self::Plivo,
        Self::Exotel,
        Self::Vonage,
        Self::Telnyx,
    ];

    /// The provider name used in paths, credentials and the engine's carrier map.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Twilio => "twilio",
            Self::Plivo => "plivo",
            Self::Exotel => "exotel",
            Self::Vonage => "vonage",
            Self::Telnyx => "telnyx",
        }
    }

    /// Whether [`Carrier::transfer`](voxline_actors::carrier::Carrier::transfer) can bridge
    /// this carrier's live calls to a person. Exotel cannot: calls placed with a stream URL
    /// have no flow to continue and Exotel's v1 API cannot redirect a live call.
    pub fn can_transfer(self) -> bool {
        !matches!(self, Self::Exotel)
    }

    /// Parses a provider name as it appears in a path or a credential kind.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }
}

impl std::fmt::Display for CarrierKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where carriers find a workspace's account (decrypted credential JSON).
#[async_trait]
pub trait CarrierCredentials: Send + Sync + 'static {
    /// The workspace's credential JSON of this kind, or `None` when it has none.
    async fn for_org(&self, org_id: &str, kind: CarrierKind) -> Option<serde_json::Value>;
}

/// Fixed credentials for every workspace; for tests and single-tenant setups.
pub struct StaticCredentials(pub HashMap<CarrierKind, serde_json::Value>);

#[async_trait]
impl CarrierCredentials for StaticCredentials {
    async fn for_org(&self, _org_id: &str, kind: CarrierKind) -> Option<serde_json::Value> {
        self.0.get(&kind).cloned()
    }
}

/// Every way a carrier request or a carrier callback can fail.
#[derive(Debug, thiserror::Error)]
pub enum CarriersError {
    /// The workspace has no credential of this kind.
    #[error("no {kind} credentials for workspace {org_id}")]
    NotConfigured {
        /// The carrier.
        kind: CarrierKind,
        /// The workspace.
        org_id: String,
    },
    /// The credential JSON lacks a field or holds a wrong one.
    #[error("{kind} credential is invalid: {reason}")]
    InvalidCredential {
        /// The carrier.
        kind: CarrierKind,
        /// What is wrong.
        reason: String,
    },
    /// The carrier could not be reached or did not answer in time.
    #[error("{kind} unreachable: {reason}")]
    Unreachable {
        /// The carrier.
        kind: CarrierKind,
        /// Transport error or 5xx.
        reason: String,
    },
    /// The carrier answered the request with a client error.
    #[error("{kind} rejected the request with {status}: {body}")]
    Rejected {
        /// The carrier.
        kind: CarrierKind,
        /// HTTP status.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The carrier's success answer lacks what we need (e.g. the call id).
    #[error("{kind} answered unexpectedly: {reason}")]
    UnexpectedResponse {
        /// The carrier.
        kind: CarrierKind,
        /// What was missing.
        reason: String,
    },
    /// A hang-up for a call this process did not place (so its workspace is unknown).
    #[error("{kind} call {carrier_call_id} was not placed by this process")]
    UnknownCall {
        /// The carrier.
        kind: CarrierKind,
        /// The carrier's id.
        carrier_call_id: String,
    },
    /// A callback for a provider we do not serve.
    #[error("unknown carrier {0}")]
    UnknownProvider(String),
    /// A callback whose signature is missing or wrong.
    #[error("{0}")]
    Unverifiable(String),
    /// A callback whose body cannot be read.
    #[error("{0}")]
    BadCallback(String),
    /// A request the engine built that this carrier cannot use.
    #[error("{0}")]
    InvalidRequest(String),
    /// The carrier cannot do what was asked (e.g. Exotel transfers).
    #[error("{kind} cannot {what}: {reason}")]
    Unsupported {
        /// The carrier.
        kind: CarrierKind,
        /// What was asked.
        what: &'static str,
        /// Why not, and what to do instead.
        reason: &'static str,
    },
    /// Storing what a verified callback reported failed.
    #[error("storing a carrier report failed: {0}")]
    Store(#[from] crate::store::StoreError),
}

impl From<CarriersError> for CarrierError {
    fn from(err: CarriersError) -> Self {
        match err {
            CarriersError::NotConfigured { .. }
            | CarriersError::InvalidCredential { .. }
            | CarriersError::UnknownCall { .. } => CarrierError::NotConfigured(err.to_string()),
            CarriersError::Unreachable { .. } => CarrierError::Unreachable(err.to_string()),
            _ => CarrierError::Rejected(err.to_string()),
        }
    }
}

impl IntoResponse for CarriersError {
    fn into_response(self) -> Response {
        let status = match &self {
            Self::Unverifiable(_) => StatusCode::FORBIDDEN,
            Self::UnknownProvider(_) => StatusCode::NOT_FOUND,
            Self::BadCallback(_) => StatusCode::BAD_REQUEST,
            Self::NotConfigured { .. } | Self::InvalidCredential { .. } => StatusCode::FORBIDDEN,
            Self::Unsupported { .. } => StatusCode::NOT_FOUND,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        let message = match &self {
            // The workspace's configuration is nobody's business but its own.
            Self::NotConfigured { .. } | Self::InvalidCredential { .. } => {
                "callback cannot be verified".to_string()
            }
            // Database details stay in our logs.
            Self::Store(_) => "the report could not be stored".to_string(),
            other => other.to_string(),
        };
        (status, Json(serde_json::json!({ "message": message }))).into_response()
    }
}

/// A reqwest client with the timeouts every carrier call uses.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(15))
        .build()
        // Building only fails when a TLS backend cannot initialise; fall back to defaults.
        .unwrap_or_default()
}

/// Reads a required non-empty string field of a credential.
pub(crate) fn required_field(
    kind: CarrierKind,
    value: &serde_json::Value,
    field: &str,
) -> Result<String, CarriersError> {
    optional_field(value, field).ok_or_else(|| CarriersError::InvalidCredential {
        kind,
        reason: format!("needs a non-empty string field {field}"),
    })
}

/// Reads an optional non-empty string field of a credential.
pub(crate) fn optional_field(value: &serde_json::Value, field: &str) -> Option<String> {
    value
        .get(field)
        .and_then(|v| v.as_str())
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}

/// The API base URL: the credential's `baseUrl` or the carrier's default, without a trailing slash.
pub(crate) fn base_url(value: &serde_json::Value, default: &str) -> String {
    optional_field(value, "baseUrl")
        .unwrap_or_else(|| default.to_string())
        .trim_end_matches('/')
        .to_string()
}

/// Sends a request and returns the body of a 2xx answer; other answers become errors.
pub(crate) async fn send(
    kind: CarrierKind,
    request: reqwest::RequestBuilder,
) -> Result<(u16, bytes::Bytes), CarriersError> {
    let response = request
        .send()
        .await
        .map_err(|e| CarriersError::Unreachable {
            kind,
            reason: e.to_string(),
        })?;
    let status = response.status();
    let body = response
        .bytes()
        .await
        .map_err(|e| CarriersError::Unreachable {
            kind,
            reason: e.to_string(),
        })?;
    if status.is_success() {
        return Ok((status.as_u16(), body));
    }
    let text: String = String::from_utf8_lossy(&body).chars().take(512).collect();
    if status.is_server_error() {
        return Err(CarriersError::Unreachable {
            kind,
            reason: format!("{status}: {text}"),
        });
    }
    Err(CarriersError::Rejected {
        kind,
        status: status.as_u16(),
        body: text,
    })
}

/// Our signature for an unsigned carrier's callback URL: hex HMAC-SHA256 of
/// the call id, keyed by a secret of the workspace's account.
pub fn callback_sig(key: &str, call_id: &str) -> String {
    Signer::sha256(key).sign_hex(&[CALLBACK_PURPOSE, call_id.as_bytes()])
}

/// Prefixed to the call id, so a callback signature is never a valid tag of
/// anything else signed with the same account secret.
const CALLBACK_PURPOSE: &[u8] = b"voxline/carrier-callback/v1\0";

/// Checks a `sig` made by [`callback_sig`] in constant time.
pub fn verify_callback_sig(key: &str, call_id: &str, sig: &str) -> bool {
    Signer::sha256(key).verify_hex(&[CALLBACK_PURPOSE, call_id.as_bytes()], sig)
}

/// Our signature for a transfer's leg-report URL at an unsigned (or optionally
/// signing) carrier: like [`callback_sig`] but for another purpose, so a status
/// URL that leaked cannot be replayed as a leg report and the other way round.
pub fn transfer_callback_sig(key: &str, call_id: &str) -> String {
    Signer::sha256(key).sign_hex(&[TRANSFER_PURPOSE, call_id.as_bytes()])
}

/// Prefixed to the call id in [`transfer_callback_sig`].
const TRANSFER_PURPOSE: &[u8] = b"voxline/carrier-transfer/v1\0";

/// Checks a `sig` made by [`transfer_callback_sig`] in constant time.
pub fn verify_transfer_callback_sig(key: &str, call_id: &str, sig: &str) -> bool {
    Signer::sha256(key).verify_hex(&[TRANSFER_PURPOSE, call_id.as_bytes()], sig)
}

/// The query parameter of a Vonage or Telnyx leg-report URL naming the callee's own
/// leg: its events are not the bridged leg's, and Telnyx's is hung up after a transfer.
pub const TRANSFER_ALEG_PARAM: &str = "aleg";

/// The path segment of the leg-report route: `/carrier/{kind}/transfer-status/{callId}`.
pub const TRANSFER_STATUS_SEGMENT: &str = "transfer-status";

/// The URL where a carrier reports a transferred call's bridged leg
/// ([`TransferRequest::leg_status_url`](voxline_actors::carrier::TransferRequest::leg_status_url)):
/// `{public_base}/carrier/{kind}/transfer-status/{callId}`, beside the status callback
/// `{public_base}/carrier/{kind}/status/{callId}`.
///
/// It carries no signature: each carrier's `transfer` adds what its carrier cannot sign
/// itself (Vonage and Telnyx get our `sig`; Twilio and Plivo sign their own requests).
pub fn transfer_status_url(public_base: &str, kind: CarrierKind, call_id: CallId) -> String {
    format!(
        "{}/carrier/{kind}/{TRANSFER_STATUS_SEGMENT}/{call_id}",
        public_base.trim_end_matches('/')
    )
}

/// Appends `sig` to a callback URL.
pub(crate) fn with_sig(url: &str, sig: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}sig={sig}")
}

/// Appends form-encoded query parameters to a URL.
pub(crate) fn with_params(url: &str, params: &[(&str, &str)]) -> String {
    let mut query = form_urlencoded::Serializer::new(String::new());
    for (name, value) in params {
        query.append_pair(name, value);
    }
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}{}", query.finish())
}

/// Escapes text for an XML attribute or element.
pub fn xml_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for ch in text.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c => out.push(c),
        }
    }
    out
}

/// Reads back text [`xml_escape`] wrote (and the numeric character references
/// a carrier's XML may hold).
pub fn xml_unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        let Some(end) = tail.find(';') else {
            out.push_str(tail);
            return out;
        };
        let entity = &tail[1..end];
        let decoded = match entity {
            "amp" => Some('&'),
            "lt" => Some('<'),
            "gt" => Some('>'),
            "quot" => Some('"'),
            "apos" => Some('\''),
            _ => entity
                .strip_prefix("#x")
                .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                .or_else(|| entity.strip_prefix('#').and_then(|dec| dec.parse().ok()))
                .and_then(char::from_u32),
        };
        match decoded {
            Some(ch) => {
                out.push(ch);
                rest = &tail[end + 1..];
            }
            None => {
                out.push('&');
                rest = &tail[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Remembers which workspace placed each carrier call, because the engine
/// hangs up by carrier id alone and each workspace has its own account, and
/// which calls were transferred, because those are no longer ours to hang up.
///
/// Entries expire after the call's longest possible life so the map stays
/// bounded without hearing about every call's end.
#[derive(Default)]
pub struct CallIndex {
    inner: Mutex<CallIndexInner>,
}

#[derive(Default)]
struct CallIndexInner {
    calls: HashMap<String, IndexedCall>,
    last_prune: Option<Instant>,
}

struct IndexedCall {
    org_id: String,
    expires: Instant,
    transferred: bool,
}

impl CallIndex {
    /// Records that `org_id` placed `carrier_call_id`, for at most `lifetime`.
    pub fn insert(&self, carrier_call_id: &str, org_id: &str, lifetime: Duration) {
        let now = Instant::now();
        let mut inner = self.inner.lock();
        let due = inner
            .last_prune
            .is_none_or(|t| now.duration_since(t) > Duration::from_secs(60));
        if due {
            inner.calls.retain(|_, call| call.expires > now);
            inner.last_prune = Some(now);
        }
        inner.calls.insert(
            carrier_call_id.to_string(),
            IndexedCall {
                org_id: org_id.to_string(),
                expires: now + lifetime,
                transferred: false,
            },
        );
    }

    /// The workspace that placed a call, if this process placed it.
    pub fn org_of(&self, carrier_call_id: &str) -> Option<String> {
        self.inner
            .lock()
            .calls
            .get(carrier_call_id)
            .map(|call| call.org_id.clone())
    }

    /// Marks a call as handed over to a person: the engine's hang-up when its
    /// conversation ends must not cut the bridge.
    pub fn mark_transferred(&self, carrier_call_id: &str) {
        if let Some(call) = self.inner.lock().calls.get_mut(carrier_call_id) {
            call.transferred = true;
        }
    }

    /// Whether a call was transferred.
    pub fn is_transferred(&self, carrier_call_id: &str) -> bool {
        self.inner
            .lock()
            .calls
            .get(carrier_call_id)
            .is_some_and(|call| call.transferred)
    }

    /// Forgets a call (after it was hung up).
    pub fn remove(&self, carrier_call_id: &str) {
        self.inner.lock().calls.remove(carrier_call_id);
    }

    /// Number of calls remembered.
    pub fn len(&self) -> usize {
        self.inner.lock().calls.len()
    }

    /// Whether no call is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The workspace of a call about to be hung up, or `None` when it was
    /// transferred (then it is forgotten and must not be hung up).
    pub(crate) fn org_for_hangup(
        &self,
        kind: CarrierKind,
        carrier_call_id: &str,
    ) -> Result<Option<String>, CarriersError> {
        let mut inner = self.inner.lock();
        let Some(call) = inner.calls.get(carrier_call_id) else {
            return Err(CarriersError::UnknownCall {
                kind,
                carrier_call_id: carrier_call_id.to_string(),
            });
        };
        if call.transferred {
            inner.calls.remove(carrier_call_id);
            tracing::debug!(
                %kind,
                carrier_call_id,
                "not hanging up a transferred call: the callee now talks to a person"
            );
            return Ok(None);
        }
        Ok(Some(call.org_id.clone()))
    }
}

/// How long to remember a placed call: ringing plus talking plus a margin.
pub(crate) fn call_lifetime(ring_timeout_seconds: u32, time_limit_seconds: u32) -> Duration {
    Duration::from_secs(u64::from(ring_timeout_seconds) + u64::from(time_limit_seconds) + 3600)
}

/// Builds the five carriers over one credentials source, keyed by provider
/// name as the engine's `EngineConfig::carriers` map expects.
pub fn all_carriers(
    credentials: Arc<dyn CarrierCredentials>,
) -> HashMap<String, Arc<dyn voxline_actors::carrier::Carrier>> {
    let http = http_client();
    let mut map: HashMap<String, Arc<dyn voxline_actors::carrier::Carrier>> = HashMap::new();
    map.insert(
        CarrierKind::Twilio.as_str().into(),
        Arc::new(TwilioCarrier::new(Arc::clone(&credentials), http.clone())),
    );
    map.insert(
        CarrierKind::Plivo.as_str().into(),
        Arc::new(PlivoCarrier::new(Arc::clone(&credentials), http.clone())),
    );
    map.insert(
        CarrierKind::Exotel.as_str().into(),
        Arc::new(ExotelCarrier::new(Arc::clone(&credentials), http.clone())),
    );
    map.insert(
        CarrierKind::Vonage.as_str().into(),
        Arc::new(VonageCarrier::new(Arc::clone(&credentials), http.clone())),
    );
    map.insert(
        CarrierKind::Telnyx.as_str().into(),
        Arc::new(TelnyxCarrier::new(credentials, http)),
    );
    map
}
