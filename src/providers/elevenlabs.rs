//! ElevenLabs streaming speech over HTTP:
//! `POST {base}/v1/text-to-speech/{voice_id}/stream?output_format=pcm_{rate}`
//! with the `xi-api-key` header. The PCM rate is chosen to match what the call
//! loop asked for (8, 16 or 24 kHz), so telephony audio needs no resampling.

use super::openai_tts::PcmBodyStream;
use super::{HttpPolicy, byte_stream, send_with_retry};
use async_trait::async_trait;
use serde_json::json;
use voxline_actors::providers::{ProviderError, ProviderKind, TtsProvider, TtsStream};

/// Voice used when the agent's voice is the sim default ("Rachel").
pub const DEFAULT_VOICE_ID: &str = "21m00Tcm4TlvDq8ikWAM";

/// An ElevenLabs account.
#[derive(Clone)]
pub struct ElevenLabsTts {
    http: reqwest::Client,
    base_url: String,
    api_key: String,
    model: String,
    policy: HttpPolicy,
}

impl std::fmt::Debug for ElevenLabsTts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ElevenLabsTts")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .finish_non_exhaustive()
    }
}

impl ElevenLabsTts {
    /// A client for `model` at `base_url`.
    pub fn new(
        http: reqwest::Client,
        base_url: &str,
        api_key: String,
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

/// The PCM rate to ask for: the loop's rate when ElevenLabs offers it.
fn output_rate(requested: u32) -> u32 {
    match requested {
        8_000 | 16_000 | 24_000 => requested,
        _ => 24_000,
    }
}

#[async_trait]
impl TtsProvider for ElevenLabsTts {
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError> {
        // Voice ids are alphanumeric; anything else (the sim default, a stray
        // path character) falls back rather than reaching into another URL.
        let usable = !voice.is_empty()
            && !voice.starts_with("sim")
            && voice
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        let voice_id = if !usable { DEFAULT_VOICE_ID } else { voice };
        let rate = output_rate(sample_rate);
        let url = format!(
            "{}/v1/text-to-speech/{voice_id}/stream?output_format=pcm_{rate}",
            self.base_url
        );
        let body = json!({"text": text, "model_id": self.model});
        let response = send_with_retry(ProviderKind::Tts, "elevenlabs", &self.policy, || {
            self.http
                .post(&url)
                .header("xi-api-key", &self.api_key)
                .json(&body)
        })
        .await?;
        Ok(Box::new(PcmBodyStream::new(
            byte_stream(response),
            rate,
            self.policy.read_timeout,
        )))
    }
}
