//! Vonage Voice API: place a call whose NCCO connects a websocket to our
//! `/media/vonage` endpoint, authenticated by an RS256 application JWT; hang
//! it up; transfer it to an inline NCCO that connects the callee to a person
//! (whose `eventUrl` reports the bridged leg); and check its event callbacks.
//!
//! Vonage signs callbacks only when the account enables signed webhooks
//! (an HS256 JWT keyed by the signature secret, checked when the credential
//! holds `signatureSecret`), so the event URL we hand it also carries our own
//! `sig` keyed by the application's private key.

use super::callback_request::{
    CallbackRequest, OurSig, carrier_phone, field, require_inbound_sig, require_our_sig, required,
    seconds, unverifiable,
};
use super::rest_carrier::{AccountClient, CarrierApi, RestCarrier};
use super::{
    CarrierKind, CarriersError, TRANSFER_ALEG_PARAM, base_url, callback_sig, optional_field,
    required_field, transfer_callback_sig, with_params, with_sig,
};
use async_trait::async_trait;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use reqwest::Method;
use sha2::{Digest, Sha256};
use voxline_actors::carrier::{AnsweredBy, CarrierStatus, DialRequest, TransferRequest};

const KIND: CarrierKind = CarrierKind::Vonage;

/// Vonage's public API host.
pub const DEFAULT_BASE_URL: &str = "https://api.nexmo.com";

/// The audio format we ask Vonage to stream.
pub const STREAM_CONTENT_TYPE: &str = "audio/l16;rate=16000";

/// How long an application JWT we mint stays valid.
const JWT_LIFETIME_SECONDS: i64 = 300;

/// One Vonage application: `{applicationId, privateKey, baseUrl?, signatureSecret?}`.
#[derive(Clone)]
pub struct VonageAccount {
    /// Application id (the JWT's `application_id`).
    pub application_id: String,
    /// PEM RSA private key of the application (signs our JWTs; keys our callback `sig`).
    pub private_key_pem: String,
    /// Signature secret for signed webhooks, when the account uses them.
    pub signature_secret: Option<String>,
    /// API base URL without a trailing slash.
    pub base_url: String,
}

impl std::fmt::Debug for VonageAccount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Secrets stay out of logs.
        f.debug_struct("VonageAccount")
            .field("application_id", &self.application_id)
            .field("base_url", &self.base_url)
            .finish_non_exhaustive()
    }
}

impl VonageAccount {
    /// Parses the workspace's `vonage` credential JSON.
    pub fn from_credential(value: &serde_json::Value) -> Result<Self, CarriersError> {
        let raw_key = required_field(KIND, value, "privateKey")?;
        // Keys pasted into a single-line JSON field often carry literal "\n".
        let private_key_pem = if raw_key.contains('\n') {
            raw_key
        } else {
            raw_key.replace("\\n", "\n")
        };
        Ok(Self {
            application_id: required_field(KIND, value, "applicationId")?,
            private_key_pem,
            signature_secret: optional_field(value, "signatureSecret"),
            base_url: base_url(value, DEFAULT_BASE_URL),
        })
    }

    /// Mints an application JWT (RS256) valid from `now_unix` for five minutes.
    pub fn jwt(&self, now_unix: i64) -> Result<String, CarriersError> {
        let key = EncodingKey::from_rsa_pem(self.private_key_pem.as_bytes()).map_err(|e| {
            CarriersError::InvalidCredential {
                kind: KIND,
                reason: format!("privateKey is not a PEM RSA key: {e}"),
            }
        })?;
        let claims = serde_json::json!({
            "application_id": self.application_id,
            "iat": now_unix,
            "nbf": now_unix - 5,
            "exp": now_unix + JWT_LIFETIME_SECONDS,
            "jti": uuid::Uuid::new_v4().to_string(),
        });
        jsonwebtoken::encode(&Header::new(Algorithm::RS256), &claims, &key).map_err(|e| {
            CarriersError::InvalidCredential {
                kind: KIND,
                reason: format!("cannot sign a JWT with privateKey: {e}"),
            }
        })
    }
}

/// A number as Vonage takes it: E.164 digits without the `+`.
fn vonage_number(e164: &str) -> String {
    e164.trim().trim_start_matches('+').to_string()
}

/// The JSON body of the create-call request.
pub fn create_call_body(req: &DialRequest, account: &VonageAccount) -> serde_json::Value {
    let event_url = with_sig(
        &req.status_url,
        &callback_sig(&account.private_key_pem, &req.call_id),
    );
    let mut body = serde_json::json!({
        "to": [{ "type": "phone", "number": vonage_number(&req.to) }],
        "from": { "type": "phone", "number": vonage_number(&req.from) },
        "ncco": [{
            "action": "connect",
            "endpoint": [{
                "type": "websocket",
                "uri": req.media_url,
                "content-type": STREAM_CONTENT_TYPE,
                "headers": { "token": req.media_token, "callId": req.call_id },
            }],
        }],
        "event_url": [event_url],
        "event_method": "POST",
        // Vonage accepts 1–120 s of ringing and 1–7200 s of call.
        "ringing_timer": req.ring_timeout_seconds.clamp(1, 120),
        "length_timer": req.time_limit_seconds.clamp(1, 7200),
    });
    if req.detect_machine
        && let Some(fields) = body.as_object_mut()
    {
        // The call goes on with a machine (the agent decides); the verdict and the beep come
        // as events to the event URL.
        fields.insert(
            "advanced_machine_detection".into(),
            serde_json::json!({ "behavior": "continue", "mode": "detect_beep" }),
        );
    }
    body
}

/// The event URL of a transfer's `connect`: the leg-report URL with our `sig` (Vonage
/// signs webhooks only when the account opts in) and the callee's leg uuid.
pub fn transfer_event_url(req: &TransferRequest, account: &VonageAccount) -> String {
    let signed = with_sig(
        &req.leg_status_url,
        &transfer_callback_sig(&account.private_key_pem, &req.call_id),
    );
    with_params(&signed, &[(TRANSFER_ALEG_PARAM, &req.carrier_call_id)])
}

/// The JSON body of the update-call request that moves the callee into a new
/// conversation with the person (which leaves our websocket leg behind).
pub fn transfer_body(req: &TransferRequest, account: &VonageAccount) -> serde_json::Value {
    serde_json::json!({
        "action": "transfer",
        "destination": {
            "type": "ncco",
            "ncco": [{
                "action": "connect",
                "from": vonage_number(&req.from),
                "endpoint": [{ "type": "phone", "number": vonage_number(&req.to) }],
                "eventUrl": [transfer_event_url(req, account)],
                "eventMethod": "POST",
            }],
        },
    })
}

/// Maps an event of the transfer's connected leg to the leg outcome we store
/// (completed, no-answer, busy, failed, canceled); `None` for progress on the way
/// (started, ringing, answered) and anything else.
pub fn map_leg_status(status: &str) -> Option<String> {
    let status = match status.trim().to_ascii_lowercase().as_str() {
        "completed" => "completed",
        "busy" => "busy",
        "unanswered" | "timeout" => "no-answer",
        "failed" | "rejected" => "failed",
        "cancelled" | "canceled" => "canceled",
        _ => return None,
    };
    Some(status.to_string())
}

/// Vonage's Voice API, for [`RestCarrier`].
pub struct VonageApi;

/// Vonage behind the engine's [`Carrier`](voxline_actors::carrier::Carrier) trait,
/// one application per workspace.
pub type VonageCarrier = RestCarrier<VonageApi>;

#[async_trait]
impl CarrierApi for VonageApi {
    type Account = VonageAccount;
    const KIND: CarrierKind = KIND;

    fn account(credential: &serde_json::Value) -> Result<VonageAccount, CarriersError> {
        VonageAccount::from_credential(credential)
    }

    /// A fresh application JWT per request: Vonage's tokens are short-lived.
    fn authorize(
        account: &VonageAccount,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, CarriersError> {
        Ok(request.bearer_auth(account.jwt(now_unix())?))
    }

    /// Places a call; its `uuid`.
    async fn create_call(
        client: &AccountClient<'_, Self>,
        req: &DialRequest,
    ) -> Result<String, CarriersError> {
        let request = client
            .request(
                Method::POST,
                &format!("{}/v1/calls", client.account.base_url),
            )?
            .json(&create_call_body(req, &client.account));
        client.send_for_id(request, "/uuid").await
    }

    /// Hangs the call up; a call Vonage no longer knows (404) already ended.
    async fn end_call(client: &AccountClient<'_, Self>, uuid: &str) -> Result<(), CarriersError> {
        let request = client
            .request(
                Method::PUT,
                &format!("{}/v1/calls/{uuid}", client.account.base_url),
            )?
            .json(&serde_json::json!({ "action": "hangup" }));
        match client.send(request).await {
            Ok(_) | Err(CarriersError::Rejected { status: 404, .. }) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Transfers the live call to [`transfer_body`]'s NCCO.
    async fn transfer_call(
        client: &AccountClient<'_, Self>,
        req: &TransferRequest,
    ) -> Result<(), CarriersError> {
        let request = client
            .request(
                Method::PUT,
                &format!(
                    "{}/v1/calls/{}",
                    client.account.base_url, req.carrier_call_id
                ),
            )?
            .json(&transfer_body(req, &client.account));
        client.send(request).await?;
        Ok(())
    }
}

fn now_unix() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Reads an advanced machine detection event: `status` human or machine, and on a machine
/// `sub_state` `beep_start` (the beep) or `beep_timeout` (no beep heard); `None` for any
/// other event.
pub fn map_machine(status: &str, sub_state: Option<&str>) -> Option<CarrierStatus> {
    let verdict = match (status.trim().to_ascii_lowercase().as_str(), sub_state) {
        ("human", _) => AnsweredBy::Human,
        ("machine", Some("beep_start")) => AnsweredBy::Beep,
        ("machine", Some("beep_timeout")) => AnsweredBy::GreetingEnded,
        ("machine", _) => AnsweredBy::Machine,
        _ => return None,
    };
    Some(CarrierStatus::AnsweredBy(verdict))
}

/// Maps a Vonage event's `status` to engine progress; `None` for values the
/// engine does not act on (started, transfers; machine verdicts are [`map_machine`]'s).
pub fn map_status(status: &str) -> Option<CarrierStatus> {
    match status.trim().to_ascii_lowercase().as_str() {
        "ringing" => Some(CarrierStatus::Ringing),
        "answered" => Some(CarrierStatus::Answered),
        "completed" => Some(CarrierStatus::Completed),
        "busy" => Some(CarrierStatus::Busy),
        "unanswered" | "timeout" => Some(CarrierStatus::NoAnswer),
        "failed" => Some(CarrierStatus::Failed("failed".into())),
        "rejected" => Some(CarrierStatus::Failed("rejected".into())),
        "cancelled" | "canceled" => Some(CarrierStatus::Failed("cancelled".into())),
        _ => None,
    }
}

/// How old a signed webhook's token may be (its `iat`): Vonage signs each
/// callback as it sends it, so an older token is a captured one replayed.
pub const SIGNED_WEBHOOK_MAX_AGE_SECONDS: i64 = 300;

/// How far in the future a signed webhook's `iat` (or `nbf`) may lie: the
/// clock skew between Vonage's clock and ours that we forgive. Expiry (`exp`)
/// gets no leeway, as in Vonage's own `vonage-jwt` check.
pub const SIGNED_WEBHOOK_CLOCK_SKEW_SECONDS: i64 = 60;

/// Why a signed webhook was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SignedWebhookError {
    /// No `Authorization: Bearer` token.
    #[error("signed-webhook Authorization is not a Bearer token")]
    Missing,
    /// The token is not an HS256 JWT under the signature secret, or its
    /// claims are not numbers where the JWT spec says they are.
    #[error("signed-webhook JWT does not match")]
    Mismatch,
    /// The token names no `iat`, so how old it is cannot be told.
    #[error("signed-webhook JWT has no iat")]
    NoIssuedAt,
    /// `iat` is more than [`SIGNED_WEBHOOK_MAX_AGE_SECONDS`] ago.
    #[error("signed-webhook JWT was issued more than {SIGNED_WEBHOOK_MAX_AGE_SECONDS} s ago")]
    Stale,
    /// `iat` or `nbf` is more than [`SIGNED_WEBHOOK_CLOCK_SKEW_SECONDS`] ahead of now.
    #[error("signed-webhook JWT is not valid yet")]
    NotYetValid,
    /// `exp` has passed.
    #[error("signed-webhook JWT has expired")]
    Expired,
    /// `payload_hash` is not the body's SHA-256.
    #[error("signed-webhook payload_hash does not match the body")]
    BodyMismatch,
}

/// The claims of a signed webhook's JWT that the check reads; a time claim
/// that is present but not a whole number of seconds fails to parse.
#[derive(serde::Deserialize)]
struct SignedWebhookClaims {
    iat: Option<i64>,
    nbf: Option<i64>,
    exp: Option<i64>,
    payload_hash: Option<String>,
}

/// Verifies a signed webhook at `now_unix` (the wall clock's unix seconds:
/// Vonage signs with real time): `Authorization: Bearer <HS256 JWT>` keyed by
/// the signature secret, issued (`iat`) at most
/// [`SIGNED_WEBHOOK_MAX_AGE_SECONDS`] ago, not expired (`exp`, when present),
/// not before its `nbf`, and whose `payload_hash` (when present) is the
/// body's hex SHA-256. A captured callback therefore cannot be replayed
/// after a few minutes, however long the call lives.
pub fn verify_signed_webhook(
    signature_secret: &str,
    authorization: &str,
    body: &[u8],
    now_unix: i64,
) -> Result<(), SignedWebhookError> {
    let token = authorization
        .trim()
        .strip_prefix("Bearer ")
        .or_else(|| authorization.trim().strip_prefix("bearer "))
        .ok_or(SignedWebhookError::Missing)?;
    let mut validation = Validation::new(Algorithm::HS256);
    // The time claims are checked below against `now_unix`, not the
    // library's own clock, and with the leeways documented above.
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.required_spec_claims.clear();
    validation.validate_aud = false;
    let key = DecodingKey::from_secret(signature_secret.as_bytes());
    let claims = jsonwebtoken::decode::<SignedWebhookClaims>(token.trim(), &key, &validation)
        .map_err(|_| SignedWebhookError::Mismatch)?
        .claims;
    let issued_at = claims.iat.ok_or(SignedWebhookError::NoIssuedAt)?;
    if issued_at < now_unix.saturating_sub(SIGNED_WEBHOOK_MAX_AGE_SECONDS) {
        return Err(SignedWebhookError::Stale);
    }
    let latest_start = now_unix.saturating_add(SIGNED_WEBHOOK_CLOCK_SKEW_SECONDS);
    if issued_at > latest_start || claims.nbf.is_some_and(|nbf| nbf > latest_start) {
        return Err(SignedWebhookError::NotYetValid);
    }
    if claims.exp.is_some_and(|exp| exp <= now_unix) {
        return Err(SignedWebhookError::Expired);
    }
    match claims.payload_hash {
        Some(hash) if !hash.eq_ignore_ascii_case(&hex::encode(Sha256::digest(body))) => {
            Err(SignedWebhookError::BodyMismatch)
        }
        _ => Ok(()),
    }
}

/// Checks that a callback came from the Vonage application in `credential`: our
/// `sig` of kind `which` in its URL, plus the signed-webhook JWT when enabled.
pub(super) fn verify_callback(
    call_id: &str,
    request: &CallbackRequest,
    credential: &serde_json::Value,
    which: OurSig,
) -> Result<(), CarriersError> {
    let account = VonageAccount::from_credential(credential)?;
    require_our_sig(request, &account.private_key_pem, call_id, which)?;
    verify_signed_request(&account, request)
}

/// Checks Vonage's signed-webhook JWT when the account opted in (`signatureSecret`).
/// Its age is judged by the wall clock: Vonage signs with real time.
fn verify_signed_request(
    account: &VonageAccount,
    request: &CallbackRequest,
) -> Result<(), CarriersError> {
    if let Some(secret) = &account.signature_secret {
        let authorization = request
            .header("authorization")
            .ok_or_else(|| unverifiable("missing signed-webhook Authorization"))?;
        verify_signed_webhook(
            secret,
            authorization,
            &request.body,
            chrono::Utc::now().timestamp(),
        )
        .map_err(|err| CarriersError::Unverifiable(err.to_string()))?;
    }
    Ok(())
}

/// The progress a verified event callback reports, if the engine acts on it.
pub(super) fn parse_status(
    fields: &[(String, String)],
) -> Result<Option<CarrierStatus>, CarriersError> {
    let status = required(fields, "status")?;
    Ok(map_machine(&status, field(fields, "sub_state").as_deref()).or_else(|| map_status(&status)))
}

/// A transfer leg report's final status and duration; `None` for an event of the
/// callee's own leg (`aleg`) or one that is not final.
pub(super) fn parse_leg(
    fields: &[(String, String)],
    aleg: Option<&str>,
) -> Result<Option<(String, Option<u32>)>, CarriersError> {
    let status = required(fields, "status")?;
    if aleg.is_some() && field(fields, "uuid").as_deref() == aleg {
        return Ok(None);
    }
    Ok(map_leg_status(&status).map(|status| (status, seconds(field(fields, "duration")))))
}

/// A call ringing one of our Vonage numbers, read from its answer webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VonageInboundCall {
    /// Vonage's call (leg) `uuid`, which the Voice API hangs up.
    pub uuid: String,
    /// The number that rang, in E.164 (Vonage leaves the `+` off).
    pub to: String,
    /// The caller, in E.164 when it is a number; `anonymous` when withheld.
    pub from: String,
}

/// Reads the answer webhook of an incoming call: `uuid`, `from`, `to` (and
/// `conversation_uuid`), from the JSON body of a POST or the query of a GET.
pub fn parse_inbound(fields: &[(String, String)]) -> Result<VonageInboundCall, CarriersError> {
    Ok(VonageInboundCall {
        uuid: required(fields, "uuid")?,
        to: carrier_phone(&required(fields, "to")?),
        from: field(fields, "from")
            .filter(|from| !from.is_empty())
            .map_or_else(|| "anonymous".to_string(), |from| carrier_phone(&from)),
    })
}

/// The answer webhook's fields: the JSON body of a POST, else the URL's query (GET).
pub fn inbound_fields(request: &CallbackRequest) -> Vec<(String, String)> {
    if request.method == Method::GET {
        let query = request.url.split_once('?').map_or("", |(_, q)| q);
        form_urlencoded::parse(query.as_bytes())
            .into_owned()
            .collect()
    } else {
        request.fields()
    }
}

/// Checks that an answer webhook for `number` came from the Vonage application
/// in `credential`: the signed-webhook JWT when the account opted in
/// (`signatureSecret`), else our own `sig` over the number in the answer URL
/// the customer pasted (Vonage signs nothing else).
pub(super) fn verify_inbound(
    request: &CallbackRequest,
    credential: &serde_json::Value,
    number: &str,
) -> Result<(), CarriersError> {
    let account = VonageAccount::from_credential(credential)?;
    if account.signature_secret.is_some() {
        verify_signed_request(&account, request)
    } else {
        require_inbound_sig(request, &account.private_key_pem, number)
    }
}

/// Checks a held caller's `notify` webhook for our call `call_id`: our `sig`
/// (which [`hold_ncco`]'s caller put in the poll URL) and, when enabled, the
/// signed-webhook JWT.
pub(super) fn verify_hold(
    request: &CallbackRequest,
    credential: &serde_json::Value,
    call_id: &str,
) -> Result<(), CarriersError> {
    verify_callback(call_id, request, credential, OurSig::Status)
}

/// The key our `sig`s of this application are made with (its private key).
pub fn sig_key(credential: &serde_json::Value) -> Result<String, CarriersError> {
    Ok(VonageAccount::from_credential(credential)?.private_key_pem)
}

/// The NCCO that streams an incoming call to our media endpoint, as outbound
/// calls' `connect` does: L16 at 16 kHz, the media token and call id in the
/// websocket's headers (Vonage sends them in its first text frame).
pub fn connect_ncco(media_url: &str, media_token: &str, call_id: &str) -> serde_json::Value {
    serde_json::json!([{
        "action": "connect",
        "endpoint": [{
            "type": "websocket",
            "uri": media_url,
            "content-type": STREAM_CONTENT_TYPE,
            "headers": { "token": media_token, "callId": call_id },
        }],
    }])
}

/// The NCCO that says `text` and, having nothing after it, ends the call.
/// Vonage has no way to refuse a call from its answer webhook: the call is
/// answered when an NCCO is served, so a refusal is a short message.
pub fn talk_ncco(text: &str) -> serde_json::Value {
    serde_json::json!([{ "action": "talk", "text": text }])
}

/// The NCCO that keeps a caller on hold: the hold message (or an SSML pause
/// of `pause_seconds` when there is none to say), then a `notify` to
/// `poll_url`, whose answer is the next NCCO (Vonage replaces the current
/// one with a `notify` webhook's NCCO answer).
pub fn hold_ncco(say: Option<&str>, pause_seconds: u32, poll_url: &str) -> serde_json::Value {
    let text = match say {
        Some(say) => say.to_string(),
        None => format!("<speak><break time=\"{pause_seconds}s\"/></speak>"),
    };
    serde_json::json!([
        { "action": "talk", "text": text },
        {
            "action": "notify",
            "payload": { "hold": true },
            "eventUrl": [poll_url],
            "eventMethod": "POST",
        },
    ])
}

#[cfg(test)]
mod inbound_tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_answer_webhook_reads_in_e164() {
        let call = parse_inbound(&pairs(&[
            ("uuid", "63f61863"),
            ("conversation_uuid", "CON-f972836a"),
            ("from", "919845012399"),
            ("to", "918035740188"),
        ]))
        .unwrap();
        assert_eq!(call.uuid, "63f61863");
        assert_eq!(call.to, "+918035740188");
        assert_eq!(call.from, "+919845012399");
        assert!(parse_inbound(&pairs(&[("to", "9180")])).is_err());
    }

    #[test]
    fn nccos_connect_say_and_hold() {
        let connect = connect_ncco("wss://v.example/media/vonage", "tok", "c1");
        assert_eq!(connect[0]["action"], "connect");
        assert_eq!(
            connect[0]["endpoint"][0]["content-type"],
            "audio/l16;rate=16000"
        );
        assert_eq!(connect[0]["endpoint"][0]["headers"]["token"], "tok");
        assert_eq!(talk_ncco("Bye.")[0]["text"], "Bye.");
        let hold = hold_ncco(None, 1, "https://v.example/p");
        assert!(
            hold[0]["text"]
                .as_str()
                .unwrap()
                .contains("break time=\"1s\"")
        );
        assert_eq!(hold[1]["action"], "notify");
        assert_eq!(hold[1]["eventUrl"][0], "https://v.example/p");
    }
}
