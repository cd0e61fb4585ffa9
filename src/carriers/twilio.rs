//! Twilio Programmable Voice: place a call with inline TwiML that connects a
//! bidirectional Media Stream to our `/media/twilio` endpoint, hang it up,
//! transfer it (new TwiML `<Dial>` on the live call, whose `action` reports the
//! bridged leg), and verify `X-Twilio-Signature` on its callbacks.

use super::callback_request::{CallbackRequest, field, required, seconds, unverifiable};
use super::rest_carrier::{AccountClient, CarrierApi, RestCarrier};
use super::{CarrierKind, CarriersError, base_url, required_field, xml_escape};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use reqwest::Method;
use sha2::{Digest, Sha256};
use voxline_actors::carrier::{AnsweredBy, CarrierStatus, DialRequest, TransferRequest};
use voxline_actors::signing::Signer;

const KIND: CarrierKind = CarrierKind::Twilio;

/// Twilio's public API host.
pub const DEFAULT_BASE_URL: &str = "https://api.twilio.com";

/// Twilio's error code for "the requested resource was not found" (the call already ended).
pub const CODE_NOT_FOUND: i64 = 20404;

/// One Twilio account: `{accountSid, authToken, baseUrl?}`.
#[derive(Debug, Clone)]
pub struct TwilioAccount {
    /// `AC…` account SID (Basic auth user and path segment).
    pub account_sid: String,
    /// Auth token (Basic auth password and callback signing key).
    pub auth_token: String,
    /// API base URL without a trailing slash.
    pub base_url: String,
}

impl TwilioAccount {
    /// Parses the workspace's `twilio` credential JSON.
    pub fn from_credential(value: &serde_json::Value) -> Result<Self, CarriersError> {
        Ok(Self {
            account_sid: required_field(KIND, value, "accountSid")?,
            auth_token: required_field(KIND, value, "authToken")?,
            base_url: base_url(value, DEFAULT_BASE_URL),
        })
    }

    fn calls_url(&self) -> String {
        format!(
            "{}/2010-04-01/Accounts/{}/Calls.json",
            self.base_url, self.account_sid
        )
    }

    fn call_url(&self, sid: &str) -> String {
        format!(
            "{}/2010-04-01/Accounts/{}/Calls/{}.json",
            self.base_url, self.account_sid, sid
        )
    }
}

/// TwiML that declines a ringing call without answering it (so nobody is
/// billed): `<Reject reason="busy">` when `busy`, else `<Reject>` (`rejected`).
pub fn reject_twiml(busy: bool) -> String {
    let reason = if busy { " reason=\"busy\"" } else { "" };
    format!("<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Reject{reason}/></Response>")
}

/// TwiML that keeps a caller on hold: `say` (when given), a pause of
/// `pause_seconds`, then a `<Redirect>` that asks `poll_url` what next.
pub fn hold_twiml(say: Option<&str>, pause_seconds: u32, poll_url: &str) -> String {
    let say = say
        .map(|text| format!("<Say>{}</Say>", xml_escape(text)))
        .unwrap_or_default();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response>{say}<Pause length=\"{pause_seconds}\"/><Redirect method=\"POST\">{}</Redirect></Response>",
        xml_escape(poll_url)
    )
}

/// TwiML that answers, says `text` and hangs up.
pub fn say_and_hang_up_twiml(text: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Say>{}</Say><Hangup/></Response>",
        xml_escape(text)
    )
}

/// The TwiML that bridges the answered call to our media websocket.
///
/// `<Stream>` ignores query strings, so the token travels as a `<Parameter>`
/// and arrives in the stream's `start.customParameters`.
pub fn connect_twiml(media_url: &str, media_token: &str, call_id: &str) -> String {
    format!(
        "<Response><Connect><Stream url=\"{}\"><Parameter name=\"token\" value=\"{}\"/><Parameter name=\"callId\" value=\"{}\"/></Stream></Connect></Response>",
        xml_escape(media_url),
        xml_escape(media_token),
        xml_escape(call_id)
    )
}

/// The form fields of the create-call request.
pub fn create_call_form(req: &DialRequest) -> Vec<(&'static str, String)> {
    let mut form = vec![
        ("To", req.to.clone()),
        ("From", req.from.clone()),
        (
            "Twiml",
            connect_twiml(&req.media_url, &req.media_token, &req.call_id),
        ),
        ("StatusCallback", req.status_url.clone()),
        ("StatusCallbackMethod", "POST".to_string()),
    ];
    for event in ["initiated", "ringing", "answered", "completed"] {
        form.push(("StatusCallbackEvent", event.to_string()));
    }
    form.push(("Timeout", req.ring_timeout_seconds.to_string()));
    form.push(("TimeLimit", req.time_limit_seconds.to_string()));
    if req.detect_machine {
        // Detection runs beside the stream (the call connects at once) and reports the end
        // of a machine's greeting, beep or not, to the status URL.
        form.push(("MachineDetection", "DetectMessageEnd".to_string()));
        form.push(("AsyncAmd", "true".to_string()));
        form.push(("AsyncAmdStatusCallback", req.status_url.clone()));
        form.push(("AsyncAmdStatusCallbackMethod", "POST".to_string()));
    }
    form
}

/// The TwiML that replaces the live call's `<Connect><Stream>` (which ends our media
/// stream) with a `<Dial>` to the person; Twilio posts `DialCallStatus`,
/// `DialCallDuration` and `DialCallSid` to the `action` URL when the bridged leg ends.
pub fn transfer_twiml(req: &TransferRequest) -> String {
    format!(
        "<Response><Dial action=\"{}\" method=\"POST\" callerId=\"{}\"><Number>{}</Number></Dial></Response>",
        xml_escape(&req.leg_status_url),
        xml_escape(&req.from),
        xml_escape(&req.to)
    )
}

/// The form fields of the update-call request that transfers a call.
pub fn transfer_form(req: &TransferRequest) -> Vec<(&'static str, String)> {
    vec![("Twiml", transfer_twiml(req))]
}

/// Twilio's Calls resource, for [`RestCarrier`].
pub struct TwilioApi;

/// Twilio behind the engine's [`Carrier`](voxline_actors::carrier::Carrier) trait,
/// one account per workspace.
pub type TwilioCarrier = RestCarrier<TwilioApi>;

#[async_trait]
impl CarrierApi for TwilioApi {
    type Account = TwilioAccount;
    const KIND: CarrierKind = KIND;

    fn account(credential: &serde_json::Value) -> Result<TwilioAccount, CarriersError> {
        TwilioAccount::from_credential(credential)
    }

    fn authorize(
        account: &TwilioAccount,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, CarriersError> {
        Ok(request.basic_auth(&account.account_sid, Some(&account.auth_token)))
    }

    /// Places a call; its `CA…` SID.
    async fn create_call(
        client: &AccountClient<'_, Self>,
        req: &DialRequest,
    ) -> Result<String, CarriersError> {
        let request = client
            .request(Method::POST, &client.account.calls_url())?
            .form(&create_call_form(req));
        client.send_for_id(request, "/sid").await
    }

    /// Completes the call; an already-ended call (404, code 20404) is success.
    async fn end_call(client: &AccountClient<'_, Self>, sid: &str) -> Result<(), CarriersError> {
        let request = client
            .request(Method::POST, &client.account.call_url(sid))?
            .form(&[("Status", "completed")]);
        match client.send(request).await {
            Ok(_) => Ok(()),
            Err(CarriersError::Rejected {
                status: 404, body, ..
            }) if is_not_found(&body) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Redirects the live call to [`transfer_twiml`].
    async fn transfer_call(
        client: &AccountClient<'_, Self>,
        req: &TransferRequest,
    ) -> Result<(), CarriersError> {
        let request = client
            .request(Method::POST, &client.account.call_url(&req.carrier_call_id))?
            .form(&transfer_form(req));
        client.send(request).await?;
        Ok(())
    }
}

/// Whether a 404 body is Twilio's "resource not found" (code 20404).
fn is_not_found(body: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("code").and_then(|c| c.as_i64()))
        == Some(CODE_NOT_FOUND)
}

/// Maps a `<Dial action>` report's `DialCallStatus` to the leg outcome we store:
/// completed, no-answer, busy, failed or canceled (`answered` means the person
/// picked up and the bridge ended normally, so it is `completed` too).
pub fn map_leg_status(dial_call_status: &str) -> String {
    match dial_call_status.trim().to_ascii_lowercase().as_str() {
        "answered" | "completed" => "completed".into(),
        other => other.to_string(),
    }
}

/// Maps a status callback's `CallStatus` (and `AnsweredBy`) to engine progress;
/// `None` for statuses the engine does not act on (queued, initiated) or unknown ones.
pub fn map_status(call_status: &str, answered_by: Option<&str>) -> Option<CarrierStatus> {
    match call_status.trim().to_ascii_lowercase().as_str() {
        "queued" | "initiated" => None,
        "ringing" => Some(CarrierStatus::Ringing),
        // A machine pick-up is still an answered line; its verdict comes on its own
        // (the asynchronous AMD callback, see [`map_answered_by`]).
        "in-progress" | "answered" => {
            let _ = answered_by;
            Some(CarrierStatus::Answered)
        }
        "completed" => Some(CarrierStatus::Completed),
        "busy" => Some(CarrierStatus::Busy),
        "no-answer" => Some(CarrierStatus::NoAnswer),
        "failed" => Some(CarrierStatus::Failed("failed".into())),
        "canceled" => Some(CarrierStatus::Failed("canceled".into())),
        _ => None,
    }
}

/// Maps the asynchronous AMD callback's `AnsweredBy` (with `DetectMessageEnd`) to a
/// verdict; `None` for `fax` and `unknown`, which the engine's own detector decides.
pub fn map_answered_by(answered_by: &str) -> Option<AnsweredBy> {
    match answered_by.trim().to_ascii_lowercase().as_str() {
        "human" => Some(AnsweredBy::Human),
        "machine_start" => Some(AnsweredBy::Machine),
        "machine_end_beep" => Some(AnsweredBy::Beep),
        "machine_end_silence" | "machine_end_other" => Some(AnsweredBy::GreetingEnded),
        _ => None,
    }
}

/// The `X-Twilio-Signature` for a URL and form parameters: base64 HMAC-SHA1,
/// keyed by the auth token, over the URL followed by each parameter sorted by name.
pub fn signature(auth_token: &str, url: &str, params: &[(String, String)]) -> String {
    STANDARD.encode(Signer::sha1(auth_token).sign(&signed_parts(url, params)))
}

/// What Twilio signs: the URL, then each parameter's name and value, sorted.
fn signed_parts<'a>(url: &'a str, params: &'a [(String, String)]) -> Vec<&'a [u8]> {
    let mut sorted: Vec<&(String, String)> = params.iter().collect();
    // Repeated names (e.g. StatusCallbackEvent) sort by value too, as Twilio's helpers do.
    sorted.sort();
    let mut parts = Vec::with_capacity(1 + 2 * sorted.len());
    parts.push(url.as_bytes());
    for (name, value) in sorted {
        parts.push(name.as_bytes());
        parts.push(value.as_bytes());
    }
    parts
}

/// Verifies `X-Twilio-Signature` over a form-encoded request, trying the URL
/// as given and with its port added or removed (proxies differ on which one
/// Twilio signed). A URL carrying `bodySHA256` is checked as a JSON-body request.
pub fn verify_form(auth_token: &str, url: &str, body: &[u8], header: &str) -> bool {
    if query_param(url, "bodySHA256").is_some() {
        return verify_json_body(auth_token, url, body, header);
    }
    let params: Vec<(String, String)> = form_urlencoded::parse(body).into_owned().collect();
    verify_params(auth_token, url, &params, header)
}

/// Verifies `X-Twilio-Signature` over a URL and already-parsed parameters.
pub fn verify_params(
    auth_token: &str,
    url: &str,
    params: &[(String, String)],
    header: &str,
) -> bool {
    let Ok(expected) = STANDARD.decode(header.trim()) else {
        return false;
    };
    let signer = Signer::sha1(auth_token);
    url_port_variants(url)
        .iter()
        .any(|candidate| signer.verify(&signed_parts(candidate, params), &expected))
}

/// Verifies a JSON-body request: the signature covers the URL alone (which
/// carries `bodySHA256`), and that hash must match the body.
pub fn verify_json_body(auth_token: &str, url: &str, body: &[u8], header: &str) -> bool {
    let Some(claimed) = query_param(url, "bodySHA256") else {
        return false;
    };
    let actual = hex::encode(Sha256::digest(body));
    // Both are public values (the body and its hash in the URL), so a plain comparison is fine.
    if !claimed.eq_ignore_ascii_case(&actual) {
        return false;
    }
    verify_params(auth_token, url, &[], header)
}

/// The decoded value of a query parameter of a URL.
fn query_param(url: &str, name: &str) -> Option<String> {
    let query = url.split_once('?')?.1;
    let query = query.split('#').next().unwrap_or(query);
    form_urlencoded::parse(query.as_bytes())
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.into_owned())
}

/// The URL as given, plus the same URL with its explicit port removed or the
/// scheme's default port added.
pub fn url_port_variants(url: &str) -> Vec<String> {
    let mut variants = vec![url.to_string()];
    let Some((scheme, rest)) = url.split_once("://") else {
        return variants;
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let (userinfo, hostport) = match authority.rsplit_once('@') {
        Some((user, host)) => (format!("{user}@"), host),
        None => (String::new(), authority),
    };
    // The port follows the last colon, unless that colon is inside an IPv6 literal.
    let port_colon = hostport
        .rfind(':')
        .filter(|&i| !hostport[i..].contains(']'));
    let other = match port_colon {
        Some(i) => format!("{scheme}://{userinfo}{}{tail}", &hostport[..i]),
        None => {
            let port = match scheme.to_ascii_lowercase().as_str() {
                "https" => 443,
                "http" => 80,
                _ => return variants,
            };
            format!("{scheme}://{userinfo}{hostport}:{port}{tail}")
        }
    };
    variants.push(other);
    variants
}

/// Checks that a status callback (or a transferred call's leg report, signed the
/// same way) was sent by the Twilio account in `credential`: `X-Twilio-Signature`.
pub(crate) fn verify_callback(
    request: &CallbackRequest,
    credential: &serde_json::Value,
) -> Result<(), CarriersError> {
    let account = TwilioAccount::from_credential(credential)?;
    let signature = request
        .header("x-twilio-signature")
        .ok_or_else(|| unverifiable("missing X-Twilio-Signature"))?;
    if verify_form(&account.auth_token, &request.url, &request.body, signature) {
        Ok(())
    } else {
        Err(unverifiable("X-Twilio-Signature does not match"))
    }
}

/// The progress a verified status callback reports, if the engine acts on it.
pub(super) fn parse_status(
    fields: &[(String, String)],
) -> Result<Option<CarrierStatus>, CarriersError> {
    let answered_by = field(fields, "AnsweredBy");
    Ok(match (field(fields, "CallStatus"), answered_by) {
        (Some(call_status), answered_by) => map_status(&call_status, answered_by.as_deref()),
        // The asynchronous AMD callback carries no CallStatus.
        (None, Some(answered_by)) => map_answered_by(&answered_by).map(CarrierStatus::AnsweredBy),
        (None, None) => return Err(CarriersError::BadCallback("missing CallStatus".into())),
    })
}

/// A `<Dial>` action report's leg status and duration.
pub(super) fn parse_leg(
    fields: &[(String, String)],
) -> Result<(String, Option<u32>), CarriersError> {
    let status = required(fields, "DialCallStatus")?;
    Ok((
        map_leg_status(&status),
        seconds(field(fields, "DialCallDuration")),
    ))
}
