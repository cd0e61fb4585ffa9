//! Carriers' inbound entry points: `POST /carrier/{provider}/inbound`, the URL a
//! workspace sets as its number's voice (answer) URL in the carrier's console.
//!
//! The request is read the carrier's way (which number rang, who calls, the
//! carrier's id of the call), checked against the signature of the account the
//! number belongs to, and answered in the carrier's own form: a media stream to
//! `/media/{carrier}` carrying the call's signed single-use token, or a polite
//! refusal. What to answer is the service's decision ([`InboundHost::ring`]);
//! this room only speaks the carriers' protocols. A refusal is never a 5xx: a
//! carrier that gets one plays its own error message to the caller.
//!
//! `sim` numbers ring through the same route in Twilio's protocol, signed with
//! the workspace's sim account ([`sim_account`]), which is what
//! `voxline admin sim call` and `voxline loadgen --inbound` send.

use super::callback_request::{CallbackRequest, field, unverifiable};
use super::{
    CarrierKind, CarriersError, callback_sig, exotel, http_client, plivo, telnyx, twilio, vonage,
    with_sig,
};
use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use std::sync::Arc;
use voxline_actors::signing::Signer;

/// The path segment of the inbound route, after `/carrier/{provider}/`.
pub const INBOUND_SEGMENT: &str = "inbound";

/// Which protocol an inbound webhook speaks: a real carrier's, or the sim's
/// (Twilio's protocol, signed with the workspace's sim account).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum InboundCarrier {
    /// The simulated carrier.
    Sim,
    /// One of the five real carriers.
    Real(CarrierKind),
    /// A workspace's own SIP trunk (issue 33): INVITEs reach the SIP user
    /// agent, never the HTTP inbound route.
    Sip,
}

impl InboundCarrier {
    /// Reads the route's provider segment (never [`Self::Sip`]: SIP calls
    /// ring the SIP listener, not a URL).
    pub fn parse(provider: &str) -> Option<Self> {
        if provider == "sim" {
            return Some(Self::Sim);
        }
        CarrierKind::parse(provider).map(Self::Real)
    }

    /// The provider name numbers are stored with.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sim => "sim",
            Self::Real(kind) => kind.as_str(),
            Self::Sip => "sip",
        }
    }

    /// Whether the carrier can keep a caller on hold and ask us again: Exotel's
    /// Voicebot applet takes one answer and cannot come back to us, and a
    /// Telnyx call is answered or rejected by one command, so a number that
    /// queues when busy answers busy there instead.
    /// A SIP caller is answered or refused at once too: holding would mean
    /// answering with music and no agent, which is not built.
    pub fn can_hold(self) -> bool {
        !matches!(
            self,
            Self::Real(CarrierKind::Exotel | CarrierKind::Telnyx) | Self::Sip
        )
    }

    /// The media endpoint's carrier segment (`/media/{segment}`): the sim streams as Twilio.
    pub fn media_segment(self) -> &'static str {
        match self {
            Self::Sim => CarrierKind::Twilio.as_str(),
            Self::Real(kind) => kind.as_str(),
            // SIP media is RTP handed to the call in process; the segment names it only.
            Self::Sip => "sip",
        }
    }
}

/// A call ringing one of our numbers, as the carrier's webhook described it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InboundRing {
    /// Whose protocol.
    pub carrier: InboundCarrier,
    /// The carrier's id of the call (Twilio's `CallSid`).
    pub carrier_call_id: String,
    /// The number that rang, as the carrier wrote it.
    pub to: String,
    /// The caller's number, as the carrier wrote it (may be withheld).
    pub from: String,
    /// The sim only: the caller's script (`SimScript`, a JSON array), so the sim
    /// ASR hears the lines the caller says, as `simScript` does on outbound sim calls.
    pub sim_script: Option<serde_json::Value>,
}

/// The form field in which the sim phone sends its caller's script.
pub const SIM_SCRIPT_FIELD: &str = "SimScript";

/// Why a ringing call is not answered by an agent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Refusal {
    /// No workspace rents the number, or not on this carrier.
    UnknownNumber,
    /// The number does not take calls now: inbound off, suspended, no agent
    /// or an inactive one, an empty wallet or a spent minute quota.
    Unavailable,
    /// Every slot of the workspace is taken and the number rejects when busy.
    Busy,
    /// The workspace blocked the caller.
    Blocked,
    /// The caller placed the workspace's hourly cap of calls already.
    CallerCap,
    /// The workspace's routing URL refused the call.
    Routed,
    /// A held caller's wait is over (`queueSeconds`) with no slot free, or the
    /// held call ended otherwise.
    WaitOver,
}

impl Refusal {
    /// The metric label and log word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::UnknownNumber => "unknown-number",
            Self::Unavailable => "unavailable",
            Self::Busy => "busy",
            Self::Blocked => "blocked",
            Self::CallerCap => "caller-cap",
            Self::Routed => "routing-rejected",
            Self::WaitOver => "wait-over",
        }
    }
}

/// What to tell the carrier about a ringing call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InboundAnswer {
    /// Stream the call's audio to our media endpoint.
    Connect {
        /// Our call id.
        call_id: String,
        /// The websocket URL of `/media/{carrier}`.
        media_url: String,
        /// The call's signed single-use media token.
        token: String,
    },
    /// Every slot is taken: keep the caller on hold and ask again at `poll_url`.
    Hold {
        /// Said to the caller before the pause, when it is time to say it again.
        say: Option<String>,
        /// Where the carrier asks again (absolute: the node that holds the caller).
        poll_url: String,
    },
    /// Do not connect the caller.
    Refuse(Refusal),
}

/// Seconds a held caller waits between two asks: how soon they are connected
/// once a slot frees.
pub const HOLD_POLL_SECONDS: u32 = 1;

/// The path segment of a held caller's poll, after `/carrier/{provider}/inbound/`.
pub const HOLD_SEGMENT: &str = "hold";

/// The URL where a held call's carrier asks again: the `round`-th ask.
pub fn hold_poll_url(
    public_base: &str,
    carrier: InboundCarrier,
    call_id: &str,
    round: u32,
) -> String {
    format!(
        "{}/carrier/{}/{INBOUND_SEGMENT}/{HOLD_SEGMENT}/{call_id}?round={round}",
        public_base.trim_end_matches('/'),
        carrier.as_str()
    )
}

/// What the inbound route needs from the service.
#[async_trait]
pub trait InboundHost: Send + Sync + 'static {
    /// The public base URL carriers call, or `None` to rebuild it from the
    /// request's `Host` header (what the carrier signed).
    fn public_base_url(&self) -> Option<String>;

    /// The decrypted credential that signs webhooks for the number `to` on
    /// `carrier` (the sim's: [`sim_account`]); `None` when no workspace rents
    /// that number on that carrier, or its account is not configured.
    async fn number_credential(
        &self,
        carrier: InboundCarrier,
        to: &str,
    ) -> Option<serde_json::Value>;

    /// Decides what happens to a verified ringing call (and starts it when it is answered).
    async fn ring(&self, ring: InboundRing) -> InboundAnswer;

    /// The credential that signs webhooks of our call `call_id` on `carrier`
    /// (that call's number's account); `None` when there is no such call.
    async fn call_credential(
        &self,
        carrier: InboundCarrier,
        call_id: &str,
    ) -> Option<serde_json::Value>;

    /// What a held caller's `round`-th ask gets: connected once a slot is theirs,
    /// held again, or let go.
    async fn poll_hold(&self, carrier: InboundCarrier, call_id: &str, round: u32) -> InboundAnswer;
}

/// The URL a workspace sets as `number`'s voice (answer) URL in its carrier's
/// console: `{public_base}/carrier/{provider}/inbound`, carrying our `sig` of the
/// number where the carrier signs nothing we can check (Exotel always; Vonage
/// without signed webhooks), keyed by the workspace's `credential`; on Telnyx,
/// the Call Control application's webhook URL, with our `sig` of the application
/// unless the account signs its webhooks. `None` for a signed URL without its
/// credential.
pub fn inbound_url_for(
    public_base: &str,
    provider: &str,
    number: &str,
    credential: Option<&serde_json::Value>,
) -> Option<String> {
    let carrier = InboundCarrier::parse(provider)?;
    let base = format!(
        "{}/carrier/{}/{INBOUND_SEGMENT}",
        public_base.trim_end_matches('/'),
        carrier.as_str()
    );
    match carrier {
        InboundCarrier::Sim | InboundCarrier::Real(CarrierKind::Twilio | CarrierKind::Plivo) => {
            Some(base)
        }
        InboundCarrier::Real(CarrierKind::Exotel) => {
            let account = super::ExotelAccount::from_credential(credential?).ok()?;
            Some(super::callback_request::inbound_url(
                &base,
                &account.api_token,
                number,
            ))
        }
        InboundCarrier::Real(CarrierKind::Vonage) => {
            let account = super::VonageAccount::from_credential(credential?).ok()?;
            if account.signature_secret.is_some() {
                Some(base)
            } else {
                Some(super::callback_request::inbound_url(
                    &base,
                    &account.private_key_pem,
                    number,
                ))
            }
        }
        InboundCarrier::Real(CarrierKind::Telnyx) => {
            let account = super::TelnyxAccount::from_credential(credential?).ok()?;
            if account.public_key.is_some() {
                return Some(base);
            }
            let scope = telnyx::inbound_sig_scope(&account)?;
            Some(super::callback_request::inbound_url(
                &base,
                &account.api_key,
                scope,
            ))
        }
        // A SIP number rings the SIP listener; it has no voice URL.
        InboundCarrier::Sip => None,
    }
}

/// The Twilio-shaped account of a workspace's sim numbers: its `accountSid`
/// and `authToken` are derived from the server's secret, so the server, the
/// admin CLI and the load generator (which hold the secret) sign alike and
/// nobody else can ring a sim number.
pub fn sim_account(secret: &[u8], org_id: &str) -> serde_json::Value {
    let key = Signer::sha256(secret).sign(&[b"voxline-sim-twilio-account:", org_id.as_bytes()]);
    let hex = hex::encode(key);
    serde_json::json!({
        "accountSid": format!("AC{}", &hex[..32]),
        "authToken": &hex[32..],
    })
}

/// Reads a ringing call from a Twilio (or sim) Voice URL request: `CallSid`,
/// `To`, `From`, and `AccountSid`, which must be the number's account.
fn twilio_ring(
    carrier: InboundCarrier,
    request: &CallbackRequest,
) -> Result<(InboundRing, String), CarriersError> {
    let fields = request.fields();
    let required = |name: &str| {
        field(&fields, name)
            .ok_or_else(|| CarriersError::BadCallback(format!("inbound webhook lacks {name}")))
    };
    let ring = InboundRing {
        carrier,
        carrier_call_id: required("CallSid")?,
        to: required("To")?,
        // A withheld caller ID arrives as a word ("Anonymous"), not a number.
        from: field(&fields, "From").unwrap_or_else(|| "anonymous".to_string()),
        sim_script: match carrier {
            InboundCarrier::Sim => fields
                .iter()
                .find(|(name, _)| name == SIM_SCRIPT_FIELD)
                .map(|(_, raw)| {
                    serde_json::from_str(raw).map_err(|e| {
                        CarriersError::BadCallback(format!("{SIM_SCRIPT_FIELD} is not JSON: {e}"))
                    })
                })
                .transpose()?,
            InboundCarrier::Real(_) | InboundCarrier::Sip => None,
        },
    };
    Ok((ring, required("AccountSid")?))
}

/// What a carrier said about a ringing call, read and verified, with the
/// credential of the number's account (some answers are signed with it).
async fn verified_ring(
    host: &dyn InboundHost,
    carrier: InboundCarrier,
    request: &CallbackRequest,
) -> Result<Option<(InboundRing, serde_json::Value)>, CarriersError> {
    match carrier {
        InboundCarrier::Sim | InboundCarrier::Real(CarrierKind::Twilio) => {
            let (ring, account_sid) = twilio_ring(carrier, request)?;
            let Some(credential) = host.number_credential(carrier, &ring.to).await else {
                return Ok(None);
            };
            let account = twilio::TwilioAccount::from_credential(&credential)?;
            twilio::verify_callback(request, &credential)?;
            if account.account_sid != account_sid {
                return Err(unverifiable("AccountSid is not the number's account"));
            }
            Ok(Some((ring, credential)))
        }
        InboundCarrier::Real(CarrierKind::Plivo) => {
            let call = plivo::parse_inbound(&request.fields())?;
            let Some(credential) = host.number_credential(carrier, &call.to).await else {
                return Ok(None);
            };
            plivo::verify_callback(request, &credential)?;
            let ring = InboundRing {
                carrier,
                carrier_call_id: call.call_uuid,
                to: call.to,
                from: call.from,
                sim_script: None,
            };
            Ok(Some((ring, credential)))
        }
        InboundCarrier::Real(CarrierKind::Exotel) => {
            let call = exotel::parse_inbound(request)?;
            let Some(credential) = host.number_credential(carrier, &call.to).await else {
                return Ok(None);
            };
            exotel::verify_inbound(request, &credential, &call.to)?;
            let ring = InboundRing {
                carrier,
                carrier_call_id: call.call_sid,
                to: call.to,
                from: call.from,
                sim_script: None,
            };
            Ok(Some((ring, credential)))
        }
        InboundCarrier::Real(CarrierKind::Vonage) => {
            let call = vonage::parse_inbound(&vonage::inbound_fields(request))?;
            let Some(credential) = host.number_credential(carrier, &call.to).await else {
                return Ok(None);
            };
            vonage::verify_inbound(request, &credential, &call.to)?;
            let ring = InboundRing {
                carrier,
                carrier_call_id: call.uuid,
                to: call.to,
                from: call.from,
                sim_script: None,
            };
            Ok(Some((ring, credential)))
        }
        InboundCarrier::Real(CarrierKind::Telnyx) => Err(CarriersError::BadCallback(
            "Telnyx rings by call.initiated, read by telnyx_webhook".into(),
        )),
        InboundCarrier::Sip => Err(CarriersError::BadCallback(
            "SIP calls ring the SIP listener, not a webhook".into(),
        )),
    }
}

/// What a caller hears before a refusal that is not a busy signal.
pub const UNAVAILABLE_MESSAGE: &str =
    "Sorry, this number is not taking calls right now. Please try again later. Goodbye.";

/// What a held caller hears when the wait is over without a free line.
pub const WAIT_OVER_MESSAGE: &str =
    "Sorry, all our lines are still busy. Please call again later. Goodbye.";

/// The TwiML answering an inbound call's Voice URL request: `<Connect><Stream>`
/// with the call's media token, as for outbound calls; `<Reject reason="busy">`
/// when every slot is taken; `<Reject>` for a number nobody rents here or a
/// refused caller (never answered, so nobody is billed); a short `<Say>` and
/// `<Hangup>` when the number exists but takes no calls now.
pub fn twilio_answer(answer: &InboundAnswer) -> String {
    match answer {
        InboundAnswer::Connect {
            call_id,
            media_url,
            token,
        } => twilio::connect_twiml(media_url, token, call_id),
        InboundAnswer::Refuse(Refusal::Busy) => twilio::reject_twiml(true),
        InboundAnswer::Refuse(
            Refusal::UnknownNumber | Refusal::Blocked | Refusal::CallerCap | Refusal::Routed,
        ) => twilio::reject_twiml(false),
        InboundAnswer::Refuse(Refusal::Unavailable) => {
            twilio::say_and_hang_up_twiml(UNAVAILABLE_MESSAGE)
        }
        InboundAnswer::Refuse(Refusal::WaitOver) => {
            twilio::say_and_hang_up_twiml(WAIT_OVER_MESSAGE)
        }
        InboundAnswer::Hold { say, poll_url } => {
            twilio::hold_twiml(say.as_deref(), HOLD_POLL_SECONDS, poll_url)
        }
    }
}

/// The Plivo XML answering an inbound call's Answer URL request, with the
/// same choices as [`twilio_answer`]: `<Stream>` carrying the media token in
/// its path (as for outbound calls), `<Hangup reason="busy"/>`,
/// `<Hangup reason="rejected"/>`, or `<Speak>` and `<Hangup/>`.
pub fn plivo_answer(answer: &InboundAnswer) -> String {
    match answer {
        InboundAnswer::Connect {
            media_url, token, ..
        } => plivo::stream_xml(media_url, token),
        InboundAnswer::Refuse(Refusal::Busy) => plivo::reject_xml(true),
        InboundAnswer::Refuse(
            Refusal::UnknownNumber | Refusal::Blocked | Refusal::CallerCap | Refusal::Routed,
        ) => plivo::reject_xml(false),
        InboundAnswer::Refuse(Refusal::Unavailable) => {
            plivo::speak_and_hang_up_xml(UNAVAILABLE_MESSAGE)
        }
        InboundAnswer::Refuse(Refusal::WaitOver) => plivo::speak_and_hang_up_xml(WAIT_OVER_MESSAGE),
        InboundAnswer::Hold { say, poll_url } => {
            plivo::hold_xml(say.as_deref(), HOLD_POLL_SECONDS, poll_url)
        }
    }
}

/// The NCCO answering a Vonage answer (or hold `notify`) webhook: `connect`
/// to our websocket as for outbound calls; a short `talk` for every refusal
/// (Vonage cannot refuse from the answer webhook, the call ends after it);
/// `talk` and `notify` to the poll URL, signed with our `sig` keyed by `sig_key`
/// (the application's key), for a held caller.
pub fn vonage_answer(answer: &InboundAnswer, sig_key: Option<&str>) -> serde_json::Value {
    match answer {
        InboundAnswer::Connect {
            call_id,
            media_url,
            token,
        } => vonage::connect_ncco(media_url, token, call_id),
        InboundAnswer::Refuse(Refusal::Busy) => vonage::talk_ncco(BUSY_MESSAGE),
        InboundAnswer::Refuse(Refusal::WaitOver) => vonage::talk_ncco(WAIT_OVER_MESSAGE),
        InboundAnswer::Refuse(_) => vonage::talk_ncco(UNAVAILABLE_MESSAGE),
        InboundAnswer::Hold { say, poll_url } => {
            let signed = match (sig_key, hold_call_id(poll_url)) {
                (Some(key), Some(call_id)) => with_sig(poll_url, &callback_sig(key, call_id)),
                // Without the account's key the poll could not be verified: let the caller go.
                _ => return vonage::talk_ncco(BUSY_MESSAGE),
            };
            vonage::hold_ncco(say.as_deref(), HOLD_POLL_SECONDS, &signed)
        }
    }
}

/// The Voicebot URL's answer on Exotel: the stream, or no stream (the flow's
/// next applet plays the goodbye). Exotel cannot hold a caller: the applet
/// takes one answer and there is no redirect back to us, so a `queue` number
/// whose slots are all taken answers busy there.
pub fn exotel_answer(answer: &InboundAnswer) -> serde_json::Value {
    match answer {
        InboundAnswer::Connect {
            media_url, token, ..
        } => exotel::stream_answer(media_url, token),
        InboundAnswer::Refuse(refusal) => exotel::refusal_answer(refusal.as_str()),
        InboundAnswer::Hold { .. } => exotel::refusal_answer(Refusal::Busy.as_str()),
    }
}

/// What a caller hears where the carrier plays no busy tone.
pub const BUSY_MESSAGE: &str = "Sorry, all our lines are busy. Please call again later. Goodbye.";

/// Our call id in a [`hold_poll_url`].
fn hold_call_id(poll_url: &str) -> Option<&str> {
    let path = poll_url.split('?').next()?;
    let (_, call_id) = path.rsplit_once(&format!("/{HOLD_SEGMENT}/"))?;
    Some(call_id)
}

/// The carrier's form of an answer; `credential` is the number's account's,
/// when known (Vonage signs its hold poll URL with it).
fn render(
    carrier: InboundCarrier,
    answer: &InboundAnswer,
    credential: Option<&serde_json::Value>,
) -> Response {
    match carrier {
        InboundCarrier::Sim | InboundCarrier::Real(CarrierKind::Twilio) => {
            xml(twilio_answer(answer))
        }
        InboundCarrier::Real(CarrierKind::Plivo) => xml(plivo_answer(answer)),
        InboundCarrier::Real(CarrierKind::Exotel) => {
            axum::Json(exotel_answer(answer)).into_response()
        }
        InboundCarrier::Real(CarrierKind::Vonage) => {
            let key = credential.and_then(|c| vonage::sig_key(c).ok());
            axum::Json(vonage_answer(answer, key.as_deref())).into_response()
        }
        // Telnyx takes commands, not an answer body (`telnyx_webhook`): the webhook gets a bare 200.
        InboundCarrier::Real(CarrierKind::Telnyx) => StatusCode::OK.into_response(),
        InboundCarrier::Sip => StatusCode::NOT_FOUND.into_response(),
    }
}

fn xml(body: String) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], body).into_response()
}

/// The handler of `POST /carrier/{provider}/inbound`: 200 with the carrier's
/// answer (a stream, or a polite refusal for a number nobody can answer); 403
/// for a request the number's account did not sign; 400 for one that cannot be
/// read; 404 for a provider we do not serve.
pub async fn inbound_webhook(
    host: &dyn InboundHost,
    http: &reqwest::Client,
    provider: &str,
    request: CallbackRequest,
) -> Response {
    let Some(carrier) = InboundCarrier::parse(provider) else {
        return CarriersError::UnknownProvider(provider.to_string()).into_response();
    };
    if carrier == InboundCarrier::Real(CarrierKind::Telnyx) {
        return telnyx_webhook(host, http, request).await;
    }
    match verified_ring(host, carrier, &request).await {
        Ok(Some((ring, credential))) => {
            let answer = host.ring(ring.clone()).await;
            note_refusal(&ring, &answer);
            render(carrier, &answer, Some(&credential))
        }
        Ok(None) => {
            note_unknown_number(provider);
            render(
                carrier,
                &InboundAnswer::Refuse(Refusal::UnknownNumber),
                None,
            )
        }
        Err(err) => {
            tracing::warn!(provider, error = %err, "inbound webhook refused");
            err.into_response()
        }
    }
}

/// Counts and logs a refused ringing call.
fn note_refusal(ring: &InboundRing, answer: &InboundAnswer) {
    if let InboundAnswer::Refuse(refusal) = answer {
        metrics::counter!("voxline_inbound_refusals_total", "reason" => refusal.as_str())
            .increment(1);
        tracing::info!(provider = ring.carrier.as_str(), to = %ring.to, from = %ring.from, reason = refusal.as_str(), "inbound call refused");
    }
}

/// Counts and logs a call to a number nobody rents here on that carrier.
fn note_unknown_number(provider: &str) {
    metrics::counter!("voxline_inbound_refusals_total", "reason" => Refusal::UnknownNumber.as_str())
        .increment(1);
    tracing::info!(
        provider,
        "inbound call to a number no workspace rents here; refused"
    );
}

/// Telnyx's application webhook: an incoming `call.initiated`, checked, decided,
/// then answered with the answer command (the stream, and the call's later
/// events to its signed status URL) or refused with the reject command. Every
/// other event gets a bare 200. A number nobody rents here is left ringing:
/// without the account's key there is nobody to command it, and Telnyx ends it.
async fn telnyx_webhook(
    host: &dyn InboundHost,
    http: &reqwest::Client,
    request: CallbackRequest,
) -> Response {
    const PROVIDER: &str = "telnyx";
    let carrier = InboundCarrier::Real(CarrierKind::Telnyx);
    let call = match telnyx::parse_inbound(&request.body) {
        Ok(Some(call)) => call,
        Ok(None) => return StatusCode::OK.into_response(),
        Err(err) => {
            tracing::warn!(provider = PROVIDER, error = %err, "inbound webhook refused");
            return err.into_response();
        }
    };
    let Some(credential) = host.number_credential(carrier, &call.to).await else {
        note_unknown_number(PROVIDER);
        return StatusCode::OK.into_response();
    };
    if let Err(err) = telnyx::verify_inbound(&request, &credential, &call) {
        tracing::warn!(provider = PROVIDER, error = %err, "inbound webhook refused");
        return err.into_response();
    }
    let ring = InboundRing {
        carrier,
        carrier_call_id: call.call_control_id.clone(),
        to: call.to.clone(),
        from: call.from.clone(),
        sim_script: None,
    };
    let answer = host.ring(ring.clone()).await;
    note_refusal(&ring, &answer);
    let command = match &answer {
        InboundAnswer::Connect {
            call_id,
            media_url,
            token,
        } => {
            let base = host.public_base_url().unwrap_or_else(|| {
                request
                    .url
                    .split("/carrier/")
                    .next()
                    .unwrap_or_default()
                    .to_string()
            });
            let status_url = format!(
                "{}/carrier/{PROVIDER}/status/{call_id}",
                base.trim_end_matches('/')
            );
            telnyx::inbound_webhook_url(&credential, &status_url, call_id).map(|url| {
                (
                    "answer",
                    telnyx::answer_body(media_url, token, &url, call_id),
                )
            })
        }
        InboundAnswer::Refuse(Refusal::Busy) | InboundAnswer::Hold { .. } => {
            Ok(("reject", telnyx::reject_body(true)))
        }
        InboundAnswer::Refuse(_) => Ok(("reject", telnyx::reject_body(false))),
    };
    let sent = match command {
        Ok((action, body)) => {
            telnyx::inbound_command(http, &credential, &call.call_control_id, action, &body)
                .await
                .map(|()| action)
        }
        Err(err) => Err(err),
    };
    if let Err(err) = sent {
        // A started call that never gets its stream ends when the engine's media wait runs out.
        tracing::warn!(provider = PROVIDER, call = %call.call_control_id, error = %err, "the answer or reject command failed");
    }
    StatusCode::OK.into_response()
}

/// What the inbound routes share: the service, and the client that sends
/// carriers' commands (Telnyx answers by REST).
#[derive(Clone)]
struct InboundRoutes {
    host: Arc<dyn InboundHost>,
    http: reqwest::Client,
}

/// The inbound route over an [`InboundHost`], mergeable into any router.
pub fn router<S>(host: Arc<dyn InboundHost>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let routes = InboundRoutes {
        host,
        http: http_client(),
    };
    Router::new()
        .route(
            &format!("/carrier/{{provider}}/{INBOUND_SEGMENT}"),
            // GET for the carriers whose answer webhook may be a GET (Vonage, Exotel).
            post(inbound_route).get(inbound_route),
        )
        .route(
            &format!("/carrier/{{provider}}/{INBOUND_SEGMENT}/{HOLD_SEGMENT}/{{call_id}}"),
            post(hold_route),
        )
        .with_state(routes)
}

async fn inbound_route(
    State(InboundRoutes { host, http }): State<InboundRoutes>,
    Path(provider): Path<String>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = CallbackRequest::new(
        host.public_base_url().as_deref(),
        method,
        &uri,
        headers,
        body,
    );
    inbound_webhook(host.as_ref(), &http, &provider, request).await
}

/// The handler of a held caller's ask, `POST /carrier/{provider}/inbound/hold/{callId}`:
/// checked against the signature of the call's number's account, then answered
/// with the stream, more hold, or a goodbye; 403 when unsigned, 404 for a
/// provider we do not serve.
pub async fn hold_webhook(
    host: &dyn InboundHost,
    provider: &str,
    call_id: &str,
    request: CallbackRequest,
) -> Response {
    let Some(carrier) = InboundCarrier::parse(provider) else {
        return CarriersError::UnknownProvider(provider.to_string()).into_response();
    };
    let verified = async {
        let credential = host
            .call_credential(carrier, call_id)
            .await
            .ok_or_else(|| unverifiable("callback cannot be verified"))?;
        match carrier {
            InboundCarrier::Real(CarrierKind::Vonage) => {
                vonage::verify_hold(&request, &credential, call_id)
            }
            InboundCarrier::Sim | InboundCarrier::Real(CarrierKind::Twilio) => {
                twilio::verify_callback(&request, &credential)
            }
            InboundCarrier::Real(CarrierKind::Plivo) => {
                plivo::verify_callback(&request, &credential)
            }
            InboundCarrier::Real(kind) => Err(CarriersError::Unsupported {
                kind,
                what: "hold inbound callers",
                reason: "this carrier answers or rejects a ringing call once and cannot hold it",
            }),
            InboundCarrier::Sip => Err(unverifiable("SIP callers are not held over HTTP")),
        }
        .map(|()| credential)
    };
    let credential = match verified.await {
        Ok(credential) => credential,
        Err(err) => {
            tracing::warn!(provider, call = call_id, error = %err, "hold poll refused");
            return err.into_response();
        }
    };
    let round = request
        .query_param("round")
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let answer = host.poll_hold(carrier, call_id, round).await;
    render(carrier, &answer, Some(&credential))
}

async fn hold_route(
    State(InboundRoutes { host, .. }): State<InboundRoutes>,
    Path((provider, call_id)): Path<(String, String)>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let request = CallbackRequest::new(
        host.public_base_url().as_deref(),
        method,
        &uri,
        headers,
        body,
    );
    hold_webhook(host.as_ref(), &provider, &call_id, request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sim_account_is_the_workspaces_own_and_twilio_shaped() {
        let a = sim_account(b"secret", "org-a");
        let b = sim_account(b"secret", "org-b");
        assert_ne!(a, b);
        assert_eq!(a, sim_account(b"secret", "org-a"));
        assert_ne!(a, sim_account(b"other", "org-a"));
        let account = twilio::TwilioAccount::from_credential(&a).unwrap();
        assert!(account.account_sid.starts_with("AC"));
        assert_eq!(account.account_sid.len(), 34);
        assert_eq!(account.auth_token.len(), 32);
    }

    #[test]
    fn providers_parse_with_the_sim_streaming_as_twilio() {
        assert_eq!(InboundCarrier::parse("sim"), Some(InboundCarrier::Sim));
        assert_eq!(
            InboundCarrier::parse("plivo"),
            Some(InboundCarrier::Real(CarrierKind::Plivo))
        );
        assert_eq!(InboundCarrier::parse("skype"), None);
        assert_eq!(InboundCarrier::Sim.media_segment(), "twilio");
    }

    #[test]
    fn a_vonage_hold_polls_a_signed_url_and_refusals_talk() {
        let poll = hold_poll_url(
            "https://v.example",
            InboundCarrier::Real(CarrierKind::Vonage),
            "c-1",
            2,
        );
        assert_eq!(hold_call_id(&poll), Some("c-1"));
        let hold = InboundAnswer::Hold {
            say: Some("Please hold.".into()),
            poll_url: poll.clone(),
        };
        let ncco = vonage_answer(&hold, Some("key"));
        let url = ncco[1]["eventUrl"][0].as_str().unwrap();
        assert!(url.starts_with(&poll), "{url}");
        assert!(url.contains(&callback_sig("key", "c-1")), "{url}");
        assert_eq!(vonage_answer(&hold, None)[0]["text"], BUSY_MESSAGE);
        let refused = vonage_answer(&InboundAnswer::Refuse(Refusal::UnknownNumber), None);
        assert_eq!(refused[0]["action"], "talk");
        assert!(plivo_answer(&InboundAnswer::Refuse(Refusal::Busy)).contains("busy"));
    }
}
