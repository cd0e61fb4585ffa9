//! Exotel voicebot calls: `Calls/connect` with a bidirectional stream to our
//! `/media/exotel/{token}` endpoint.
//!
//! Exotel does not sign its callbacks, so the status URL we hand it carries
//! our own `sig`: an HMAC of the call id keyed by the workspace's API token,
//! which the callback handler checks (see [`super::callback_sig`]).
//!
//! Exotel calls cannot be transferred (see [`TRANSFER_REFUSAL`]).

use super::{
    CallIndex, CarrierCredentials, CarrierKind, CarriersError, call_lifetime, callback_sig,
    load_account, optional_field, required_field, send, with_sig,
};
use async_trait::async_trait;
use std::sync::Arc;
use voxline_actors::carrier::{
    Carrier, CarrierError, CarrierStatus, DialRequest, StatusSink, TransferRequest,
};

const KIND: CarrierKind = CarrierKind::Exotel;

/// Exotel's default (Singapore) API host; India accounts use `api.in.exotel.com`.
pub const DEFAULT_SUBDOMAIN: &str = "api.exotel.com";

/// Why [`ExotelCarrier`] refuses transfers. Exotel's v1 API has no request that
/// redirects a live call, and a call placed with `StreamUrl` ("Connect Voice AI")
/// runs no App Bazaar flow, so there is no Connect applet to fall through to: closing
/// our stream would only hang up on the callee. Exotel documents bot-to-human
/// handoff only for calls placed into a flow (Voicebot applet, then Connect).
pub const TRANSFER_REFUSAL: &str = "Exotel cannot redirect a live call by API, and calls placed with a stream URL run no flow to hand over to, so ending the stream would only hang up on the callee";

/// One Exotel account: `{accountSid, apiKey, apiToken, subdomain? | baseUrl?}`.
#[derive(Debug, Clone)]
pub struct ExotelAccount {
    /// Account SID (path segment).
    pub account_sid: String,
    /// API key (Basic auth user).
    pub api_key: String,
    /// API token (Basic auth password and our callback-URL key).
    pub api_token: String,
    /// API base URL without a trailing slash.
    pub base_url: String,
}

impl ExotelAccount {
    /// Parses the workspace's `exotel` credential JSON; `baseUrl` wins over `subdomain`.
    pub fn from_credential(value: &serde_json::Value) -> Result<Self, CarriersError> {
        let base_url = match optional_field(value, "baseUrl") {
            Some(url) => url,
            None => {
                let subdomain = optional_field(value, "subdomain")
                    .unwrap_or_else(|| DEFAULT_SUBDOMAIN.to_string());
                if subdomain.contains("://") {
                    subdomain
                } else {
                    format!("https://{subdomain}")
                }
            }
        };
        Ok(Self {
            account_sid: required_field(KIND, value, "accountSid")?,
            api_key: required_field(KIND, value, "apiKey")?,
            api_token: required_field(KIND, value, "apiToken")?,
            base_url: base_url.trim_end_matches('/').to_string(),
        })
    }
}

/// The form fields of the connect request. `From` is the number Exotel calls
/// first (the callee) and `CallerId` the workspace's ExoPhone.
pub fn connect_form(req: &DialRequest, api_token: &str) -> Vec<(&'static str, String)> {
    vec![
        ("From", req.to.clone()),
        ("CallerId", req.from.clone()),
        (
            "StreamUrl",
            format!(
                "{}/{}",
                req.media_url.trim_end_matches('/'),
                req.media_token
            ),
        ),
        ("StreamType", "bidirectional".to_string()),
        (
            "StatusCallback",
            with_sig(&req.status_url, &callback_sig(api_token, &req.call_id)),
        ),
        ("StatusCallbackEvents[0]", "terminal".to_string()),
        ("StatusCallbackEvents[1]", "answered".to_string()),
        ("TimeOut", req.ring_timeout_seconds.to_string()),
        ("TimeLimit", req.time_limit_seconds.to_string()),
        ("CustomField", req.call_id.clone()),
    ]
}

/// Exotel behind the engine's [`Carrier`] trait, one account per workspace.
pub struct ExotelCarrier {
    credentials: Arc<dyn CarrierCredentials>,
    http: reqwest::Client,
    calls: CallIndex,
}

impl ExotelCarrier {
    /// A carrier that looks up each workspace's account in `credentials`.
    pub fn new(credentials: Arc<dyn CarrierCredentials>, http: reqwest::Client) -> Self {
        Self {
            credentials,
            http,
            calls: CallIndex::default(),
        }
    }

    /// Places a call and returns its `Call.Sid`.
    pub async fn create_call(&self, req: &DialRequest) -> Result<String, CarriersError> {
        let account = load_account(
            self.credentials.as_ref(),
            &req.org_id,
            KIND,
            ExotelAccount::from_credential,
        )
        .await?;
        let request = self
            .http
            .post(format!(
                "{}/v1/Accounts/{}/Calls/connect",
                account.base_url, account.account_sid
            ))
            .basic_auth(&account.api_key, Some(&account.api_token))
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&connect_form(req, &account.api_token));
        let (_, body) = send(KIND, request).await?;
        let sid = parse_call_sid(&body).ok_or_else(|| CarriersError::UnexpectedResponse {
            kind: KIND,
            reason: "connect answer has no Call.Sid".into(),
        })?;
        self.calls.insert(
            &sid,
            &req.org_id,
            call_lifetime(req.ring_timeout_seconds, req.time_limit_seconds),
        );
        Ok(sid)
    }
}

/// The call SID of a connect answer, JSON (`{"Call":{"Sid"}}`) or, when the
/// account ignores `Accept`, Exotel's default XML (`<Call><Sid>`).
pub fn parse_call_sid(body: &[u8]) -> Option<String> {
    if let Ok(json) = serde_json::from_slice::<serde_json::Value>(body) {
        return json
            .get("Call")
            .and_then(|c| c.get("Sid"))
            .and_then(|s| s.as_str())
            .map(str::to_string)
            .filter(|s| !s.is_empty());
    }
    let text = std::str::from_utf8(body).ok()?;
    let call = &text[text.find("<Call>")?..];
    let start = call.find("<Sid>")? + "<Sid>".len();
    let end = start + call[start..].find("</Sid>")?;
    Some(call[start..end].trim().to_string()).filter(|s| !s.is_empty())
}

#[async_trait]
impl Carrier for ExotelCarrier {
    async fn place(&self, req: DialRequest, _status: StatusSink) -> Result<String, CarrierError> {
        // Progress arrives by status callback, routed to the engine by the service.
        Ok(self.create_call(&req).await?)
    }

    async fn hangup(&self, carrier_call_id: &str) -> Result<(), CarrierError> {
        // Exotel documents no REST hang-up for connect calls: an answered call
        // ends when our media websocket closes, which the conversation does on
        // stop. A call still ringing rings out on Exotel's `TimeOut`.
        tracing::debug!(
            carrier_call_id,
            "exotel has no hang-up request; the media socket close ends the call"
        );
        self.calls.remove(carrier_call_id);
        Ok(())
    }

    async fn transfer(&self, req: TransferRequest) -> Result<(), CarrierError> {
        tracing::info!(
            call = %req.call_id,
            "exotel transfer refused: {TRANSFER_REFUSAL}"
        );
        Err(CarriersError::Unsupported {
            kind: KIND,
            what: "transfer calls",
            reason: TRANSFER_REFUSAL,
        }
        .into())
    }
}

/// Maps an Exotel callback's `Status` (and `EventType`) to engine progress;
/// `None` for values the engine does not act on.
pub fn map_status(status: Option<&str>, event_type: Option<&str>) -> Option<CarrierStatus> {
    let status = status
        .map(|s| s.trim().to_ascii_lowercase())
        .unwrap_or_default();
    match status.as_str() {
        "queued" => None,
        "ringing" => Some(CarrierStatus::Ringing),
        "in-progress" | "answered" => Some(CarrierStatus::Answered),
        "completed" => Some(CarrierStatus::Completed),
        "busy" => Some(CarrierStatus::Busy),
        "no-answer" => Some(CarrierStatus::NoAnswer),
        "failed" => Some(CarrierStatus::Failed("failed".into())),
        "canceled" | "cancelled" => Some(CarrierStatus::Failed("canceled".into())),
        _ if event_type.is_some_and(|e| e.trim().eq_ignore_ascii_case("answered")) => {
            Some(CarrierStatus::Answered)
        }
        _ => None,
    }
}
