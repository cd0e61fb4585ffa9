//! One carrier leg of a call as each of the five carriers plays it on our
//! media websocket: the opening messages, caller audio in the carrier's
//! format, acknowledged marks and the carrier's hang-up. Shared by the media
//! protocol tests (outbound dials) and the inbound carrier tests.

use base64::Engine as _;
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio::time::{Instant, MissedTickBehavior, interval, timeout};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, connect_async};
use voxline_actors::carrier::DialRequest;
use voxline_media::g711::linear_to_mulaw;
use voxline_media::synth::SpeechLikeGenerator;

/// How long a leg waits for what it expects from the server.
pub const WAIT: Duration = Duration::from_secs(20);

/// The five carriers as the test plays them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Twilio,
    Plivo,
    Exotel,
    Vonage,
    Telnyx,
}

/// What the test (as the carrier) has seen of the agent.
#[derive(Debug, Default)]
pub struct Heard {
    /// Agent audio received, in samples at the stream's rate.
    pub samples: usize,
    /// Marks (checkpoints, notifies) received and acknowledged, in order.
    pub marks: Vec<String>,
    pub clears: usize,
    /// When the first agent audio arrived.
    pub first_audio_at: Option<Instant>,
    /// The close frame's code, once the server closed the socket.
    pub closed: Option<u16>,
}

/// One carrier leg of a call: the socket plus that carrier's wire format.
pub struct Leg {
    pub kind: Kind,
    pub ws: WebSocketStream<MaybeTlsStream<TcpStream>>,
    pub rate: u32,
    seq: u64,
    stream_id: String,
    speech: VecDeque<i16>,
    voice: SpeechLikeGenerator,
    pub heard: Heard,
    pub started_at: Instant,
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
    pub fn rate(self) -> u32 {
        match self {
            Kind::Plivo | Kind::Vonage => 16_000,
            Kind::Twilio | Kind::Exotel | Kind::Telnyx => 8_000,
        }
    }

    /// Whether the token rides in the URL path (else in the stream's parameters).
    pub fn token_in_path(self) -> bool {
        matches!(self, Kind::Plivo | Kind::Exotel)
    }
}

impl Leg {
    /// Connects to the dial request's media URL and sends the carrier's opening messages.
    pub async fn open(kind: Kind, dial: &DialRequest, token: &str) -> Self {
        let url = if kind.token_in_path() {
            format!("{}/{token}", dial.media_url)
        } else {
            dial.media_url.clone()
        };
        Self::connect(kind, &url, token, format!("stream-{}", &dial.call_id[..8])).await
    }

    /// Connects to `url` exactly as a carrier's answer named it (the token
    /// already in its path where the carrier puts it there) and sends the
    /// carrier's opening messages, `token` in them where the carrier sends it.
    pub async fn connect(kind: Kind, url: &str, token: &str, stream_id: String) -> Self {
        let (ws, _) = connect_async(url).await.expect("websocket opens");
        let mut leg = Self {
            kind,
            ws,
            rate: kind.rate(),
            seq: 0,
            stream_id,
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
    pub async fn hang_up(&mut self) {
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
    pub fn say(&mut self, duration: Duration) {
        let n = (self.rate as u128 * duration.as_millis() / 1000) as usize;
        let mut samples = vec![0; n];
        self.voice.fill(&mut samples);
        self.speech.extend(samples);
    }

    /// Streams real-time caller audio (speech when queued, else silence) and
    /// handles the server's messages until `done` holds.
    pub async fn until(&mut self, what: &str, done: impl Fn(&Heard) -> bool) {
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
