//! Carrier media protocols through the real server (issue 4): for each of
//! Twilio, Plivo, Exotel, Vonage and Telnyx, a call placed through the API is
//! handed to a test carrier that keeps the dial request instead of dialing;
//! the test then plays that carrier, speaking its exact wire messages over a
//! real websocket to `/media/{carrier}` for a whole call. Also: media tokens
//! refused without touching a call, and the warm welcome cache.

use crate::support::{Kind, Leg, TestApp, WAIT};
use chrono::Utc;
use futures::StreamExt;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Mutex, mpsc};
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::Message;
use voxline::admin::ops;
use voxline::config::Settings;
use voxline::domain::clock::{ManualClock, SharedClock};
use voxline_actors::carrier::{Carrier, CarrierError, DialRequest, StatusSink};

const WELCOME: &str = "Hello from Voxline.";
const CALLER_LINE: &str = "Yes, I can talk now.";

/// A carrier that hands every dial request to the test instead of dialing.
struct HandOver {
    dials: mpsc::UnboundedSender<DialRequest>,
}

#[async_trait::async_trait]
impl Carrier for HandOver {
    async fn place(&self, req: DialRequest, _status: StatusSink) -> Result<String, CarrierError> {
        let id = format!("test-{}", req.call_id);
        self.dials
            .send(req)
            .map_err(|_| CarrierError::Unreachable("test is gone".into()))?;
        Ok(id)
    }

    async fn hangup(&self, _carrier_call_id: &str) -> Result<(), CarrierError> {
        Ok(())
    }
}

/// A server whose five carriers all hand their calls to the test.
struct Harness {
    server: TestApp,
    key: String,
    dials: Mutex<mpsc::UnboundedReceiver<DialRequest>>,
    clock: Arc<ManualClock>,
}

impl Harness {
    /// A server on a manual clock (set to now) with `provider` as the
    /// workspace's only number.
    async fn start(provider: &str, tune: impl FnOnce(&mut Settings)) -> Self {
        let (tx, rx) = mpsc::unbounded_channel();
        let carrier: Arc<dyn Carrier> = Arc::new(HandOver { dials: tx });
        let carriers: HashMap<String, Arc<dyn Carrier>> =
            ["twilio", "plivo", "exotel", "vonage", "telnyx"]
                .into_iter()
                .map(|name| (name.to_string(), Arc::clone(&carrier)))
                .collect();
        let clock = ManualClock::new(Utc::now());
        let shared: SharedClock = clock.clone();
        let server = TestApp::spawn_with(shared, carriers, tune).await;
        let store = server.store();
        let now = clock.now_utc();
        let org = ops::create_org(store, "Media", None, None, now)
            .await
            .expect("org");
        let key = ops::create_key(store, org.id, "media", now)
            .await
            .expect("key");
        store
            .credit_wallet(
                org.id,
                voxline::domain::Paise(1_000_000),
                now.timestamp_millis(),
            )
            .await
            .expect("credit");
        ops::add_number(store, org.id, "+918000000001", provider, true, None, now)
            .await
            .expect("number");
        Self {
            server,
            key: key.key,
            dials: Mutex::new(rx),
            clock,
        }
    }

    async fn request(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.server.request(&self.key, method, path);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("send");
        let status = resp.status();
        let text = resp.text().await.expect("body");
        assert!(status.is_success(), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap_or(Value::Null)
    }

    async fn agent(&self, welcome: &str) -> String {
        let agent = self
            .request(
                reqwest::Method::POST,
                "/api/agents",
                Some(json!({
                    "name": "Protocol agent",
                    "welcomeMessage": welcome,
                    "prompt": "You confirm appointments.",
                })),
            )
            .await;
        agent["id"].as_str().expect("agent id").to_string()
    }

    /// Places a call and returns its id and the dial request the carrier got.
    async fn place(&self, agent_id: &str, script: &[&str]) -> (String, DialRequest) {
        let placed = self
            .request(
                reqwest::Method::POST,
                "/api/calls",
                Some(json!({
                    "agentId": agent_id,
                    "to": "+919845012310",
                    "variables": {"simScript": script},
                })),
            )
            .await;
        let call_id = placed["callId"].as_str().expect("callId").to_string();
        let dial = timeout(WAIT, self.dials.lock().await.recv())
            .await
            .expect("the carrier was asked to dial")
            .expect("dial request");
        assert_eq!(dial.call_id, call_id);
        (call_id, dial)
    }

    async fn call(&self, call_id: &str) -> Value {
        self.request(reqwest::Method::GET, &format!("/api/calls/{call_id}"), None)
            .await
    }

    /// Polls until the call has ended and returns its detail.
    async fn ended(&self, call_id: &str) -> Value {
        let deadline = Instant::now() + WAIT;
        loop {
            let call = self.call(call_id).await;
            if call["endedReason"].is_string() && call["rawStatus"] != "in-progress" {
                return call;
            }
            assert!(Instant::now() < deadline, "call never ended: {call}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

trait ClockExt {
    fn now_utc(&self) -> chrono::DateTime<Utc>;
}

impl ClockExt for ManualClock {
    fn now_utc(&self) -> chrono::DateTime<Utc> {
        voxline::domain::clock::Clock::now(self)
    }
}

/// Plays one whole call as `kind`: greeting, caller speech, agent reply, carrier hang-up.
async fn whole_call(kind: Kind, provider: &str) {
    let app = Harness::start(provider, |_| {}).await;
    let agent = app.agent(WELCOME).await;
    let (call_id, dial) = app.place(&agent, &[CALLER_LINE, "Goodbye."]).await;
    assert_eq!(
        dial.media_url,
        format!(
            "{}/media/{provider}",
            app.server.base.replacen("http", "ws", 1)
        )
    );
    let mut leg = Leg::open(kind, &dial, &dial.media_token).await;

    // The greeting arrives in the carrier's format and its mark comes back.
    leg.until("the greeting", |h| h.samples > 0 && !h.marks.is_empty())
        .await;
    let greeting_ms = leg.heard.samples * 1000 / leg.rate as usize;
    assert!(greeting_ms >= 1000, "greeting of {greeting_ms} ms");

    // The caller answers; the agent replies after the end of speech.
    leg.say(Duration::from_millis(1200));
    let before_reply = leg.heard.samples;
    let one_second = kind.rate() as usize;
    leg.until("the agent's reply", |h| {
        h.samples >= before_reply + one_second
    })
    .await;
    assert_eq!(leg.heard.clears, 0, "nobody interrupted");

    // The carrier hangs up mid-reply.
    leg.hang_up().await;
    assert!(leg.heard.closed.is_some(), "the connection closed");

    let call = app.ended(&call_id).await;
    assert_eq!(call["rawStatus"], "completed", "{call}");
    assert_eq!(call["endedReason"], "caller-hangup", "{call}");
    let transcript = app
        .request(
            reqwest::Method::GET,
            &format!("/api/calls/{call_id}/transcript"),
            None,
        )
        .await;
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
    assert_eq!(turns[2].0, "assistant");
    assert!(
        turns[2].1.starts_with("Thank you"),
        "the reply as heard: {turns:?}"
    );
    let text = transcript["transcriptText"]
        .as_str()
        .expect("transcriptText");
    assert!(
        text.starts_with(&format!(
            "Bot: {WELCOME}\nCandidate: {CALLER_LINE}\nBot: Thank you"
        )),
        "{text}"
    );
    // A recording was written and lasts about as long as the call.
    let listed = app
        .request(reqwest::Method::GET, "/api/recordings", None)
        .await;
    assert_eq!(listed["rows"][0]["callId"], call_id.as_str(), "{listed}");
    assert!(listed["rows"][0]["durationSeconds"].as_f64().unwrap_or(0.0) > 2.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilio_call_end_to_end() {
    whole_call(Kind::Twilio, "twilio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plivo_call_end_to_end() {
    whole_call(Kind::Plivo, "plivo").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exotel_call_end_to_end() {
    whole_call(Kind::Exotel, "exotel").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vonage_call_end_to_end() {
    whole_call(Kind::Vonage, "vonage").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn telnyx_call_end_to_end() {
    whole_call(Kind::Telnyx, "telnyx").await;
}

/// Opens a socket with `token`, sends the opening, and returns the close code the server answers with.
async fn refused_with(kind: Kind, dial: &DialRequest, token: &str) -> u16 {
    let mut leg = Leg::open(kind, dial, token).await;
    timeout(WAIT, async {
        match leg.ws.next().await {
            Some(Ok(Message::Close(frame))) => frame.map_or(1005, |f| u16::from(f.code)),
            Some(Ok(other)) => panic!("refused socket got {other:?}"),
            Some(Err(_)) | None => 1006,
        }
    })
    .await
    .expect("the server closes a refused socket")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_without_touching_the_call() {
    let app = Harness::start("twilio", |_| {}).await;
    let agent = app.agent(WELCOME).await;
    let (call_id, dial) = app.place(&agent, &[CALLER_LINE]).await;
    let before = app.call(&call_id).await["rawStatus"].clone();

    let now = app.clock.now_utc().timestamp();
    let tokens = &app.server.state().media_tokens;
    let expired = tokens.issue(call_id.parse().unwrap(), now - 1);
    let forged = format!("{call_id}.{}.{}", now + 600, "00".repeat(32));
    for (what, token) in [
        ("unknown", "not-a-token"),
        ("forged", forged.as_str()),
        ("expired", expired.as_str()),
    ] {
        assert_eq!(
            refused_with(Kind::Twilio, &dial, token).await,
            1008,
            "{what} token"
        );
    }
    // Also as a path token on another carrier's endpoint.
    assert_eq!(refused_with(Kind::Exotel, &dial, "nope").await, 1008);
    assert_eq!(app.call(&call_id).await["rawStatus"], before);
    assert!(app.server.state().engine.is_live(call_id.parse().unwrap()));

    // The real token still works once; a second socket with it is refused cleanly
    // while the first carries the call.
    let mut leg = Leg::open(Kind::Twilio, &dial, &dial.media_token).await;
    leg.until("the greeting", |h| h.samples > 0).await;
    assert_eq!(
        refused_with(Kind::Twilio, &dial, &dial.media_token).await,
        1008
    );
    leg.until("more greeting", |h| h.samples > 1600).await;
    leg.hang_up().await;
    let call = app.ended(&call_id).await;
    assert_eq!(call["rawStatus"], "completed");

    // After the call: the used token and even a fresh valid one are refused cleanly.
    assert_eq!(
        refused_with(Kind::Twilio, &dial, &dial.media_token).await,
        1008
    );
    let fresh = tokens.issue(call_id.parse().unwrap(), now + 600);
    assert_eq!(refused_with(Kind::Plivo, &dial, &fresh).await, 1008);
    assert_eq!(app.ended(&call_id).await["endedReason"], "caller-hangup");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn warm_agents_greet_without_waiting_for_tts() {
    // A TTS first byte this slow makes a cold greeting unmistakable.
    let app = Harness::start("twilio", |s| s.sim.tts_first_byte_ms = 1500).await;
    let cache = Arc::clone(&app.server.state().welcome_cache);
    let warm = app.agent(WELCOME).await;
    let cold = app.agent("Hello {name}, this is Voxline.").await;
    let warm_id: voxline::domain::AgentId = warm.parse().expect("agent id");
    let cold_id: voxline::domain::AgentId = cold.parse().expect("agent id");
    let deadline = Instant::now() + WAIT;
    while !cache.is_warm(warm_id) {
        assert!(Instant::now() < deadline, "welcome never warmed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!cache.is_warm(cold_id), "placeholders cannot be cached");

    let greeting_latency = |agent: String| {
        let app = &app;
        async move {
            let (_, dial) = app.place(&agent, &[]).await;
            let mut leg = Leg::open(Kind::Twilio, &dial, &dial.media_token).await;
            leg.until("the greeting", |h| h.samples > 0).await;
            let latency = leg.heard.first_audio_at.expect("audio") - leg.started_at;
            leg.hang_up().await;
            latency
        }
    };
    let warm_latency = greeting_latency(warm.clone()).await;
    let cold_latency = greeting_latency(cold).await;
    assert!(
        warm_latency < Duration::from_millis(700),
        "warm greeting after {warm_latency:?}"
    );
    assert!(
        cold_latency >= Duration::from_millis(1500),
        "cold greeting after {cold_latency:?}"
    );

    // Dormant agents lose it; activate warms it again.
    app.clock.advance(chrono::Duration::days(8));
    let deadline = Instant::now() + WAIT;
    while cache.is_warm(warm_id) {
        assert!(Instant::now() < deadline, "dormant agent still warm");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let agent = app
        .request(reqwest::Method::GET, &format!("/api/agents/{warm}"), None)
        .await;
    assert_eq!(agent["dormant"], true);
    app.request(
        reqwest::Method::POST,
        &format!("/api/agents/{warm}/activate"),
        None,
    )
    .await;
    let deadline = Instant::now() + WAIT;
    while !cache.is_warm(warm_id) {
        assert!(Instant::now() < deadline, "activate did not re-warm");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // An edited welcome is re-warmed with the new text.
    app.request(
        reqwest::Method::PATCH,
        &format!("/api/agents/{warm}"),
        Some(json!({"welcomeMessage": "Good morning from Voxline."})),
    )
    .await;
    let deadline = Instant::now() + WAIT;
    let voice = agent["voice"].as_str().expect("voice").to_string();
    while cache
        .get(warm_id, "Good morning from Voxline.", &voice)
        .is_none()
    {
        assert!(Instant::now() < deadline, "edit did not re-warm");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
