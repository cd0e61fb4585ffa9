//! Transfers at the real carriers: each carrier's transfer request against the
//! shared fake of its API (`support::FakeCarrier`; method, path, auth and body
//! as documented), the Telnyx Call Control carrier, Plivo's transferred-leg XML
//! route, and the leg reports each carrier posts back, through the running app
//! into the call row.
//!
//! Expected signatures are computed here independently (plain HMAC over the
//! documented signing strings), never with the code under test.

use crate::carriers::{VONAGE_PRIVATE_KEY, VONAGE_PUBLIC_KEY};
use crate::support::{Answer, FakeCarrier, TestApp, Workspace, eventually};
use axum::body::Bytes;
use axum::http::{HeaderMap, Method, StatusCode};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha1::Sha1;
use sha2::Sha256;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use voxline::carriers::{
    CarrierCredentials, CarrierKind, ExotelCarrier, PlivoCarrier, StaticCredentials, TelnyxCarrier,
    TwilioCarrier, VonageCarrier, http_client, transfer_status_url,
};
use voxline::domain::{CallId, OrgId};
use voxline::secrets::credentials::CredentialCipher;
use voxline::store::CallFixture;
use voxline_actors::carrier::{
    Carrier, CarrierError, DialRequest, StatusSink, TransferLeg, TransferRequest,
};

const PUBLIC: &str = "https://voxline.example.com";
const PERSON: &str = "+919812345678";
const OUR_NUMBER: &str = "+14155550100";

// ------------------------------------------------------------ helpers

fn credentials(kind: CarrierKind, value: Value) -> Arc<dyn CarrierCredentials> {
    Arc::new(StaticCredentials(HashMap::from([(kind, value)])))
}

fn basic(user: &str, password: &str) -> String {
    format!("Basic {}", STANDARD.encode(format!("{user}:{password}")))
}

fn call_id() -> CallId {
    "0190f5a2-7b3c-7d4e-8f60-123456789abc".parse().unwrap()
}

fn dial_request(provider: &str) -> DialRequest {
    let call = call_id().to_string();
    DialRequest {
        call_id: call.clone(),
        org_id: "org-1".into(),
        to: "+919876543210".into(),
        from: OUR_NUMBER.into(),
        media_url: format!("wss://voxline.example.com/media/{provider}"),
        media_token: "tok.123".into(),
        status_url: format!("{PUBLIC}/carrier/{provider}/status/{call}"),
        ring_timeout_seconds: 30,
        time_limit_seconds: 600,
        sim_script: None,
        detect_machine: false,
    }
}

fn transfer_request(kind: CarrierKind, carrier_call_id: &str) -> TransferRequest {
    TransferRequest {
        call_id: call_id().to_string(),
        org_id: "org-1".into(),
        carrier_call_id: carrier_call_id.into(),
        to: PERSON.into(),
        from: OUR_NUMBER.into(),
        leg_status_url: transfer_status_url(PUBLIC, kind, call_id()),
    }
}

fn hmac_sha1_b64(key: &str, data: &str) -> String {
    let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(data.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

fn hmac_sha256_b64(key: &str, data: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(data.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Our transfer `sig`, as documented: hex HMAC-SHA256 of
/// "voxline/carrier-transfer/v1\0" + callId, keyed by the account secret.
fn transfer_sig(key: &str, call_id: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(b"voxline/carrier-transfer/v1\0");
    mac.update(call_id.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// Our status-callback `sig`: the same over "voxline/carrier-callback/v1\0".
fn status_sig(key: &str, call_id: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(b"voxline/carrier-callback/v1\0");
    mac.update(call_id.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

/// `X-Twilio-Signature`: the URL, then each parameter sorted by name, HMAC-SHA1, base64.
fn twilio_signature(token: &str, url: &str, fields: &[(&str, &str)]) -> String {
    let mut sorted = fields.to_vec();
    sorted.sort();
    let mut signing = url.to_string();
    for (k, v) in sorted {
        signing.push_str(k);
        signing.push_str(v);
    }
    hmac_sha1_b64(token, &signing)
}

/// `X-Plivo-Signature-V3` of a POST: the URL without query, `?` and its query pairs
/// sorted as `k=v` joined by `&`, a `.`, the body parameters sorted as `kv`, then
/// `.` and the nonce; HMAC-SHA256 keyed by the auth token, base64.
fn plivo_signature(token: &str, url: &str, fields: &[(&str, &str)], nonce: &str) -> String {
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    let mut query: Vec<(String, String)> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    query.sort();
    let query = query
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&");
    let mut sorted = fields.to_vec();
    sorted.sort();
    let params: String = sorted.iter().map(|(k, v)| format!("{k}{v}")).collect();
    // The query and the parameters are separated by a dot only when both exist.
    let signing = if query.is_empty() {
        format!("{path}?{params}")
    } else {
        format!("{path}?{query}.{params}")
    };
    hmac_sha256_b64(token, &format!("{signing}.{nonce}"))
}

fn form_body(fields: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields.iter().copied())
        .finish()
}

// ------------------------------------------------------------ Twilio

#[tokio::test]
async fn twilio_transfer_redirects_the_live_call_to_a_dial_and_later_hangups_spare_it() {
    let fake = FakeCarrier::start(CarrierKind::Twilio, "CA1").await;
    let carrier = TwilioCarrier::new(
        credentials(
            CarrierKind::Twilio,
            json!({"accountSid": "AC123", "authToken": "tw-token", "baseUrl": fake.base}),
        ),
        http_client(),
    );
    let sid = carrier
        .place(dial_request("twilio"), StatusSink::new(|_| {}))
        .await
        .unwrap();
    assert_eq!(sid, "CA1");
    let mut req = transfer_request(CarrierKind::Twilio, "CA1");
    // A query with '&' must reach Twilio XML-escaped inside the attribute.
    req.leg_status_url.push_str("?a=1&b=2");
    carrier.transfer(req.clone()).await.unwrap();
    // The conversation's end makes the engine hang up; the bridge must survive it.
    carrier.hangup("CA1").await.unwrap();

    let seen = fake.requests();
    assert_eq!(
        seen.len(),
        2,
        "place and transfer only, no hang-up: {seen:?}"
    );
    let transfer = &seen[1];
    assert_eq!(transfer.method, Method::POST);
    assert_eq!(transfer.path, "/2010-04-01/Accounts/AC123/Calls/CA1.json");
    assert_eq!(transfer.header("authorization"), basic("AC123", "tw-token"));
    let call = call_id();
    assert_eq!(
        transfer.form(),
        vec![(
            "Twiml".to_string(),
            format!(
                "<Response><Dial action=\"{PUBLIC}/carrier/twilio/transfer-status/{call}?a=1&amp;b=2\" method=\"POST\" callerId=\"{OUR_NUMBER}\"><Number>{PERSON}</Number></Dial></Response>"
            )
        )]
    );
}

#[tokio::test]
async fn twilio_transfer_of_an_ended_call_is_refused() {
    let fake = FakeCarrier::start(CarrierKind::Twilio, "CA1").await;
    fake.answer(
        Method::POST,
        "/2010-04-01/Accounts/AC123/Calls/CA9.json",
        Answer::json(404, json!({"code": 20404, "message": "not found"})),
    );
    let carrier = TwilioCarrier::new(
        credentials(
            CarrierKind::Twilio,
            json!({"accountSid": "AC123", "authToken": "tw-token", "baseUrl": fake.base}),
        ),
        http_client(),
    );
    let err = carrier
        .transfer(transfer_request(CarrierKind::Twilio, "CA9"))
        .await
        .unwrap_err();
    assert!(matches!(err, CarrierError::Rejected(_)), "{err:?}");
}

// ------------------------------------------------------------ Plivo

#[tokio::test]
async fn plivo_transfer_moves_the_callee_leg_to_our_dial_xml() {
    let fake = FakeCarrier::start(CarrierKind::Plivo, "uuid-1").await;
    let carrier = PlivoCarrier::new(
        credentials(
            CarrierKind::Plivo,
            json!({"authId": "MA123", "authToken": "pl-token", "baseUrl": fake.base}),
        ),
        http_client(),
    );
    carrier
        .transfer(transfer_request(CarrierKind::Plivo, "uuid-1"))
        .await
        .unwrap();

    let seen = fake.only();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.path, "/v1/Account/MA123/Call/uuid-1/");
    assert_eq!(seen.header("authorization"), basic("MA123", "pl-token"));
    let body = seen.json();
    assert_eq!(body["legs"], "aleg");
    assert_eq!(body["aleg_method"], "POST");
    let call = call_id();
    let aleg_url = body["aleg_url"].as_str().unwrap();
    let (path, query) = aleg_url.split_once('?').unwrap();
    assert_eq!(path, format!("{PUBLIC}/carrier/plivo/transfer/{call}"));
    let query: HashMap<String, String> = form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    assert_eq!(query["to"], PERSON);
    assert_eq!(query["from"], OUR_NUMBER);
    assert_eq!(
        query["action"],
        format!("{PUBLIC}/carrier/plivo/transfer-status/{call}")
    );
}

// ------------------------------------------------------------ Vonage

#[tokio::test]
async fn vonage_transfer_puts_an_inline_ncco_connecting_the_person() {
    let fake = FakeCarrier::start(CarrierKind::Vonage, "63f61863-4a51").await;
    let carrier = VonageCarrier::new(
        credentials(
            CarrierKind::Vonage,
            json!({"applicationId": "app-1", "privateKey": VONAGE_PRIVATE_KEY, "baseUrl": fake.base}),
        ),
        http_client(),
    );
    carrier
        .transfer(transfer_request(CarrierKind::Vonage, "63f61863-4a51"))
        .await
        .unwrap();

    let seen = fake.only();
    assert_eq!(seen.method, Method::PUT);
    assert_eq!(seen.path, "/v1/calls/63f61863-4a51");
    // The application JWT, checked with the public key.
    let token = seen
        .header("authorization")
        .strip_prefix("Bearer ")
        .unwrap();
    let mut validation = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::RS256);
    validation.required_spec_claims.clear();
    let claims = jsonwebtoken::decode::<Value>(
        token,
        &jsonwebtoken::DecodingKey::from_rsa_pem(VONAGE_PUBLIC_KEY.as_bytes()).unwrap(),
        &validation,
    )
    .unwrap()
    .claims;
    assert_eq!(claims["application_id"], "app-1");

    let call = call_id().to_string();
    let event_url = format!(
        "{PUBLIC}/carrier/vonage/transfer-status/{call}?sig={}&aleg=63f61863-4a51",
        transfer_sig(VONAGE_PRIVATE_KEY, &call)
    );
    assert_eq!(
        seen.json(),
        json!({
            "action": "transfer",
            "destination": {
                "type": "ncco",
                "ncco": [{
                    "action": "connect",
                    "from": "14155550100",
                    "endpoint": [{"type": "phone", "number": "919812345678"}],
                    "eventUrl": [event_url],
                    "eventMethod": "POST",
                }],
            },
        })
    );
}

// ------------------------------------------------------------ Telnyx

/// The fake Call Control API, whose dials answer with `v3:abc-1`.
async fn fake_telnyx() -> FakeCarrier {
    FakeCarrier::start(CarrierKind::Telnyx, "v3:abc-1").await
}

fn telnyx_carrier(fake: &FakeCarrier) -> TelnyxCarrier {
    TelnyxCarrier::new(
        credentials(
            CarrierKind::Telnyx,
            json!({"apiKey": "KEY123", "connectionId": "conn-9", "baseUrl": fake.base}),
        ),
        http_client(),
    )
}

#[tokio::test]
async fn telnyx_places_a_streaming_call_with_call_control() {
    let fake = fake_telnyx().await;
    let carrier = telnyx_carrier(&fake);
    let id = carrier
        .place(dial_request("telnyx"), StatusSink::new(|_| {}))
        .await
        .unwrap();
    assert_eq!(id, "v3:abc-1");

    let seen = fake.only();
    assert_eq!(seen.method, Method::POST);
    assert_eq!(seen.path, "/v2/calls");
    assert_eq!(seen.header("authorization"), "Bearer KEY123");
    let call = call_id().to_string();
    assert_eq!(
        seen.json(),
        json!({
            "connection_id": "conn-9",
            "to": "+919876543210",
            "from": OUR_NUMBER,
            "stream_url": "wss://voxline.example.com/media/telnyx/tok.123",
            "stream_track": "inbound_track",
            "stream_bidirectional_mode": "rtp",
            "stream_bidirectional_codec": "PCMU",
            "webhook_url": format!(
                "{PUBLIC}/carrier/telnyx/status/{call}?sig={}",
                status_sig("KEY123", &call)
            ),
            "webhook_url_method": "POST",
            "timeout_secs": 30,
            "time_limit_secs": 600,
        })
    );
}

#[tokio::test]
async fn telnyx_hangs_up_and_an_ended_call_is_no_error() {
    let fake = fake_telnyx().await;
    let carrier = telnyx_carrier(&fake);
    carrier
        .place(dial_request("telnyx"), StatusSink::new(|_| {}))
        .await
        .unwrap();
    carrier.hangup("v3:abc-1").await.unwrap();
    let seen = fake.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[1].method, Method::POST);
    assert_eq!(seen[1].path, "/v2/calls/v3:abc-1/actions/hangup");
    assert_eq!(seen[1].header("authorization"), "Bearer KEY123");

    let ended = fake_telnyx().await;
    ended.answer(
        Method::POST,
        "/v2/calls/v3:abc-1/actions/hangup",
        Answer::json(
            422,
            json!({"errors": [{"code": "90018", "title": "Call has already ended"}]}),
        ),
    );
    let carrier = telnyx_carrier(&ended);
    carrier
        .place(dial_request("telnyx"), StatusSink::new(|_| {}))
        .await
        .unwrap();
    carrier.hangup("v3:abc-1").await.unwrap();

    // A call this process did not place has no known workspace.
    let err = carrier.hangup("v3:other").await.unwrap_err();
    assert!(matches!(err, CarrierError::NotConfigured(_)), "{err:?}");
}

#[tokio::test]
async fn telnyx_transfer_sends_the_transfer_command_with_our_webhook() {
    let fake = fake_telnyx().await;
    let carrier = telnyx_carrier(&fake);
    carrier
        .place(dial_request("telnyx"), StatusSink::new(|_| {}))
        .await
        .unwrap();
    carrier
        .transfer(transfer_request(CarrierKind::Telnyx, "v3:abc-1"))
        .await
        .unwrap();
    carrier.hangup("v3:abc-1").await.unwrap();

    let seen = fake.requests();
    assert_eq!(seen.len(), 2, "no hang-up after the transfer: {seen:?}");
    let transfer = &seen[1];
    assert_eq!(transfer.method, Method::POST);
    assert_eq!(transfer.path, "/v2/calls/v3:abc-1/actions/transfer");
    assert_eq!(transfer.header("authorization"), "Bearer KEY123");
    let call = call_id().to_string();
    assert_eq!(
        transfer.json(),
        json!({
            "to": PERSON,
            "from": OUR_NUMBER,
            "webhook_url": format!(
                "{PUBLIC}/carrier/telnyx/transfer-status/{call}?sig={}&aleg=v3%3Aabc-1",
                transfer_sig("KEY123", &call)
            ),
            "webhook_url_method": "POST",
        })
    );
}

#[tokio::test]
async fn telnyx_without_a_connection_id_cannot_place_calls() {
    let fake = fake_telnyx().await;
    let carrier = TelnyxCarrier::new(
        credentials(
            CarrierKind::Telnyx,
            json!({"apiKey": "KEY123", "baseUrl": fake.base}),
        ),
        http_client(),
    );
    let err = carrier
        .place(dial_request("telnyx"), StatusSink::new(|_| {}))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CarrierError::NotConfigured(m) if m.contains("connectionId")),
        "{err:?}"
    );
    assert!(fake.requests().is_empty());
}

// ------------------------------------------------------------ Exotel

#[tokio::test]
async fn exotel_refuses_transfers_without_calling_exotel() {
    let fake = FakeCarrier::start(CarrierKind::Exotel, "ex-call").await;
    let carrier = ExotelCarrier::new(
        credentials(
            CarrierKind::Exotel,
            json!({"accountSid": "ex1", "apiKey": "k", "apiToken": "t", "baseUrl": fake.base}),
        ),
        http_client(),
    );
    let err = carrier
        .transfer(transfer_request(CarrierKind::Exotel, "ex-call"))
        .await
        .unwrap_err();
    match err {
        CarrierError::Rejected(message) => {
            assert!(
                message.contains("exotel cannot transfer calls"),
                "{message}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert!(fake.requests().is_empty());
    assert!(!CarrierKind::Exotel.can_transfer());
    assert!(CarrierKind::Telnyx.can_transfer());
}

// ------------------------------------------------------------ leg reports through the app

/// A stored call of `ws` on `provider`, and the workspace's credential of that kind
/// (`null` for none).
async fn stored_call(app: &TestApp, ws: &Workspace, provider: &str, credential: Value) -> CallId {
    let id = CallId::new();
    app.store()
        .insert_call_fixture(&CallFixture {
            id: id.to_string(),
            org_id: ws.org_id.to_string(),
            agent_id: "agent-transfer".into(),
            agent_name: "Transfer".into(),
            phone: "+919876543210".into(),
            from_number: OUR_NUMBER.into(),
            provider: provider.into(),
            status: "completed".into(),
            ended_reason: Some("transferred".into()),
            created_at: app.now().timestamp_millis(),
            ..CallFixture::default()
        })
        .await
        .unwrap();
    if !credential.is_null() {
        store_credential(app, ws.org_id, provider, &credential).await;
    }
    id
}

async fn store_credential(app: &TestApp, org_id: OrgId, kind: &str, credential: &Value) {
    let (nonce, ciphertext) =
        CredentialCipher::new(&app.state().secret).seal(credential.to_string().as_bytes());
    app.store()
        .upsert_credential(
            org_id,
            kind,
            &nonce,
            &ciphertext,
            app.now().timestamp_millis(),
        )
        .await
        .unwrap();
}

async fn transfer_columns(app: &TestApp, id: CallId) -> (Option<String>, Option<i64>) {
    let row = app.store().call_transfer(id).await.unwrap().unwrap();
    (row.transfer_status, row.transfer_duration_seconds)
}

async fn post(
    app: &TestApp,
    url: &str,
    headers: &[(&str, &str)],
    content_type: &str,
    body: String,
) -> (StatusCode, String, String) {
    let mut request = app
        .http
        .post(url)
        .header("content-type", content_type)
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    let content_type = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (status, content_type, response.text().await.unwrap())
}

#[tokio::test]
async fn twilio_dial_action_reports_are_verified_and_stored_on_the_call() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Transfers").await;
    let id = stored_call(
        &app,
        &ws,
        "twilio",
        json!({"accountSid": "AC123", "authToken": "tw-token"}),
    )
    .await;
    let url = transfer_status_url(&app.base, CarrierKind::Twilio, id);
    let fields = [
        ("CallSid", "CA1"),
        ("DialCallSid", "CA2"),
        ("DialCallStatus", "completed"),
        ("DialCallDuration", "42"),
    ];

    // Unsigned, then signed by another account: refused, nothing stored.
    let (status, _, _) = post(
        &app,
        &url,
        &[],
        "application/x-www-form-urlencoded",
        form_body(&fields),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let forged = twilio_signature("other-token", &url, &fields);
    let (status, _, _) = post(
        &app,
        &url,
        &[("x-twilio-signature", &forged)],
        "application/x-www-form-urlencoded",
        form_body(&fields),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(transfer_columns(&app, id).await, (None, None));

    let signature = twilio_signature("tw-token", &url, &fields);
    let (status, content_type, body) = post(
        &app,
        &url,
        &[("x-twilio-signature", &signature)],
        "application/x-www-form-urlencoded",
        form_body(&fields),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(content_type.contains("xml"), "{content_type}");
    assert!(body.contains("<Hangup/>"), "{body}");
    assert_eq!(
        transfer_columns(&app, id).await,
        (Some("completed".into()), Some(42))
    );

    // A person who did not pick up: no-answer, and no length.
    let id = stored_call(
        &app,
        &ws,
        "twilio",
        json!({"accountSid": "AC123", "authToken": "tw-token"}),
    )
    .await;
    let url = transfer_status_url(&app.base, CarrierKind::Twilio, id);
    let fields = [("DialCallStatus", "no-answer"), ("DialCallDuration", "0")];
    let signature = twilio_signature("tw-token", &url, &fields);
    let (status, _, _) = post(
        &app,
        &url,
        &[("x-twilio-signature", &signature)],
        "application/x-www-form-urlencoded",
        form_body(&fields),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        transfer_columns(&app, id).await,
        (Some("no-answer".into()), None)
    );
    app.shutdown().await;
}

#[tokio::test]
async fn vonage_connect_events_are_verified_and_the_final_one_stored() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Transfers").await;
    let id = stored_call(
        &app,
        &ws,
        "vonage",
        json!({"applicationId": "app-1", "privateKey": VONAGE_PRIVATE_KEY}),
    )
    .await;
    let call = id.to_string();
    let base = transfer_status_url(&app.base, CarrierKind::Vonage, id);
    let url = format!(
        "{base}?sig={}&aleg=uuid-a",
        transfer_sig(VONAGE_PRIVATE_KEY, &call)
    );
    let event = |uuid: &str, status: &str, duration: Option<&str>| -> String {
        let mut event = json!({"uuid": uuid, "conversation_uuid": "CON-1", "status": status});
        if let Some(d) = duration {
            event["duration"] = json!(d);
        }
        event.to_string()
    };

    // Our status-callback sig is not a transfer sig; no sig at all is refused too.
    let wrong = format!(
        "{base}?sig={}&aleg=uuid-a",
        status_sig(VONAGE_PRIVATE_KEY, &call)
    );
    let (status, _, _) = post(
        &app,
        &wrong,
        &[],
        "application/json",
        event("uuid-b", "completed", Some("17")),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    let (status, _, _) = post(
        &app,
        &base,
        &[],
        "application/json",
        event("uuid-b", "completed", Some("17")),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    // Progress is acknowledged but not stored; the callee's own leg is ignored.
    for (uuid, status) in [
        ("uuid-b", "ringing"),
        ("uuid-b", "answered"),
        ("uuid-a", "completed"),
    ] {
        let (code, _, _) = post(
            &app,
            &url,
            &[],
            "application/json",
            event(uuid, status, Some("99")),
        )
        .await;
        assert_eq!(code, StatusCode::OK);
    }
    assert_eq!(transfer_columns(&app, id).await, (None, None));

    let (status, _, _) = post(
        &app,
        &url,
        &[],
        "application/json",
        event("uuid-b", "completed", Some("17")),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        transfer_columns(&app, id).await,
        (Some("completed".into()), Some(17))
    );
    app.shutdown().await;
}

#[tokio::test]
async fn telnyx_leg_hangup_is_stored_and_the_callee_leg_hung_up() {
    let fake = fake_telnyx().await;
    let app = TestApp::spawn().await;
    let ws = app.workspace("Transfers").await;
    let id = stored_call(
        &app,
        &ws,
        "telnyx",
        json!({"apiKey": "KEY123", "connectionId": "conn-9", "baseUrl": fake.base}),
    )
    .await;
    let call = id.to_string();
    let base = transfer_status_url(&app.base, CarrierKind::Telnyx, id);
    let url = format!(
        "{base}?sig={}&aleg=v3%3Aleg-a",
        transfer_sig("KEY123", &call)
    );
    let hangup = json!({
        "data": {
            "record_type": "event",
            "event_type": "call.hangup",
            "occurred_at": "2026-01-05T10:00:40Z",
            "payload": {
                "call_control_id": "v3:leg-b",
                "hangup_cause": "normal_clearing",
                "start_time": "2026-01-05T10:00:05Z",
                "end_time": "2026-01-05T10:00:35Z",
            }
        }
    });

    let (status, _, _) = post(&app, &base, &[], "application/json", hangup.to_string()).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert!(fake.requests().is_empty());

    let (status, _, body) = post(&app, &url, &[], "application/json", hangup.to_string()).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        transfer_columns(&app, id).await,
        (Some("completed".into()), Some(30))
    );
    // Telnyx leaves the callee's leg up after the bridged leg ends; we end it.
    let first = fake
        .wait_for("the callee leg's hang-up", Duration::from_secs(5), |_| true)
        .await;
    assert_eq!(first.path, "/v2/calls/v3:leg-a/actions/hangup");
    assert_eq!(first.header("authorization"), "Bearer KEY123");
    app.shutdown().await;
}

#[tokio::test]
async fn plivo_transfer_xml_route_answers_a_signed_fetch_with_the_dial() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Transfers").await;
    let id = stored_call(
        &app,
        &ws,
        "plivo",
        json!({"authId": "MA123", "authToken": "pl-token"}),
    )
    .await;
    let mut req = transfer_request(CarrierKind::Plivo, "uuid-1");
    req.call_id = id.to_string();
    req.leg_status_url = transfer_status_url(&app.base, CarrierKind::Plivo, id);
    // The URL the transfer request hands Plivo, as Plivo would fetch it.
    let aleg_url = voxline::carriers::plivo::transfer_xml_url(&req).unwrap();
    let fields = [("CallUUID", "uuid-1"), ("CallStatus", "in-progress")];

    let (status, _, _) = post(
        &app,
        &aleg_url,
        &[],
        "application/x-www-form-urlencoded",
        form_body(&fields),
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);

    let signature = plivo_signature("pl-token", &aleg_url, &fields, "nonce-1");
    let (status, content_type, body) = post(
        &app,
        &aleg_url,
        &[
            ("x-plivo-signature-v3", &signature),
            ("x-plivo-signature-v3-nonce", "nonce-1"),
        ],
        "application/x-www-form-urlencoded",
        form_body(&fields),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(content_type.contains("xml"));
    assert_eq!(
        body,
        format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Dial action=\"{}\" method=\"POST\" callerId=\"{OUR_NUMBER}\"><Number>{PERSON}</Number></Dial></Response>",
            req.leg_status_url
        )
    );

    // Then Plivo posts the dial's outcome to the action URL.
    let fields = [
        ("DialStatus", "completed"),
        ("DialBLegUUID", "uuid-b"),
        ("DialBLegDuration", "25"),
    ];
    let signature = plivo_signature("pl-token", &req.leg_status_url, &fields, "nonce-2");
    let (status, _, body) = post(
        &app,
        &req.leg_status_url,
        &[
            ("x-plivo-signature-v3", &signature),
            ("x-plivo-signature-v3-nonce", "nonce-2"),
        ],
        "application/x-www-form-urlencoded",
        form_body(&fields),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("<Hangup/>"));
    assert_eq!(
        transfer_columns(&app, id).await,
        (Some("completed".into()), Some(25))
    );
    app.shutdown().await;
}

#[tokio::test]
async fn exotel_leg_reports_and_unknown_providers_are_not_found() {
    let app = TestApp::spawn().await;
    let id = CallId::new();
    for provider in ["exotel", "nope"] {
        let url = format!("{}/carrier/{provider}/transfer-status/{id}", app.base);
        let (status, _, _) = post(
            &app,
            &url,
            &[],
            "application/x-www-form-urlencoded",
            "Status=completed".into(),
        )
        .await;
        assert_eq!(status, StatusCode::NOT_FOUND, "{provider}");
    }
    app.shutdown().await;
}

#[tokio::test]
async fn sim_carrier_legs_reach_the_call_row_through_the_sink() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Transfers").await;
    let id = stored_call(&app, &ws, "sim", Value::Null).await;
    let sink = voxline::carriers::store_wiring::transfer_leg_sink(app.store().clone());
    sink(TransferLeg {
        call_id: id.to_string(),
        status: "completed".into(),
        duration_seconds: Some(3),
    });
    let app_ref = &app;
    let stored = eventually(
        Duration::from_secs(5),
        "the sim leg stored",
        || async move {
            let columns = transfer_columns(app_ref, id).await;
            columns.0.is_some().then_some(columns)
        },
    )
    .await;
    assert_eq!(stored, (Some("completed".into()), Some(3)));
    // A later report without a length keeps the one stored.
    assert!(
        app.store()
            .record_transfer_leg(id, "completed", None)
            .await
            .unwrap()
    );
    assert_eq!(
        transfer_columns(&app, id).await,
        (Some("completed".into()), Some(3))
    );
    assert!(
        !app.store()
            .record_transfer_leg(CallId::new(), "busy", None)
            .await
            .unwrap()
    );
    app.shutdown().await;
}

#[test]
fn transfer_status_urls_sit_beside_the_status_callbacks() {
    let id = call_id();
    assert_eq!(
        transfer_status_url("https://pub.example/", CarrierKind::Telnyx, id),
        format!("https://pub.example/carrier/telnyx/transfer-status/{id}")
    );
}

// ------------------------------------------------------------ Telnyx call progress

#[tokio::test]
async fn telnyx_call_webhooks_carry_our_sig_and_map_to_engine_progress() {
    use voxline::carriers::callbacks::{self, CallbackRequest};
    use voxline_actors::carrier::CarrierStatus;

    let call = call_id().to_string();
    let credential = json!({"apiKey": "KEY123", "connectionId": "conn-9"});
    let signed = format!(
        "{PUBLIC}/carrier/telnyx/status/{call}?sig={}",
        status_sig("KEY123", &call)
    );
    let event = |event_type: &str, cause: Option<&str>| {
        let mut payload = json!({"call_control_id": "v3:abc-1"});
        if let Some(cause) = cause {
            payload["hangup_cause"] = json!(cause);
        }
        json!({"data": {"event_type": event_type, "payload": payload}}).to_string()
    };
    let cases = [
        (event("call.initiated", None), None),
        (event("call.answered", None), Some(CarrierStatus::Answered)),
        (
            event("call.hangup", Some("normal_clearing")),
            Some(CarrierStatus::Completed),
        ),
        (
            event("call.hangup", Some("user_busy")),
            Some(CarrierStatus::Busy),
        ),
        (
            event("call.hangup", Some("timeout")),
            Some(CarrierStatus::NoAnswer),
        ),
        (
            event("call.hangup", Some("call_rejected")),
            Some(CarrierStatus::Failed("call_rejected".into())),
        ),
        (event("streaming.started", None), None),
    ];
    for (body, expected) in cases {
        for (url, status) in [
            (signed.as_str(), StatusCode::OK),
            (
                format!("{PUBLIC}/carrier/telnyx/status/{call}").as_str(),
                StatusCode::FORBIDDEN,
            ),
        ] {
            let delivered = Arc::new(Mutex::new(Vec::new()));
            let sink = Arc::clone(&delivered);
            let credential = credential.clone();
            let response = callbacks::status_callback(
                "telnyx",
                &call,
                CallbackRequest {
                    method: Method::POST,
                    url: url.to_string(),
                    headers: HeaderMap::new(),
                    body: Bytes::from(body.clone()),
                },
                |_| async move { Some(credential) },
                move |status| sink.lock().unwrap().push(status),
            )
            .await;
            assert_eq!(response.status(), status, "{body} at {url}");
            let delivered = delivered.lock().unwrap().clone();
            let wanted: Vec<CarrierStatus> = if status == StatusCode::OK {
                expected.clone().into_iter().collect()
            } else {
                Vec::new()
            };
            assert_eq!(delivered, wanted, "{body}");
        }
    }
}
