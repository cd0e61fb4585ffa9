//! Carrier media protocols through the real server (issue 4): for each of
//! Twilio, Plivo, Exotel, Vonage and Telnyx, a call placed through the API is
//! handed to a test carrier that keeps the dial request instead of dialing;
//! the test then plays that carrier, speaking its exact wire messages over a
//! real websocket to `/media/{carrier}` for a whole call. Also: media tokens
//! refused without touching a call, and the warm welcome cache.

use crate::support::TestApp;
use base64::Engine as _;
use chrono::Utc;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::sync::{Mutex, mpsc};
use tokio::time::{Instant, MissedTickBehavior, interval, timeout};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};
use voxline::admin::ops;
use voxline::config::Settings;
use voxline::domain::clock::{ManualClock, SharedClock};
use voxline_actors::carrier::{Carrier, CarrierError, DialRequest, StatusSink};
use voxline_media::g711::linear_to_mulaw;
use voxline_media::synth::SpeechLikeGenerator;

const WELCOME: &str = "Hello from Voxline.";
const CALLER_LINE: &str = "Yes, I can talk now.";
const WAIT: Duration = Duration::from_secs(20);

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

/// The five carriers as the test plays them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Twilio,
    Plivo,
    Exotel,
    Vonage,
    Telnyx,
}

/// What the test (as the carrier) has seen of the agent.
#[derive(Debug, Default)]
struct Heard {
    /// Agent audio received, in samples at the stream's rate.
    samples: usize,
    /// Marks (checkpoints, notifies) received and acknowledged, in order.
    marks: Vec<String>,
    clears: usize,
    /// When the first agent audio arrived.
    first_audio_at: Option<Instant>,
    /// The close frame's code, once the server closed the socket.
    closed: Option<u16>,
}

/// One carrier leg of a call: the socket plus that carrier's wire format.
struct Leg {
    kind: Kind,
    ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    rate: u32,
    seq: u64,
    stream_id: String,
    speech: VecDeque<i16>,
    voice: SpeechLikeGenerator,
    heard: Heard,
    started_at: Instant,
    /// Telnyx frames held back to send out of order.
    held: Option<String>,
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .expect("base64 payload")
}

fn pcm16(samples: &[i16]) -> Vec<u8> {
    samples.iter().flat_map(|s| s.to_le_bytes()).collect()
}

impl Kind {
    /// The stream's sample rate as this test sets it up.
    fn rate(self) -> u32 {
        match self {
            Kind::Plivo | Kind::Vonage => 16_000,
            Kind::Twilio | Kind::Exotel | Kind::Telnyx => 8_000,
        }
    }

    /// Whether the token rides in the URL path (else in the stream's parameters).
    fn token_in_path(self) -> bool {
        matches!(self, Kind::Plivo | Kind::Exotel)
    }
}

impl Leg {
    /// Connects to the dial request's media URL and sends the carrier's opening messages.
    async fn open(kind: Kind, dial: &DialRequest, token: &str) -> Self {
        let url = if kind.token_in_path() {
            format!("{}/{token}", dial.media_url)
        } else {
            dial.media_url.clone()
        };
        let (ws, _) = connect_async(url.as_str()).await.expect("websocket opens");
        let mut leg = Self {
            kind,
            ws,
            rate: kind.rate(),
            seq: 0,
            stream_id: format!("stream-{}", &dial.call_id[..8]),
            speech: VecDeque::new(),
            voice: SpeechLikeGenerator::new(kind.rate(), 7),
            heard: Heard::default(),
            started_at: Instant::now(),
            held: None,
        };
        for message in leg.opening(token) {
            leg.ws.send(message).await.expect("send opening");
        }
        leg.started_at = Instant::now();
        leg
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    fn text(value: Value) -> Message {
        Message::Text(value.to_string().into())
    }

    /// `connected` and `start` (Vonage: `websocket:connected`), exactly as each carrier sends them.
    fn opening(&mut self, token: &str) -> Vec<Message> {
        let sid = self.stream_id.clone();
        match self.kind {
            Kind::Twilio => {
                let seq = self.next_seq();
                vec![
                    Self::text(json!({"event":"connected","protocol":"Call","version":"1.0.0"})),
                    Self::text(json!({
                        "event": "start", "sequenceNumber": seq.to_string(), "streamSid": sid,
                        "start": {
                            "accountSid": "AC0123", "streamSid": sid, "callSid": "CA0123",
                            "tracks": ["inbound"],
                            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
                            "customParameters": {"token": token},
                        },
                    })),
                ]
            }
            // Plivo: no `connected`, numeric sequence numbers, wideband L16.
            Kind::Plivo => {
                let seq = self.next_seq();
                vec![Self::text(json!({
                    "event": "start", "sequenceNumber": seq,
                    "start": {
                        "callId": "0c4b8e5e-3b8a-4a4e-9d4b-1a2b3c4d5e6f", "streamId": sid,
                        "accountId": "MA0123", "tracks": ["inbound"],
                        "mediaFormat": {"encoding": "audio/x-l16", "sampleRate": 16000},
                    },
                    "extra_headers": "campaign=renewals;attempt=1",
                }))]
            }
            // Exotel: snake_case, numbers as strings, raw PCM16 at 8 kHz.
            Kind::Exotel => {
                let seq = self.next_seq();
                vec![
                    Self::text(json!({"event": "connected"})),
                    Self::text(json!({
                        "event": "start", "sequence_number": seq.to_string(), "stream_sid": sid,
                        "start": {
                            "stream_sid": sid, "call_sid": "exo-call", "account_sid": "exo-acct",
                            "from": "+919845012310", "to": "+918000000001", "custom_parameters": {},
                            "media_format": {"encoding": "audio/x-raw", "sample_rate": "8000", "bit_rate": "16"},
                        },
                    })),
                ]
            }
            // Vonage: one JSON text frame with the NCCO headers flattened in, then binary audio.
            Kind::Vonage => vec![Self::text(json!({
                "event": "websocket:connected",
                "content-type": "audio/l16;rate=16000",
                "token": token,
                "call_uuid": "aaaaaaaa-bbbb-cccc-dddd-0123456789ab",
            }))],
            Kind::Telnyx => {
                let seq = self.next_seq();
                vec![
                    Self::text(json!({"event": "connected", "version": "1.0.0"})),
                    Self::text(json!({
                        "event": "start", "sequence_number": seq.to_string(), "stream_id": sid,
                        "start": {
                            "user_id": "3e6f995f-85f7-4705-9741-53b116d28237",
                            "call_control_id": "v3:test-control", "call_session_id": "session-1",
                            "from": "+918000000001", "to": "+919845012310", "client_state": "dm94",
                            "custom_parameters": {"token": token},
                            "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1},
                        },
                    })),
                ]
            }
        }
    }

    /// One 20 ms frame of caller audio in the carrier's inbound format.
    fn media(&mut self, samples: &[i16]) -> Vec<Message> {
        let seq = self.next_seq();
        let chunk = seq - 1;
        let ms = self.started_at.elapsed().as_millis().to_string();
        let sid = self.stream_id.clone();
        match self.kind {
            Kind::Twilio => {
                let mulaw: Vec<u8> = samples.iter().map(|&s| linear_to_mulaw(s)).collect();
                vec![Self::text(json!({
                    "event": "media", "sequenceNumber": seq.to_string(), "streamSid": sid,
                    "media": {"track": "inbound", "chunk": chunk.to_string(), "timestamp": ms, "payload": b64(&mulaw)},
                }))]
            }
            Kind::Plivo => vec![Self::text(json!({
                "event": "media", "sequenceNumber": seq, "streamId": sid,
                "media": {"track": "inbound", "timestamp": ms, "chunk": chunk, "payload": b64(&pcm16(samples))},
            }))],
            // Exotel documents snake_case; camelCase must be accepted too, so alternate.
            Kind::Exotel if seq.is_multiple_of(2) => vec![Self::text(json!({
                "event": "media", "sequence_number": seq.to_string(), "stream_sid": sid,
                "media": {"chunk": chunk.to_string(), "timestamp": ms, "payload": b64(&pcm16(samples))},
            }))],
            Kind::Exotel => vec![Self::text(json!({
                "event": "media", "sequenceNumber": seq.to_string(), "streamSid": sid,
                "media": {"chunk": chunk.to_string(), "timestamp": ms, "payload": b64(&pcm16(samples))},
            }))],
            Kind::Vonage => vec![Message::Binary(pcm16(samples).into())],
            // Telnyx may deliver out of order: every tenth pair goes swapped.
            Kind::Telnyx => {
                let mulaw: Vec<u8> = samples.iter().map(|&s| linear_to_mulaw(s)).collect();
                let frame = json!({
                    "event": "media", "sequence_number": seq.to_string(), "stream_id": sid,
                    "media": {"track": "inbound", "chunk": chunk.to_string(), "timestamp": ms, "payload": b64(&mulaw)},
                })
                .to_string();
                if let Some(held) = self.held.take() {
                    vec![Message::Text(frame.into()), Message::Text(held.into())]
                } else if seq.is_multiple_of(10) {
                    self.held = Some(frame);
                    Vec::new()
                } else {
                    vec![Message::Text(frame.into())]
                }
            }
        }
    }

    /// The carrier's hang-up: `stop` where it has one, else closing the socket.
    async fn hang_up(&mut self) {
        let seq = self.next_seq();
        let sid = self.stream_id.clone();
        let stop = match self.kind {
            Kind::Twilio => Some(json!({
                "event": "stop", "sequenceNumber": seq.to_string(), "streamSid": sid,
                "stop": {"accountSid": "AC0123", "callSid": "CA0123"},
            })),
            Kind::Exotel => Some(json!({
                "event": "stop", "sequence_number": seq.to_string(), "stream_sid": sid,
                "stop": {"call_sid": "exo-call", "account_sid": "exo-acct", "reason": "callended"},
            })),
            Kind::Telnyx => Some(json!({
                "event": "stop", "sequence_number": seq.to_string(), "stream_id": sid,
                "stop": {"user_id": "3e6f995f-85f7-4705-9741-53b116d28237", "call_control_id": "v3:test-control"},
            })),
            Kind::Plivo | Kind::Vonage => None,
        };
        match stop {
            Some(stop) => self.ws.send(Self::text(stop)).await.expect("send stop"),
            None => self.ws.close(None).await.expect("close"),
        }
        // Drain until the connection is closed on both sides.
        let drained = timeout(WAIT, async {
            while let Some(Ok(message)) = self.ws.next().await {
                if let Message::Close(frame) = message {
                    self.heard.closed = Some(frame.map_or(1005, |f| u16::from(f.code)));
                }
            }
        })
        .await;
        if drained.is_ok() {
            self.heard.closed.get_or_insert(1000);
        }
    }

    /// Handles one server message: checks its exact shape, counts audio, acknowledges marks.
    async fn on_server(&mut self, message: Message) {
        let mut audio_bytes = None;
        let mut reply = None;
        match message {
            Message::Binary(data) => {
                assert_eq!(self.kind, Kind::Vonage, "binary frame to {:?}", self.kind);
                assert_eq!(data.len(), 640, "Vonage frames are 20 ms of L16 at 16 kHz");
                audio_bytes = Some(data.len() / 2);
            }
            Message::Text(text) => {
                let v: Value = serde_json::from_str(&text).expect("server sends JSON");
                let seq = self.next_seq();
                let sid = self.stream_id.clone();
                match (self.kind, v["event"].as_str(), v["action"].as_str()) {
                    (Kind::Twilio, Some("media"), _) => {
                        assert_eq!(v["streamSid"], sid.as_str());
                        let payload = unb64(v["media"]["payload"].as_str().expect("payload"));
                        assert_eq!(payload.len(), 160, "20 ms of μ-law");
                        audio_bytes = Some(payload.len());
                    }
                    (Kind::Twilio, Some("mark"), _) => {
                        assert_eq!(v["streamSid"], sid.as_str());
                        let name = v["mark"]["name"].as_str().expect("mark name").to_string();
                        reply = Some(
                            json!({"event":"mark","sequenceNumber":seq.to_string(),"streamSid":sid,"mark":{"name":name}}),
                        );
                        self.heard.marks.push(name);
                    }
                    (Kind::Twilio, Some("clear"), _) => self.heard.clears += 1,
                    (Kind::Plivo, Some("playAudio"), _) => {
                        assert_eq!(v["media"]["contentType"], "audio/x-l16");
                        assert_eq!(v["media"]["sampleRate"], 16000);
                        let payload = unb64(v["media"]["payload"].as_str().expect("payload"));
                        assert_eq!(payload.len() % 2, 0);
                        audio_bytes = Some(payload.len() / 2);
                    }
                    (Kind::Plivo, Some("checkpoint"), _) => {
                        assert_eq!(v["streamId"], sid.as_str());
                        let name = v["name"].as_str().expect("checkpoint name").to_string();
                        reply = Some(
                            json!({"event":"playedStream","sequenceNumber":seq,"streamId":sid,"name":name}),
                        );
                        self.heard.marks.push(name);
                    }
                    (Kind::Plivo, Some("clearAudio"), _) => {
                        self.heard.clears += 1;
                        reply = Some(
                            json!({"event":"clearedAudio","sequenceNumber":seq,"streamId":sid}),
                        );
                    }
                    (Kind::Exotel, Some("media"), _) => {
                        assert_eq!(v["stream_sid"], sid.as_str());
                        let payload = unb64(v["media"]["payload"].as_str().expect("payload"));
                        assert!(
                            payload.len().is_multiple_of(320)
                                && (3200..=100_000).contains(&payload.len()),
                            "Exotel chunks are multiples of 320 bytes, 3.2 KB to 100 KB: {}",
                            payload.len()
                        );
                        audio_bytes = Some(payload.len() / 2);
                    }
                    (Kind::Exotel, Some("mark"), _) => {
                        assert_eq!(v["stream_sid"], sid.as_str());
                        let name = v["mark"]["name"].as_str().expect("mark name").to_string();
                        reply = Some(
                            json!({"event":"mark","sequence_number":seq.to_string(),"stream_sid":sid,"mark":{"name":name}}),
                        );
                        self.heard.marks.push(name);
                    }
                    (Kind::Exotel, Some("clear"), _) => self.heard.clears += 1,
                    (Kind::Vonage, _, Some("notify")) => {
                        let payload = v["payload"].clone();
                        let name = payload["name"].as_str().expect("notify name").to_string();
                        reply = Some(json!({"event":"websocket:notify","payload":payload}));
                        self.heard.marks.push(name);
                    }
                    (Kind::Vonage, _, Some("clear")) => {
                        self.heard.clears += 1;
                        reply = Some(json!({"event":"websocket:cleared"}));
                    }
                    (Kind::Telnyx, Some("media"), _) => {
                        let payload = unb64(v["media"]["payload"].as_str().expect("payload"));
                        audio_bytes = Some(payload.len());
                    }
                    (Kind::Telnyx, Some("mark"), _) => {
                        let name = v["mark"]["name"].as_str().expect("mark name").to_string();
                        reply = Some(
                            json!({"event":"mark","sequence_number":seq.to_string(),"stream_id":sid,"mark":{"name":name}}),
                        );
                        self.heard.marks.push(name);
                    }
                    (Kind::Telnyx, Some("clear"), _) => self.heard.clears += 1,
                    (kind, _, _) => panic!("unexpected message to {kind:?}: {v}"),
                }
            }
            Message::Close(frame) => {
                self.heard.closed = Some(frame.map_or(1005, |f| u16::from(f.code)));
            }
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => {}
        }
        if let Some(samples) = audio_bytes {
            self.heard.samples += samples;
            self.heard.first_audio_at.get_or_insert_with(Instant::now);
        }
        if let Some(reply) = reply {
            self.ws.send(Self::text(reply)).await.expect("send ack");
        }
    }

    /// Queues `duration` of speech-like caller audio.
    fn say(&mut self, duration: Duration) {
        let n = (self.rate as u128 * duration.as_millis() / 1000) as usize;
        let mut samples = vec![0; n];
        self.voice.fill(&mut samples);
        self.speech.extend(samples);
    }

    /// Streams real-time caller audio (speech when queued, else silence) and
    /// handles the server's messages until `done` holds.
    async fn until(&mut self, what: &str, done: impl Fn(&Heard) -> bool) {
        let frame = self.rate as usize / 50;
        let mut ticker = interval(Duration::from_millis(20));
        ticker.set_missed_tick_behavior(MissedTickBehavior::Burst);
        let deadline = Instant::now() + WAIT;
        while !done(&self.heard) {
            assert!(
                Instant::now() < deadline,
                "{:?}: timed out waiting for {what}; heard {:?}",
                self.kind,
                self.heard
            );
            assert!(
                self.heard.closed.is_none(),
                "{:?}: socket closed while waiting for {what}",
                self.kind
            );
            tokio::select! {
                _ = ticker.tick() => {
                    let samples: Vec<i16> = (0..frame).map(|_| self.speech.pop_front().unwrap_or(0)).collect();
                    for message in self.media(&samples) {
                        self.ws.send(message).await.expect("send media");
                    }
                }
                message = self.ws.next() => match message {
                    Some(Ok(message)) => self.on_server(message).await,
                    _ => self.heard.closed = Some(1006),
                },
            }
        }
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
