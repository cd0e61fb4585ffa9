//! Carrier status callbacks (`POST /carrier/{provider}/status/{callId}`),
//! Plivo's answer URL (`GET|POST /carrier/plivo/answer/{callId}`), transferred
//! calls' leg reports (`POST /carrier/{provider}/transfer-status/{callId}`) and
//! Plivo's transferred-leg XML (`GET|POST /carrier/plivo/transfer/{callId}`):
//! verify the request came from the workspace's carrier account, then turn it
//! into [`CarrierStatus`] or a [`TransferLeg`].
//!
//! The handlers take what they need as arguments (the callback's public URL,
//! a lookup of the call's workspace credential, and a sink for the status), so
//! the service can mount them on its own router; [`router`] does that wiring
//! for a [`CallbackHost`].

use super::{
    CarrierKind, CarriersError, http_client, plivo, telnyx, twilio, verify_callback_sig,
    verify_transfer_callback_sig, vonage,
};
use crate::domain::text::{self, Lines};
use async_trait::async_trait;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use std::future::Future;
use std::sync::Arc;
use voxline_actors::carrier::{CarrierStatus, TransferLeg};

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

    fn header(&self, name: &str) -> Option<&str> {
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
fn field(fields: &[(String, String)], name: &str) -> Option<String> {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| text::parse(v, Lines::One, MAX_FIELD_CHARS).ok())
}

fn unverifiable(message: &str) -> CarriersError {
    CarriersError::Unverifiable(message.to_string())
}

/// Checks that a callback was sent by the carrier account in `credential`.
pub fn verify(
    kind: CarrierKind,
    call_id: &str,
    request: &CallbackRequest,
    credential: &serde_json::Value,
) -> Result<(), CarriersError> {
    match kind {
        CarrierKind::Twilio => {
            let account = twilio::TwilioAccount::from_credential(credential)?;
            let signature = request
                .header("x-twilio-signature")
                .ok_or_else(|| unverifiable("missing X-Twilio-Signature"))?;
            if twilio::verify_form(&account.auth_token, &request.url, &request.body, signature) {
                Ok(())
            } else {
                Err(unverifiable("X-Twilio-Signature does not match"))
            }
        }
        CarrierKind::Plivo => {
            let account = plivo::PlivoAccount::from_credential(credential)?;
            let signature = request
                .header("x-plivo-signature-v3")
                .ok_or_else(|| unverifiable("missing X-Plivo-Signature-V3"))?;
            let nonce = request
                .header("x-plivo-signature-v3-nonce")
                .ok_or_else(|| unverifiable("missing X-Plivo-Signature-V3-Nonce"))?;
            let params = if request.method == Method::GET {
                Vec::new()
            } else {
                request.fields()
            };
            if plivo::verify_v3(
                &account.auth_token,
                request.method.as_str(),
                &request.url,
                &params,
                nonce,
                signature,
            ) {
                Ok(())
            } else {
                Err(unverifiable("X-Plivo-Signature-V3 does not match"))
            }
        }
        CarrierKind::Exotel => {
            // Exotel does not sign: our own `sig` in the status URL stands in.
            let account = super::ExotelAccount::from_credential(credential)?;
            let sig = request
                .query_param("sig")
                .ok_or_else(|| unverifiable("missing callback sig"))?;
            if verify_callback_sig(&account.api_token, call_id, &sig) {
                Ok(())
            } else {
                Err(unverifiable("callback sig does not match"))
            }
        }
        CarrierKind::Vonage => {
            let account = vonage::VonageAccount::from_credential(credential)?;
            let sig = request
                .query_param("sig")
                .ok_or_else(|| unverifiable("missing callback sig"))?;
            if !verify_callback_sig(&account.private_key_pem, call_id, &sig) {
                return Err(unverifiable("callback sig does not match"));
            }
            verify_vonage_signed_webhook(&account, request)
        }
        CarrierKind::Telnyx => {
            let account = telnyx::TelnyxAccount::from_credential(credential)?;
            let sig = request
                .query_param("sig")
                .ok_or_else(|| unverifiable("missing callback sig"))?;
            if !verify_callback_sig(&account.api_key, call_id, &sig) {
                return Err(unverifiable("callback sig does not match"));
            }
            verify_telnyx_signature(&account, request)
        }
    }
}

/// Checks Telnyx's Ed25519 webhook signature when the account gave its public key.
/// The timestamp is compared with the wall clock: Telnyx signs with real time.
fn verify_telnyx_signature(
    account: &telnyx::TelnyxAccount,
    request: &CallbackRequest,
) -> Result<(), CarriersError> {
    let Some(key) = &account.public_key else {
        return Ok(());
    };
    telnyx::verify_signature(
        key,
        request.header("telnyx-timestamp"),
        request.header("telnyx-signature-ed25519"),
        &request.body,
        chrono::Utc::now().timestamp(),
    )
    .map_err(|err| CarriersError::Unverifiable(err.to_string()))
}

/// Checks Vonage's signed-webhook JWT when the account opted in (`signatureSecret`).
/// Its age is judged by the wall clock: Vonage signs with real time.
fn verify_vonage_signed_webhook(
    account: &vonage::VonageAccount,
    request: &CallbackRequest,
) -> Result<(), CarriersError> {
    if let Some(secret) = &account.signature_secret {
        let authorization = request
            .header("authorization")
            .ok_or_else(|| unverifiable("missing signed-webhook Authorization"))?;
        vonage::verify_signed_webhook(
            secret,
            authorization,
            &request.body,
            chrono::Utc::now().timestamp(),
        )
        .map_err(|err| CarriersError::Unverifiable(err.to_string()))?;
    }
    Ok(())
}

/// Checks our transfer `sig` in a leg-report URL, keyed by `key`.
fn verify_transfer_sig(
    key: &str,
    call_id: &str,
    request: &CallbackRequest,
) -> Result<(), CarriersError> {
    let sig = request
        .query_param("sig")
        .ok_or_else(|| unverifiable("missing callback sig"))?;
    if verify_transfer_callback_sig(key, call_id, &sig) {
        Ok(())
    } else {
        Err(unverifiable("callback sig does not match"))
    }
}

/// Checks that a transferred call's leg report was sent by the carrier account in
/// `credential`: Twilio's and Plivo's own signatures as on status callbacks; our
/// transfer `sig` for Vonage (plus its signed-webhook JWT when enabled) and Telnyx
/// (plus its Ed25519 signature when the credential has the public key).
pub fn verify_transfer(
    kind: CarrierKind,
    call_id: &str,
    request: &CallbackRequest,
    credential: &serde_json::Value,
) -> Result<(), CarriersError> {
    match kind {
        CarrierKind::Twilio | CarrierKind::Plivo => verify(kind, call_id, request, credential),
        CarrierKind::Vonage => {
            let account = vonage::VonageAccount::from_credential(credential)?;
            verify_transfer_sig(&account.private_key_pem, call_id, request)?;
            verify_vonage_signed_webhook(&account, request)
        }
        CarrierKind::Telnyx => {
            let account = telnyx::TelnyxAccount::from_credential(credential)?;
            verify_transfer_sig(&account.api_key, call_id, request)?;
            verify_telnyx_signature(&account, request)
        }
        CarrierKind::Exotel => Err(exotel_cannot_transfer()),
    }
}

fn exotel_cannot_transfer() -> CarriersError {
    CarriersError::Unsupported {
        kind: CarrierKind::Exotel,
        what: "transfer calls",
        reason: super::exotel::TRANSFER_REFUSAL,
    }
}

/// A whole number of seconds from a carrier field ("12", or "12.0" from lenient senders).
fn seconds(text: Option<String>) -> Option<u32> {
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

/// Reads what a (verified) leg report says about a transferred call's bridged leg;
/// `None` when it reports nothing final (the leg ringing or answering, or an event
/// of the callee's own leg). The duration is kept only for a completed leg.
pub fn parse_transfer_leg(
    kind: CarrierKind,
    call_id: &str,
    request: &CallbackRequest,
) -> Result<Option<TransferLeg>, CarriersError> {
    let fields = request.fields();
    // Vonage and Telnyx report URLs name the callee's own leg the same way.
    let aleg = request.query_param(super::TRANSFER_ALEG_PARAM);
    let (status, duration) = match kind {
        CarrierKind::Twilio => {
            let status = field(&fields, "DialCallStatus")
                .ok_or_else(|| CarriersError::BadCallback("missing DialCallStatus".into()))?;
            (
                twilio::map_leg_status(&status),
                seconds(field(&fields, "DialCallDuration")),
            )
        }
        CarrierKind::Plivo => {
            let status = field(&fields, "DialStatus")
                .ok_or_else(|| CarriersError::BadCallback("missing DialStatus".into()))?;
            (
                plivo::map_leg_status(&status),
                seconds(field(&fields, "DialBLegDuration")),
            )
        }
        CarrierKind::Vonage => {
            let status = field(&fields, "status")
                .ok_or_else(|| CarriersError::BadCallback("missing status".into()))?;
            if aleg.is_some() && field(&fields, "uuid") == aleg {
                return Ok(None);
            }
            let Some(status) = vonage::map_leg_status(&status) else {
                return Ok(None);
            };
            (status, seconds(field(&fields, "duration")))
        }
        CarrierKind::Telnyx => {
            let event = telnyx::parse_event(&request.body)
                .ok_or_else(|| CarriersError::BadCallback("not a Telnyx call event".into()))?;
            if aleg.is_some() && event.call_control_id == aleg {
                return Ok(None);
            }
            let Some(leg) = telnyx::map_leg(&event) else {
                return Ok(None);
            };
            leg
        }
        CarrierKind::Exotel => return Err(exotel_cannot_transfer()),
    };
    let duration_seconds = duration.filter(|_| status == "completed");
    Ok(Some(TransferLeg {
        call_id: call_id.to_string(),
        status,
        duration_seconds,
    }))
}

/// Reads the progress a (verified) status callback reports; `None` when it
/// reports nothing the engine acts on.
pub fn parse_status(
    kind: CarrierKind,
    request: &CallbackRequest,
) -> Result<Option<CarrierStatus>, CarriersError> {
    let fields = request.fields();
    let status = match kind {
        CarrierKind::Twilio => {
            let answered_by = field(&fields, "AnsweredBy");
            match (field(&fields, "CallStatus"), answered_by) {
                (Some(call_status), answered_by) => {
                    twilio::map_status(&call_status, answered_by.as_deref())
                }
                // The asynchronous AMD callback carries no CallStatus.
                (None, Some(answered_by)) => {
                    twilio::map_answered_by(&answered_by).map(CarrierStatus::AnsweredBy)
                }
                (None, None) => {
                    return Err(CarriersError::BadCallback("missing CallStatus".into()));
                }
            }
        }
        CarrierKind::Plivo => {
            let call_status = field(&fields, "CallStatus");
            let event = field(&fields, "Event");
            if call_status.is_none() && event.is_none() {
                return Err(CarriersError::BadCallback(
                    "missing CallStatus and Event".into(),
                ));
            }
            // The machine-detection callback also says CallStatus=in-progress.
            plivo::map_machine(event.as_deref(), field(&fields, "Machine").as_deref())
                .or_else(|| plivo::map_status(call_status.as_deref(), event.as_deref()))
        }
        CarrierKind::Exotel => {
            let status = field(&fields, "Status").or_else(|| field(&fields, "status"));
            let event_type = field(&fields, "EventType").or_else(|| field(&fields, "event_type"));
            if status.is_none() && event_type.is_none() {
                return Err(CarriersError::BadCallback("missing Status".into()));
            }
            super::exotel::map_status(status.as_deref(), event_type.as_deref())
        }
        CarrierKind::Vonage => {
            let status = field(&fields, "status")
                .ok_or_else(|| CarriersError::BadCallback("missing status".into()))?;
            vonage::map_machine(&status, field(&fields, "sub_state").as_deref())
                .or_else(|| vonage::map_status(&status))
        }
        CarrierKind::Telnyx => {
            let event = telnyx::parse_event(&request.body)
                .ok_or_else(|| CarriersError::BadCallback("not a Telnyx call event".into()))?;
            telnyx::map_status(&event)
        }
    };
    Ok(status)
}

/// Resolves a provider path segment to a carrier kind.
pub fn provider_kind(provider: &str) -> Result<CarrierKind, CarriersError> {
    CarrierKind::parse(provider).ok_or_else(|| CarriersError::UnknownProvider(provider.to_string()))
}

/// Verifies and parses a status callback; on success hands the status (if any) to `on_status`.
pub async fn process_status<L, Fut>(
    provider: &str,
    call_id: &str,
    request: &CallbackRequest,
    credential_for: L,
    on_status: impl FnOnce(CarrierStatus),
) -> Result<Option<CarrierStatus>, CarriersError>
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
{
    let kind = provider_kind(provider)?;
    let credential = credential_for(kind)
        .await
        .ok_or_else(|| unverifiable("callback cannot be verified"))?;
    verify(kind, call_id, request, &credential)?;
    let status = parse_status(kind, request)?;
    if let Some(status) = &status {
        on_status(status.clone());
    }
    Ok(status)
}

/// The handler of `POST /carrier/{provider}/status/{callId}`: 200 on success
/// (also for statuses the engine ignores), 403 `{message}` when unverifiable,
/// 400 when unreadable, 404 for an unknown provider.
///
/// `credential_for(kind)` returns the decrypted credential of the workspace
/// that owns `call_id` (`None` when the call or credential is unknown);
/// `on_status` receives the parsed status, typically `Engine::carrier_status`.
pub async fn status_callback<L, Fut>(
    provider: &str,
    call_id: &str,
    request: CallbackRequest,
    credential_for: L,
    on_status: impl FnOnce(CarrierStatus),
) -> Response
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
{
    match process_status(provider, call_id, &request, credential_for, on_status).await {
        Ok(_) => StatusCode::OK.into_response(),
        Err(err) => {
            tracing::warn!(provider, call = call_id, error = %err, "carrier callback refused");
            err.into_response()
        }
    }
}

/// The handler of `GET|POST /carrier/plivo/answer/{callId}`: verifies Plivo's
/// signature, reports the call answered, and returns the `<Stream>` XML built
/// from the `media` and `token` the answer URL carries.
pub async fn plivo_answer<L, Fut>(
    call_id: &str,
    request: CallbackRequest,
    credential_for: L,
    on_status: impl FnOnce(CarrierStatus),
) -> Response
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
{
    let answer = async move {
        let credential = credential_for(CarrierKind::Plivo)
            .await
            .ok_or_else(|| unverifiable("callback cannot be verified"))?;
        verify(CarrierKind::Plivo, call_id, &request, &credential)?;
        let media = request
            .query_param("media")
            .ok_or_else(|| CarriersError::BadCallback("answer URL lacks media".into()))?;
        let token = request
            .query_param("token")
            .ok_or_else(|| CarriersError::BadCallback("answer URL lacks token".into()))?;
        Ok::<_, CarriersError>(plivo::stream_xml(&media, &token))
    };
    match answer.await {
        Ok(xml) => {
            // Plivo fetches the answer URL when the callee picks up; it sends no separate answered event.
            on_status(CarrierStatus::Answered);
            ([(header::CONTENT_TYPE, "application/xml")], xml).into_response()
        }
        Err(err) => {
            tracing::warn!(call = call_id, error = %err, "plivo answer refused");
            err.into_response()
        }
    }
}

/// The XML that ends a call once its `<Dial>` to the person is over (Twilio and
/// Plivo continue the call with what the `action` URL answers).
pub const HANGUP_XML: &str =
    "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Hangup/></Response>";

/// Verifies and parses a leg report; on success hands the leg (if final) to `record`.
pub async fn process_transfer_status<L, Fut, R, RFut>(
    kind: CarrierKind,
    call_id: &str,
    request: &CallbackRequest,
    credential_for: L,
    record: R,
) -> Result<(Option<TransferLeg>, serde_json::Value), CarriersError>
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
    R: FnOnce(TransferLeg) -> RFut,
    RFut: Future<Output = Result<bool, CarriersError>>,
{
    if !kind.can_transfer() {
        return Err(exotel_cannot_transfer());
    }
    let credential = credential_for(kind)
        .await
        .ok_or_else(|| unverifiable("callback cannot be verified"))?;
    verify_transfer(kind, call_id, request, &credential)?;
    let leg = parse_transfer_leg(kind, call_id, request)?;
    if let Some(leg) = &leg
        && !record(leg.clone()).await?
    {
        tracing::warn!(%kind, call = call_id, "leg report for a call that is not stored");
    }
    Ok((leg, credential))
}

/// The handler of `POST /carrier/{provider}/transfer-status/{callId}`: verifies the
/// report like the carrier's status callbacks, stores a final leg outcome through
/// `record` (typically [`Store::record_transfer_leg`](crate::store::Store::record_transfer_leg)),
/// and answers what the carrier expects: [`HANGUP_XML`] to Twilio's and Plivo's
/// `<Dial action>` (the person's leg is over, so is the call), 200 to the others.
/// Refused reports get 403 (unverifiable), 400 (unreadable) or 404 (unknown provider,
/// or Exotel, which never transfers).
///
/// After Telnyx reports the bridged leg's end, the callee's leg is hung up in the
/// background with `http`: Telnyx leaves it up when a transfer fails.
pub async fn transfer_status_callback<L, Fut, R, RFut>(
    provider: &str,
    call_id: &str,
    request: CallbackRequest,
    http: &reqwest::Client,
    credential_for: L,
    record: R,
) -> Response
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
    R: FnOnce(TransferLeg) -> RFut,
    RFut: Future<Output = Result<bool, CarriersError>>,
{
    let kind = match provider_kind(provider) {
        Ok(kind) => kind,
        Err(err) => return err.into_response(),
    };
    let xml_answer = matches!(kind, CarrierKind::Twilio | CarrierKind::Plivo);
    match process_transfer_status(kind, call_id, &request, credential_for, record).await {
        Ok((leg, credential)) => {
            if kind == CarrierKind::Telnyx && leg.is_some() {
                hang_up_telnyx_callee(call_id, &request, http, &credential);
            }
            if xml_answer {
                xml_response(HANGUP_XML.to_string())
            } else {
                StatusCode::OK.into_response()
            }
        }
        // The carrier does not retry a `<Dial action>`, and an error answer would
        // play an application-error message to the callee: end the call cleanly.
        Err(err @ CarriersError::Store(_)) if xml_answer => {
            tracing::error!(provider, call = call_id, error = %err, "leg report not stored");
            xml_response(HANGUP_XML.to_string())
        }
        Err(err) => {
            tracing::warn!(provider, call = call_id, error = %err, "leg report refused");
            err.into_response()
        }
    }
}

/// Hangs up the callee's leg named by the report URL's `aleg`, without holding up
/// the webhook's answer; an already-ended leg is fine.
fn hang_up_telnyx_callee(
    call_id: &str,
    request: &CallbackRequest,
    http: &reqwest::Client,
    credential: &serde_json::Value,
) {
    let Some(aleg) = request.query_param(super::TRANSFER_ALEG_PARAM) else {
        return;
    };
    let account = match telnyx::TelnyxAccount::from_credential(credential) {
        Ok(account) => account,
        Err(err) => {
            tracing::warn!(call = call_id, error = %err, "cannot hang up the transferred callee");
            return;
        }
    };
    let http = http.clone();
    let call_id = call_id.to_string();
    tokio::spawn(async move {
        if let Err(err) = telnyx::hangup_call(&http, &account, &aleg).await {
            tracing::warn!(call = %call_id, error = %err, "hanging up the transferred callee failed");
        }
    });
}

fn xml_response(xml: String) -> Response {
    ([(header::CONTENT_TYPE, "application/xml")], xml).into_response()
}

/// The handler of `GET|POST /carrier/plivo/transfer/{callId}`: verifies Plivo's
/// signature (which covers the query) and answers the `<Dial>` built from the
/// `to`, `from` and `action` that [`plivo::transfer_xml_url`] put in the URL.
pub async fn plivo_transfer_answer<L, Fut>(
    call_id: &str,
    request: CallbackRequest,
    credential_for: L,
) -> Response
where
    L: FnOnce(CarrierKind) -> Fut,
    Fut: Future<Output = Option<serde_json::Value>>,
{
    let answer = async move {
        let credential = credential_for(CarrierKind::Plivo)
            .await
            .ok_or_else(|| unverifiable("callback cannot be verified"))?;
        verify(CarrierKind::Plivo, call_id, &request, &credential)?;
        let param = |name: &str| {
            request
                .query_param(name)
                .filter(|v| !v.trim().is_empty())
                .ok_or_else(|| CarriersError::BadCallback(format!("transfer URL lacks {name}")))
        };
        Ok::<_, CarriersError>(plivo::transfer_xml(
            &param("to")?,
            &param("from")?,
            &param("action")?,
        ))
    };
    match answer.await {
        Ok(xml) => xml_response(xml),
        Err(err) => {
            tracing::warn!(call = call_id, error = %err, "plivo transfer answer refused");
            err.into_response()
        }
    }
}

/// What [`router`] needs from the service.
#[async_trait]
pub trait CallbackHost: Send + Sync + 'static {
    /// The public base URL carriers call (e.g. `https://voxline.example.com`),
    /// or `None` to rebuild it from the request's `Host` header.
    fn public_base_url(&self) -> Option<String>;

    /// The decrypted credential of `kind` of the workspace that owns `call_id`.
    async fn credential_for_call(
        &self,
        call_id: &str,
        kind: CarrierKind,
    ) -> Option<serde_json::Value>;

    /// Delivers a verified status to the engine.
    fn carrier_status(&self, call_id: &str, status: CarrierStatus);

    /// Stores a verified transfer leg report; `false` when the call is not stored.
    async fn record_transfer_leg(&self, leg: TransferLeg) -> Result<bool, CarriersError>;
}

#[derive(Clone)]
struct RouteState {
    host: Arc<dyn CallbackHost>,
    /// For the requests a callback leads to (Telnyx's callee hang-up).
    http: reqwest::Client,
}

/// The callback routes over a [`CallbackHost`], mergeable into any router.
pub fn router<S>(host: Arc<dyn CallbackHost>) -> Router<S>
where
    S: Clone + Send + Sync + 'static,
{
    let state = RouteState {
        host,
        http: http_client(),
    };
    Router::new()
        .route("/carrier/{provider}/status/{call_id}", post(status_route))
        .route(
            "/carrier/plivo/answer/{call_id}",
            get(answer_route).post(answer_route),
        )
        .route(
            &format!(
                "/carrier/{{provider}}/{}/{{call_id}}",
                super::TRANSFER_STATUS_SEGMENT
            ),
            post(transfer_status_route),
        )
        .route(
            &format!("/carrier/plivo/{}/{{call_id}}", plivo::TRANSFER_XML_SEGMENT),
            get(plivo_transfer_route).post(plivo_transfer_route),
        )
        .with_state(state)
}

fn callback_request(
    host: &dyn CallbackHost,
    method: Method,
    uri: &Uri,
    headers: HeaderMap,
    body: Bytes,
) -> CallbackRequest {
    CallbackRequest::new(
        host.public_base_url().as_deref(),
        method,
        uri,
        headers,
        body,
    )
}

async fn status_route(
    State(state): State<RouteState>,
    Path((provider, call_id)): Path<(String, String)>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let host = state.host;
    let request = callback_request(host.as_ref(), method, &uri, headers, body);
    let lookup_host = Arc::clone(&host);
    let lookup_call = call_id.clone();
    status_callback(
        &provider,
        &call_id,
        request,
        |kind| async move { lookup_host.credential_for_call(&lookup_call, kind).await },
        |status| host.carrier_status(&call_id, status),
    )
    .await
}

async fn answer_route(
    State(state): State<RouteState>,
    Path(call_id): Path<String>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let host = state.host;
    let request = callback_request(host.as_ref(), method, &uri, headers, body);
    let lookup_host = Arc::clone(&host);
    let lookup_call = call_id.clone();
    plivo_answer(
        &call_id,
        request,
        |kind| async move { lookup_host.credential_for_call(&lookup_call, kind).await },
        |status| host.carrier_status(&call_id, status),
    )
    .await
}

async fn transfer_status_route(
    State(state): State<RouteState>,
    Path((provider, call_id)): Path<(String, String)>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let host = state.host;
    let request = callback_request(host.as_ref(), method, &uri, headers, body);
    let lookup_host = Arc::clone(&host);
    let lookup_call = call_id.clone();
    let record_host = Arc::clone(&host);
    transfer_status_callback(
        &provider,
        &call_id,
        request,
        &state.http,
        |kind| async move { lookup_host.credential_for_call(&lookup_call, kind).await },
        |leg| async move { record_host.record_transfer_leg(leg).await },
    )
    .await
}

async fn plivo_transfer_route(
    State(state): State<RouteState>,
    Path(call_id): Path<String>,
    OriginalUri(uri): OriginalUri,
    method: Method,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let host = state.host;
    let request = callback_request(host.as_ref(), method, &uri, headers, body);
    let lookup_call = call_id.clone();
    plivo_transfer_answer(&call_id, request, |kind| async move {
        host.credential_for_call(&lookup_call, kind).await
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(body: &'static str) -> CallbackRequest {
        CallbackRequest::new(
            Some("https://voxline.example.com"),
            Method::POST,
            &Uri::from_static("/carrier/twilio/status/x?sig=a%00b"),
            HeaderMap::new(),
            Bytes::from_static(body.as_bytes()),
        )
    }

    #[test]
    fn values_with_nul_or_control_characters_read_as_absent() {
        let request = form("CallStatus=completed&AnsweredBy=hu%00man&Note=%07&Ok=+fine+");
        assert_eq!(request.field("CallStatus").as_deref(), Some("completed"));
        assert_eq!(request.field("AnsweredBy"), None);
        assert_eq!(request.field("Note"), None);
        assert_eq!(request.field("Ok").as_deref(), Some("fine"));
        assert_eq!(request.query_param("sig"), None);
        // The raw fields stay as sent: signatures are computed over them.
        assert!(
            request
                .fields()
                .contains(&("AnsweredBy".into(), "hu\0man".into()))
        );
        let telnyx =
            br#"{"data":{"event_type":"call.hangup","payload":{"hangup_cause":"x\u0000y"}}}"#;
        let event = super::super::telnyx::parse_event(telnyx).expect("an event");
        assert_eq!(event.hangup_cause, None);
    }
}
