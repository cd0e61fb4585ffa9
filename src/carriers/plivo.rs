//! Plivo Voice API: place a call whose answer URL (served by our callback
//! router) returns Plivo XML streaming the call to `/media/plivo/{token}`,
//! hang it up, transfer it (the call-transfer API points the live leg at our
//! `/carrier/plivo/transfer/{callId}`, which answers a `<Dial>` to the person),
//! and verify `X-Plivo-Signature-V3` on its callbacks.

use super::{
    CallIndex, CarrierCredentials, CarrierKind, CarriersError, TRANSFER_STATUS_SEGMENT, base_url,
    call_lifetime, load_account, required_field, send, with_params, xml_escape,
};
use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use std::sync::Arc;
use voxline_actors::carrier::{
    AnsweredBy, Carrier, CarrierError, CarrierStatus, DialRequest, StatusSink, TransferRequest,
};
use voxline_actors::signing::Signer;

const KIND: CarrierKind = CarrierKind::Plivo;

/// Plivo's public API host.
pub const DEFAULT_BASE_URL: &str = "https://api.plivo.com";

/// The audio format we ask Plivo to stream (matches the Twilio pipeline's μ-law).
pub const STREAM_CONTENT_TYPE: &str = "audio/x-mulaw;rate=8000";

/// One Plivo account: `{authId, authToken, baseUrl?}`.
#[derive(Debug, Clone)]
pub struct PlivoAccount {
    /// `MA…` auth id (Basic auth user and path segment).
    pub auth_id: String,
    /// Auth token (Basic auth password and callback signing key).
    pub auth_token: String,
    /// API base URL without a trailing slash.
    pub base_url: String,
}

impl PlivoAccount {
    /// Parses the workspace's `plivo` credential JSON.
    pub fn from_credential(value: &serde_json::Value) -> Result<Self, CarriersError> {
        Ok(Self {
            auth_id: required_field(KIND, value, "authId")?,
            auth_token: required_field(KIND, value, "authToken")?,
            base_url: base_url(value, DEFAULT_BASE_URL),
        })
    }

    fn account_url(&self) -> String {
        format!("{}/v1/Account/{}", self.base_url, self.auth_id)
    }
}

/// The answer URL Plivo fetches when the callee picks up: our
/// `/carrier/plivo/answer/{callId}` beside the status URL, carrying the media
/// URL and token so the answer needs no server-side state.
pub fn answer_url(req: &DialRequest) -> String {
    let status_suffix = format!("/status/{}", req.call_id);
    let base = req
        .status_url
        .strip_suffix(&status_suffix)
        .unwrap_or(&req.status_url);
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("media", &req.media_url)
        .append_pair("token", &req.media_token)
        .finish();
    format!("{base}/answer/{}?{query}", req.call_id)
}

/// The JSON body of the create-call request.
pub fn create_call_body(req: &DialRequest) -> serde_json::Value {
    let mut body = serde_json::json!({
        "from": req.from,
        "to": req.to,
        "answer_url": answer_url(req),
        "answer_method": "POST",
        "hangup_url": req.status_url,
        "ring_url": req.status_url,
        "ring_timeout": req.ring_timeout_seconds,
        "time_limit": req.time_limit_seconds,
    });
    if req.detect_machine
        && let Some(fields) = body.as_object_mut()
    {
        // `true` keeps the call up on a machine (the agent decides) and reports to the URL.
        fields.insert("machine_detection".into(), "true".into());
        fields.insert(
            "machine_detection_url".into(),
            req.status_url.clone().into(),
        );
        fields.insert("machine_detection_method".into(), "POST".into());
    }
    body
}

/// The Plivo XML answer that streams the call, both ways, to our media endpoint;
/// the token goes in the path because our endpoint accepts `/media/plivo/{token}`.
pub fn stream_xml(media_url: &str, media_token: &str) -> String {
    let stream_url = format!("{}/{}", media_url.trim_end_matches('/'), media_token);
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Stream bidirectional=\"true\" keepCallAlive=\"true\" contentType=\"{}\">{}</Stream></Response>",
        STREAM_CONTENT_TYPE,
        xml_escape(&stream_url)
    )
}

/// The path segment of the route that answers a transferred leg's XML:
/// `/carrier/plivo/transfer/{callId}`.
pub const TRANSFER_XML_SEGMENT: &str = "transfer";

/// The URL Plivo fetches for the transferred leg: our `/carrier/plivo/transfer/{callId}`
/// beside the leg-report URL, carrying the person's number, the caller ID and the
/// report URL so the answer needs no server-side state. Plivo signs the whole URL
/// (`X-Plivo-Signature-V3`), so the query cannot be altered on the way back.
pub fn transfer_xml_url(req: &TransferRequest) -> Result<String, CarriersError> {
    let path = req
        .leg_status_url
        .split(['?', '#'])
        .next()
        .unwrap_or(&req.leg_status_url);
    let suffix = format!("/{TRANSFER_STATUS_SEGMENT}/{}", req.call_id);
    let base = path.strip_suffix(&suffix).ok_or_else(|| {
        CarriersError::InvalidRequest(format!(
            "plivo transfers need a leg status URL ending in {suffix}, got {}",
            req.leg_status_url
        ))
    })?;
    Ok(with_params(
        &format!("{base}/{TRANSFER_XML_SEGMENT}/{}", req.call_id),
        &[
            ("to", &req.to),
            ("from", &req.from),
            ("action", &req.leg_status_url),
        ],
    ))
}

/// The JSON body of the call-transfer request: only the callee's leg (the A leg)
/// moves to [`transfer_xml_url`], which ends its `<Stream>`.
pub fn transfer_body(req: &TransferRequest) -> Result<serde_json::Value, CarriersError> {
    Ok(serde_json::json!({
        "legs": "aleg",
        "aleg_url": transfer_xml_url(req)?,
        "aleg_method": "POST",
    }))
}

/// The Plivo XML that bridges the callee to `to`; Plivo posts `DialStatus` (and
/// `DialBLegDuration` when the person answered) to `action` when the dial ends.
pub fn transfer_xml(to: &str, from: &str, action: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Dial action=\"{}\" method=\"POST\" callerId=\"{}\"><Number>{}</Number></Dial></Response>",
        xml_escape(action),
        xml_escape(from),
        xml_escape(to)
    )
}

/// Maps a `<Dial action>` report's `DialStatus` to the leg outcome we store:
/// completed, no-answer, busy, failed or canceled.
pub fn map_leg_status(dial_status: &str) -> String {
    match dial_status.trim().to_ascii_lowercase().as_str() {
        "no-answer" | "timeout" => "no-answer".into(),
        "cancel" | "cancelled" | "canceled" => "canceled".into(),
        other => other.to_string(),
    }
}

/// Plivo behind the engine's [`Carrier`] trait, one account per workspace.
pub struct PlivoCarrier {
    credentials: Arc<dyn CarrierCredentials>,
    http: reqwest::Client,
    calls: CallIndex,
}

impl PlivoCarrier {
    /// A carrier that looks up each workspace's account in `credentials`.
    pub fn new(credentials: Arc<dyn CarrierCredentials>, http: reqwest::Client) -> Self {
        Self {
            credentials,
            http,
            calls: CallIndex::default(),
        }
    }

    /// Places a call and returns its `request_uuid` (the call's UUID for outbound calls).
    pub async fn create_call(&self, req: &DialRequest) -> Result<String, CarriersError> {
        let account = load_account(
            self.credentials.as_ref(),
            &req.org_id,
            KIND,
            PlivoAccount::from_credential,
        )
        .await?;
        let request = self
            .http
            .post(format!("{}/Call/", account.account_url()))
            .basic_auth(&account.auth_id, Some(&account.auth_token))
            .json(&create_call_body(req));
        let (_, body) = send(KIND, request).await?;
        let uuid = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                // A single dial answers with a string; bulk dials with a list.
                match v.get("request_uuid")? {
                    serde_json::Value::String(s) => Some(s.clone()),
                    serde_json::Value::Array(items) => items.first()?.as_str().map(str::to_string),
                    _ => None,
                }
            })
            .filter(|s| !s.is_empty())
            .ok_or_else(|| CarriersError::UnexpectedResponse {
                kind: KIND,
                reason: "create-call answer has no request_uuid".into(),
            })?;
        self.calls.insert(
            &uuid,
            &req.org_id,
            call_lifetime(req.ring_timeout_seconds, req.time_limit_seconds),
        );
        Ok(uuid)
    }

    /// Ends a call of a workspace. A live call is deleted by call UUID; a call
    /// still ringing is only known as a request, so a 404 there retries as a
    /// request cancel; a 404 on both means it already ended, which is success.
    pub async fn end_call(&self, org_id: &str, uuid: &str) -> Result<(), CarriersError> {
        let account = load_account(
            self.credentials.as_ref(),
            org_id,
            KIND,
            PlivoAccount::from_credential,
        )
        .await?;
        for resource in ["Call", "Request"] {
            let request = self
                .http
                .delete(format!("{}/{resource}/{uuid}/", account.account_url()))
                .basic_auth(&account.auth_id, Some(&account.auth_token));
            match send(KIND, request).await {
                Ok(_) => return Ok(()),
                Err(CarriersError::Rejected { status: 404, .. }) => continue,
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Moves a live call's callee leg to [`transfer_xml_url`].
    pub async fn transfer_call(&self, req: &TransferRequest) -> Result<(), CarriersError> {
        let body = transfer_body(req)?;
        let account = load_account(
            self.credentials.as_ref(),
            &req.org_id,
            KIND,
            PlivoAccount::from_credential,
        )
        .await?;
        let request = self
            .http
            .post(format!(
                "{}/Call/{}/",
                account.account_url(),
                req.carrier_call_id
            ))
            .basic_auth(&account.auth_id, Some(&account.auth_token))
            .json(&body);
        send(KIND, request).await?;
        Ok(())
    }
}

#[async_trait]
impl Carrier for PlivoCarrier {
    async fn place(&self, req: DialRequest, _status: StatusSink) -> Result<String, CarrierError> {
        // Progress arrives by ring/answer/hangup callbacks, routed by the service.
        Ok(self.create_call(&req).await?)
    }

    async fn hangup(&self, carrier_call_id: &str) -> Result<(), CarrierError> {
        let Some(org_id) = self.calls.org_for_hangup(KIND, carrier_call_id)? else {
            return Ok(());
        };
        self.end_call(&org_id, carrier_call_id).await?;
        self.calls.remove(carrier_call_id);
        Ok(())
    }

    async fn transfer(&self, req: TransferRequest) -> Result<(), CarrierError> {
        self.transfer_call(&req).await?;
        self.calls.mark_transferred(&req.carrier_call_id);
        Ok(())
    }
}

/// Reads an asynchronous machine-detection callback (`Event=MachineDetection`, `Machine`
/// true or false); `None` for any other callback.
pub fn map_machine(event: Option<&str>, machine: Option<&str>) -> Option<CarrierStatus> {
    if !event?.trim().eq_ignore_ascii_case("MachineDetection") {
        return None;
    }
    let verdict = match machine?.trim().to_ascii_lowercase().as_str() {
        "true" => AnsweredBy::Machine,
        "false" => AnsweredBy::Human,
        _ => return None,
    };
    Some(CarrierStatus::AnsweredBy(verdict))
}

/// Maps a Plivo callback's `CallStatus` (or, lacking one, its `Event`) to
/// engine progress; `None` for values the engine does not act on.
pub fn map_status(call_status: Option<&str>, event: Option<&str>) -> Option<CarrierStatus> {
    if let Some(status) = call_status.map(|s| s.trim().to_ascii_lowercase())
        && !status.is_empty()
    {
        return match status.as_str() {
            "ringing" => Some(CarrierStatus::Ringing),
            "in-progress" | "answered" => Some(CarrierStatus::Answered),
            "completed" => Some(CarrierStatus::Completed),
            "busy" => Some(CarrierStatus::Busy),
            "no-answer" | "timeout" => Some(CarrierStatus::NoAnswer),
            "failed" => Some(CarrierStatus::Failed("failed".into())),
            "cancel" | "canceled" | "cancelled" => Some(CarrierStatus::Failed("cancel".into())),
            _ => None,
        };
    }
    match event?.trim().to_ascii_lowercase().as_str() {
        "ring" => Some(CarrierStatus::Ringing),
        "startapp" => Some(CarrierStatus::Answered),
        "hangup" => Some(CarrierStatus::Completed),
        _ => None,
    }
}

/// The string Plivo signs (before `"." + nonce`), as its helper libraries
/// build it: the URL without query, then for GET the sorted `k=v` query of
/// URL and parameters; for POST with parameters the sorted URL query, a dot
/// when there was one, and the sorted parameters as `namevalue`.
pub fn signing_base(method: &str, url: &str, params: &[(String, String)]) -> String {
    let without_fragment = url.split('#').next().unwrap_or(url);
    let (path_url, query) = without_fragment
        .split_once('?')
        .unwrap_or((without_fragment, ""));
    let mut query_pairs: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    let is_get = method.eq_ignore_ascii_case("GET");
    if is_get {
        query_pairs.extend(params.iter().cloned());
    }
    query_pairs.sort();
    let sorted_query = query_pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut base = path_url.to_string();
    let post_params = !is_get && !params.is_empty();
    if !sorted_query.is_empty() || post_params {
        base.push('?');
        base.push_str(&sorted_query);
    }
    if !sorted_query.is_empty() && post_params {
        base.push('.');
    }
    if post_params {
        let mut sorted: Vec<&(String, String)> = params.iter().collect();
        sorted.sort();
        for (k, v) in sorted {
            base.push_str(k);
            base.push_str(v);
        }
    }
    base
}

/// The `X-Plivo-Signature-V3` value for a request: base64 HMAC-SHA256 of
/// [`signing_base`] + `"."` + nonce, keyed by the auth token.
pub fn signature_v3(
    auth_token: &str,
    method: &str,
    url: &str,
    params: &[(String, String)],
    nonce: &str,
) -> String {
    let base = signing_base(method, url, params);
    STANDARD.encode(Signer::sha256(auth_token).sign(&[base.as_bytes(), b".", nonce.as_bytes()]))
}

/// Verifies `X-Plivo-Signature-V3` (possibly several comma-separated
/// signatures, e.g. during a token rotation) over `url` exactly as given.
///
/// `url` must be the URL as it was handed to Plivo: unlike Twilio's helper
/// libraries, Plivo's (`validate_v3_signature`) try no variant with the port
/// added or removed, so neither do we; a signature over any other spelling of
/// the URL was not made for this request.
pub fn verify_v3(
    auth_token: &str,
    method: &str,
    url: &str,
    params: &[(String, String)],
    nonce: &str,
    header: &str,
) -> bool {
    if nonce.is_empty() {
        return false;
    }
    let base = signing_base(method, url, params);
    let parts: [&[u8]; 3] = [base.as_bytes(), b".", nonce.as_bytes()];
    let signer = Signer::sha256(auth_token);
    header
        .split(',')
        .filter_map(|s| STANDARD.decode(s.trim()).ok())
        .any(|candidate| signer.verify(&parts, &candidate))
}
