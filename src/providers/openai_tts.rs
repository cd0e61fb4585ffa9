//! OpenAI-compatible speech: `POST {base}/audio/speech` with
//! `response_format: "pcm"`, read as it streams (raw 16-bit little-endian mono
//! PCM at 24 kHz). μ-law is not offered by this API, so PCM avoids a decode;
//! the call loop converts 24 kHz to the carrier's rate with the media crate.

use super::{ByteStream, HttpPolicy, Pcm16Assembler, byte_stream, next_chunk, send_with_retry};
use async_trait::async_trait;
use serde_json::json;
use std::time::Duration;
use voxline_actors::providers::{ProviderError, ProviderKind, TtsProvider, TtsStream};

/// The rate of OpenAI's `pcm` output.
pub const OPENAI_PCM_RATE: u32 = 24_000;

/// An OpenAI-compatible speech endpoint.
#[derive(Clone)]
pub struct OpenAiTts {
    http: reqwest::Client,
    base_url: String,
    api_key: Option<String>,
    model: String,
    policy: HttpPolicy,
}

impl std::fmt::Debug for OpenAiTts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenAiTts")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl OpenAiTts {
    /// A client for `model` at `base_url` (up to `/v1`).
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        api_key: Option<String>,
        model: &str,
        policy: HttpPolicy,
    ) -> Self {
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            api_key,
            model: model.to_string(),
            policy,
        }
    }
}

/// OpenAI's built-in voices; any other agent voice falls back to `alloy`
/// (agents default to the sim voice name).
const OPENAI_VOICES: &[&str] = &[
    "alloy", "ash", "ballad", "coral", "echo", "fable", "nova", "onyx", "sage", "shimmer", "verse",
];

#[async_trait]
impl TtsProvider for OpenAiTts {
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        _sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError> {
        let url = format!("{}/audio/speech", self.base_url);
        // Compatible servers (Kokoro, LocalAI, …) have their own voice names,
        // so only the sim default is replaced.
        let voice = if voice.is_empty() || voice.starts_with("sim") {
            OPENAI_VOICES[0]
        } else {
            voice
        };
        let body = json!({
            "model": self.model,
            "input": text,
            "voice": voice,
            "response_format": "pcm",
        });
        let response = send_with_retry(ProviderKind::Tts, "openai tts", &self.policy, || {
            let req = self.http.post(&url).json(&body);
            match &self.api_key {
                Some(key) => req.bearer_auth(key),
                None => req,
            }
        })
        .await?;
        Ok(Box::new(PcmBodyStream::new(
            byte_stream(response),
            OPENAI_PCM_RATE,
            self.policy.read_timeout,
        )))
    }
}

/// Raw PCM arriving as an HTTP body, yielded chunk by chunk as it arrives.
pub(crate) struct PcmBodyStream {
    body: ByteStream,
    rate: u32,
    read_timeout: Duration,
    pcm: Pcm16Assembler,
    ended: bool,
}

impl PcmBodyStream {
    /// Reads `body` as 16-bit little-endian mono PCM at `rate`.
    pub(crate) fn new(body: ByteStream, rate: u32, read_timeout: Duration) -> Self {
        Self {
            body,
            rate,
            read_timeout,
            pcm: Pcm16Assembler::default(),
            ended: false,
        }
    }

    /// Takes `bytes` that came before the rest of the body (after a WAV header, say) and
    /// returns the whole samples among them; an odd byte waits for the body.
    pub(crate) fn push_leading(&mut self, bytes: &[u8]) -> Vec<i16> {
        self.pcm.push(bytes)
    }
}

#[async_trait]
impl TtsStream for PcmBodyStream {
    fn sample_rate(&self) -> u32 {
        self.rate
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<i16>, ProviderError>> {
        loop {
            if self.ended {
                return None;
            }
            match next_chunk(ProviderKind::Tts, &mut self.body, self.read_timeout).await {
                None => {
                    self.ended = true;
                    return None;
                }
                Some(Err(err)) => {
                    self.ended = true;
                    return Some(Err(err));
                }
                Some(Ok(bytes)) => {
                    let samples = self.pcm.push(&bytes);
                    if !samples.is_empty() {
                        return Some(Ok(samples));
                    }
                }
            }
        }
    }
}
