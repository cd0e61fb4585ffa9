//! One caller: the Twilio side of a Media Stream. It opens the websocket, sends `connected`
//! and `start`, then a `media` event every 20 ms, counts the `media` events that come back,
//! and ends with `stop` and a close.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures::{SinkExt as _, StreamExt as _};
use serde::Deserialize;
use tokio::time::{Instant, MissedTickBehavior, interval_at, sleep};
use tokio_tungstenite::connect_async_with_config;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

/// One media frame's length.
pub const FRAME: Duration = Duration::from_millis(20);

/// Read buffer of the caller's websocket (tungstenite zero-fills its default 128 KiB on every
/// read; media events are a few hundred bytes).
const READ_BUFFER: usize = 4 * 1024;

/// What one call has done so far, read by the run while the call goes on.
#[derive(Debug, Default)]
pub struct CallCounters {
    /// `start` was sent: the call is on.
    pub started: AtomicBool,
    /// The call is over (normally or not).
    pub ended: AtomicBool,
    /// `media` events sent.
    pub sent: AtomicU64,
    /// `media` events received.
    pub returned: AtomicU64,
    /// μ-law bytes in the `media` events received.
    pub returned_bytes: AtomicU64,
}

/// How one call is placed.
#[derive(Debug, Clone)]
pub struct CallPlan {
    /// The server's websocket URL.
    pub url: String,
    /// The call's number in the run (its streamSid and callSid carry it).
    pub index: usize,
    /// Media frames to send.
    pub frames: u64,
    /// Delay before the first media frame, so the calls' 20 ms ticks are spread.
    pub phase: Duration,
    /// How long to wait for the last echoes after the last frame.
    pub drain: Duration,
    /// The frames' base64 payloads, sent in a loop from an offset.
    pub payloads: Arc<Vec<String>>,
}

#[derive(Deserialize)]
struct Incoming {
    event: String,
    #[serde(default)]
    media: Option<IncomingMedia>,
}

#[derive(Deserialize)]
struct IncomingMedia {
    payload: String,
}

/// Plays one call; `Err` says why it stopped early. The counters are updated as it goes.
pub async fn run(plan: CallPlan, counters: Arc<CallCounters>) -> Result<(), String> {
    let outcome = play(&plan, &counters).await;
    counters.ended.store(true, Ordering::Release);
    outcome
}

async fn play(plan: &CallPlan, counters: &Arc<CallCounters>) -> Result<(), String> {
    let config = WebSocketConfig::default().read_buffer_size(READ_BUFFER);
    let (socket, _response) = connect_async_with_config(plan.url.as_str(), Some(config), false)
        .await
        .map_err(|error| format!("connect: {error}"))?;
    let (mut sink, mut stream) = socket.split();

    let reader_counters = Arc::clone(counters);
    let mut reader = tokio::spawn(async move {
        let mut bytes = Vec::with_capacity(512);
        while let Some(message) = stream.next().await {
            match message {
                Ok(Message::Text(text)) => {
                    let Ok(incoming) = serde_json::from_str::<Incoming>(text.as_str()) else {
                        return Err("server sent text that is not a JSON event".to_owned());
                    };
                    if incoming.event == "media" {
                        bytes.clear();
                        let payload = incoming.media.map(|m| m.payload).unwrap_or_default();
                        if STANDARD.decode_vec(payload.as_bytes(), &mut bytes).is_err() {
                            return Err("media payload is not base64".to_owned());
                        }
                        reader_counters
                            .returned_bytes
                            .fetch_add(bytes.len() as u64, Ordering::Relaxed);
                        reader_counters.returned.fetch_add(1, Ordering::Relaxed);
                    }
                }
                Ok(Message::Close(_)) => return Ok(()),
                Ok(_) => {}
                Err(error) => return Err(format!("read: {error}")),
            }
        }
        Ok(())
    });

    let stream_sid = format!("MZpipecatfloor{:08}", plan.index);
    let call_sid = format!("CApipecatfloor{:08}", plan.index);
    let account_sid = "ACpipecatfloor";
    let connected =
        serde_json::json!({"event": "connected", "protocol": "Call", "version": "1.0.0"});
    let start = serde_json::json!({
        "event": "start",
        "sequenceNumber": "1",
        "start": {
            "accountSid": account_sid,
            "streamSid": stream_sid,
            "callSid": call_sid,
            "tracks": ["inbound"],
            "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1},
            "customParameters": {}
        },
        "streamSid": stream_sid
    });
    let send = |text: String| Message::text(text);
    sink.send(send(connected.to_string()))
        .await
        .map_err(|error| format!("send connected: {error}"))?;
    sink.send(send(start.to_string()))
        .await
        .map_err(|error| format!("send start: {error}"))?;
    counters.started.store(true, Ordering::Release);

    let mut ticks = interval_at(Instant::now() + plan.phase, FRAME);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Burst);
    let offset = plan.index.wrapping_mul(37);
    for chunk in 0..plan.frames {
        ticks.tick().await;
        let payload = &plan.payloads[(offset + chunk as usize) % plan.payloads.len()];
        let media = format!(
            r#"{{"event":"media","sequenceNumber":"{}","media":{{"track":"inbound","chunk":"{}","timestamp":"{}","payload":"{payload}"}},"streamSid":"{stream_sid}"}}"#,
            chunk + 2,
            chunk + 1,
            chunk * 20,
        );
        if let Err(error) = sink.send(send(media)).await {
            reader.abort();
            return Err(format!("send media: {error} after {chunk} frames"));
        }
        counters.sent.fetch_add(1, Ordering::Relaxed);
        if reader.is_finished() {
            break;
        }
    }

    let sent = counters.sent.load(Ordering::Relaxed);
    if sent < plan.frames {
        let why = match (&mut reader).await {
            Ok(Err(error)) => error,
            Ok(Ok(())) => "the server closed the stream".to_owned(),
            Err(join) => format!("reader: {join}"),
        };
        return Err(format!("{why} after {sent} of {} frames", plan.frames));
    }

    // The last echoes are still on their way (a paced output sends them in real time).
    let drained_by = Instant::now() + plan.drain;
    while counters.returned.load(Ordering::Relaxed) < sent
        && Instant::now() < drained_by
        && !reader.is_finished()
    {
        sleep(FRAME).await;
    }
    let stop = serde_json::json!({
        "event": "stop",
        "sequenceNumber": (plan.frames + 2).to_string(),
        "stop": {"accountSid": account_sid, "callSid": call_sid},
        "streamSid": stream_sid
    });
    // The server may already have closed; the call's figures are in the counters.
    let _ = sink.send(send(stop.to_string())).await;
    let _ = sink.close().await;
    match tokio::time::timeout(Duration::from_secs(2), &mut reader).await {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(join)) => Err(format!("reader: {join}")),
        Err(_) => {
            // The server did not answer our close: the call still ran its course.
            reader.abort();
            Ok(())
        }
    }
}
