//! The sim TTS: speech-like sound as long as the text takes to say, rendered once per voice,
//! text and rate, streamed in chunks after a first-byte delay.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::{Instant, sleep_until};
use voxline_media::synth::{SpeechLikeGenerator, samples_for_duration, speech_duration_for_text};

use super::{SimConfig, UseCounter};
use crate::providers::{ProviderError, ProviderKind, TtsProvider, TtsStream};

/// Sim TTS: speech-like audio as long as the text takes to say, after a first-byte delay,
/// streamed in chunks.
#[derive(Debug)]
pub struct SimTts {
    first_byte: Duration,
    chunk: Duration,
    counter: UseCounter,
}

impl SimTts {
    /// A sim TTS with `config`'s timings and fault.
    pub fn new(config: SimConfig) -> Self {
        Self {
            first_byte: config.tts_first_byte,
            chunk: config.tts_chunk.max(Duration::from_millis(20)),
            counter: UseCounter::new(ProviderKind::Tts, config.fail),
        }
    }
}

/// FNV-1a, so a voice and text always give the same audio.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    for part in parts {
        for byte in part.bytes().chain([0xff]) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0100_0000_01b3);
        }
    }
    hash
}

#[async_trait]
impl TtsProvider for SimTts {
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError> {
        if sample_rate == 0 {
            return Err(ProviderError::Request {
                provider: ProviderKind::Tts,
                message: "sample rate 0".to_owned(),
            });
        }
        let fails = self.counter.use_fails();
        Ok(Box::new(SimTtsStream {
            sample_rate,
            audio: rendered_speech(text, voice, sample_rate),
            sent: 0,
            chunk_samples: samples_for_duration(sample_rate, self.chunk).max(1),
            first_at: Some(Instant::now() + self.first_byte),
            fails,
        }))
    }
}

/// Sentences the sim TTS keeps rendered; past it the cache starts over.
const RENDERED_SENTENCES: usize = 512;

/// The sim voice saying `text`, rendered once per voice, text and rate and shared: agents say
/// the same welcome and replies on every call, and synthesis would otherwise be most of the
/// server's CPU in a load test (a real TTS does this work on the vendor's machines).
fn rendered_speech(text: &str, voice: &str, sample_rate: u32) -> Arc<[i16]> {
    type Cache = Mutex<HashMap<(u64, u32), Arc<[i16]>>>;
    static RENDERED: OnceLock<Cache> = OnceLock::new();
    let seed = fnv1a(&[voice, text]);
    let cache = RENDERED.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(audio) = cache
        .lock()
        .ok()
        .and_then(|map| map.get(&(seed, sample_rate)).cloned())
    {
        return audio;
    }
    let mut audio = vec![0; samples_for_duration(sample_rate, speech_duration_for_text(text))];
    SpeechLikeGenerator::new(sample_rate, seed).fill(&mut audio);
    let audio: Arc<[i16]> = audio.into();
    if let Ok(mut map) = cache.lock() {
        if map.len() >= RENDERED_SENTENCES {
            map.clear();
        }
        map.insert((seed, sample_rate), Arc::clone(&audio));
    }
    audio
}

/// One sim synthesis.
struct SimTtsStream {
    sample_rate: u32,
    audio: Arc<[i16]>,
    /// Samples of `audio` already delivered.
    sent: usize,
    chunk_samples: usize,
    /// When the first chunk is due; `None` once it has been delivered.
    first_at: Option<Instant>,
    fails: bool,
}

#[async_trait]
impl TtsStream for SimTtsStream {
    fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<i16>, ProviderError>> {
        if let Some(first_at) = self.first_at {
            sleep_until(first_at).await;
            self.first_at = None;
            if self.fails {
                self.sent = self.audio.len();
                return Some(Err(ProviderError::Injected {
                    provider: ProviderKind::Tts,
                }));
            }
        }
        let rest = &self.audio[self.sent..];
        if rest.is_empty() {
            return None;
        }
        let chunk = &rest[..self.chunk_samples.min(rest.len())];
        self.sent += chunk.len();
        Some(Ok(chunk.to_vec()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn sim_tts_audio_lasts_as_long_as_the_text() {
        let config = SimConfig::default();
        let tts = SimTts::new(config.clone());
        let text = "This sentence takes a couple of seconds to say.";
        let started = Instant::now();
        let mut stream = tts.synthesize(text, "alloy", 8000).await.unwrap();
        let mut total = 0;
        let mut first_at = None;
        while let Some(chunk) = stream.next_chunk().await {
            first_at.get_or_insert(started.elapsed());
            total += chunk.unwrap().len();
        }
        assert_eq!(first_at, Some(config.tts_first_byte));
        assert_eq!(
            total,
            samples_for_duration(8000, speech_duration_for_text(text))
        );
    }
}
