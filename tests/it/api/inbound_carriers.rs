//! Inbound calls on Plivo, Exotel, Vonage and Telnyx (issue 31, point 2): a
//! number rented on the carrier is put on an agent, the carrier's inbound
//! webhook is driven exactly as its docs show it and signed its way, and the
//! media stream the answer names carries a whole call in that carrier's media
//! protocol, which ends with a transcript and an analysis; a forged signature
//! is refused (403), an unknown or disabled number gets the carrier's polite
//! refusal (200).

use crate::support::{FakeCarrier, Kind, Leg, TestApp, Workspace, eventually};
use serde_json::{Value, json};
use std::time::Duration;
use voxline::carriers::{CarrierKind, callback_request, plivo};

const CALLER: &str = "+919845012399";

/// A workspace with `phone` rented on `provider`, its credential set through the
/// admin CLI (REST calls go to a fake of the carrier) and an agent on the
/// number; returns the workspace, the number's id and the fake carrier.
async fn carrier_workspace(
    app: &TestApp,
    kind: CarrierKind,
    phone: &str,
    credential: Value,
) -> (Workspace, String, FakeCarrier) {
    let carrier = FakeCarrier::start(kind, "unused").await;
    let ws = app.calling_workspace(kind.as_str(), 2).await;
    let number = voxline::admin::ops::add_number(
        app.store(),
        ws.org_id,
        phone,
        kind.as_str(),
        false,
        None,
        app.now(),
    )
    .await
    .expect("number");
    let mut credential = credential;
    credential["baseUrl"] = json!(carrier.base);
    app.set_credential(&ws, kind.as_str(), &credential).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({"name": "Desk", "welcomeMessage": "Hello, you called the clinic.",
                "prompt": "Answer briefly.", "silenceTimeoutSeconds": 3}),
        )
        .await;
    let number_id = number.id.to_string();
    app.patch(
        &ws.key,
        &format!("/api/numbers/{number_id}"),
        json!({"inboundAgentId": agent["id"], "inbound": {"enabled": true}}),
    )
    .await
    .expect(200);
    (ws, number_id, carrier)
}

/// Turns the number's inbound calls off.
async fn disable(app: &TestApp, ws: &Workspace, number_id: &str) {
    app.patch(
        &ws.key,
        &format!("/api/numbers/{number_id}"),
        json!({"inbound": {"enabled": false}}),
    )
    .await
    .expect(200);
}

/// Our call id, the first part of a media token (`{callId}.{expiry}.{mac}`).
fn call_of(token: &str) -> String {
    token.split('.').next().expect("token").to_string()
}

/// Plays a whole call on `leg` (greeting, the caller speaks, the agent
/// replies, the carrier hangs up), then waits for the call to be recorded as
/// an inbound call with a transcript and a finished analysis.
async fn whole_inbound_call(app: &TestApp, ws: &Workspace, mut leg: Leg, call_id: &str) -> Value {
    leg.until("the greeting", |h| h.samples > 0 && !h.marks.is_empty())
        .await;
    leg.say(Duration::from_millis(1200));
    let before_reply = leg.heard.samples;
    let one_second = leg.rate as usize;
    leg.until("the agent's reply", |h| {
        h.samples >= before_reply + one_second
    })
    .await;
    leg.hang_up().await;
    assert!(leg.heard.closed.is_some(), "the connection closed");
    let call = eventually(Duration::from_secs(30), "the analysis", || async {
        let call = app
            .get(&ws.key, &format!("/api/calls/{call_id}"))
            .await
            .expect(200)
            .body;
        (call["analysis"]["status"] == "done").then_some(call)
    })
    .await;
    assert_eq!(call["direction"], "inbound", "{call}");
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["fromNumber"], CALLER, "{call}");
    let transcript = call["transcript"].to_string();
    assert!(
        transcript.contains("Hello, you called the clinic."),
        "{transcript}"
    );
    call
}

/// The text between `<{tag}…>` and `</{tag}>`.
fn element(xml: &str, tag: &str) -> Option<String> {
    let open = xml.find(&format!("<{tag}"))?;
    let start = open + xml[open..].find('>')? + 1;
    let end = start + xml[start..].find(&format!("</{tag}>"))?;
    Some(xml[start..end].replace("&amp;", "&"))
}

// ---------------------------------------------------------------- Plivo

const PLIVO_PHONE: &str = "+918035740101";
const PLIVO_TOKEN: &str = "plivo-inbound-token";

/// Posts Plivo's Answer URL request for a call from CALLER to `to` (Plivo
/// writes numbers without `+`), signed `X-Plivo-Signature-V3` with `token`.
async fn plivo_ring(app: &TestApp, to: &str, token: &str) -> (u16, String) {
    let url = format!("{}/carrier/plivo/inbound", app.base);
    let fields: Vec<(String, String)> = [
        ("CallUUID", uuid::Uuid::new_v4().to_string()),
        ("From", CALLER.trim_start_matches('+').to_string()),
        ("To", to.trim_start_matches('+').to_string()),
        ("Direction", "inbound".into()),
        ("CallStatus", "ringing".into()),
        ("Event", "StartApp".into()),
        ("CallerName", "+919845012399".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let nonce = "12345678901234567890";
    let signature = plivo::signature_v3(token, "POST", &url, &fields, nonce);
    let resp = reqwest::Client::new()
        .post(&url)
        .header("X-Plivo-Signature-V3", signature)
        .header("X-Plivo-Signature-V3-Nonce", nonce)
        .form(&fields)
        .send()
        .await
        .expect("the answer URL answers");
    let status = resp.status().as_u16();
    (status, resp.text().await.expect("body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plivo_number_answers_its_signed_answer_url_with_a_stream() {
    let app = TestApp::spawn().await;
    let (ws, number_id, _plivo) = carrier_workspace(
        &app,
        CarrierKind::Plivo,
        PLIVO_PHONE,
        json!({"authId": "MA0123", "authToken": PLIVO_TOKEN}),
    )
    .await;

    let (status, _) = plivo_ring(&app, PLIVO_PHONE, "not-the-token").await;
    assert_eq!(status, 403, "a forged signature");

    let (status, xml) = plivo_ring(&app, PLIVO_PHONE, PLIVO_TOKEN).await;
    assert_eq!(status, 200, "{xml}");
    assert!(
        xml.contains("<Stream bidirectional=\"true\" keepCallAlive=\"true\" contentType=\"audio/x-mulaw;rate=8000\">"),
        "{xml}"
    );
    let url = element(&xml, "Stream").expect("a stream URL");
    let token = url.rsplit('/').next().expect("token").to_string();
    assert!(url.contains("/media/plivo/"), "{url}");
    let call_id = call_of(&token);
    let leg = Leg::connect(Kind::Plivo, &url, &token, "plivo-stream-1".into()).await;
    let call = whole_inbound_call(&app, &ws, leg, &call_id).await;
    assert_eq!(call["provider"], "plivo", "{call}");
    assert_eq!(call["toNumber"], PLIVO_PHONE, "{call}");

    // A number nobody rents here is rejected; a disabled one says why and hangs up.
    let (status, xml) = plivo_ring(&app, "+918035799999", PLIVO_TOKEN).await;
    assert_eq!(status, 200, "{xml}");
    assert!(xml.contains("<Hangup reason=\"rejected\"/>"), "{xml}");
    disable(&app, &ws, &number_id).await;
    let (status, xml) = plivo_ring(&app, PLIVO_PHONE, PLIVO_TOKEN).await;
    assert_eq!(status, 200, "{xml}");
    assert!(
        xml.contains("<Speak>") && xml.contains("<Hangup/>"),
        "{xml}"
    );
}

// ---------------------------------------------------------------- Vonage

const VONAGE_PHONE: &str = "+918035740102";
const VONAGE_SECRET: &str = "vonage-signature-secret";

/// A signed-webhook JWT as Vonage makes one: HS256 keyed by the signature
/// secret, issued now, with the body's SHA-256 as `payload_hash`.
fn vonage_jwt(secret: &str, body: &[u8]) -> String {
    use sha2::Digest as _;
    let claims = json!({
        "iat": chrono::Utc::now().timestamp(),
        "jti": uuid::Uuid::new_v4().to_string(),
        "iss": "Vonage",
        "payload_hash": hex::encode(sha2::Sha256::digest(body)),
        "application_id": "app-inbound",
    });
    jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &claims,
        &jsonwebtoken::EncodingKey::from_secret(secret.as_bytes()),
    )
    .expect("jwt")
}

/// Posts Vonage's answer webhook (answer_method POST, JSON) for a call from
/// CALLER to `to` (numbers without `+`), signed with `secret`.
async fn vonage_ring(app: &TestApp, to: &str, secret: &str) -> (u16, Value) {
    let body = json!({
        "from": CALLER.trim_start_matches('+'),
        "to": to.trim_start_matches('+'),
        "uuid": uuid::Uuid::new_v4().simple().to_string(),
        "conversation_uuid": format!("CON-{}", uuid::Uuid::new_v4()),
        "region_url": "https://api-ap-3.vonage.com",
    })
    .to_string();
    let resp = reqwest::Client::new()
        .post(format!("{}/carrier/vonage/inbound", app.base))
        .header(
            "Authorization",
            format!("Bearer {}", vonage_jwt(secret, body.as_bytes())),
        )
        .header("Content-Type", "application/json")
        .body(body)
        .send()
        .await
        .expect("the answer webhook answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vonage_number_answers_its_signed_answer_webhook_with_an_ncco() {
    let app = TestApp::spawn().await;
    let (ws, number_id, _vonage) = carrier_workspace(
        &app,
        CarrierKind::Vonage,
        VONAGE_PHONE,
        json!({"applicationId": "app-inbound", "privateKey": crate::carriers::VONAGE_PRIVATE_KEY,
            "signatureSecret": VONAGE_SECRET}),
    )
    .await;

    let (status, _) = vonage_ring(&app, VONAGE_PHONE, "not-the-secret").await;
    assert_eq!(status, 403, "a forged signature");

    let (status, ncco) = vonage_ring(&app, VONAGE_PHONE, VONAGE_SECRET).await;
    assert_eq!(status, 200, "{ncco}");
    assert_eq!(ncco[0]["action"], "connect", "{ncco}");
    let endpoint = &ncco[0]["endpoint"][0];
    assert_eq!(endpoint["type"], "websocket");
    assert_eq!(endpoint["content-type"], "audio/l16;rate=16000");
    let url = endpoint["uri"].as_str().expect("uri");
    assert!(url.ends_with("/media/vonage"), "{url}");
    let token = endpoint["headers"]["token"].as_str().expect("token");
    let call_id = call_of(token);
    assert_eq!(endpoint["headers"]["callId"], call_id.as_str());
    let leg = Leg::connect(Kind::Vonage, url, token, "vonage-stream-1".into()).await;
    let call = whole_inbound_call(&app, &ws, leg, &call_id).await;
    assert_eq!(call["provider"], "vonage", "{call}");
    assert_eq!(call["toNumber"], VONAGE_PHONE, "{call}");

    // An unknown number and a disabled one: a short message, and the call ends.
    for disabled in [false, true] {
        let to = if disabled {
            disable(&app, &ws, &number_id).await;
            VONAGE_PHONE
        } else {
            "+918035799998"
        };
        let (status, ncco) = vonage_ring(&app, to, VONAGE_SECRET).await;
        assert_eq!(status, 200, "{ncco}");
        assert_eq!(ncco.as_array().map(Vec::len), Some(1), "{ncco}");
        assert_eq!(ncco[0]["action"], "talk", "{ncco}");
    }
}

// ---------------------------------------------------------------- Exotel

const EXOTEL_PHONE: &str = "+918035740103";
const EXOTEL_TOKEN: &str = "exotel-api-token";

/// Exotel's Voicebot applet asking its URL for the stream of a call from
/// CALLER to `to` (a GET with the call in the query, numbers in Exotel's
/// national form), at the URL the customer pasted, signed with `token`.
async fn exotel_ring(app: &TestApp, to: &str, token: &str) -> (u16, Value) {
    let national = |e164: &str| format!("0{}", e164.trim_start_matches("+91"));
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("CallSid", &uuid::Uuid::new_v4().simple().to_string())
        .append_pair("CallFrom", &national(CALLER))
        .append_pair("CallTo", &national(to))
        .append_pair("From", &national(CALLER))
        .append_pair("To", &national(to))
        .append_pair("Direction", "incoming")
        .append_pair("sig", &callback_request::inbound_sig(token, to))
        .finish();
    let resp = reqwest::Client::new()
        .get(format!("{}/carrier/exotel/inbound?{query}", app.base))
        .send()
        .await
        .expect("the voicebot URL answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exotel_number_answers_its_signed_voicebot_url_with_a_stream() {
    let app = TestApp::spawn().await;
    let (ws, number_id, _exotel) = carrier_workspace(
        &app,
        CarrierKind::Exotel,
        EXOTEL_PHONE,
        json!({"accountSid": "exo-acct", "apiKey": "exo-key", "apiToken": EXOTEL_TOKEN}),
    )
    .await;

    let (status, _) = exotel_ring(&app, EXOTEL_PHONE, "not-the-token").await;
    assert_eq!(status, 403, "a forged sig");

    let (status, answer) = exotel_ring(&app, EXOTEL_PHONE, EXOTEL_TOKEN).await;
    assert_eq!(status, 200, "{answer}");
    let url = answer["url"].as_str().expect("a stream URL");
    assert!(url.contains("/media/exotel/"), "{url}");
    let token = url.rsplit('/').next().expect("token").to_string();
    let call_id = call_of(&token);
    let leg = Leg::connect(Kind::Exotel, url, &token, "exotel-stream-1".into()).await;
    let call = whole_inbound_call(&app, &ws, leg, &call_id).await;
    assert_eq!(call["provider"], "exotel", "{call}");
    assert_eq!(call["toNumber"], EXOTEL_PHONE, "{call}");

    // No stream for an unknown or a disabled number: the flow's next applet says goodbye.
    let (status, answer) = exotel_ring(&app, "+918035799997", EXOTEL_TOKEN).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["url"], Value::Null, "{answer}");
    disable(&app, &ws, &number_id).await;
    let (status, answer) = exotel_ring(&app, EXOTEL_PHONE, EXOTEL_TOKEN).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["url"], Value::Null, "{answer}");
    assert_eq!(answer["refused"], "unavailable", "{answer}");
}

// ---------------------------------------------------------------- Telnyx

const TELNYX_PHONE: &str = "+918035740104";
const TELNYX_KEY: &str = "KEY0192-telnyx-inbound";
const TELNYX_APP: &str = "1494404757140276705";

/// The Call Control application's `call.initiated` for a call from CALLER to
/// `to`, as Telnyx posts it before anyone answers (`state: parked`).
fn telnyx_initiated(call_control_id: &str, to: &str) -> String {
    json!({"data": {
        "record_type": "event",
        "event_type": "call.initiated",
        "id": uuid::Uuid::new_v4().to_string(),
        "occurred_at": chrono::Utc::now().to_rfc3339(),
        "payload": {
            "call_control_id": call_control_id,
            "connection_id": TELNYX_APP,
            "call_leg_id": uuid::Uuid::new_v4().to_string(),
            "call_session_id": uuid::Uuid::new_v4().to_string(),
            "client_state": null,
            "caller_id_name": CALLER,
            "direction": "incoming",
            "from": CALLER,
            "to": to,
            "start_time": chrono::Utc::now().to_rfc3339(),
            "state": "parked",
        },
    }, "meta": {"attempt": 1, "delivered_to": "https://voxline.example"}})
    .to_string()
}

/// Posts a Telnyx webhook `body` to `url` with `headers`; the status.
async fn telnyx_post(url: &str, body: String, headers: &[(&str, String)]) -> u16 {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("Content-Type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request
        .body(body)
        .send()
        .await
        .expect("the application webhook answers")
        .status()
        .as_u16()
}

/// The commands our server sent the fake Telnyx for `call_control_id`.
fn telnyx_commands(
    telnyx: &FakeCarrier,
    call_control_id: &str,
) -> Vec<crate::support::CarrierRequest> {
    let prefix = format!("/v2/calls/{call_control_id}/actions/");
    telnyx
        .requests()
        .into_iter()
        .filter(|r| r.path.starts_with(&prefix))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telnyx_number_is_answered_by_command_from_its_signed_application_webhook() {
    use base64::Engine as _;
    use ed25519_dalek::Signer as _;
    let app = TestApp::spawn().await;
    let (ws, number_id, telnyx) = carrier_workspace(
        &app,
        CarrierKind::Telnyx,
        TELNYX_PHONE,
        json!({"apiKey": TELNYX_KEY, "connectionId": TELNYX_APP}),
    )
    .await;
    telnyx.require_authorization(&format!("Bearer {TELNYX_KEY}"));

    // The application's webhook URL carries our sig of the application.
    let number = app
        .get(&ws.key, &format!("/api/numbers/{number_id}"))
        .await
        .expect(200)
        .body;
    let inbound_url = number["inboundUrl"].as_str().expect("an inbound URL");
    assert!(
        inbound_url.contains("/carrier/telnyx/inbound?sig="),
        "{number}"
    );
    let unsigned = format!("{}/carrier/telnyx/inbound", app.base);
    let forged = format!(
        "{unsigned}?sig={}",
        callback_request::inbound_sig("not-the-key", TELNYX_APP)
    );
    for url in [&unsigned, &forged] {
        let status = telnyx_post(url, telnyx_initiated("v3:forged", TELNYX_PHONE), &[]).await;
        assert_eq!(status, 403, "{url}");
    }
    assert!(telnyx_commands(&telnyx, "v3:forged").is_empty());

    // A ringing call is answered by the answer command, streaming to us.
    let status = telnyx_post(
        inbound_url,
        telnyx_initiated("v3:in-call-1", TELNYX_PHONE),
        &[],
    )
    .await;
    assert_eq!(status, 200);
    let commands = telnyx_commands(&telnyx, "v3:in-call-1");
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert_eq!(commands[0].path, "/v2/calls/v3:in-call-1/actions/answer");
    let answer = commands[0].json();
    assert_eq!(answer["stream_track"], "inbound_track", "{answer}");
    assert_eq!(answer["stream_bidirectional_mode"], "rtp", "{answer}");
    assert_eq!(answer["stream_bidirectional_codec"], "PCMU", "{answer}");
    let url = answer["stream_url"].as_str().expect("stream_url");
    assert!(url.contains("/media/telnyx/"), "{url}");
    let token = url.rsplit('/').next().expect("token").to_string();
    let call_id = call_of(&token);
    assert_eq!(answer["command_id"], call_id.as_str(), "{answer}");
    let webhook = answer["webhook_url"].as_str().expect("webhook_url");
    assert!(
        webhook.contains(&format!("/carrier/telnyx/status/{call_id}?sig=")),
        "{webhook}"
    );
    // Telnyx then reports the answer to the call's own webhook URL, signed there.
    let answered = json!({"data": {"event_type": "call.answered",
        "occurred_at": chrono::Utc::now().to_rfc3339(),
        "payload": {"call_control_id": "v3:in-call-1", "connection_id": TELNYX_APP}}});
    assert_eq!(telnyx_post(webhook, answered.to_string(), &[]).await, 200);
    let leg = Leg::connect(Kind::Telnyx, url, &token, "telnyx-stream-1".into()).await;
    let call = whole_inbound_call(&app, &ws, leg, &call_id).await;
    assert_eq!(call["provider"], "telnyx", "{call}");
    assert_eq!(call["toNumber"], TELNYX_PHONE, "{call}");

    // Events other than a ringing call are taken and ignored.
    let hangup = json!({"data": {"event_type": "call.hangup",
        "payload": {"call_control_id": "v3:early-hangup", "hangup_cause": "originator_cancel"}}});
    assert_eq!(telnyx_post(inbound_url, hangup.to_string(), &[]).await, 200);
    assert!(telnyx_commands(&telnyx, "v3:early-hangup").is_empty());

    // A number nobody rents here: no key to command it with, so no command.
    let status = telnyx_post(
        inbound_url,
        telnyx_initiated("v3:unknown", "+918035799996"),
        &[],
    )
    .await;
    assert_eq!(status, 200);
    assert!(telnyx_commands(&telnyx, "v3:unknown").is_empty());

    // A disabled number is rejected by command.
    disable(&app, &ws, &number_id).await;
    let status = telnyx_post(inbound_url, telnyx_initiated("v3:off-1", TELNYX_PHONE), &[]).await;
    assert_eq!(status, 200);
    let commands = telnyx_commands(&telnyx, "v3:off-1");
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert_eq!(commands[0].path, "/v2/calls/v3:off-1/actions/reject");
    assert_eq!(commands[0].json()["cause"], "CALL_REJECTED");

    // With the account's public key, Telnyx's Ed25519 signature is what counts.
    let key = ed25519_dalek::SigningKey::from_bytes(&rand::random::<[u8; 32]>());
    let public = base64::engine::general_purpose::STANDARD.encode(key.verifying_key().to_bytes());
    let credential = json!({"apiKey": TELNYX_KEY, "connectionId": TELNYX_APP, "publicKey": public,
        "baseUrl": telnyx.base});
    app.set_credential(&ws, "telnyx", &credential).await;
    let number = app
        .get(&ws.key, &format!("/api/numbers/{number_id}"))
        .await
        .expect(200)
        .body;
    assert_eq!(number["inboundUrl"], unsigned.as_str(), "{number}");
    let sign = |body: &str| {
        let now = chrono::Utc::now().timestamp().to_string();
        let signature = key.sign(format!("{now}|{body}").as_bytes());
        vec![
            ("telnyx-timestamp", now),
            (
                "telnyx-signature-ed25519",
                base64::engine::general_purpose::STANDARD.encode(signature.to_bytes()),
            ),
        ]
    };
    let body = telnyx_initiated("v3:signed-1", TELNYX_PHONE);
    let other = ed25519_dalek::SigningKey::from_bytes(&rand::random::<[u8; 32]>());
    let now = chrono::Utc::now().timestamp().to_string();
    let forged = vec![
        ("telnyx-timestamp", now.clone()),
        (
            "telnyx-signature-ed25519",
            base64::engine::general_purpose::STANDARD
                .encode(other.sign(format!("{now}|{body}").as_bytes()).to_bytes()),
        ),
    ];
    assert_eq!(telnyx_post(&unsigned, body.clone(), &forged).await, 403);
    assert_eq!(
        telnyx_post(&unsigned, body.clone(), &sign(&body)).await,
        200
    );
    let commands = telnyx_commands(&telnyx, "v3:signed-1");
    assert_eq!(commands.len(), 1, "{commands:?}");
    assert_eq!(commands[0].path, "/v2/calls/v3:signed-1/actions/reject");
}
