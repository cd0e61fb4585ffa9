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

pub use super::callback_request::CallbackRequest;
use super::callback_request::{OurSig, unverifiable};
use super::rest_carrier::AccountClient;
use super::{CarrierKind, CarriersError, exotel, http_client, plivo, telnyx, twilio, vonage};
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

/// Checks that a callback was sent by the carrier account in `credential`; each
/// carrier's own file knows how it signs.
pub fn verify(
    kind: CarrierKind,
    call_id: &str,
    request: &CallbackRequest,
    credential: &serde_json::Value,
) -> Result<(), CarriersError> {
    match kind {
        CarrierKind::Twilio => twilio::verify_callback(request, credential),
        CarrierKind::Plivo => plivo::verify_callback(request, credential),
        CarrierKind::Exotel => exotel::verify_callback(call_id, request, credential),
        CarrierKind::Vonage => {
            vonage::verify_callback(call_id, request, credential, OurSig::Status)
        }
        CarrierKind::Telnyx => {
            telnyx::verify_callback(call_id, request, credential, OurSig::Status)
        }
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
        CarrierKind::Twilio => twilio::verify_callback(request, credential),
        CarrierKind::Plivo => plivo::verify_callback(request, credential),
        CarrierKind::Vonage => {
            vonage::verify_callback(call_id, request, credential, OurSig::Transfer)
        }
        CarrierKind::Telnyx => {
            telnyx::verify_callback(call_id, request, credential, OurSig::Transfer)
        }
        CarrierKind::Exotel => Err(exotel::cannot_transfer()),
    }
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
    let leg = match kind {
        CarrierKind::Twilio => Some(twilio::parse_leg(&fields)?),
        CarrierKind::Plivo => Some(plivo::parse_leg(&fields)?),
        CarrierKind::Vonage => vonage::parse_leg(&fields, aleg.as_deref())?,
        CarrierKind::Telnyx => telnyx::parse_leg(request, aleg.as_deref())?,
        CarrierKind::Exotel => return Err(exotel::cannot_transfer()),
    };
    let Some((status, duration)) = leg else {
        return Ok(None);
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
    match kind {
        CarrierKind::Twilio => twilio::parse_status(&request.fields()),
        CarrierKind::Plivo => plivo::parse_status(&request.fields()),
        CarrierKind::Exotel => exotel::parse_status(&request.fields()),
        CarrierKind::Vonage => vonage::parse_status(&request.fields()),
        CarrierKind::Telnyx => telnyx::parse_callback_status(request),
    }
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
        return Err(exotel::cannot_transfer());
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
        let client = AccountClient::new(&http, account);
        if let Err(err) = telnyx::hangup_call(&client, &aleg).await {
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
