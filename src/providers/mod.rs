//! Real speech and language providers behind the engine's provider traits
//! (`voxline_actors::providers`): Deepgram and OpenAI-compatible ASR, an
//! OpenAI-compatible streaming LLM, OpenAI-compatible, ElevenLabs and espeak-ng
//! TTS; the per-call choice of clients and keys ([`select`]); and what keeps a
//! failing vendor from hurting calls ([`resilience`]); and the Smart Turn end-of-turn model
//! run in process on a bounded pool of threads ([`smart_turn`]).
//!
//! Every client has a connect timeout and a read timeout (the longest gap
//! between two pieces of an answer), retries only while nothing of its answer
//! reached the caller, and reports failures as [`ProviderError`]s naming the
//! provider kind, which the call loop turns into `asr-error`, `llm-error` or
//! `tts-error`.

pub mod deepgram;
pub mod drafting;
pub mod elevenlabs;
pub mod espeak;
pub mod openai_asr;
pub mod openai_llm;
pub mod openai_tts;
pub mod piper;
pub mod resilience;
pub mod select;
pub mod settings;
pub mod smart_turn;

use backon::{ExponentialBuilder, Retryable};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use settings::ProviderSettings;
use std::pin::Pin;
use std::time::Duration;
use voxline_actors::providers::{ProviderError, ProviderKind};

/// Timeouts and retry bounds shared by every network client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HttpPolicy {
    /// Time allowed to open the connection.
    pub connect_timeout: Duration,
    /// Longest wait for the response head or for the next piece of a body.
    pub read_timeout: Duration,
    /// Extra attempts after a retryable failure (before anything was spoken).
    pub retries: u32,
    /// First backoff; doubles per attempt, plus up to as much again of jitter.
    pub backoff: Duration,
}

impl HttpPolicy {
    /// The policy configured in `settings`.
    pub fn from_settings(settings: &ProviderSettings) -> Self {
        Self {
            connect_timeout: settings.connect_timeout,
            read_timeout: settings.read_timeout,
            retries: settings.retries,
            backoff: settings.retry_backoff,
        }
    }

    /// The waits between attempts: `backoff`, doubling, for at most `retries`
    /// retries, each stretched by a random share of itself so clients that
    /// failed together do not come back together.
    pub fn retry_waits(&self) -> ExponentialBuilder {
        ExponentialBuilder::default()
            .with_min_delay(self.backoff)
            .with_factor(2.0)
            .without_max_delay()
            .with_max_times(self.retries as usize)
            .with_jitter()
    }

    /// An HTTP client with this policy's connect timeout. There is no total
    /// timeout: answers are streams, bounded per piece by the read timeout.
    pub fn client(&self) -> reqwest::Client {
        reqwest::Client::builder()
            .connect_timeout(self.connect_timeout)
            .build()
            .unwrap_or_default()
    }
}

impl Default for HttpPolicy {
    fn default() -> Self {
        Self::from_settings(&ProviderSettings::default())
    }
}

/// A response body as a stream of byte chunks.
pub(crate) type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// The body of `response` as a byte stream.
pub(crate) fn byte_stream(response: reqwest::Response) -> ByteStream {
    Box::pin(response.bytes_stream())
}

/// The next body chunk, failing when the vendor stays silent past the read
/// timeout. Cancel-safe: `StreamExt::next` is, and a cancelled timeout loses nothing.
pub(crate) async fn next_chunk(
    kind: ProviderKind,
    body: &mut ByteStream,
    read_timeout: Duration,
) -> Option<Result<Bytes, ProviderError>> {
    match tokio::time::timeout(read_timeout, body.next()).await {
        Err(_) => Some(Err(ProviderError::Timeout {
            provider: kind,
            after: read_timeout,
        })),
        Ok(None) => None,
        Ok(Some(Ok(bytes))) => Some(Ok(bytes)),
        Ok(Some(Err(err))) => Some(Err(ProviderError::Stream {
            provider: kind,
            message: err.to_string(),
        })),
    }
}

/// Whether a failed attempt is worth repeating.
fn retryable_status(status: reqwest::StatusCode) -> bool {
    status == reqwest::StatusCode::TOO_MANY_REQUESTS || status.is_server_error()
}

/// One failed attempt at opening an answer, and whether another could succeed.
struct FailedAttempt {
    error: ProviderError,
    retryable: bool,
}

/// Sends the request `build` makes, retrying connection failures, timeouts,
/// 429 and 5xx up to `policy.retries` times (see [`HttpPolicy::retry_waits`]).
/// Only used to open an answer, so a retry never repeats anything the caller heard.
pub(crate) async fn send_with_retry(
    kind: ProviderKind,
    vendor: &str,
    policy: &HttpPolicy,
    build: impl Fn() -> reqwest::RequestBuilder,
) -> Result<reqwest::Response, ProviderError> {
    let limit = policy.connect_timeout + policy.read_timeout;
    let attempt = || async {
        let retry = |error| FailedAttempt {
            error,
            retryable: true,
        };
        match tokio::time::timeout(limit, build().send()).await {
            Err(_) => Err(retry(ProviderError::Timeout {
                provider: kind,
                after: limit,
            })),
            Ok(Err(err)) => Err(retry(ProviderError::Request {
                provider: kind,
                message: format!("{vendor}: {}", without_url(&err)),
            })),
            Ok(Ok(response)) if response.status().is_success() => Ok(response),
            Ok(Ok(response)) => {
                let status = response.status();
                Err(FailedAttempt {
                    error: ProviderError::Request {
                        provider: kind,
                        message: format!(
                            "{vendor} answered {status}: {}",
                            error_body(response).await
                        ),
                    },
                    retryable: retryable_status(status),
                })
            }
        }
    };
    attempt
        .retry(policy.retry_waits())
        .sleep(tokio::time::sleep)
        .when(|failed| failed.retryable)
        .notify(|failed, wait| {
            tracing::debug!(%vendor, ?wait, error = %failed.error, "retrying a provider request");
        })
        .await
        .map_err(|failed| failed.error)
}

/// A reqwest error without its URL (query strings may carry vendor options we
/// would rather not repeat in every log line).
fn without_url(err: &reqwest::Error) -> String {
    let mut text = String::new();
    let mut source: Option<&dyn std::error::Error> = Some(err);
    while let Some(e) = source {
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&e.to_string());
        source = e.source();
    }
    match err.url() {
        Some(url) => text.replace(url.as_str(), "<url>"),
        None => text,
    }
}

/// The start of an error body. Authentication failures are summarized instead:
/// some vendors echo part of the key in them.
async fn error_body(response: reqwest::Response) -> String {
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return "the API key was refused".to_string();
    }
    let text = response.text().await.unwrap_or_default();
    text.chars().take(300).collect()
}

/// The longest WAV header a local TTS may send before its output counts as not WAV.
const MAX_WAV_HEADER: usize = 4096;

/// The rate and data offset of the 16-bit mono WAV whose first bytes `prefix` holds, at a
/// rate the call loop resamples; `None` while the header is still arriving. `who` names the
/// synthesizer in the errors.
pub(crate) fn tts_wav_header(
    who: &str,
    prefix: &[u8],
) -> Result<Option<(u32, usize)>, ProviderError> {
    let error = |message: String| ProviderError::Request {
        provider: ProviderKind::Tts,
        message,
    };
    let info = match voxline_media::wav::WavInfo::from_prefix(prefix) {
        Ok(Some(info)) => info,
        Ok(None) if prefix.len() <= MAX_WAV_HEADER => return Ok(None),
        Ok(None) | Err(_) => return Err(error(format!("{who}'s output is not a WAV file"))),
    };
    if info.channels != 1 || info.bits_per_sample != 16 {
        return Err(error(format!(
            "{who} sent {} channel(s) of {}-bit audio, not 16-bit mono",
            info.channels, info.bits_per_sample
        )));
    }
    if !voxline_media::resample::SUPPORTED_RATES.contains(&info.sample_rate) {
        return Err(error(format!(
            "{who} speaks at {} Hz, which the call loop cannot resample",
            info.sample_rate
        )));
    }
    let start = usize::try_from(info.data_offset).unwrap_or(prefix.len());
    Ok(Some((info.sample_rate, start)))
}

/// Little-endian 16-bit PCM bytes to samples, across chunk boundaries that
/// split a sample.
#[derive(Debug, Default)]
pub(crate) struct Pcm16Assembler {
    carry: Option<u8>,
}

impl Pcm16Assembler {
    /// The whole samples completed by `bytes`.
    pub(crate) fn push(&mut self, bytes: &[u8]) -> Vec<i16> {
        let mut samples = Vec::with_capacity(bytes.len() / 2 + 1);
        let mut rest = bytes;
        if let Some(low) = self.carry.take() {
            match rest.split_first() {
                Some((&high, tail)) => {
                    samples.push(i16::from_le_bytes([low, high]));
                    rest = tail;
                }
                None => {
                    self.carry = Some(low);
                    return samples;
                }
            }
        }
        let mut pairs = rest.chunks_exact(2);
        samples.extend(pairs.by_ref().map(|p| i16::from_le_bytes([p[0], p[1]])));
        self.carry = pairs.remainder().first().copied();
        samples
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pcm_assembler_joins_split_samples() {
        let mut pcm = Pcm16Assembler::default();
        let bytes: Vec<u8> = [1000i16, -2000, 3000]
            .iter()
            .flat_map(|s| s.to_le_bytes())
            .collect();
        let mut out = pcm.push(&bytes[..3]);
        assert_eq!(out, vec![1000]);
        out.extend(pcm.push(&bytes[3..4]));
        out.extend(pcm.push(&bytes[4..]));
        assert_eq!(out, vec![1000, -2000, 3000]);
    }
}
