//! Deepgram live transcription over a websocket (`{base}/listen`).
//!
//! Caller audio goes out as binary linear16 frames as it arrives, from a writer
//! task so the call loop never waits on the network. Deepgram answers with
//! `Results` (interim and final, `speech_final` at its own endpoint), and with
//! `UtteranceEnd` and `SpeechStarted` events. The loop's endpointer sends
//! `Finalize`; the `Results` marked `from_finalize` close the utterance. An
//! idle stream gets a `KeepAlive` every few seconds, and `close` sends
//! `CloseStream` so Deepgram flushes before hanging up.

use super::HttpPolicy;
use async_trait::async_trait;
use backon::Retryable;
use futures::{SinkExt, StreamExt};
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use voxline_actors::providers::{
    AsrContext, AsrEvent, AsrProvider, AsrStream, ProviderError, ProviderKind,
};

/// How long an idle stream waits before a `KeepAlive` (Deepgram closes after 10 s).
pub const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(4);

/// A Deepgram account.
#[derive(Clone)]
pub struct DeepgramAsr {
    base_url: String,
    api_key: String,
    model: String,
    policy: HttpPolicy,
}

impl std::fmt::Debug for DeepgramAsr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeepgramAsr")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl DeepgramAsr {
    /// A client for `model` at `base_url` (`wss://api.deepgram.com/v1` by default).
    pub fn new(base_url: &str, api_key: String, model: &str, policy: HttpPolicy) -> Self {
        // Deepgram documents https:// addresses; the live API is the same host over wss://.
        let base_url = base_url
            .trim_end_matches('/')
            .replacen("https://", "wss://", 1)
            .replacen("http://", "ws://", 1);
        Self {
            base_url,
            api_key,
            model: model.to_string(),
            policy,
        }
    }

    /// The `listen` URL for a session.
    pub fn listen_url(&self, context: &AsrContext) -> String {
        let language = if context.language.is_empty() {
            "en"
        } else {
            context.language.as_str()
        };
        format!(
            "{}/listen?model={}&language={}&encoding=linear16&sample_rate={}&channels=1\
             &interim_results=true&utterance_end_ms=1000&vad_events=true&endpointing=300\
             &punctuate=true&smart_format=true",
            self.base_url, self.model, language, context.sample_rate
        )
    }

    async fn connect(&self, url: &str) -> Result<DeepgramSocket, ProviderError> {
        let fail = |message: String| ProviderError::Request {
            provider: ProviderKind::Asr,
            message,
        };
        let mut request = url
            .into_client_request()
            .map_err(|e| fail(format!("deepgram URL: {e}")))?;
        let auth = HeaderValue::from_str(&format!("Token {}", self.api_key))
            .map_err(|_| fail("deepgram API key is not a valid header value".into()))?;
        request.headers_mut().insert("authorization", auth);
        match tokio::time::timeout(
            self.policy.connect_timeout + self.policy.read_timeout,
            // Transcripts are small; the default 128 KiB read buffer would be zero-filled before
            // every read and held for the whole call.
            tokio_tungstenite::connect_async_with_config(
                request,
                Some(
                    tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                        .read_buffer_size(16 * 1024),
                ),
                false,
            ),
        )
        .await
        {
            Err(_) => Err(ProviderError::Timeout {
                provider: ProviderKind::Asr,
                after: self.policy.connect_timeout + self.policy.read_timeout,
            }),
            Ok(Err(err)) => Err(fail(format!("deepgram connect: {err}"))),
            Ok(Ok((socket, _))) => Ok(socket),
        }
    }
}

type DeepgramSocket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

#[async_trait]
impl AsrProvider for DeepgramAsr {
    async fn open(&self, context: AsrContext) -> Result<Box<dyn AsrStream>, ProviderError> {
        let url = self.listen_url(&context);
        // Nothing reaches the caller before the socket is open, so every
        // failed connect may be retried.
        let socket = (|| self.connect(&url))
            .retry(self.policy.retry_waits())
            .sleep(tokio::time::sleep)
            .notify(|err, wait| {
                tracing::debug!(call = %context.call_id, ?wait, error = %err, "retrying deepgram connect");
            })
            .await?;
        let (sink, source) = socket.split();
        let (out_tx, out_rx) = mpsc::unbounded_channel();
        let (event_tx, events) = mpsc::unbounded_channel();
        let writer = tokio::spawn(write_loop(sink, out_rx));
        let reader = tokio::spawn(read_loop(source, event_tx));
        Ok(Box::new(DeepgramStream {
            out: out_tx,
            events,
            writer,
            reader,
            bytes: Vec::new(),
        }))
    }
}

/// What the writer task sends.
#[derive(Debug)]
enum Outgoing {
    Audio(Vec<u8>),
    Finalize,
    Close,
}

async fn write_loop(
    mut sink: futures::stream::SplitSink<DeepgramSocket, Message>,
    mut out: mpsc::UnboundedReceiver<Outgoing>,
) {
    let mut last_sent = Instant::now();
    let mut keep_alive = tokio::time::interval(Duration::from_secs(1));
    keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let message = tokio::select! {
            next = out.recv() => match next {
                Some(Outgoing::Audio(bytes)) => Message::Binary(bytes.into()),
                Some(Outgoing::Finalize) => Message::text(r#"{"type":"Finalize"}"#),
                Some(Outgoing::Close) | None => {
                    let _ = sink.send(Message::text(r#"{"type":"CloseStream"}"#)).await;
                    return;
                }
            },
            _ = keep_alive.tick() => {
                if last_sent.elapsed() < KEEP_ALIVE_EVERY {
                    continue;
                }
                Message::text(r#"{"type":"KeepAlive"}"#)
            }
        };
        if sink.send(message).await.is_err() {
            return;
        }
        last_sent = Instant::now();
    }
}

async fn read_loop(
    mut source: futures::stream::SplitStream<DeepgramSocket>,
    events: mpsc::UnboundedSender<Result<AsrEvent, ProviderError>>,
) {
    while let Some(message) = source.next().await {
        let text = match message {
            Ok(Message::Text(text)) => text,
            Ok(Message::Close(frame)) => {
                let abnormal = frame
                    .as_ref()
                    .is_some_and(|f| u16::from(f.code) != 1000 && u16::from(f.code) != 1005);
                if abnormal {
                    let reason = frame.map(|f| format!("{} {}", u16::from(f.code), f.reason));
                    let _ = events.send(Err(ProviderError::Stream {
                        provider: ProviderKind::Asr,
                        message: format!(
                            "deepgram closed the stream: {}",
                            reason.unwrap_or_default()
                        ),
                    }));
                }
                return;
            }
            Ok(_) => continue,
            Err(err) => {
                let _ = events.send(Err(ProviderError::Stream {
                    provider: ProviderKind::Asr,
                    message: format!("deepgram: {err}"),
                }));
                return;
            }
        };
        for event in parse_message(text.as_str()) {
            if events.send(event).is_err() {
                return;
            }
        }
    }
}

/// The events one Deepgram message carries.
pub fn parse_message(text: &str) -> Vec<Result<AsrEvent, ProviderError>> {
    let Ok(message) = serde_json::from_str::<Value>(text) else {
        return vec![Err(ProviderError::Stream {
            provider: ProviderKind::Asr,
            message: "deepgram sent unreadable JSON".into(),
        })];
    };
    let flag = |name: &str| message.get(name).and_then(Value::as_bool).unwrap_or(false);
    match message.get("type").and_then(Value::as_str).unwrap_or("") {
        "Results" => {
            let transcript = message
                .pointer("/channel/alternatives/0/transcript")
                .and_then(Value::as_str)
                .unwrap_or("")
                .trim()
                .to_string();
            let mut events = Vec::new();
            if !transcript.is_empty() {
                events.push(Ok(if flag("is_final") {
                    AsrEvent::Final { text: transcript }
                } else {
                    AsrEvent::Interim(transcript)
                }));
            }
            if flag("from_finalize") || flag("speech_final") {
                events.push(Ok(AsrEvent::UtteranceEnd));
            }
            events
        }
        "UtteranceEnd" => vec![Ok(AsrEvent::UtteranceEnd)],
        "SpeechStarted" => vec![Ok(AsrEvent::SpeechStarted)],
        "Error" => {
            let description = message
                .get("description")
                .or_else(|| message.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("unknown error");
            vec![Err(ProviderError::Stream {
                provider: ProviderKind::Asr,
                message: format!("deepgram: {description}"),
            })]
        }
        _ => Vec::new(),
    }
}

/// One live session.
struct DeepgramStream {
    out: mpsc::UnboundedSender<Outgoing>,
    events: mpsc::UnboundedReceiver<Result<AsrEvent, ProviderError>>,
    writer: JoinHandle<()>,
    reader: JoinHandle<()>,
    /// Reused conversion buffer.
    bytes: Vec<u8>,
}

impl Drop for DeepgramStream {
    fn drop(&mut self) {
        self.writer.abort();
        self.reader.abort();
    }
}

fn closed() -> ProviderError {
    ProviderError::Stream {
        provider: ProviderKind::Asr,
        message: "the deepgram connection is closed".into(),
    }
}

#[async_trait]
impl AsrStream for DeepgramStream {
    fn push_audio(&mut self, samples: &[i16], _sample_rate: u32) -> Result<(), ProviderError> {
        self.bytes.clear();
        self.bytes
            .extend(samples.iter().flat_map(|sample| sample.to_le_bytes()));
        self.out
            .send(Outgoing::Audio(self.bytes.clone()))
            .map_err(|_| closed())
    }

    fn finalize(&mut self) -> Result<(), ProviderError> {
        self.out.send(Outgoing::Finalize).map_err(|_| closed())
    }

    async fn next_event(&mut self) -> Option<Result<AsrEvent, ProviderError>> {
        self.events.recv().await
    }

    async fn close(&mut self) -> Result<(), ProviderError> {
        // Deepgram flushes its last results, then closes; they are no longer needed.
        let _ = self.out.send(Outgoing::Close);
        while self.events.recv().await.is_some() {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_map_to_interim_final_and_utterance_end() {
        let interim = r#"{"type":"Results","is_final":false,"speech_final":false,
            "channel":{"alternatives":[{"transcript":"hello th"}]}}"#;
        assert_eq!(
            parse_message(interim)
                .into_iter()
                .map(Result::unwrap)
                .collect::<Vec<_>>(),
            vec![AsrEvent::Interim("hello th".into())]
        );
        let fin = r#"{"type":"Results","is_final":true,"speech_final":true,
            "channel":{"alternatives":[{"transcript":"hello there"}]}}"#;
        assert_eq!(
            parse_message(fin)
                .into_iter()
                .map(Result::unwrap)
                .collect::<Vec<_>>(),
            vec![
                AsrEvent::Final {
                    text: "hello there".into()
                },
                AsrEvent::UtteranceEnd
            ]
        );
        assert_eq!(
            parse_message(r#"{"type":"UtteranceEnd","last_word_end":2.1}"#)
                .into_iter()
                .map(Result::unwrap)
                .collect::<Vec<_>>(),
            vec![AsrEvent::UtteranceEnd]
        );
        assert!(parse_message(r#"{"type":"Metadata"}"#).is_empty());
    }
}
