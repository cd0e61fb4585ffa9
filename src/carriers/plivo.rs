//! Plivo Voice API: place a call whose answer URL (served by our callback
//! router) returns Plivo XML streaming the call to `/media/plivo/{token}`,
//! hang it up, transfer it (the call-transfer API points the live leg at our
//! `/carrier/plivo/transfer/{callId}`, which answers a `<Dial>` to the person),
//! and verify `X-Plivo-Signature-V3` on its callbacks.

use super::callback_request::{
    CallbackRequest, carrier_phone, field, required, seconds, unverifiable,
};
use super::rest_carrier::{AccountClient, CarrierApi, RestCarrier, json_id};
use super::{
    CarrierKind, CarriersError, TRANSFER_STATUS_SEGMENT, base_url, required_field, with_params,
    xml_escape,
};
use async_trait::async_trait;
use axum::http::Method;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use voxline_actors::carrier::{AnsweredBy, CarrierStatus, DialRequest, TransferRequest};
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

/// Plivo's Call API, for [`RestCarrier`].
pub struct PlivoApi;

/// Plivo behind the engine's [`Carrier`](voxline_actors::carrier::Carrier) trait,
/// one account per workspace.
pub type PlivoCarrier = RestCarrier<PlivoApi>;

#[async_trait]
impl CarrierApi for PlivoApi {
    type Account = PlivoAccount;
    const KIND: CarrierKind = KIND;

    fn account(credential: &serde_json::Value) -> Result<PlivoAccount, CarriersError> {
        PlivoAccount::from_credential(credential)
    }

    fn authorize(
        account: &PlivoAccount,
        request: reqwest::RequestBuilder,
    ) -> Result<reqwest::RequestBuilder, CarriersError> {
        Ok(request.basic_auth(&account.auth_id, Some(&account.auth_token)))
    }

    /// Places a call; its `request_uuid` (the call's UUID for outbound calls).
    async fn create_call(
        client: &AccountClient<'_, Self>,
        req: &DialRequest,
    ) -> Result<String, CarriersError> {
        let request = client
            .request(
                Method::POST,
                &format!("{}/Call/", client.account.account_url()),
            )?
            .json(&create_call_body(req));
        let (_, body) = client.send(request).await?;
        // A single dial answers with a string; bulk dials with a list.
        json_id(&body, "/request_uuid")
            .or_else(|| json_id(&body, "/request_uuid/0"))
            .ok_or_else(|| CarriersError::UnexpectedResponse {
                kind: KIND,
                reason: "create-call answer has no request_uuid".into(),
            })
    }

    /// A live call is deleted by call UUID; a call still ringing is only known as a
    /// request, so a 404 there retries as a request cancel; a 404 on both means it
    /// already ended, which is success.
    async fn end_call(client: &AccountClient<'_, Self>, uuid: &str) -> Result<(), CarriersError> {
        for resource in ["Call", "Request"] {
            let request = client.request(
                Method::DELETE,
                &format!("{}/{resource}/{uuid}/", client.account.account_url()),
            )?;
            match client.send(request).await {
                Ok(_) => return Ok(()),
                Err(CarriersError::Rejected { status: 404, .. }) => continue,
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// Moves the live call's callee leg to [`transfer_xml_url`].
    async fn transfer_call(
        client: &AccountClient<'_, Self>,
        req: &TransferRequest,
    ) -> Result<(), CarriersError> {
        let body = transfer_body(req)?;
        let request = client
            .request(
                Method::POST,
                &format!(
                    "{}/Call/{}/",
                    client.account.account_url(),
                    req.carrier_call_id
                ),
            )?
            .json(&body);
        client.send(request).await?;
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

/// Checks that a callback (status, answer URL or leg report) was sent by the Plivo
/// account in `credential`: `X-Plivo-Signature-V3` over the URL, the POST
/// parameters and the nonce.
pub(super) fn verify_callback(
    request: &CallbackRequest,
    credential: &serde_json::Value,
) -> Result<(), CarriersError> {
    let account = PlivoAccount::from_credential(credential)?;
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
    if verify_v3(
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

/// The progress a verified status callback reports, if the engine acts on it.
pub(super) fn parse_status(
    fields: &[(String, String)],
) -> Result<Option<CarrierStatus>, CarriersError> {
    let call_status = field(fields, "CallStatus");
    let event = field(fields, "Event");
    if call_status.is_none() && event.is_none() {
        return Err(CarriersError::BadCallback(
            "missing CallStatus and Event".into(),
        ));
    }
    // The machine-detection callback also says CallStatus=in-progress.
    Ok(
        map_machine(event.as_deref(), field(fields, "Machine").as_deref())
            .or_else(|| map_status(call_status.as_deref(), event.as_deref())),
    )
}

/// A `<Dial>` action report's leg status and duration.
pub(super) fn parse_leg(
    fields: &[(String, String)],
) -> Result<(String, Option<u32>), CarriersError> {
    let status = required(fields, "DialStatus")?;
    Ok((
        map_leg_status(&status),
        seconds(field(fields, "DialBLegDuration")),
    ))
}

/// A call ringing one of our Plivo numbers, read from its Answer URL request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlivoInboundCall {
    /// Plivo's `CallUUID`.
    pub call_uuid: String,
    /// The number that rang, in E.164 (Plivo leaves the `+` off).
    pub to: String,
    /// The caller, in E.164 when it is a number; `anonymous` when withheld.
    pub from: String,
}

/// Reads the Answer URL request of an incoming call (`CallUUID`, `From`, `To`;
/// `Direction` is `inbound`). An outbound call's answer never reaches this
/// route, so a request saying `outbound` was not made for it.
pub fn parse_inbound(fields: &[(String, String)]) -> Result<PlivoInboundCall, CarriersError> {
    if let Some(direction) = field(fields, "Direction")
        && !direction.eq_ignore_ascii_case("inbound")
    {
        return Err(CarriersError::BadCallback(format!(
            "answer URL request for a {direction} call"
        )));
    }
    Ok(PlivoInboundCall {
        call_uuid: required(fields, "CallUUID")?,
        to: carrier_phone(&required(fields, "To")?),
        from: field(fields, "From")
            .filter(|from| !from.is_empty())
            .map_or_else(|| "anonymous".to_string(), |from| carrier_phone(&from)),
    })
}

/// Plivo XML refusing a call before it is answered: `<Hangup reason="busy"/>`
/// (the caller hears a busy tone) or `<Hangup reason="rejected"/>`.
pub fn reject_xml(busy: bool) -> String {
    let reason = if busy { "busy" } else { "rejected" };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Hangup reason=\"{reason}\"/></Response>"
    )
}

/// Plivo XML that says `text` and hangs up.
pub fn speak_and_hang_up_xml(text: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Speak>{}</Speak><Hangup/></Response>",
        xml_escape(text)
    )
}

/// Plivo XML that keeps a caller on hold: an optional `<Speak>`, a `<Wait>` of
/// `wait_seconds`, then `<Redirect>` (POST, signed like the Answer URL) to
/// `poll_url`, where we answer again.
pub fn hold_xml(say: Option<&str>, wait_seconds: u32, poll_url: &str) -> String {
    let speak = say
        .map(|text| format!("<Speak>{}</Speak>", xml_escape(text)))
        .unwrap_or_default();
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response>{speak}<Wait length=\"{wait_seconds}\"/><Redirect method=\"POST\">{}</Redirect></Response>",
        xml_escape(poll_url)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn an_incoming_calls_answer_request_reads_in_e164() {
        let call = parse_inbound(&pairs(&[
            ("CallUUID", "9a1b"),
            ("From", "919845012399"),
            ("To", "918035740188"),
            ("Direction", "inbound"),
            ("CallStatus", "ringing"),
        ]))
        .unwrap();
        assert_eq!(call.call_uuid, "9a1b");
        assert_eq!(call.to, "+918035740188");
        assert_eq!(call.from, "+919845012399");
        let withheld = parse_inbound(&pairs(&[("CallUUID", "u"), ("To", "+9180")])).unwrap();
        assert_eq!(withheld.from, "anonymous");
        assert!(parse_inbound(&pairs(&[("To", "9180")])).is_err());
        assert!(
            parse_inbound(&pairs(&[
                ("CallUUID", "u"),
                ("To", "9180"),
                ("Direction", "outbound")
            ]))
            .is_err()
        );
    }

    #[test]
    fn refusals_and_hold_are_plivo_xml() {
        assert!(reject_xml(true).contains("<Hangup reason=\"busy\"/>"));
        assert!(reject_xml(false).contains("<Hangup reason=\"rejected\"/>"));
        let bye = speak_and_hang_up_xml("Sorry & goodbye.");
        assert!(
            bye.contains("<Speak>Sorry &amp; goodbye.</Speak><Hangup/>"),
            "{bye}"
        );
        let hold = hold_xml(Some("Please hold."), 1, "https://v.example/p?a=1&round=2");
        assert!(
            hold.contains(
                "<Speak>Please hold.</Speak><Wait length=\"1\"/><Redirect method=\"POST\">https://v.example/p?a=1&amp;round=2</Redirect>"
            ),
            "{hold}"
        );
        assert!(!hold_xml(None, 1, "u").contains("<Speak>"));
    }

    #[test]
    fn an_answer_url_request_verifies_with_the_accounts_token() {
        let url = "https://v.example/carrier/plivo/inbound";
        let params = pairs(&[("CallUUID", "u"), ("To", "9180")]);
        let sig = signature_v3("tok", "POST", url, &params, "n1");
        assert!(verify_v3("tok", "POST", url, &params, "n1", &sig));
        assert!(!verify_v3("other", "POST", url, &params, "n1", &sig));
    }
}
