//! A Telnyx call end to end (issue 21): the app places the call through the
//! shared fake of Call Control v2 (`support::FakeCarrier`: `POST /v2/calls`,
//! any other API key refused), then the test, as Telnyx, posts the call's
//! webhooks signed with Ed25519 under a key pair it made (the workspace's
//! credential carries its public key), plays Telnyx's media stream to the
//! `stream_url` in real time as a caller who says a line, and hangs up.
//! Signatures are made here with `ed25519-dalek`'s signing half, never with the
//! code under test.

use crate::support::{CarrierRequest, FakeCarrier, TestApp, Workspace, eventually};
use axum::http::Method;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer as _, SigningKey};
use futures::{SinkExt, StreamExt};
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{Instant, MissedTickBehavior, interval, timeout};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};
use voxline_media::g711::linear_to_mulaw;
use voxline_media::synth::SpeechLikeGenerator;

const API_KEY: &str = "KEY0199A1B2C3D4E5F6_telnyx";
const CONNECTION_ID: &str = "1684641123236054244";
const CONTROL_ID: &str = "v3:u5OAKGEPT3Dx8SZSSDRWEMdNH2OripQhO";
const OUR_NUMBER: &str = "+14155550177";
const CALLEE: &str = "+919845012377";
const WELCOME: &str = "Hello from Voxline on Telnyx.";
const CALLER_LINE: &str = "Yes, this is a good time.";
const WAIT: Duration = Duration::from_secs(30);

/// The fake Call Control API: dials answer with [`CONTROL_ID`], and only our API key is let in.
async fn fake_telnyx() -> FakeCarrier {
    let fake = FakeCarrier::start(voxline::carriers::CarrierKind::Telnyx, CONTROL_ID).await;
    fake.require_authorization(&format!("Bearer {API_KEY}"));
    fake
}

// ------------------------------------------------------------ signed webhooks

/// The account's key pair as the Telnyx portal would hold it.
struct AccountKey(SigningKey);

impl AccountKey {
    fn new() -> Self {
        Self(SigningKey::from_bytes(&rand::random::<[u8; 32]>()))
    }

    /// The portal's "Public Key": base64 of the 32-byte verifying key.
    fn public_base64(&self) -> String {
        STANDARD.encode(self.0.verifying_key().to_bytes())
    }

    /// `telnyx-signature-ed25519`: base64 Ed25519 signature of `"{timestamp}|{body}"`.
    fn sign(&self, timestamp: &str, body: &str) -> String {
        let signature = self.0.sign(format!("{timestamp}|{body}").as_bytes());
        STANDARD.encode(signature.to_bytes())
    }
}

/// Our transfer `sig` (HMAC-SHA256 keyed by the API key over a fixed label and the call id),
/// computed independently of the signing module.
fn transfer_sig(key: &str, call_id: &str) -> String {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(key.as_bytes()).unwrap();
    mac.update(b"voxline/carrier-transfer/v1\0");
    mac.update(call_id.as_bytes());
    hex::encode(mac.finalize().into_bytes())
}

fn unix_now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A Call Control webhook body as Telnyx sends it.
fn event(event_type: &str, payload: Value) -> String {
    let mut payload = payload;
    payload["call_control_id"] = json!(CONTROL_ID);
    payload["connection_id"] = json!(CONNECTION_ID);
    payload["call_leg_id"] = json!("2dc6fc34-f9e0-11ea-b68e-02420a0f7768");
    payload["call_session_id"] = json!("2dc1b3c8-f9e0-11ea-bc5a-02420a0f7768");
    payload["from"] = json!(OUR_NUMBER);
    payload["to"] = json!(CALLEE);
    payload["direction"] = json!("outgoing");
    json!({
        "data": {
            "record_type": "event",
            "event_type": event_type,
            "id": uuid::Uuid::new_v4().to_string(),
            "occurred_at": chrono::Utc::now().to_rfc3339(),
            "payload": payload,
        },
        "meta": {"attempt": 1},
    })
    .to_string()
}

/// Posts a webhook with the given signature headers; returns the status.
async fn post_webhook(app: &TestApp, url: &str, body: &str, headers: &[(&str, String)]) -> u16 {
    let mut request = app
        .http
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    request.send().await.unwrap().status().as_u16()
}

/// Posts a webhook signed now with `key`.
async fn post_signed(app: &TestApp, key: &AccountKey, url: &str, body: &str) -> u16 {
    let timestamp = unix_now().to_string();
    let signature = key.sign(&timestamp, body);
    post_webhook(
        app,
        url,
        body,
        &[
            ("telnyx-timestamp", timestamp),
            ("telnyx-signature-ed25519", signature),
        ],
    )
    .await
}

// ------------------------------------------------------------ Telnyx's media stream

/// Telnyx's side of the media websocket: PCMU at 8 kHz in 20 ms frames.
struct Stream {
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    seq: u64,
    speech: VecDeque<i16>,
    voice: SpeechLikeGenerator,
    started_at: Instant,
    /// Agent audio received, in samples.
    heard: usize,
    marks: usize,
    closed: bool,
}

const STREAM_ID: &str = "32de0dea-53cb-4b21-89a4-9ffeb7bfbb5f";

impl Stream {
    /// Connects to `stream_url` and sends `connected` and `start` as Telnyx does.
    async fn open(stream_url: &str) -> Self {
        let (ws, _) = connect_async(stream_url).await.expect("websocket opens");
        let mut stream = Self {
            ws,
            seq: 0,
            speech: VecDeque::new(),
            voice: SpeechLikeGenerator::new(8_000, 11),
            started_at: Instant::now(),
            heard: 0,
            marks: 0,
            closed: false,
        };
        stream
            .send(json!({"event": "connected", "version": "1.0.0"}))
            .await;
        let seq = stream.next_seq();
        stream
            .send(json!({
                "event": "start", "sequence_number": seq.to_string(), "stream_id": STREAM_ID,
                "start": {
                    "user_id": "3e6f995f-85f7-4705-9741-53b116d28237",
                    "call_control_id": CONTROL_ID,
                    "call_session_id": "2dc1b3c8-f9e0-11ea-bc5a-02420a0f7768",
                    "from": OUR_NUMBER, "to": CALLEE, "client_state": null,
                    "custom_parameters": {},
                    "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
                },
            }))
            .await;
        stream.started_at = Instant::now();
        stream
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    async fn send(&mut self, value: Value) {
        self.ws
            .send(Message::Text(value.to_string().into()))
            .await
            .expect("send to the media socket");
    }

    /// Queues `duration` of speech-like caller audio.
    fn say(&mut self, duration: Duration) {
        let mut samples = vec![0; (8 * duration.as_millis()) as usize];
        self.voice.fill(&mut samples);
        self.speech.extend(samples);
    }

    async fn on_server(&mut self, message: Message) {
        let Message::Text(text) = message else {
            if let Message::Close(_) = message {
                self.closed = true;
            }
            return;
        };
        let v: Value = serde_json::from_str(&text).expect("the server sends JSON");
        match v["event"].as_str() {
            Some("media") => {
                let payload = STANDARD
                    .decode(v["media"]["payload"].as_str().expect("payload"))
                    .expect("base64 payload");
                self.heard += payload.len();
            }
            Some("mark") => {
                let seq = self.next_seq();
                let name = v["mark"]["name"].clone();
                self.marks += 1;
                self.send(json!({
                    "event": "mark", "sequence_number": seq.to_string(), "stream_id": STREAM_ID,
                    "mark": {"name": name},
                }))
                .await;
            }
            Some("clear") => {}
            other => panic!("unexpected message to Telnyx: {other:?} {v}"),
        }
    }

    /// Streams real-time caller audio (speech when queued, else silence) and
    /// handles the server's messages until `done` holds.
    async fn until(&mut self, what: &str, done: impl Fn(&Self) -> bool) {
        let mut ticker = interval(Duration::from_millis(20));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
        let deadline = Instant::now() + WAIT;
        while !done(self) {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            assert!(!self.closed, "the socket closed while waiting for {what}");
            tokio::select! {
                _ = ticker.tick() => {
                    let mulaw: Vec<u8> = (0..160)
                        .map(|_| linear_to_mulaw(self.speech.pop_front().unwrap_or(0)))
                        .collect();
                    let seq = self.next_seq();
                    let ms = self.started_at.elapsed().as_millis().to_string();
                    self.send(json!({
                        "event": "media", "sequence_number": seq.to_string(), "stream_id": STREAM_ID,
                        "media": {"track": "inbound", "chunk": (seq - 1).to_string(), "timestamp": ms,
                                  "payload": STANDARD.encode(&mulaw)},
                    }))
                    .await;
                }
                message = self.ws.next() => match message {
                    Some(Ok(message)) => self.on_server(message).await,
                    _ => self.closed = true,
                },
            }
        }
    }

    /// Telnyx's `stop`, then drains the socket until the server closes it.
    async fn stop(&mut self) {
        let seq = self.next_seq();
        self.send(json!({
            "event": "stop", "sequence_number": seq.to_string(), "stream_id": STREAM_ID,
            "stop": {"user_id": "3e6f995f-85f7-4705-9741-53b116d28237", "call_control_id": CONTROL_ID},
        }))
        .await;
        let _ = timeout(WAIT, async {
            while let Some(Ok(_)) = self.ws.next().await {}
        })
        .await;
    }
}

// ------------------------------------------------------------ the app side

/// A workspace on Telnyx: a Telnyx caller ID as its default number and the
/// credential (pointing at the fake, carrying the account's public key) stored
/// the way the admin CLI does.
async fn telnyx_workspace(app: &TestApp, fake: &FakeCarrier, key: &AccountKey) -> Workspace {
    let ws = app.calling_workspace("Telnyx calls", 2).await;
    app.add_number(&ws, OUR_NUMBER, "telnyx").await;
    let credential = json!({
        "apiKey": API_KEY,
        "connectionId": CONNECTION_ID,
        "publicKey": key.public_base64(),
        "baseUrl": fake.base,
    });
    app.set_credential(&ws, "telnyx", &credential).await;
    ws
}

async fn telnyx_agent(app: &TestApp, ws: &Workspace) -> String {
    let agent = app
        .create_agent(
            &ws.key,
            json!({
                "name": "Telnyx agent",
                "welcomeMessage": WELCOME,
                "prompt": "You confirm appointments.",
                "telephonyProvider": "telnyx",
                "llmProvider": "sim",
                "asrProvider": "sim",
                "ttsProvider": "sim",
            }),
        )
        .await;
    agent["id"].as_str().expect("agent id").to_string()
}

/// Places a call and returns its id and the dial request the fake received.
async fn place(
    app: &TestApp,
    ws: &Workspace,
    fake: &FakeCarrier,
    agent: &str,
) -> (String, CarrierRequest) {
    let placed = app
        .post(
            &ws.key,
            "/api/calls",
            json!({"agentId": agent, "to": CALLEE, "variables": {"simScript": [CALLER_LINE]}}),
        )
        .await
        .expect(201);
    let id = placed.body["callId"].as_str().expect("callId").to_string();
    let dial = fake
        .wait_for("the dial request", WAIT, |r| r.path == "/v2/calls")
        .await;
    (id, dial)
}

async fn detail(app: &TestApp, ws: &Workspace, id: &str) -> Value {
    app.get(&ws.key, &format!("/api/calls/{id}"))
        .await
        .expect(200)
        .body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_telnyx_call_goes_from_dial_to_a_finished_transcript() {
    let fake = fake_telnyx().await;
    let key = AccountKey::new();
    let app = TestApp::spawn().await;
    let ws = telnyx_workspace(&app, &fake, &key).await;
    let agent = telnyx_agent(&app, &ws).await;
    let (id, dial) = place(&app, &ws, &fake, &agent).await;

    // The dial: Call Control v2 with a bidirectional PCMU stream to our media socket.
    assert_eq!(dial.method, Method::POST);
    assert_eq!(dial.header("authorization"), format!("Bearer {API_KEY}"));
    let body = dial.json();
    assert_eq!(body["connection_id"], CONNECTION_ID, "{body}");
    assert_eq!(body["to"], CALLEE, "{body}");
    assert_eq!(body["from"], OUR_NUMBER, "{body}");
    assert_eq!(body["stream_track"], "inbound_track", "{body}");
    let stream_url = body["stream_url"].as_str().expect("stream_url").to_string();
    let media_base = format!("{}/media/telnyx/", app.base.replacen("http", "ws", 1));
    assert!(stream_url.starts_with(&media_base), "{stream_url}");
    let webhook_url = body["webhook_url"]
        .as_str()
        .expect("webhook_url")
        .to_string();
    assert!(
        webhook_url.starts_with(&format!("{}/carrier/telnyx/status/{id}?sig=", app.base)),
        "{webhook_url}"
    );

    // Telnyx reports the call ringing out, then answered; both signed.
    let initiated = event("call.initiated", json!({"state": "bridging"}));
    assert_eq!(post_signed(&app, &key, &webhook_url, &initiated).await, 200);
    let answered = event(
        "call.answered",
        json!({"start_time": chrono::Utc::now().to_rfc3339()}),
    );
    assert_eq!(post_signed(&app, &key, &webhook_url, &answered).await, 200);

    // The stream: the greeting arrives and its mark comes back.
    let mut stream = Stream::open(&stream_url).await;
    stream
        .until("the greeting", |s| s.heard >= 8_000 && s.marks > 0)
        .await;
    // The caller says a line; the agent replies.
    stream.say(Duration::from_millis(1_400));
    let before = stream.heard;
    stream
        .until("the agent's reply", |s| s.heard >= before + 8_000)
        .await;
    // The caller hangs up: the stream stops and Telnyx reports the hang-up.
    stream.stop().await;
    let hangup = event(
        "call.hangup",
        json!({"hangup_cause": "normal_clearing", "hangup_source": "callee", "sip_hangup_cause": "200"}),
    );
    assert_eq!(post_signed(&app, &key, &webhook_url, &hangup).await, 200);

    let call = eventually(WAIT, "the call to end", || async {
        let call = detail(&app, &ws, &id).await;
        (call["endedReason"].is_string() && call["rawStatus"] != "in-progress").then_some(call)
    })
    .await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["provider"], "telnyx", "{call}");
    assert!(
        call["costPaise"].as_i64().unwrap_or_default() > 0,
        "an answered call is billed: {call}"
    );

    let transcript = app
        .get(&ws.key, &format!("/api/calls/{id}/transcript"))
        .await
        .expect(200)
        .body;
    let turns: Vec<(String, String)> = transcript["turns"]
        .as_array()
        .expect("turns")
        .iter()
        .map(|t| {
            (
                t["speaker"].as_str().unwrap_or_default().to_string(),
                t["text"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert!(turns.len() >= 3, "{turns:?}");
    assert_eq!(turns[0], ("assistant".to_string(), WELCOME.to_string()));
    assert_eq!(turns[1], ("user".to_string(), CALLER_LINE.to_string()));
    assert_eq!(turns[2].0, "assistant", "{turns:?}");
    app.shutdown().await;
}

#[tokio::test]
async fn telnyx_webhooks_unsigned_badly_signed_or_stale_are_refused() {
    let fake = fake_telnyx().await;
    let key = AccountKey::new();
    let app = TestApp::spawn().await;
    let ws = telnyx_workspace(&app, &fake, &key).await;
    let agent = telnyx_agent(&app, &ws).await;
    let (id, dial) = place(&app, &ws, &fake, &agent).await;
    let webhook_url = dial.json()["webhook_url"]
        .as_str()
        .expect("webhook_url")
        .to_string();
    let hangup = event("call.hangup", json!({"hangup_cause": "user_busy"}));
    let now = unix_now().to_string();
    let stale = (unix_now() - 600).to_string();
    let other = AccountKey::new();
    let cases: Vec<(&str, Vec<(&str, String)>)> = vec![
        ("unsigned", Vec::new()),
        (
            "signed by another key",
            vec![
                ("telnyx-timestamp", now.clone()),
                ("telnyx-signature-ed25519", other.sign(&now, &hangup)),
            ],
        ),
        (
            "signed over another body",
            vec![
                ("telnyx-timestamp", now.clone()),
                ("telnyx-signature-ed25519", key.sign(&now, "{}")),
            ],
        ),
        (
            "signature without a timestamp",
            vec![("telnyx-signature-ed25519", key.sign(&now, &hangup))],
        ),
        (
            "a timestamp ten minutes old",
            vec![
                ("telnyx-timestamp", stale.clone()),
                ("telnyx-signature-ed25519", key.sign(&stale, &hangup)),
            ],
        ),
    ];
    for (what, headers) in cases {
        assert_eq!(
            post_webhook(&app, &webhook_url, &hangup, &headers).await,
            403,
            "{what}"
        );
    }
    // Our own sig still counts: a good Ed25519 signature on a URL without it is refused.
    let bare = webhook_url.split_once('?').expect("query").0;
    assert_eq!(post_signed(&app, &key, bare, &hangup).await, 403);
    // The transferred leg's reports are held to the same signature, beside our transfer sig.
    let leg_url = format!(
        "{}/carrier/telnyx/transfer-status/{id}?sig={}&aleg={CONTROL_ID}",
        app.base,
        transfer_sig(API_KEY, &id)
    );
    let leg_hangup = event("call.hangup", json!({"hangup_cause": "normal_clearing"}))
        .replace(CONTROL_ID, "v3:the-bridged-leg");
    assert_eq!(post_webhook(&app, &leg_url, &leg_hangup, &[]).await, 403);
    assert_eq!(
        post_webhook(
            &app,
            &leg_url,
            &leg_hangup,
            &[
                ("telnyx-timestamp", stale.clone()),
                ("telnyx-signature-ed25519", key.sign(&stale, &leg_hangup)),
            ],
        )
        .await,
        403
    );
    assert_eq!(post_signed(&app, &key, &leg_url, &leg_hangup).await, 200);
    // None of them moved the call; the signed one does.
    let call = detail(&app, &ws, &id).await;
    assert!(call["endedReason"].is_null(), "{call}");
    assert_eq!(post_signed(&app, &key, &webhook_url, &hangup).await, 200);
    let call = eventually(WAIT, "the busy call to end", || async {
        let call = detail(&app, &ws, &id).await;
        call["endedReason"].is_string().then_some(call)
    })
    .await;
    assert_eq!(call["rawStatus"], "busy", "{call}");
    assert_eq!(call["costPaise"], 0, "{call}");
    app.shutdown().await;
}

#[tokio::test]
async fn a_telnyx_credential_with_a_bad_public_key_is_refused_naming_it() {
    let app = TestApp::spawn().await;
    let ws = app.workspace("Telnyx keys").await;
    let org = ws.org_id.to_string();
    for public_key in [
        json!("not base64!"),
        json!(STANDARD.encode([7u8; 16])),
        json!(STANDARD.encode([0u8; 32])),
        json!(42),
    ] {
        let credential =
            json!({"apiKey": API_KEY, "connectionId": CONNECTION_ID, "publicKey": public_key});
        let out = app
            .admin(&[
                "credential",
                "set",
                "--org",
                &org,
                "--kind",
                "telnyx",
                "--json",
                &credential.to_string(),
            ])
            .await;
        assert!(!out.status.success(), "{public_key} was accepted");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("publicKey"), "{public_key}: {stderr}");
    }
    let good = json!({"apiKey": API_KEY, "publicKey": AccountKey::new().public_base64()});
    app.admin_ok(&[
        "credential",
        "set",
        "--org",
        &org,
        "--kind",
        "telnyx",
        "--json",
        &good.to_string(),
    ])
    .await;
    app.shutdown().await;
}
