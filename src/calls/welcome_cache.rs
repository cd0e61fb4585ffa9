//! Warm welcome audio (issue 4, decisions §6): an awake agent's welcome
//! message, when it has no placeholders and the agent speaks with the sim
//! TTS, is synthesized once and kept, so a call's greeting starts without a
//! TTS round trip.
//!
//! Entries are keyed by agent and remember the text and voice they were made
//! from, so an edited agent never plays stale audio. Creating, activating or
//! editing an agent warms it; deactivating or deleting it, or the janitor
//! finding it dormant, drops it; a call that finds an awake agent cold warms
//! it for the next call (e.g. after a restart).

use crate::config::SimSettings;
use crate::domain::agent::{AgentSpec, AgentStatus, TtsVendor, placeholder_names};
use crate::domain::{AgentId, OrgId};
use crate::store::{Store, StoreResult};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use voxline_actors::providers::TtsProvider;
use voxline_actors::sim::providers::{SimConfig, SimTts};
use voxline_media::wav::RECORDING_SAMPLE_RATE;

/// Picks the TTS provider an agent speaks with.
pub type TtsForAgent = Arc<dyn Fn(&AgentSpec) -> Arc<dyn TtsProvider> + Send + Sync>;

/// How long one warm-up synthesis may take.
const SYNTHESIS_TIMEOUT: Duration = Duration::from_secs(30);

/// The sim TTS with the service's configured timings, for the cache.
pub fn sim_tts_for_agents(sim: &SimSettings) -> TtsForAgent {
    let tts: Arc<dyn TtsProvider> = Arc::new(SimTts::new(SimConfig {
        tts_first_byte: Duration::from_millis(sim.tts_first_byte_ms),
        ..SimConfig::default()
    }));
    Arc::new(move |_spec| Arc::clone(&tts))
}

/// One agent's entry.
struct Entry {
    org_id: OrgId,
    text: String,
    voice: String,
    /// `None` while the synthesis runs.
    audio: Option<Arc<[i16]>>,
    /// Which warm-up made it; a slower, older warm-up never overwrites a newer one.
    generation: u64,
}

/// The cache of warm welcome audio, shared by the API, the runner and the janitor.
pub struct WelcomeCache {
    tts_for: TtsForAgent,
    entries: Mutex<HashMap<AgentId, Entry>>,
    next_generation: Mutex<u64>,
}

/// Whether `spec` speaks with the sim TTS, the voice the cache synthesizes with. Agents on a
/// vendor's TTS greet through it at call time instead: a cached sim greeting would be the wrong
/// voice, and warming with the vendor would spend the workspace's credits on agents never called.
pub fn speaks_with_sim_tts(spec: &AgentSpec) -> bool {
    spec.tts_provider == TtsVendor::Sim
}

/// The welcome text of `spec` if it can be cached: not empty, no placeholders.
pub fn cacheable_welcome(spec: &AgentSpec) -> Option<&str> {
    let text = spec.welcome_message.trim();
    (!text.is_empty() && placeholder_names(text).next().is_none()).then_some(text)
}

impl WelcomeCache {
    /// An empty cache synthesizing with `tts_for`.
    pub fn new(tts_for: TtsForAgent) -> Arc<Self> {
        Arc::new(Self {
            tts_for,
            entries: Mutex::new(HashMap::new()),
            next_generation: Mutex::new(0),
        })
    }

    /// Warms an awake agent's welcome in the background; an agent whose
    /// welcome has placeholders (or none) is dropped instead. Nothing happens
    /// when the same text and voice are already warm or warming.
    pub fn warm(self: &Arc<Self>, org_id: OrgId, agent_id: AgentId, spec: &AgentSpec) {
        let Some(text) = cacheable_welcome(spec).filter(|_| speaks_with_sim_tts(spec)) else {
            self.forget(agent_id);
            return;
        };
        let generation = {
            let mut next = self.next_generation.lock();
            *next += 1;
            *next
        };
        {
            let mut entries = self.entries.lock();
            if entries
                .get(&agent_id)
                .is_some_and(|e| e.text == text && e.voice == spec.voice)
            {
                return;
            }
            entries.insert(
                agent_id,
                Entry {
                    org_id,
                    text: text.to_string(),
                    voice: spec.voice.clone(),
                    audio: None,
                    generation,
                },
            );
        }
        let tts = (self.tts_for)(spec);
        let cache = Arc::clone(self);
        let text = text.to_string();
        let voice = spec.voice.clone();
        tokio::spawn(async move {
            let audio = tokio::time::timeout(SYNTHESIS_TIMEOUT, synthesize(&*tts, &text, &voice))
                .await
                .unwrap_or_else(|_| Err("timed out".to_string()));
            let mut entries = cache.entries.lock();
            let Some(entry) = entries.get_mut(&agent_id) else {
                return;
            };
            if entry.generation != generation {
                return;
            }
            match audio {
                Ok(audio) => entry.audio = Some(audio),
                Err(err) => {
                    tracing::warn!(agent = %agent_id, error = %err, "welcome audio not cached");
                    entries.remove(&agent_id);
                }
            }
        });
    }

    /// The warm audio of `agent_id`'s welcome, if it was made from exactly
    /// `text` and `voice`.
    pub fn get(&self, agent_id: AgentId, text: &str, voice: &str) -> Option<Arc<[i16]>> {
        let entries = self.entries.lock();
        let entry = entries.get(&agent_id)?;
        (entry.text == text.trim() && entry.voice == voice)
            .then(|| entry.audio.clone())
            .flatten()
    }

    /// Whether `agent_id` has warm audio (not merely warming).
    pub fn is_warm(&self, agent_id: AgentId) -> bool {
        self.entries
            .lock()
            .get(&agent_id)
            .is_some_and(|e| e.audio.is_some())
    }

    /// Drops `agent_id`'s entry.
    pub fn forget(&self, agent_id: AgentId) {
        self.entries.lock().remove(&agent_id);
    }

    /// Drops the entries of agents that are no longer awake (dormant,
    /// inactive, deleted or gone); returns how many went.
    pub async fn drop_sleeping(&self, store: &Store) -> StoreResult<usize> {
        let cached: Vec<(OrgId, AgentId)> = self
            .entries
            .lock()
            .iter()
            .map(|(agent, e)| (e.org_id, *agent))
            .collect();
        let mut dropped = 0;
        for (org_id, agent_id) in cached {
            let awake = store
                .agent(org_id, agent_id)
                .await?
                .is_some_and(|row| row.status() == AgentStatus::Active && !row.dormant);
            if !awake {
                self.forget(agent_id);
                dropped += 1;
            }
        }
        Ok(dropped)
    }
}

/// Synthesizes `text` whole at the recording rate (8 kHz).
async fn synthesize(tts: &dyn TtsProvider, text: &str, voice: &str) -> Result<Arc<[i16]>, String> {
    let mut stream = tts
        .synthesize(text, voice, RECORDING_SAMPLE_RATE)
        .await
        .map_err(|e| e.to_string())?;
    if stream.sample_rate() != RECORDING_SAMPLE_RATE {
        return Err(format!(
            "the TTS answered at {} Hz, not {RECORDING_SAMPLE_RATE} Hz",
            stream.sample_rate()
        ));
    }
    let mut audio = Vec::new();
    while let Some(chunk) = stream.next_chunk().await {
        audio.extend_from_slice(&chunk.map_err(|e| e.to_string())?);
    }
    if audio.is_empty() {
        return Err("the TTS produced no audio".to_string());
    }
    Ok(audio.into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::agent::AgentInput;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use voxline_actors::providers::{ProviderError, TtsStream};

    /// Counts syntheses, delegating to the sim TTS.
    struct Counting(AtomicUsize, SimTts);

    #[async_trait::async_trait]
    impl TtsProvider for Counting {
        async fn synthesize(
            &self,
            text: &str,
            voice: &str,
            sample_rate: u32,
        ) -> Result<Box<dyn TtsStream>, ProviderError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1.synthesize(text, voice, sample_rate).await
        }
    }

    fn spec(welcome: &str) -> AgentSpec {
        let input: AgentInput = serde_json::from_value(serde_json::json!({
            "name": "Greeter",
            "welcomeMessage": welcome,
        }))
        .unwrap();
        input.into_new_spec().unwrap()
    }

    async fn settle(cache: &WelcomeCache, agent: AgentId) {
        for _ in 0..200 {
            if cache.is_warm(agent) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn agents_on_a_vendor_tts_are_never_warmed_with_the_sim_voice() {
        let tts = Arc::new(Counting(
            AtomicUsize::new(0),
            SimTts::new(SimConfig::default()),
        ));
        let provider: Arc<dyn TtsProvider> = tts.clone();
        let cache = WelcomeCache::new(Arc::new(move |_| Arc::clone(&provider)));
        let (org, a2) = (OrgId::new(), AgentId::new());
        let mut vendor = spec("Hello from Voxline.");
        vendor.tts_provider = TtsVendor::ElevenLabs;
        cache.warm(org, a2, &vendor);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!cache.is_warm(a2));
        assert!(
            cache
                .get(a2, "Hello from Voxline.", &vendor.voice)
                .is_none()
        );
        assert_eq!(tts.0.load(Ordering::SeqCst), 0);
        // Switching back to the sim voice warms it.
        vendor.tts_provider = TtsVendor::Sim;
        cache.warm(org, a2, &vendor);
        settle(&cache, a2).await;
        assert!(cache.is_warm(a2));
    }

    #[tokio::test]
    async fn warms_once_and_only_matching_text_and_voice_hit() {
        let tts = Arc::new(Counting(
            AtomicUsize::new(0),
            SimTts::new(SimConfig::default()),
        ));
        let provider: Arc<dyn TtsProvider> = tts.clone();
        let cache = WelcomeCache::new(Arc::new(move |_| Arc::clone(&provider)));
        let (org, a1) = (OrgId::new(), AgentId::new());
        let greeter = spec("Hello from Voxline.");
        cache.warm(org, a1, &greeter);
        cache.warm(org, a1, &greeter);
        settle(&cache, a1).await;
        assert_eq!(tts.0.load(Ordering::SeqCst), 1);
        let audio = cache
            .get(a1, "Hello from Voxline.", &greeter.voice)
            .unwrap();
        assert!(audio.len() >= 8000 / 2, "{} samples", audio.len());
        assert!(cache.get(a1, "Something else.", &greeter.voice).is_none());
        assert!(cache.get(a1, "Hello from Voxline.", "other").is_none());

        // An edit re-warms with the new text; placeholders drop it.
        cache.warm(org, a1, &spec("Hi again."));
        assert!(
            cache
                .get(a1, "Hello from Voxline.", &greeter.voice)
                .is_none()
        );
        settle(&cache, a1).await;
        assert!(cache.get(a1, "Hi again.", &greeter.voice).is_some());
        cache.warm(org, a1, &spec("Hi {name}."));
        assert!(!cache.is_warm(a1));
        assert_eq!(tts.0.load(Ordering::SeqCst), 2);
    }
}
