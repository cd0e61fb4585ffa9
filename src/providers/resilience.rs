//! A circuit breaker per provider and workspace, so a dead vendor is not
//! hammered by every queued call: after `threshold` consecutive failures the
//! circuit opens and requests fail at once (the call ends with the provider's
//! error reason) until `cooldown` has passed; then one trial request decides
//! whether it closes again.
//!
//! The breaker state lives in [`Breakers`], built once per server and handed
//! to every provider selector, so every call and text request of a workspace
//! shares it while two servers in one process (tests) do not. It is keyed by
//! vendor and workspace so one workspace's broken key never blocks another's calls.

use async_trait::async_trait;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use voxline_actors::providers::{
    AsrContext, AsrEvent, AsrProvider, AsrStream, LlmEvent, LlmProvider, LlmRequest, LlmStream,
    ProviderError, ProviderKind, TtsProvider, TtsStream,
};

#[derive(Debug, Default)]
struct BreakerState {
    failures: u32,
    open_until: Option<Instant>,
}

/// Every breaker's state of one server, by (vendor, workspace); cheap to clone.
#[derive(Debug, Clone, Default)]
pub struct Breakers {
    states: Arc<Mutex<HashMap<(String, String), BreakerState>>>,
}

impl Breakers {
    /// The breaker of `vendor` (e.g. `openai-llm`) for workspace `org_id`.
    pub fn breaker(
        &self,
        vendor: &str,
        org_id: &str,
        kind: ProviderKind,
        threshold: u32,
        cooldown: Duration,
    ) -> CircuitBreaker {
        CircuitBreaker {
            states: self.clone(),
            key: (vendor.to_string(), org_id.to_string()),
            kind,
            threshold: threshold.max(1),
            cooldown,
        }
    }
}

/// The breaker of one vendor for one workspace.
#[derive(Debug, Clone)]
pub struct CircuitBreaker {
    states: Breakers,
    key: (String, String),
    kind: ProviderKind,
    threshold: u32,
    cooldown: Duration,
}

impl CircuitBreaker {
    /// Lets a request through, or refuses it while the circuit is open. After
    /// the cooldown one request passes as the trial; the others keep waiting.
    pub fn admit(&self) -> Result<(), ProviderError> {
        let mut all = self.states.states.lock();
        let state = all.entry(self.key.clone()).or_default();
        let now = Instant::now();
        match state.open_until {
            Some(until) if until > now => Err(ProviderError::Request {
                provider: self.kind,
                message: format!(
                    "{} circuit open after {} consecutive failures; retrying in {} s",
                    self.key.0,
                    state.failures,
                    (until - now).as_secs() + 1
                ),
            }),
            Some(_) => {
                state.open_until = Some(now + self.cooldown);
                Ok(())
            }
            None => Ok(()),
        }
    }

    /// Records a success: the circuit closes.
    pub fn success(&self) {
        let mut all = self.states.states.lock();
        let state = all.entry(self.key.clone()).or_default();
        state.failures = 0;
        state.open_until = None;
    }

    /// Records a failure: the circuit opens at the threshold.
    pub fn failure(&self) {
        let mut all = self.states.states.lock();
        let state = all.entry(self.key.clone()).or_default();
        state.failures = state.failures.saturating_add(1);
        if state.failures >= self.threshold {
            if state.open_until.is_none() || state.failures == self.threshold {
                tracing::warn!(vendor = %self.key.0, org = %self.key.1, failures = state.failures,
                    "provider circuit opened");
            }
            state.open_until = Some(Instant::now() + self.cooldown);
        }
    }

    /// Whether requests are being refused now.
    pub fn is_open(&self) -> bool {
        self.states
            .states
            .lock()
            .get(&self.key)
            .and_then(|s| s.open_until)
            .is_some_and(|until| until > Instant::now())
    }
}

/// An ASR behind a breaker.
pub struct GuardedAsr {
    /// The client.
    pub inner: Arc<dyn AsrProvider>,
    /// Its breaker.
    pub breaker: CircuitBreaker,
}

#[async_trait]
impl AsrProvider for GuardedAsr {
    async fn open(&self, context: AsrContext) -> Result<Box<dyn AsrStream>, ProviderError> {
        self.breaker.admit()?;
        match self.inner.open(context).await {
            Ok(stream) => {
                self.breaker.success();
                Ok(Box::new(GuardedAsrStream {
                    inner: stream,
                    breaker: self.breaker.clone(),
                }))
            }
            Err(err) => {
                self.breaker.failure();
                Err(err)
            }
        }
    }
}

struct GuardedAsrStream {
    inner: Box<dyn AsrStream>,
    breaker: CircuitBreaker,
}

#[async_trait]
impl AsrStream for GuardedAsrStream {
    fn push_audio(&mut self, samples: &[i16], sample_rate: u32) -> Result<(), ProviderError> {
        self.inner.push_audio(samples, sample_rate)
    }

    fn finalize(&mut self) -> Result<(), ProviderError> {
        self.inner.finalize()
    }

    fn discard(&mut self) -> Result<(), ProviderError> {
        self.inner.discard()
    }

    fn peek(&mut self, over_agent: bool) -> Result<bool, ProviderError> {
        self.inner.peek(over_agent)
    }

    async fn next_event(&mut self) -> Option<Result<AsrEvent, ProviderError>> {
        let event = self.inner.next_event().await;
        if matches!(event, Some(Err(_))) {
            self.breaker.failure();
        }
        event
    }

    async fn close(&mut self) -> Result<(), ProviderError> {
        self.inner.close().await
    }
}

/// An LLM behind a breaker.
pub struct GuardedLlm {
    /// The client.
    pub inner: Arc<dyn LlmProvider>,
    /// Its breaker.
    pub breaker: CircuitBreaker,
}

#[async_trait]
impl LlmProvider for GuardedLlm {
    async fn stream(&self, request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError> {
        self.breaker.admit()?;
        match self.inner.stream(request).await {
            Ok(stream) => Ok(Box::new(GuardedLlmStream {
                inner: stream,
                breaker: self.breaker.clone(),
            })),
            Err(err) => {
                self.breaker.failure();
                Err(err)
            }
        }
    }
}

struct GuardedLlmStream {
    inner: Box<dyn LlmStream>,
    breaker: CircuitBreaker,
}

#[async_trait]
impl LlmStream for GuardedLlmStream {
    async fn next_event(&mut self) -> Option<Result<LlmEvent, ProviderError>> {
        let event = self.inner.next_event().await;
        match &event {
            Some(Err(_)) => self.breaker.failure(),
            Some(Ok(LlmEvent::Done { .. })) => self.breaker.success(),
            _ => {}
        }
        event
    }
}

/// A TTS behind a breaker.
pub struct GuardedTts {
    /// The client.
    pub inner: Arc<dyn TtsProvider>,
    /// Its breaker.
    pub breaker: CircuitBreaker,
}

#[async_trait]
impl TtsProvider for GuardedTts {
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError> {
        self.breaker.admit()?;
        match self.inner.synthesize(text, voice, sample_rate).await {
            Ok(stream) => Ok(Box::new(GuardedTtsStream {
                inner: stream,
                breaker: self.breaker.clone(),
            })),
            Err(err) => {
                self.breaker.failure();
                Err(err)
            }
        }
    }
}

struct GuardedTtsStream {
    inner: Box<dyn TtsStream>,
    breaker: CircuitBreaker,
}

#[async_trait]
impl TtsStream for GuardedTtsStream {
    fn sample_rate(&self) -> u32 {
        self.inner.sample_rate()
    }

    async fn next_chunk(&mut self) -> Option<Result<Vec<i16>, ProviderError>> {
        let chunk = self.inner.next_chunk().await;
        match &chunk {
            Some(Err(_)) => self.breaker.failure(),
            None => self.breaker.success(),
            Some(Ok(_)) => {}
        }
        chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn opens_at_the_threshold_and_lets_one_trial_through_after_cooldown() {
        let breakers = Breakers::default();
        let breaker = breakers.breaker(
            "test-vendor",
            "org",
            ProviderKind::Llm,
            3,
            Duration::from_secs(30),
        );
        for _ in 0..2 {
            breaker.admit().unwrap();
            breaker.failure();
        }
        assert!(!breaker.is_open());
        breaker.admit().unwrap();
        breaker.failure();
        assert!(breaker.is_open());
        assert!(breaker.admit().is_err());
        // Another workspace is unaffected.
        let other = breakers.breaker(
            "test-vendor",
            "other-org",
            ProviderKind::Llm,
            3,
            Duration::from_secs(30),
        );
        assert!(other.admit().is_ok());
        tokio::time::advance(Duration::from_secs(31)).await;
        breaker.admit().unwrap();
        assert!(breaker.admit().is_err(), "only one trial passes");
        breaker.success();
        assert!(breaker.admit().is_ok());
    }

    #[test]
    fn separate_breakers_share_nothing() {
        let first = Breakers::default();
        let second = Breakers::default();
        let open = first.breaker("v", "org", ProviderKind::Asr, 1, Duration::from_secs(30));
        open.failure();
        assert!(open.is_open());
        assert!(
            !second
                .breaker("v", "org", ProviderKind::Asr, 1, Duration::from_secs(30))
                .is_open()
        );
        assert!(
            first
                .breaker("v", "org", ProviderKind::Asr, 1, Duration::from_secs(30))
                .is_open(),
            "a clone of the same breakers sees the open circuit"
        );
    }
}
