//! Local speech from a Piper server (`python -m piper.http_server`, piper-tts 1.3+):
//! `POST {base}/synthesize` with `{"text": …, "voice": …}` answers with a WAV file, 16-bit mono at the
//! voice's rate (22 050 Hz for the medium voices). No account and no network.
//!
//! The body is read as it arrives: once the header is in, the samples after it
//! are yielded at the voice's own rate, and the call loop's one resampler per
//! stream brings them to the carrier's rate.

use super::openai_tts::PcmBodyStream;
use super::{ByteStream, HttpPolicy, byte_stream, next_chunk, send_with_retry, tts_wav_header};
use async_trait::async_trait;
use serde_json::json;
use std::time::Duration;
use voxline_actors::providers::{ProviderError, ProviderKind, TtsProvider, TtsStream};

/// A Piper HTTP server.
#[derive(Clone)]
pub struct PiperTts {
    http: reqwest::Client,
    base_url: String,
    default_voice: String,
    policy: HttpPolicy,
}

impl std::fmt::Debug for PiperTts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PiperTts")
            .field("base_url", &self.base_url)
            .field("default_voice", &self.default_voice)
            .finish_non_exhaustive()
    }
}

fn tts_error(message: impl Into<String>) -> ProviderError {
    ProviderError::Request {
        provider: ProviderKind::Tts,
        message: message.into(),
    }
}

impl PiperTts {
    /// A client for the server at `base_url`, asking for `default_voice` (blank: the
    /// server's own) when the agent names no Piper voice.
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        default_voice: &str,
        policy: HttpPolicy,
    ) -> Self {
        Self {
            http,
            base_url: base_url.trim_end_matches('/').to_string(),
            default_voice: default_voice.trim().to_string(),
            policy,
        }
    }

    /// The voice to ask for: the agent's when it names one (Piper voices look like
    /// `en_US-lessac-medium`), else the default. The sim voice names are not Piper's.
    fn voice_for<'a>(&'a self, voice: &'a str) -> &'a str {
        let voice = voice.trim();
        if voice.is_empty() || voice.starts_with("sim") {
            &self.default_voice
        } else {
            voice
        }
    }
}

#[async_trait]
impl TtsProvider for PiperTts {
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        _sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError> {
        let url = format!("{}/synthesize", self.base_url);
        let voice = self.voice_for(voice);
        // One line: Piper reads a newline as a sentence break with a long pause.
        let text = text.replace(['\n', '\r'], " ");
        let body = if voice.is_empty() {
            json!({ "text": text })
        } else {
            json!({ "text": text, "voice": voice })
        };
        let response = send_with_retry(ProviderKind::Tts, "piper tts", &self.policy, || {
            self.http.post(&url).json(&body)
        })
        .await?;
        let stream = WavBodyStream::open(byte_stream(response), self.policy.read_timeout).await?;
        Ok(Box::new(stream))
    }
}

/// A WAV file arriving as an HTTP body: its header read, then its samples as they come.
struct WavBodyStream {
    /// Samples that came with the header.
    first: Option<Vec<i16>>,
    pcm: PcmBodyStream,
}

impl WavBodyStream {
    /// Reads `body` until the `data` chunk starts; the rate comes from the header.
    async fn open(mut body: ByteStream, read_timeout: Duration) -> Result<Self, ProviderError> {
        let mut header = Vec::new();
        loop {
            let bytes = match next_chunk(ProviderKind::Tts, &mut body, read_timeout).await {
                Some(bytes) => bytes?,
                None => return Err(tts_error("piper answered without audio")),
            };
            header.extend_from_slice(&bytes);
            let Some((rate, start)) = tts_wav_header("piper", &header)? else {
                continue;
            };
            let mut pcm = PcmBodyStream::new(body, rate, read_timeout);
            let first = pcm.push_leading(header.get(start..).unwrap_or_default());
            return Ok(Self {
                first: (!first.is_empty()).then_some(first),
                pcm,
            });
        }
    }
}

#[async_trait]
impl TtsStream for WavBodyStream {
    fn sample_rate(&self) -> u32 {
        self.pcm.sample_rate()
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<i16>, ProviderError>> {
        match self.first.take() {
            Some(samples) => Some(Ok(samples)),
            None => self.pcm.next_chunk().await,
        }
    }
}
