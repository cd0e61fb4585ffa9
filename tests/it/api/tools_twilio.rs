//! In-call transfer over Twilio, end to end (issue 17): the app places the call
//! through the shared fake of Twilio's REST API (`support::FakeCarrier`), the
//! test plays Twilio's side of the media stream (a [`SimCallee`] connecting to
//! our `/media/twilio` with the `<Stream>` parameters from the create request),
//! the sim LLM transfers the caller who asks for a person, and the fake
//! receives the call update that dials the destination. Twilio's later
//! callbacks (the `<Dial action>` report and the parent call's `completed`) are
//! signed here independently of the code under test.

use crate::support::{FakeCarrier, TestApp, Workspace, eventually};
use axum::http::Method;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha1::Sha1;
use std::time::Duration;
use voxline_actors::sim::callee::{CalleeBehaviour, CalleeOptions, ScriptStep, SimCallee};

const ACCOUNT: &str = "AC5f1d0c2e9b8a7f6e5d4c3b2a19081726";
const TOKEN: &str = "tw-auth-token";
const CALL_SID: &str = "CA0a1b2c3d4e5f60718293a4b5c6d7e8f9";
const DIAL_SID: &str = "CAf9e8d7c6b5a4938271605f4e3d2c1b0a";
const OUR_NUMBER: &str = "+14155550100";
const CALLEE: &str = "+919845012311";
const FRONT_DESK: &str = "+14155550123";
const SCRIPT: [&str; 2] = ["Hello, yes.", "Can I speak to a person please?"];

// ------------------------------------------------------------ TwiML and signatures

fn xml_unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

/// The value of `attribute` on the first `<element …>` of `xml`.
fn attribute(xml: &str, element: &str, attribute: &str) -> Option<String> {
    let start = xml.find(&format!("<{element} "))?;
    let tag = &xml[start..start + xml[start..].find('>')?];
    let key = format!(" {attribute}=\"");
    let from = tag.find(&key)? + key.len();
    let len = tag[from..].find('"')?;
    Some(xml_unescape(&tag[from..from + len]))
}

/// Every `<Parameter name=… value=…/>` of a `<Stream>`, as Twilio sends them in
/// `start.customParameters`.
fn stream_parameters(twiml: &str) -> Vec<(String, String)> {
    twiml
        .match_indices("<Parameter ")
        .filter_map(|(at, _)| {
            let tag = &twiml[at..];
            Some((
                attribute(tag, "Parameter", "name")?,
                attribute(tag, "Parameter", "value")?,
            ))
        })
        .collect()
}

/// `X-Twilio-Signature`: base64 HMAC-SHA1, keyed by the auth token, of the URL
/// followed by each parameter's name and value, sorted by name.
fn twilio_signature(url: &str, fields: &[(&str, &str)]) -> String {
    let mut sorted = fields.to_vec();
    sorted.sort();
    let mut signing = url.to_string();
    for (name, value) in sorted {
        signing.push_str(name);
        signing.push_str(value);
    }
    let mut mac = <Hmac<Sha1> as KeyInit>::new_from_slice(TOKEN.as_bytes()).unwrap();
    mac.update(signing.as_bytes());
    STANDARD.encode(mac.finalize().into_bytes())
}

/// Posts a signed Twilio form callback; returns the status and body.
async fn post_signed(app: &TestApp, url: &str, fields: &[(&str, &str)]) -> (u16, String) {
    let body = form_urlencoded::Serializer::new(String::new())
        .extend_pairs(fields.iter().copied())
        .finish();
    let response = app
        .http
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .header("x-twilio-signature", twilio_signature(url, fields))
        .body(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    (status, response.text().await.unwrap())
}

// ------------------------------------------------------------ the app side

async fn detail(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body
}

/// A workspace on Twilio: its credential (pointing at the fake) stored the way
/// the admin CLI does, and a Twilio caller ID as its default number.
async fn twilio_workspace(app: &TestApp, fake: &FakeCarrier) -> Workspace {
    let ws = app.calling_workspace("Twilio transfers", 2).await;
    app.add_number(&ws, OUR_NUMBER, "twilio").await;
    let credential = json!({"accountSid": ACCOUNT, "authToken": TOKEN, "baseUrl": fake.base});
    app.set_credential(&ws, "twilio", &credential).await;
    ws
}

#[tokio::test]
async fn a_sim_callee_asking_for_a_person_is_transferred_through_twilio() {
    let fake = FakeCarrier::start(voxline::carriers::CarrierKind::Twilio, CALL_SID).await;
    let app = TestApp::spawn().await;
    let ws = twilio_workspace(&app, &fake).await;
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Front desk",
                "welcomeMessage": "Hi, this is Voxline.",
                "prompt": "Help the caller; connect them with the front desk when they ask for a person.",
                "telephonyProvider": "twilio",
                "llmProvider": "sim",
                "asrProvider": "sim",
                "ttsProvider": "sim",
                "tools": [{"type": "transferCall", "destinations": [{
                    "number": FRONT_DESK,
                    "description": "the front desk",
                    "message": "Let me connect you with the front desk.",
                }]}],
            }),
        )
        .await;
    let agent_id = agent["id"].as_str().expect("agent id");
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent_id, "to": CALLEE, "variables": {"simScript": SCRIPT}}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_string();

    // Twilio accepts the create.
    let create = fake
        .wait_for("the create-call request", Duration::from_secs(15), |_| true)
        .await;
    assert_eq!(create.method, Method::POST);
    assert_eq!(
        create.path,
        format!("/2010-04-01/Accounts/{ACCOUNT}/Calls.json")
    );
    let basic = format!("Basic {}", STANDARD.encode(format!("{ACCOUNT}:{TOKEN}")));
    assert_eq!(create.header("authorization"), basic);
    assert_eq!(create.form_value("To"), CALLEE);
    assert_eq!(create.form_value("From"), OUR_NUMBER);
    let twiml = &create.form_value("Twiml");
    let media_url = attribute(twiml, "Stream", "url").unwrap_or_else(|| panic!("{twiml}"));
    assert!(media_url.ends_with("/media/twilio"), "{media_url}");
    let params = stream_parameters(twiml);
    assert!(params.iter().any(|(k, _)| k == "token"), "{twiml}");

    // The callee answers: Twilio opens the stream with the TwiML's parameters.
    let callee = tokio::spawn(SimCallee::run(
        media_url,
        params,
        SCRIPT
            .iter()
            .map(|line| ScriptStep::Say((*line).to_string()))
            .collect(),
        CalleeBehaviour::Human,
        CalleeOptions {
            call_sid: CALL_SID.into(),
            account_sid: ACCOUNT.into(),
            max_call: Duration::from_secs(90),
            ..CalleeOptions::default()
        },
    ));

    // The transfer: the live call's TwiML becomes a <Dial> to the front desk.
    let update = fake
        .wait_for("the transfer update", Duration::from_secs(60), |r| {
            r.path == format!("/2010-04-01/Accounts/{ACCOUNT}/Calls/{CALL_SID}.json")
                && !r.form_values("Twiml").is_empty()
        })
        .await;
    assert_eq!(update.method, Method::POST);
    assert_eq!(update.header("authorization"), basic);
    let dial = &update.form_value("Twiml");
    assert!(
        dial.contains(&format!("<Number>{FRONT_DESK}</Number>")),
        "{dial}"
    );
    assert_eq!(
        attribute(dial, "Dial", "callerId").as_deref(),
        Some(OUR_NUMBER),
        "{dial}"
    );
    let action = attribute(dial, "Dial", "action").unwrap_or_else(|| panic!("{dial}"));
    assert_eq!(
        action,
        format!("{}/carrier/twilio/transfer-status/{id}", app.base),
        "{dial}"
    );

    // The call ends transferred and the callee's stream is closed by us.
    let call = eventually(Duration::from_secs(30), "the call to end", || async {
        let call = detail(&app, &ws, &id).await;
        (call["endedReason"] != Value::Null).then_some(call)
    })
    .await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["endedReason"], "transferred", "{call}");
    assert_eq!(call["provider"], "twilio", "{call}");
    assert_eq!(call["transferredTo"], FRONT_DESK, "{call}");
    assert!(call["transferredAt"].is_string(), "{call}");
    let report = tokio::time::timeout(Duration::from_secs(30), callee)
        .await
        .expect("the callee's stream ends")
        .expect("the callee ran");
    assert!(report.connected, "{report:?}");
    assert_eq!(report.lines_said, SCRIPT.len(), "{report:?}");
    assert!(report.agent_hung_up, "{report:?}");

    // The transcript: the callee's lines, and the agent turn that transferred.
    let transcript = app
        .get(&ws.key, &format!("/api/calls/{id}/transcript"))
        .await
        .expect(200)
        .body;
    let turns = transcript["turns"].as_array().expect("turns");
    for line in SCRIPT {
        assert!(
            turns
                .iter()
                .any(|t| t["speaker"] == "user" && t["text"] == line),
            "{transcript}"
        );
    }
    let transferring: Vec<&Value> = turns
        .iter()
        .filter(|t| t["speaker"] == "assistant")
        .flat_map(|t| t["toolCalls"].as_array().into_iter().flatten())
        .filter(|c| c["name"] == "transfer_call")
        .collect();
    assert_eq!(transferring.len(), 1, "{transcript}");
    assert_eq!(
        transferring[0]["arguments"],
        json!({"destination": FRONT_DESK}),
        "{transcript}"
    );
    assert!(transferring[0]["error"].is_null(), "{transcript}");

    // The person hangs up: Twilio reports the bridged leg to the Dial action.
    let (status, body) = post_signed(
        &app,
        &action,
        &[
            ("AccountSid", ACCOUNT),
            ("CallSid", CALL_SID),
            ("CallStatus", "in-progress"),
            ("Direction", "outbound-api"),
            ("DialCallSid", DIAL_SID),
            ("DialCallStatus", "completed"),
            ("DialCallDuration", "42"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("<Hangup/>"), "{body}");
    // Then the parent call completes.
    let status_url = format!("{}/carrier/twilio/status/{id}", app.base);
    let (status, body) = post_signed(
        &app,
        &status_url,
        &[
            ("AccountSid", ACCOUNT),
            ("CallSid", CALL_SID),
            ("CallStatus", "completed"),
            ("CallDuration", "60"),
            ("Direction", "outbound-api"),
        ],
    )
    .await;
    assert_eq!(status, 200, "{body}");

    let call = detail(&app, &ws, &id).await;
    assert_eq!(call["transferStatus"], "completed", "{call}");
    assert_eq!(call["transferDurationSeconds"], 42, "{call}");
    assert_eq!(call["endedReason"], "transferred", "{call}");
    assert_eq!(call["transferredTo"], FRONT_DESK, "{call}");

    // The bridge was never hung up: Twilio saw the create and the transfer only.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let seen = fake.requests();
    assert!(
        seen.iter()
            .all(|r| !r.form_values("Status").iter().any(|s| s == "completed")),
        "a hang-up was sent: {seen:?}"
    );
    assert_eq!(seen.len(), 2, "create and transfer only: {seen:?}");
    app.shutdown().await;
}
