//! The simulated providers (decisions §11): deterministic, local, with configurable latencies,
//! so the whole service runs on one machine and load tests measure the engine, not a vendor.
//!
//! Every delay is a `tokio::time` deadline kept in the stream, so the `next_*` methods stay
//! cancel-safe and tests can run on a paused clock.
//!
//! [`SimAsr`] (`asr.rs`), [`SimLlm`] (`llm.rs`, and how it uses tools, `tool_use.rs`) and
//! [`SimTts`] (`tts.rs`) share one [`SimConfig`]; [`Providers::sim`] builds the three.

pub mod asr;
pub mod llm;
pub mod tool_use;
pub mod tts;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::providers::{ProviderError, ProviderKind, Providers};

pub use asr::SimAsr;
pub use llm::{
    SIM_ACKNOWLEDGEMENTS, SIM_ANYTHING_ELSE, SIM_CLOSE, SIM_GOODBYE, SIM_NOTED_QUESTION,
    SIM_STILL_THERE, SimLlm,
};
pub use tts::SimTts;

/// Makes one sim provider fail, for tests of the failure paths.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimFailure {
    /// The provider that fails.
    pub provider: ProviderKind,
    /// Uses that succeed before every later one fails (ASR: utterances, LLM: turns,
    /// TTS: syntheses), counted per provider instance.
    pub after_uses: u32,
}

/// Latencies and fault injection shared by the three sim providers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimConfig {
    /// From the end of an utterance (`finalize`) to its final transcript.
    pub asr_latency: Duration,
    /// From an LLM request to its first token.
    pub llm_first_token: Duration,
    /// Between later tokens.
    pub llm_token_interval: Duration,
    /// From a TTS request to its first audio.
    pub tts_first_byte: Duration,
    /// Length of each TTS audio chunk.
    pub tts_chunk: Duration,
    /// A provider told to fail, if any.
    pub fail: Option<SimFailure>,
    /// The sim ASR streams interim transcripts as the caller speaks (a streaming
    /// recognizer); off, it sends only each utterance's final, as a recognizer without
    /// interim results does, and the turn is judged on the audio alone.
    pub interim_results: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        Self {
            asr_latency: Duration::from_millis(150),
            llm_first_token: Duration::from_millis(300),
            llm_token_interval: Duration::from_millis(25),
            tts_first_byte: Duration::from_millis(120),
            tts_chunk: Duration::from_millis(200),
            fail: None,
            interim_results: true,
        }
    }
}

/// Counts uses of one provider and decides when an injected failure starts.
#[derive(Debug)]
struct UseCounter {
    kind: ProviderKind,
    fail: Option<SimFailure>,
    uses: AtomicU32,
}

impl UseCounter {
    fn new(kind: ProviderKind, fail: Option<SimFailure>) -> Self {
        Self {
            kind,
            fail,
            uses: AtomicU32::new(0),
        }
    }

    /// Counts one use; true when this use must fail.
    fn use_fails(&self) -> bool {
        let previous = self.uses.fetch_add(1, Ordering::Relaxed);
        self.fail
            .is_some_and(|fail| fail.provider == self.kind && previous >= fail.after_uses)
    }

    fn injected(&self) -> ProviderError {
        ProviderError::Injected {
            provider: self.kind,
        }
    }
}

impl Providers {
    /// The simulated providers of decisions §11, sharing one config.
    pub fn sim(config: SimConfig) -> Self {
        Self {
            asr: Arc::new(SimAsr::new(config.clone())),
            llm: Arc::new(SimLlm::new(config.clone())),
            tts: Arc::new(SimTts::new(config)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::providers::TtsProvider;

    #[tokio::test(start_paused = true)]
    async fn sim_failure_starts_after_the_configured_uses() {
        let tts = SimTts::new(SimConfig {
            fail: Some(SimFailure {
                provider: ProviderKind::Tts,
                after_uses: 1,
            }),
            ..SimConfig::default()
        });
        let mut ok = tts.synthesize("fine", "v", 8000).await.unwrap();
        assert!(ok.next_chunk().await.unwrap().is_ok());
        let mut broken = tts.synthesize("broken", "v", 8000).await.unwrap();
        let error = broken.next_chunk().await.unwrap().unwrap_err();
        assert_eq!(error.provider(), ProviderKind::Tts);
        assert!(broken.next_chunk().await.is_none());
    }
}
