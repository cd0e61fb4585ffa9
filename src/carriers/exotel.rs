//! Exotel voicebot calls: `Calls/connect` with a bidirectional stream to our
//! `/media/exotel/{token}` endpoint.
//!
//! Exotel does not sign its callbacks, so the status URL we hand it carries
//! our own `sig`: an HMAC of the call id keyed by the workspace's API token,
//! which the callback handler checks (see [`super::callback_sig`]).
//!
//! Exotel calls cannot be transferred (see [`TRANSFER_REFUSAL`]).

use super::callback_request::{
    CallbackRequest, OurSig, carrier_phone, field, require_inbound_sig, require_our_sig,
};
use super::rest_carrier::{AccountClient, CarrierApi, RestCarrier};
use super::{CarrierKind, CarriersError, callback_sig, optional_field, required_field, with_sig};
use async_trait::async_trait;
use reqwest::Method;
use voxline_actors::carrier::{CarrierStatus, DialRequest, TransferRequest};

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

/// Exotel's Calls API (`Calls/connect`), for [`RestCarrier`].
pub struct ExotelApi;

/// Exotel behind the engine's [`Carrier`](voxline_actors::carrier::Carrier) trait,
/// one account per workspace.
pub type ExotelCarrier = RestCarrier<ExotelApi>;

#[async_trait]
impl CarrierApi for ExotelApi {
    type Account = ExotelAccount;
    const KIND: CarrierKind = KIND;
    // Exotel documents no REST hang-up for connect calls: an answered call ends
    // when our media websocket closes, which the conversation does on stop. A
    // call still ringing rings out on Exotel's `TimeOut`.
    const HANGS_UP: bool = false;

    fn account(credential: &serde_json::Value) -> Result<ExotelAccount, CarriersError> {
        ExotelAccount::from_credential(credential)
    }

    fn authorize(
        account: &ExotelAccount,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, CarriersError> {
        Ok(request.basic_auth(&account.api_key, Some(&account.api_token)))
    }

    /// Places a call; its `Call.Sid`.
    async fn create_call(
        client: &AccountClient<'_, Self>,
        req: &DialRequest,
    ) -> Result<String, CarriersError> {
        let account = &client.account;
        let request = client
            .request(
                Method::POST,
                &format!(
                    "{}/v1/Accounts/{}/Calls/connect",
                    account.base_url, account.account_sid
                ),
            )?
            .header(reqwest::header::ACCEPT, "application/json")
            .form(&connect_form(req, &account.api_token));
        let (_, body) = client.send(request).await?;
        parse_call_sid(&body).ok_or_else(|| CarriersError::UnexpectedResponse {
            kind: KIND,
            reason: "connect answer has no Call.Sid".into(),
        })
    }

    /// Never asked ([`CarrierApi::HANGS_UP`] is false); nothing to end.
    async fn end_call(
        _client: &AccountClient<'_, Self>,
        _carrier_call_id: &str,
    ) -> Result<(), CarriersError> {
        Ok(())
    }

    async fn transfer_call(
        _client: &AccountClient<'_, Self>,
        req: &TransferRequest,
    ) -> Result<(), CarriersError> {
        tracing::info!(
            call = %req.call_id,
            "exotel transfer refused: {TRANSFER_REFUSAL}"
        );
        Err(cannot_transfer())
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

/// Checks that a status callback came from the Exotel account in `credential`.
/// Exotel does not sign: our own `sig` in the status URL stands in.
pub(super) fn verify_callback(
    call_id: &str,
    request: &CallbackRequest,
    credential: &serde_json::Value,
) -> Result<(), CarriersError> {
    let account = ExotelAccount::from_credential(credential)?;
    require_our_sig(request, &account.api_token, call_id, OurSig::Status)
}

/// The progress a verified status callback reports, if the engine acts on it.
pub(super) fn parse_status(
    fields: &[(String, String)],
) -> Result<Option<CarrierStatus>, CarriersError> {
    let status = field(fields, "Status").or_else(|| field(fields, "status"));
    let event_type = field(fields, "EventType").or_else(|| field(fields, "event_type"));
    if status.is_none() && event_type.is_none() {
        return Err(CarriersError::BadCallback("missing Status".into()));
    }
    Ok(map_status(status.as_deref(), event_type.as_deref()))
}

/// Exotel's API cannot bridge a live call to another number.
pub(super) fn cannot_transfer() -> CarriersError {
    CarriersError::Unsupported {
        kind: CarrierKind::Exotel,
        what: "transfer calls",
        reason: TRANSFER_REFUSAL,
    }
}

/// A call ringing one of our Exophones, read from the Voicebot applet's URL
/// request (a GET whose query carries the call, as Exotel's applet URLs do).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExotelInboundCall {
    /// Exotel's `CallSid`.
    pub call_sid: String,
    /// The Exophone that rang, in E.164.
    pub to: String,
    /// The caller, in E.164 when it is a number; `anonymous` when withheld.
    pub from: String,
}

/// A number as Exotel writes it, in E.164: Exotel's Indian accounts write
/// numbers in the national form (`09845012399`, `08035740103`), others
/// without the `+`.
fn exotel_phone(raw: &str) -> String {
    let trimmed = raw.trim();
    match trimmed.strip_prefix('0') {
        Some(national) if !national.is_empty() && national.chars().all(|c| c.is_ascii_digit()) => {
            format!("+91{national}")
        }
        _ => carrier_phone(trimmed),
    }
}

/// The first of `names` present in the query.
fn query_field(request: &CallbackRequest, names: &[&str]) -> Option<String> {
    names.iter().find_map(|name| request.query_param(name))
}

/// Reads the Voicebot applet's URL request: `CallSid`, and the numbers as
/// `From`/`To` (or `CallFrom`/`CallTo`, as Exotel's applets also name them).
pub fn parse_inbound(request: &CallbackRequest) -> Result<ExotelInboundCall, CarriersError> {
    let required = |names: &[&str]| {
        query_field(request, names).ok_or_else(|| {
            CarriersError::BadCallback(format!("voicebot URL request lacks {}", names[0]))
        })
    };
    Ok(ExotelInboundCall {
        call_sid: required(&["CallSid"])?,
        to: exotel_phone(&required(&["To", "CallTo"])?),
        from: query_field(request, &["From", "CallFrom"])
            .filter(|from| !from.is_empty())
            .map_or_else(|| "anonymous".to_string(), |from| exotel_phone(&from)),
    })
}

/// Checks our `sig` over `number` in the Voicebot URL: Exotel signs nothing on
/// this request, so the URL the customer pastes carries it, keyed by the
/// workspace's API token.
pub(super) fn verify_inbound(
    request: &CallbackRequest,
    credential: &serde_json::Value,
    number: &str,
) -> Result<(), CarriersError> {
    let account = ExotelAccount::from_credential(credential)?;
    require_inbound_sig(request, &account.api_token, number)
}

/// The Voicebot URL's answer naming the stream: `{"url": "wss://…/media/exotel/{token}"}`.
pub fn stream_answer(media_url: &str, media_token: &str) -> serde_json::Value {
    serde_json::json!({
        "url": format!("{}/{}", media_url.trim_end_matches('/'), media_token),
    })
}

/// The Voicebot URL's answer for a call we do not take: no stream URL, so the
/// applet fails over to the flow's next applet (where the customer puts a
/// goodbye and a hang-up); `reason` says why, for the flow's logs.
pub fn refusal_answer(reason: &str) -> serde_json::Value {
    serde_json::json!({ "url": null, "refused": reason })
}

#[cfg(test)]
mod inbound_tests {
    use super::*;
    use axum::http::{HeaderMap, Uri};

    fn request(query: &str) -> CallbackRequest {
        let uri: Uri = format!("/carrier/exotel/inbound?{query}").parse().unwrap();
        CallbackRequest::new(
            Some("https://v.example"),
            Method::GET,
            &uri,
            HeaderMap::new(),
            Default::default(),
        )
    }

    #[test]
    fn a_voicebot_url_request_reads_either_spelling() {
        let call =
            parse_inbound(&request("CallSid=c1&From=09845012399&To=%2B918035740103")).unwrap();
        assert_eq!(call.call_sid, "c1");
        assert_eq!(call.to, "+918035740103");
        let call = parse_inbound(&request(
            "CallSid=c1&CallFrom=919845012399&CallTo=918035740103",
        ))
        .unwrap();
        assert_eq!(call.from, "+919845012399");
        assert!(parse_inbound(&request("From=1")).is_err());
    }

    #[test]
    fn the_url_is_signed_over_the_number_with_the_api_token() {
        let credential = serde_json::json!({"accountSid": "a", "apiKey": "k", "apiToken": "t"});
        let sig = super::super::callback_request::inbound_sig("t", "+918035740103");
        let signed = request(&format!("CallSid=c&To=918035740103&sig={sig}"));
        assert!(verify_inbound(&signed, &credential, "+918035740103").is_ok());
        assert!(verify_inbound(&signed, &credential, "+918035740104").is_err());
        assert!(verify_inbound(&request("CallSid=c"), &credential, "+918035740103").is_err());
        assert_eq!(
            stream_answer("wss://v.example/media/exotel", "tok")["url"],
            "wss://v.example/media/exotel/tok"
        );
        assert_eq!(refusal_answer("busy")["url"], serde_json::Value::Null);
    }
}
