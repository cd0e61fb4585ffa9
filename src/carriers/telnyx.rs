//! Telnyx Call Control v2: place a call that streams both ways to our
//! `/media/telnyx/{token}` endpoint, hang it up, transfer it to a person, and
//! read its webhooks (call progress, and the transferred leg's hang-up).
//!
//! Every webhook URL we hand Telnyx carries our own `sig` (an HMAC of the call
//! id keyed by the API key). Telnyx also signs each webhook with Ed25519 under
//! the account's public key from the portal; when the credential carries that
//! key (`publicKey`), the signature and its timestamp are checked as well.
//!
//! Inbound calls reach the Call Control application's own webhook URL as
//! `call.initiated` (`direction: incoming`), and are answered or rejected by a
//! command: [`answer_body`] streams them like placed calls; [`reject_body`]
//! refuses them with a busy or rejected cause.

use super::callback_request::{CallbackRequest, OurSig, require_inbound_sig, require_our_sig};
use super::rest_carrier::{AccountClient, CarrierApi, RestCarrier};
use super::{
    CarrierKind, CarriersError, TRANSFER_ALEG_PARAM, base_url, callback_sig, optional_field,
    required_field, transfer_callback_sig, with_params, with_sig,
};
use crate::domain::text::{self, Lines};
use crate::secrets::credentials::ed25519_public_key;
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use reqwest::Method;
use voxline_actors::carrier::{AnsweredBy, CarrierStatus, DialRequest, TransferRequest};

const KIND: CarrierKind = CarrierKind::Telnyx;

/// Telnyx's public API host.
pub const DEFAULT_BASE_URL: &str = "https://api.telnyx.com";

/// Telnyx's error code for a command on a call that has already ended.
pub const CODE_ALREADY_ENDED: &str = "90018";

/// Telnyx takes a call's time limit between 30 s and 4 h.
const TIME_LIMIT_RANGE: (u32, u32) = (30, 14_400);

/// How far a webhook's `telnyx-timestamp` may be from our clock, either way:
/// Telnyx's libraries refuse older ones to stop replays.
pub const SIGNATURE_TOLERANCE_SECONDS: i64 = 300;

/// One Telnyx account: `{apiKey, connectionId?, publicKey?, baseUrl?}`.
#[derive(Clone)]
pub struct TelnyxAccount {
    /// API v2 key (Bearer token and our webhook `sig` key).
    pub api_key: String,
    /// The Call Control application placing calls; only placing needs it.
    pub connection_id: Option<String>,
    /// The account's Ed25519 webhook key; when present, webhooks must be signed with it.
    pub public_key: Option<ed25519_dalek::VerifyingKey>,
    /// API base URL without a trailing slash.
    pub base_url: String,
}

impl std::fmt::Debug for TelnyxAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("TelnyxAccount")
            .field("connection_id", &self.connection_id)
            .field("signed_webhooks", &self.public_key.is_some())
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl TelnyxAccount {
    /// Parses the workspace's `telnyx` credential JSON. `connectionId` is optional
    /// here because the credential kind only requires `apiKey`; placing a call
    /// without one is refused then.
    pub fn from_credential(value: &serde_json::Value) -> Result<Self, CarriersError> {
        Ok(Self {
            api_key: required_field(KIND, value, "apiKey")?,
            connection_id: optional_field(value, "connectionId"),
            public_key: match optional_field(value, "publicKey") {
                None => None,
                Some(text) => Some(ed25519_public_key(&text).ok_or_else(|| {
                    CarriersError::InvalidCredential {
                        kind: KIND,
                        reason: "publicKey is not a base64 Ed25519 public key".into(),
                    }
                })?),
            },
            base_url: base_url(value, DEFAULT_BASE_URL),
        })
    }

    fn connection_id(&self) -> Result<&str, CarriersError> {
        self.connection_id
            .as_deref()
            .ok_or_else(|| CarriersError::InvalidCredential {
                kind: KIND,
                reason: "needs a non-empty string field connectionId to place calls".into(),
            })
    }

    fn action_url(&self, call_control_id: &str, action: &str) -> String {
        format!(
            "{}/v2/calls/{}/actions/{action}",
            self.base_url,
            path_segment(call_control_id)
        )
    }
}

/// Why a webhook's Ed25519 signature was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignatureError {
    /// No `telnyx-signature-ed25519` or `telnyx-timestamp` header.
    #[error("missing telnyx-signature-ed25519 or telnyx-timestamp")]
    Missing,
    /// The timestamp is not unix seconds, or too far from now.
    #[error("telnyx-timestamp is not within {SIGNATURE_TOLERANCE_SECONDS} s of now")]
    Stale,
    /// The signature is not base64 of 64 bytes, or does not verify.
    #[error("telnyx-signature-ed25519 does not match")]
    Mismatch,
}

/// Checks a webhook as Telnyx signs it: the Ed25519 signature (base64, header
/// `telnyx-signature-ed25519`) of `"{timestamp}|{raw body}"` under the account's
/// public key, with `telnyx-timestamp` (unix seconds) within
/// [`SIGNATURE_TOLERANCE_SECONDS`] of `now_unix`.
pub fn verify_signature(
    key: &ed25519_dalek::VerifyingKey,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
    now_unix: i64,
) -> Result<(), SignatureError> {
    let (Some(timestamp), Some(signature)) = (timestamp, signature) else {
        return Err(SignatureError::Missing);
    };
    let timestamp = timestamp.trim();
    let signed_at: i64 = timestamp.parse().map_err(|_| SignatureError::Stale)?;
    if (now_unix - signed_at).abs() > SIGNATURE_TOLERANCE_SECONDS {
        return Err(SignatureError::Stale);
    }
    let bytes: [u8; 64] = STANDARD
        .decode(signature.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(SignatureError::Mismatch)?;
    let signature = ed25519_dalek::Signature::from_bytes(&bytes);
    let mut message = Vec::with_capacity(timestamp.len() + 1 + body.len());
    message.extend_from_slice(timestamp.as_bytes());
    message.push(b'|');
    message.extend_from_slice(body);
    key.verify_strict(&message, &signature)
        .map_err(|_| SignatureError::Mismatch)
}

/// Escapes what would end a path segment. Call control ids look like
/// `v3:<base64url>` and Telnyx's own examples put them in the path as they are,
/// so only characters that would break the path are encoded.
fn path_segment(id: &str) -> String {
    let mut out = String::with_capacity(id.len());
    for ch in id.chars() {
        match ch {
            '/' => out.push_str("%2F"),
            '?' => out.push_str("%3F"),
            '#' => out.push_str("%23"),
            '%' => out.push_str("%25"),
            ' ' => out.push_str("%20"),
            c => out.push(c),
        }
    }
    out
}

/// The JSON body of the dial request. The stream is bidirectional in RTP mode
/// with PCMU payloads, which is what our Telnyx media codec sends back.
pub fn dial_body(
    req: &DialRequest,
    account: &TelnyxAccount,
) -> Result<serde_json::Value, CarriersError> {
    let (min_limit, max_limit) = TIME_LIMIT_RANGE;
    let mut body = serde_json::json!({
        "connection_id": account.connection_id()?,
        "to": req.to,
        "from": req.from,
        "stream_url": format!("{}/{}", req.media_url.trim_end_matches('/'), req.media_token),
        "stream_track": "inbound_track",
        "stream_bidirectional_mode": "rtp",
        "stream_bidirectional_codec": "PCMU",
        "webhook_url": with_sig(&req.status_url, &callback_sig(&account.api_key, &req.call_id)),
        "webhook_url_method": "POST",
        "timeout_secs": req.ring_timeout_seconds,
        "time_limit_secs": req.time_limit_seconds.clamp(min_limit, max_limit),
    });
    if req.detect_machine
        && let Some(fields) = body.as_object_mut()
    {
        // Reports `call.machine.detection.ended`, then on a machine
        // `call.machine.greeting.ended` (beep or not), to the webhook URL.
        fields.insert("answering_machine_detection".into(), "detect_beep".into());
    }
    Ok(body)
}

/// The webhook URL of a transfer: the leg-report URL with our `sig` and the callee's
/// leg, so the report handler can tell the bridged leg's events from the callee's.
pub fn transfer_webhook_url(req: &TransferRequest, account: &TelnyxAccount) -> String {
    let signed = with_sig(
        &req.leg_status_url,
        &transfer_callback_sig(&account.api_key, &req.call_id),
    );
    with_params(&signed, &[(TRANSFER_ALEG_PARAM, &req.carrier_call_id)])
}

/// The JSON body of the transfer command; the new leg's webhooks go to
/// [`transfer_webhook_url`].
pub fn transfer_body(req: &TransferRequest, account: &TelnyxAccount) -> serde_json::Value {
    serde_json::json!({
        "to": req.to,
        "from": req.from,
        "webhook_url": transfer_webhook_url(req, account),
        "webhook_url_method": "POST",
    })
}

/// Ends a call by its `call_control_id`; a call that already ended (code 90018) is success.
pub async fn hangup_call(
    client: &AccountClient<'_, TelnyxApi>,
    call_control_id: &str,
) -> Result<(), CarriersError> {
    let request = client
        .request(
            Method::POST,
            &client.account.action_url(call_control_id, "hangup"),
        )?
        .json(&serde_json::json!({}));
    match client.send(request).await {
        Ok(_) => Ok(()),
        Err(CarriersError::Rejected { body, .. }) if has_error_code(&body, CODE_ALREADY_ENDED) => {
            Ok(())
        }
        Err(err) => Err(err),
    }
}

/// Whether an error answer (`{"errors":[{"code":"90018",…}]}`) carries `code`.
fn has_error_code(body: &str, code: &str) -> bool {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(body) else {
        return false;
    };
    value
        .get("errors")
        .and_then(|e| e.as_array())
        .is_some_and(|errors| {
            errors.iter().any(|e| match e.get("code") {
                Some(serde_json::Value::String(s)) => s == code,
                Some(serde_json::Value::Number(n)) => n.to_string() == code,
                _ => false,
            })
        })
}

/// Telnyx's Call Control API, for [`RestCarrier`].
pub struct TelnyxApi;

/// Telnyx behind the engine's [`Carrier`](voxline_actors::carrier::Carrier) trait,
/// one account per workspace.
pub type TelnyxCarrier = RestCarrier<TelnyxApi>;

#[async_trait]
impl CarrierApi for TelnyxApi {
    type Account = TelnyxAccount;
    const KIND: CarrierKind = KIND;

    fn account(credential: &serde_json::Value) -> Result<TelnyxAccount, CarriersError> {
        TelnyxAccount::from_credential(credential)
    }

    fn authorize(
        account: &TelnyxAccount,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, CarriersError> {
        Ok(request.bearer_auth(&account.api_key))
    }

    /// Places a call; its `call_control_id`.
    async fn create_call(
        client: &AccountClient<'_, Self>,
        req: &DialRequest,
    ) -> Result<String, CarriersError> {
        let request = client
            .request(
                Method::POST,
                &format!("{}/v2/calls", client.account.base_url),
            )?
            .json(&dial_body(req, &client.account)?);
        client.send_for_id(request, "/data/call_control_id").await
    }

    /// The hangup command; an already-ended call is success.
    async fn end_call(
        client: &AccountClient<'_, Self>,
        call_control_id: &str,
    ) -> Result<(), CarriersError> {
        hangup_call(client, call_control_id).await
    }

    /// Bridges the live call to the person (the transfer command).
    async fn transfer_call(
        client: &AccountClient<'_, Self>,
        req: &TransferRequest,
    ) -> Result<(), CarriersError> {
        let request = client
            .request(
                Method::POST,
                &client.account.action_url(&req.carrier_call_id, "transfer"),
            )?
            .json(&transfer_body(req, &client.account));
        client.send(request).await?;
        Ok(())
    }
}

/// The parts of a Call Control webhook (`{"data":{"event_type","occurred_at","payload":{…}}}`)
/// we act on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TelnyxEvent {
    /// `call.initiated`, `call.answered`, `call.hangup`, …
    pub event_type: String,
    /// The leg the event is about.
    pub call_control_id: Option<String>,
    /// On `call.hangup`: `normal_clearing`, `user_busy`, `timeout`, …
    pub hangup_cause: Option<String>,
    /// When the leg started (RFC 3339).
    pub start_time: Option<String>,
    /// When the leg ended (RFC 3339), where Telnyx says.
    pub end_time: Option<String>,
    /// When the event happened (RFC 3339).
    pub occurred_at: Option<String>,
    /// On the machine-detection events: `human`, `machine`, `beep_detected`, `ended`, …
    pub result: Option<String>,
    /// `incoming` or `outgoing`.
    pub direction: Option<String>,
    /// The Call Control application (connection) of the leg.
    pub connection_id: Option<String>,
    /// The caller.
    pub from: Option<String>,
    /// The number called.
    pub to: Option<String>,
}

/// Reads a webhook body; `None` when it is not a Call Control event.
pub fn parse_event(body: &[u8]) -> Option<TelnyxEvent> {
    let value: serde_json::Value = serde_json::from_slice(body).ok()?;
    let data = value.get("data")?;
    // A value holding NUL or a control character reads as absent: it never reaches the store.
    let text = |v: Option<&serde_json::Value>| {
        v.and_then(|v| v.as_str())
            .map(str::trim)
            .filter(|s| !s.is_empty() && text::check(s, Lines::One).is_ok())
            .map(str::to_string)
    };
    let payload = data.get("payload");
    let field = |name: &str| text(payload.and_then(|p| p.get(name)));
    Some(TelnyxEvent {
        event_type: text(data.get("event_type"))?,
        call_control_id: field("call_control_id"),
        hangup_cause: field("hangup_cause"),
        start_time: field("start_time"),
        end_time: field("end_time"),
        occurred_at: text(data.get("occurred_at")),
        result: field("result"),
        direction: field("direction"),
        connection_id: field("connection_id"),
        from: field("from"),
        to: field("to"),
    })
}

/// Maps a webhook of the placed call to engine progress; `None` for events the
/// engine does not act on (Telnyx sends no ringing event for outbound calls).
pub fn map_status(event: &TelnyxEvent) -> Option<CarrierStatus> {
    match event.event_type.as_str() {
        "call.answered" => Some(CarrierStatus::Answered),
        "call.hangup" => Some(
            match event
                .hangup_cause
                .as_deref()
                .unwrap_or("unspecified")
                .to_ascii_lowercase()
                .as_str()
            {
                "normal_clearing" | "time_limit" => CarrierStatus::Completed,
                "user_busy" => CarrierStatus::Busy,
                "timeout" | "no_answer" => CarrierStatus::NoAnswer,
                "originator_cancel" => CarrierStatus::Failed("canceled".into()),
                other => CarrierStatus::Failed(other.to_string()),
            },
        ),
        "call.machine.detection.ended" => {
            let verdict = match event.result.as_deref()? {
                "human" => AnsweredBy::Human,
                "machine" => AnsweredBy::Machine,
                _ => return None,
            };
            Some(CarrierStatus::AnsweredBy(verdict))
        }
        "call.machine.greeting.ended" => {
            let verdict = match event.result.as_deref()? {
                "beep_detected" => AnsweredBy::Beep,
                "ended" => AnsweredBy::GreetingEnded,
                _ => return None,
            };
            Some(CarrierStatus::AnsweredBy(verdict))
        }
        _ => None,
    }
}

/// Maps the transferred leg's `call.hangup` to the leg outcome we store (completed,
/// no-answer, busy, canceled, failed) and its length; `None` for any other event.
///
/// Telnyx reports no talk time on hang-up, so a completed leg's length is from the
/// leg's start to its end, which includes its ringing.
pub fn map_leg(event: &TelnyxEvent) -> Option<(String, Option<u32>)> {
    if event.event_type != "call.hangup" {
        return None;
    }
    let status = match event
        .hangup_cause
        .as_deref()
        .unwrap_or("unspecified")
        .to_ascii_lowercase()
        .as_str()
    {
        "normal_clearing" | "time_limit" => "completed",
        "user_busy" => "busy",
        "timeout" | "no_answer" => "no-answer",
        "originator_cancel" => "canceled",
        _ => "failed",
    };
    let duration = (status == "completed")
        .then(|| {
            let start = parse_time(event.start_time.as_deref())?;
            let end = parse_time(event.end_time.as_deref().or(event.occurred_at.as_deref()))?;
            u32::try_from((end - start).num_seconds()).ok()
        })
        .flatten();
    Some((status.to_string(), duration))
}

fn parse_time(text: Option<&str>) -> Option<chrono::DateTime<chrono::FixedOffset>> {
    chrono::DateTime::parse_from_rfc3339(text?).ok()
}

/// Checks that a webhook came from the Telnyx account in `credential`: our `sig`
/// of kind `which` in its URL, plus the Ed25519 signature when the credential has
/// the key.
pub(super) fn verify_callback(
    call_id: &str,
    request: &CallbackRequest,
    credential: &serde_json::Value,
    which: OurSig,
) -> Result<(), CarriersError> {
    let account = TelnyxAccount::from_credential(credential)?;
    require_our_sig(request, &account.api_key, call_id, which)?;
    verify_signed_request(&account, request)
}

/// Checks Telnyx's Ed25519 webhook signature when the account gave its public key.
/// The timestamp is compared with the wall clock: Telnyx signs with real time.
fn verify_signed_request(
    account: &TelnyxAccount,
    request: &CallbackRequest,
) -> Result<(), CarriersError> {
    let Some(key) = &account.public_key else {
        return Ok(());
    };
    verify_signature(
        key,
        request.header("telnyx-timestamp"),
        request.header("telnyx-signature-ed25519"),
        &request.body,
        chrono::Utc::now().timestamp(),
    )
    .map_err(|err| CarriersError::Unverifiable(err.to_string()))
}

/// The event's body as a call event, or a `BadCallback`.
fn event_of(request: &CallbackRequest) -> Result<TelnyxEvent, CarriersError> {
    parse_event(&request.body)
        .ok_or_else(|| CarriersError::BadCallback("not a Telnyx call event".into()))
}

/// The progress a verified webhook reports, if the engine acts on it.
pub(super) fn parse_callback_status(
    request: &CallbackRequest,
) -> Result<Option<CarrierStatus>, CarriersError> {
    Ok(map_status(&event_of(request)?))
}

/// A transfer leg report's final status and duration; `None` for an event of the
/// callee's own leg (`aleg`) or one that is not final.
pub(super) fn parse_leg(
    request: &CallbackRequest,
    aleg: Option<&str>,
) -> Result<Option<(String, Option<u32>)>, CarriersError> {
    let event = event_of(request)?;
    if aleg.is_some() && event.call_control_id.as_deref() == aleg {
        return Ok(None);
    }
    Ok(map_leg(&event))
}

/// A call ringing one of our numbers on Telnyx: the application's
/// `call.initiated` webhook with `direction: incoming`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelnyxInboundCall {
    /// The leg to answer or reject.
    pub call_control_id: String,
    /// The Call Control application (connection) the number is assigned to.
    pub connection_id: Option<String>,
    /// The number that rang (E.164).
    pub to: String,
    /// The caller (E.164, or `anonymous` when withheld).
    pub from: String,
}

/// Reads the application webhook's body: the ringing call of an incoming
/// `call.initiated`; `None` for every other event the application URL gets
/// (a caller who hangs up before our answer, say: after the answer, the call's
/// events go to the `webhook_url` the answer names); `BadCallback` when the body
/// is not a Call Control event.
pub fn parse_inbound(body: &[u8]) -> Result<Option<TelnyxInboundCall>, CarriersError> {
    let event = parse_event(body)
        .ok_or_else(|| CarriersError::BadCallback("not a Telnyx call event".into()))?;
    if event.event_type != "call.initiated" || event.direction.as_deref() != Some("incoming") {
        return Ok(None);
    }
    let lacks = |name: &str| CarriersError::BadCallback(format!("call.initiated lacks {name}"));
    Ok(Some(TelnyxInboundCall {
        call_control_id: event
            .call_control_id
            .ok_or_else(|| lacks("call_control_id"))?,
        connection_id: event.connection_id,
        to: event.to.ok_or_else(|| lacks("to"))?,
        from: event.from.unwrap_or_else(|| "anonymous".to_string()),
    }))
}

/// Checks an application webhook: from the application the credential names
/// (`connectionId`, when it names one), signed with Ed25519 when the account gave
/// its `publicKey`, otherwise carrying our `sig` over the application's id in
/// the URL the customer pasted ([`inbound_sig_scope`]).
pub(super) fn verify_inbound(
    request: &CallbackRequest,
    credential: &serde_json::Value,
    call: &TelnyxInboundCall,
) -> Result<(), CarriersError> {
    let account = TelnyxAccount::from_credential(credential)?;
    if let Some(expected) = &account.connection_id
        && call.connection_id.as_deref() != Some(expected.as_str())
    {
        return Err(CarriersError::Unverifiable(
            "connection_id is not the account's Call Control application".into(),
        ));
    }
    if account.public_key.is_some() {
        return verify_signed_request(&account, request);
    }
    let scope = inbound_sig_scope(&account).ok_or_else(|| {
        CarriersError::Unverifiable(
            "the credential has neither publicKey nor connectionId to check the webhook with"
                .into(),
        )
    })?;
    require_inbound_sig(request, &account.api_key, scope)
}

/// What our `sig` in a Telnyx application URL signs: the application's id, as
/// one URL serves every number on it. `None` when the account signs its own
/// webhooks (`publicKey`), or names no application.
pub fn inbound_sig_scope(account: &TelnyxAccount) -> Option<&str> {
    if account.public_key.is_some() {
        return None;
    }
    account.connection_id.as_deref()
}

/// The answer command's body: the same bidirectional PCMU stream as a placed
/// call's, with the call's later events sent to `webhook_url` (our status URL
/// of the call, signed). `command_id` (our call id) makes a retried answer a no-op.
pub fn answer_body(
    media_url: &str,
    media_token: &str,
    webhook_url: &str,
    call_id: &str,
) -> serde_json::Value {
    serde_json::json!({
        "stream_url": format!("{}/{}", media_url.trim_end_matches('/'), media_token),
        "stream_track": "inbound_track",
        "stream_bidirectional_mode": "rtp",
        "stream_bidirectional_codec": "PCMU",
        "webhook_url": webhook_url,
        "webhook_url_method": "POST",
        "command_id": call_id,
    })
}

/// The reject command's body: `USER_BUSY` when every line is taken, otherwise
/// `CALL_REJECTED`. The caller hears the network's busy or rejection tone and is
/// not billed, as Telnyx has no way to play a message to an unanswered call.
pub fn reject_body(busy: bool) -> serde_json::Value {
    serde_json::json!({"cause": if busy { "USER_BUSY" } else { "CALL_REJECTED" }})
}

/// Sends the command `action` (`answer`, `reject`) with `body` for a ringing call.
pub async fn inbound_command(
    http: &reqwest::Client,
    credential: &serde_json::Value,
    call_control_id: &str,
    action: &str,
    body: &serde_json::Value,
) -> Result<(), CarriersError> {
    let client = AccountClient::<TelnyxApi>::new(http, TelnyxAccount::from_credential(credential)?);
    let request = client
        .request(
            Method::POST,
            &client.account.action_url(call_control_id, action),
        )?
        .json(body);
    client.send(request).await?;
    Ok(())
}

/// The status URL of an answered inbound call, signed as a placed call's is.
pub fn inbound_webhook_url(
    credential: &serde_json::Value,
    status_url: &str,
    call_id: &str,
) -> Result<String, CarriersError> {
    let account = TelnyxAccount::from_credential(credential)?;
    Ok(with_sig(
        status_url,
        &callback_sig(&account.api_key, call_id),
    ))
}

#[cfg(test)]
mod inbound_tests {
    use super::*;

    fn initiated(direction: &str) -> Vec<u8> {
        serde_json::json!({"data": {
            "record_type": "event", "event_type": "call.initiated",
            "id": "0ccc7b54-4df3-4bca-a65a-3da1ecc777f0",
            "occurred_at": "2026-11-28T10:00:00.000000Z",
            "payload": {
                "call_control_id": "v3:in-1", "connection_id": "conn-7",
                "call_leg_id": "428c31b6", "call_session_id": "428c31b6-s",
                "client_state": null, "direction": direction,
                "from": "+919845012399", "to": "+918035740104", "state": "parked"
            }
        }})
        .to_string()
        .into_bytes()
    }

    #[test]
    fn an_incoming_call_initiated_is_a_ringing_call_and_other_events_are_not() {
        let call = parse_inbound(&initiated("incoming")).unwrap().unwrap();
        assert_eq!(call.call_control_id, "v3:in-1");
        assert_eq!(call.connection_id.as_deref(), Some("conn-7"));
        assert_eq!(call.to, "+918035740104");
        assert_eq!(call.from, "+919845012399");
        assert_eq!(parse_inbound(&initiated("outgoing")).unwrap(), None);
        let hangup =
            br#"{"data":{"event_type":"call.hangup","payload":{"call_control_id":"v3:in-1"}}}"#;
        assert_eq!(parse_inbound(hangup).unwrap(), None);
        assert!(parse_inbound(b"[]").is_err());
    }

    #[test]
    fn the_answer_streams_pcmu_both_ways_and_rejections_name_their_cause() {
        let body = answer_body("wss://v.example/media/telnyx/", "tok", "https://cb", "c-1");
        assert_eq!(body["stream_url"], "wss://v.example/media/telnyx/tok");
        assert_eq!(body["stream_bidirectional_codec"], "PCMU");
        assert_eq!(body["command_id"], "c-1");
        assert_eq!(reject_body(true)["cause"], "USER_BUSY");
        assert_eq!(reject_body(false)["cause"], "CALL_REJECTED");
    }
}
