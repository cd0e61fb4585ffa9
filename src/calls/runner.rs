//! Runs an answered call's conversation: builds the loop's configuration from
//! the agent and the call's variables, persists turns as they end, and stores
//! the transcript, extracted fields, latencies and recording afterwards.

use super::call_tools::{ToolCallContext, ToolDeps, call_tools};
use super::welcome_cache::WelcomeCache;
use crate::calls::media_stream::MediaStream;
use crate::config::Settings;
use crate::domain::agent::{
    AgentSpec, ConversationEngine as AgentEngine, InterruptionMode as AgentInterruptionMode,
    TurnDetectionMode, VoicemailMode, fill_placeholders,
};
use crate::domain::clock::SharedClock;
use crate::domain::{CallId, OrgId};
use crate::providers::resilience::Breakers;
use crate::providers::select::{ProviderSelector, prepare_call, record_usage};
use crate::recordings::{RecordingKey, RecordingStore};
use crate::store::Store;
use crate::store::calls::NewRecording;
use crate::store::tool_calls::{CallToolOutcome, NewToolCall};
use async_trait::async_trait;
use serde_json::{Map, Value};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use voxline_actors::conversation::{
    CarrierSession, ConversationConfig, ConversationEngine, ConversationObserver, KeypadMenu,
    KeypadOption, RecordingInfo, Speaker, Turn, VoicemailAction, VoicemailPlan, run_conversation,
};
use voxline_actors::ended_reason::EndedReason;
use voxline_actors::engine::{CallJob, ConversationRunner, MachineVerdicts};
use voxline_actors::providers::{EndOfTurnModel, ProviderKind};
use voxline_actors::sim::callee::spoken_lines;
use voxline_actors::sim::providers::{SimConfig, SimFailure};
use voxline_media::turn_taking::{
    Backchannels, InterruptionConfig, InterruptionMode as EngineInterruptionMode, TurnConfig,
    TurnMode,
};

/// The service's [`ConversationRunner`].
pub struct CallRunner {
    store: Store,
    settings: Settings,
    selector: ProviderSelector,
    clock: SharedClock,
    welcome_cache: Arc<WelcomeCache>,
    tool_deps: ToolDeps,
    recordings: RecordingStore,
    /// The end-of-turn model smart turn-taking asks, when the server has one installed.
    end_of_turn: Option<Arc<dyn EndOfTurnModel>>,
}

impl CallRunner {
    /// A runner persisting into `store`, greeting from `welcome_cache` when
    /// warm, guarding vendors with the server's `breakers`, and keeping
    /// finished recordings in `recordings`.
    pub fn new(
        store: Store,
        settings: Settings,
        clock: SharedClock,
        welcome_cache: Arc<WelcomeCache>,
        breakers: Breakers,
        tool_deps: ToolDeps,
        recordings: RecordingStore,
    ) -> Self {
        let secret = settings.storage.load_secret().ok();
        let selector = ProviderSelector::new(
            store.clone(),
            &settings.providers,
            secret.as_deref(),
            breakers,
        );
        Self {
            store,
            settings,
            selector,
            clock,
            welcome_cache,
            tool_deps,
            recordings,
            end_of_turn: None,
        }
    }

    /// The runner asking `model` at a caller's pause (agents whose turn detection is
    /// smart, or left to the default, which then is smart).
    pub fn with_end_of_turn(mut self, model: Option<Arc<dyn EndOfTurnModel>>) -> Self {
        self.end_of_turn = model;
        self
    }

    fn sim_config(&self, variables: &Map<String, Value>) -> SimConfig {
        let sim = &self.settings.sim;
        let fail = variables
            .get("simFail")
            .and_then(Value::as_str)
            .and_then(|p| {
                let provider = match p {
                    "asr" => ProviderKind::Asr,
                    "llm" => ProviderKind::Llm,
                    "tts" => ProviderKind::Tts,
                    _ => return None,
                };
                let after_uses = variables
                    .get("simFailAfter")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .unwrap_or(0);
                Some(SimFailure {
                    provider,
                    after_uses,
                })
            });
        SimConfig {
            asr_latency: Duration::from_millis(sim.asr_latency_ms),
            llm_first_token: Duration::from_millis(sim.llm_first_token_ms),
            llm_token_interval: Duration::from_millis(sim.llm_token_interval_ms),
            tts_first_byte: Duration::from_millis(sim.tts_first_byte_ms),
            fail,
            ..SimConfig::default()
        }
    }
}

/// The spoken lines of the call's sim script, as its callee will say them.
fn script_lines(script: &Option<Value>) -> Vec<String> {
    spoken_lines(&crate::calls::sim_callee::script_steps(script))
}

/// The loop's turn-taking rules for an agent: what it set, and what it left unset decided
/// for this call: smart turns when the end-of-turn model is installed (silence timing
/// otherwise), interruptions judged on words when the ASR streams interim results (on
/// their length when it transcribes whole utterances, which gives no words until the end).
pub fn turn_config(spec: &AgentSpec, model_installed: bool) -> TurnConfig {
    let detection = &spec.turn_detection;
    let mode = match detection.mode {
        Some(TurnDetectionMode::Smart) => TurnMode::Smart,
        Some(TurnDetectionMode::Silence) => TurnMode::Silence,
        None if model_installed => TurnMode::Smart,
        None => TurnMode::Silence,
    };
    let setting = &spec.interruption;
    let interruption_mode = match setting.mode {
        Some(AgentInterruptionMode::Words) => EngineInterruptionMode::Words,
        Some(AgentInterruptionMode::Duration) => EngineInterruptionMode::Duration,
        None if spec.asr_provider.transcribes_whole_utterances() => {
            EngineInterruptionMode::Duration
        }
        None => EngineInterruptionMode::Words,
    };
    TurnConfig {
        mode,
        min_silence_ms: detection.min_silence_ms,
        max_silence_ms: detection.max_silence_ms,
        threshold: detection.threshold,
        interruption: InterruptionConfig {
            enabled: spec.interruptible,
            mode: interruption_mode,
            duration_ms: spec.interruption_ms,
            min_words: setting.min_words,
            backchannels: setting
                .backchannels
                .as_ref()
                .map_or_else(Backchannels::default, Backchannels::new),
            resume_after_ms: setting.resume_after_ms,
            ..InterruptionConfig::default()
        },
        ..TurnConfig::default()
    }
}

/// The loop's configuration for an agent and a call's variables.
pub fn conversation_config(
    call_id: CallId,
    carrier: CarrierSession,
    spec: &AgentSpec,
    variables: &Map<String, Value>,
    sim_script: Vec<String>,
    recording_path: Option<std::path::PathBuf>,
    model_installed: bool,
) -> ConversationConfig {
    let engine = match spec.conversation_engine {
        AgentEngine::Pipeline => ConversationEngine::Pipeline,
        AgentEngine::Announcement => ConversationEngine::Announcement,
        AgentEngine::Keypad => ConversationEngine::Keypad,
    };
    let keypad = spec.keypad.as_ref().map(|k| KeypadMenu {
        prompt: fill_placeholders(&k.prompt, variables),
        options: k
            .options
            .iter()
            .filter_map(|o| {
                Some(KeypadOption {
                    digit: o.digit.chars().next()?,
                    say: fill_placeholders(&o.say, variables),
                    value: Value::String(o.value.clone()),
                })
            })
            .collect(),
        timeout: Duration::from_secs(u64::from(k.timeout_seconds)),
        attempts: k.attempts,
        opt_out_digit: k.opt_out_digit.as_deref().and_then(|d| d.chars().next()),
    });
    let voicemail = VoicemailPlan {
        detect: spec.voicemail.detect,
        action: match (spec.voicemail.action, &spec.voicemail.message) {
            (VoicemailMode::LeaveMessage, Some(message)) => {
                VoicemailAction::LeaveMessage(fill_placeholders(message, variables))
            }
            _ => VoicemailAction::Hangup,
        },
    };
    ConversationConfig {
        call_id: call_id.to_string(),
        carrier,
        engine,
        welcome_message: fill_placeholders(&spec.welcome_message, variables),
        prompt: fill_placeholders(&spec.prompt, variables),
        language: spec.language.clone(),
        voice: spec.voice.clone(),
        max_duration: Duration::from_secs(u64::from(spec.max_duration_seconds)),
        silence_timeout: Duration::from_secs(u64::from(spec.silence_timeout_seconds)),
        turns: turn_config(spec, model_installed),
        end_call_phrases: spec.end_call_phrases.clone(),
        keypad,
        announcement_repeat: spec.announcement.repeat,
        sim_script,
        sim_questions: spec.analysis_plan().questions(),
        recording_path,
        max_tokens: Some(spec.max_tokens),
        temperature: spec.temperature,
        voicemail,
        ..ConversationConfig::default()
    }
}

/// The format live calls record in.
const RECORDING_FORMAT: &str = "wav";

impl CallRunner {
    /// Uploads a finished recording (the WAV, and its Ogg Opus copy when one
    /// was written) to the recordings store and records its row. A file that
    /// cannot be uploaded is kept on this node for a later try (and its row
    /// written all the same, so it is served once it is up).
    async fn store_recording(&self, org_id: OrgId, call_id: CallId, recording: &RecordingInfo) {
        let key = RecordingKey::for_call(org_id, call_id, RECORDING_FORMAT);
        let bytes = self.upload_recording(call_id, &recording.path, &key).await;
        let ogg_key = recording
            .ogg_path
            .as_ref()
            .map(|path| (path, RecordingKey::for_call(org_id, call_id, "ogg")));
        let ogg_bytes = match &ogg_key {
            Some((path, key)) => Some(self.upload_recording(call_id, path, key).await),
            None => None,
        };
        let record = NewRecording {
            call_id,
            org_id,
            object_key: key.as_str(),
            format: RECORDING_FORMAT,
            duration_ms: i64::try_from(recording.duration.as_millis()).unwrap_or(i64::MAX),
            bytes: i64::try_from(bytes).unwrap_or(i64::MAX),
            ogg: ogg_key
                .as_ref()
                .zip(ogg_bytes)
                .map(|((_, key), bytes)| (key.as_str(), i64::try_from(bytes).unwrap_or(i64::MAX))),
            now_ms: self.clock.now().timestamp_millis(),
        };
        if let Err(err) = self.store.insert_recording(&record).await {
            tracing::error!(call = %call_id, error = %err, "could not store the recording");
        }
    }

    /// Uploads one recording file under `key`; returns its size. A failed upload
    /// keeps the file on this node for the retry pass.
    async fn upload_recording(
        &self,
        call_id: CallId,
        file: &std::path::Path,
        key: &RecordingKey,
    ) -> u64 {
        let local_bytes = std::fs::metadata(file).map(|m| m.len()).unwrap_or(0);
        match self.recordings.upload(file, key).await {
            Ok(bytes) => bytes,
            Err(err) => {
                match self.recordings.keep_unsent(file, key).await {
                    Ok(kept) => {
                        tracing::error!(call = %call_id, key = %key, kept = %kept.display(), error = %err, "recording upload failed; the file is kept on this node and retried");
                    }
                    Err(keep_err) => {
                        tracing::error!(call = %call_id, key = %key, file = %file.display(), error = %err, keep_error = %keep_err, "recording upload failed; the file stays in staging");
                    }
                }
                local_bytes
            }
        }
    }
}

/// Persists each turn as it ends, in order, off the media loop.
struct TurnWriter {
    tx: mpsc::UnboundedSender<Turn>,
}

impl ConversationObserver for TurnWriter {
    fn on_turn(&self, turn: &Turn) {
        let _ = self.tx.send(turn.clone());
    }
}

fn unix_ms(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// "Bot: …\nCandidate: …" as stored in `transcriptText`.
pub fn transcript_text(turns: &[Turn]) -> String {
    turns
        .iter()
        .map(|t| {
            let who = match t.speaker {
                Speaker::Assistant => "Bot",
                Speaker::User => "Candidate",
            };
            format!("{who}: {}", t.text)
        })
        .collect::<Vec<_>>()
        .join("\n")
}

fn summary(turns: &[Turn], ended_reason: &str) -> String {
    let user_turns = turns.iter().filter(|t| t.speaker == Speaker::User).count();
    let agent_turns = turns.len() - user_turns;
    let last_user = turns
        .iter()
        .rev()
        .find(|t| t.speaker == Speaker::User)
        .map(|t| format!(" Last thing the caller said: \"{}\".", t.text))
        .unwrap_or_default();
    format!(
        "{agent_turns} agent and {user_turns} caller turn(s); ended by {ended_reason}.{last_user}"
    )
}

#[async_trait]
impl ConversationRunner for CallRunner {
    type Media = MediaStream;

    async fn run(
        &self,
        job: CallJob,
        stream: MediaStream,
        _answered_at_ms: i64,
        machine: MachineVerdicts,
        cancel: CancellationToken,
    ) -> EndedReason {
        let MediaStream {
            codec,
            transport,
            start,
        } = stream;
        let (call_id, org_id) = (CallId::from(job.call_id), OrgId::from(job.org_id));
        let (agent, variables_json) = match self.store.call_agent(org_id, call_id).await {
            Ok(Some(found)) => (found.agent, found.variables),
            Ok(None) => {
                tracing::error!(call = %call_id, "no stored call, or its agent is gone, to run");
                return EndedReason::EngineError;
            }
            Err(err) => {
                tracing::error!(call = %call_id, error = %err, "could not read the call's agent");
                return EndedReason::EngineError;
            }
        };
        let agent_id = agent.id;
        let spec = match agent.spec() {
            Ok(spec) => spec,
            Err(err) => {
                tracing::error!(call = %call_id, agent = %agent_id, error = %err, "the stored agent does not parse");
                return EndedReason::EngineError;
            }
        };
        // Stored variables that do not parse end the call rather than run it on none: the
        // agent's prompt would be filled with blanks.
        let variables: Map<String, Value> = match serde_json::from_str(&variables_json) {
            Ok(variables) => variables,
            Err(err) => {
                tracing::error!(call = %call_id, column = "calls.variables", error = %err, "stored variables do not parse");
                return EndedReason::EngineError;
            }
        };
        // The call records on this node's disk; the finished file goes to
        // the shared store when the conversation is over.
        let recording_path = match self
            .recordings
            .staging_file(org_id, call_id, RECORDING_FORMAT)
        {
            Ok(path) => Some(path),
            Err(err) => {
                tracing::warn!(call = %job.call_id, error = %err, "recording disabled: cannot create directory");
                None
            }
        };
        let mut config = conversation_config(
            call_id,
            CarrierSession::started(codec, Box::new(start)),
            &spec,
            &variables,
            script_lines(&job.sim_script),
            recording_path,
            self.end_of_turn.is_some(),
        );
        config.end_of_turn = self.end_of_turn.clone();
        if job.inbound.is_some() {
            // A person who called us is no answering machine.
            config.voicemail.detect = false;
        }
        // A recognizer that transcribes each utterance whole (a Whisper server) answers only
        // once it has decoded all of it: on a busy machine that is seconds, not the 3 s a
        // streaming one needs for its last words, so it gets as long as any vendor answer.
        if spec.asr_provider.transcribes_whole_utterances() {
            config.asr_final_timeout = config
                .asr_final_timeout
                .max(self.settings.providers.read_timeout);
        }
        config.welcome_audio = super::welcome_cache::speaks_with_sim_tts(&spec)
            .then(|| {
                self.welcome_cache
                    .get(agent.id, &config.welcome_message, &config.voice)
            })
            .flatten();
        if config.welcome_audio.is_none() && !agent.dormant {
            // Cold after a restart or an eviction: warm it for the next call.
            self.welcome_cache.warm(org_id, agent.id, &spec);
        }
        let (tools, tool_service) = call_tools(
            &spec,
            self.tool_deps.clone(),
            ToolCallContext {
                call_id,
                org_id,
                variables: variables.clone(),
                phone: job.to.clone(),
                from: job.from.clone(),
                provider: job.provider.clone(),
            },
        );
        config.tools = tools;
        config.machine_verdicts = Some(machine);
        let sim = self.sim_config(&variables);
        let selected = match prepare_call(&self.selector, call_id, org_id, &spec, sim).await {
            Ok(selected) => selected,
            Err(reason) => return reason,
        };
        let providers = selected.providers;

        let (tx, mut rx) = mpsc::unbounded_channel::<Turn>();
        let store = self.store.clone();
        let seq = Arc::new(AtomicI64::new(0));
        let writer = tokio::spawn(async move {
            while let Some(turn) = rx.recv().await {
                let n = seq.fetch_add(1, Ordering::Relaxed);
                if let Err(err) = store
                    .insert_turn(
                        call_id,
                        org_id,
                        n,
                        turn.speaker.as_str(),
                        &turn.text,
                        unix_ms(turn.at),
                    )
                    .await
                {
                    tracing::warn!(call = %call_id, error = %err, "could not store a turn");
                }
            }
        });
        let observer: Arc<dyn ConversationObserver> = Arc::new(TurnWriter { tx });
        // The call's last sign of life is stamped by the node's heartbeat
        // (`cluster::heartbeat`), for every live call at once.
        let outcome = run_conversation(config, providers, transport, observer, cancel).await;
        let _ = writer.await;
        record_usage(&self.store, call_id, &selected.usage).await;

        let reason = outcome.ended_reason;
        if let Some(err) = &outcome.error {
            tracing::warn!(call = %job.call_id, reason = %reason, error = %err, "conversation ended by a provider failure");
        }
        let latencies = Value::Array(outcome.latencies.iter().map(|l| l.to_json()).collect());
        if let Err(err) = self
            .store
            .set_call_results(
                call_id,
                &transcript_text(&outcome.transcript),
                &summary(&outcome.transcript, reason.as_str()),
                &Value::Object(outcome.extracted.clone()).to_string(),
                &latencies.to_string(),
            )
            .await
        {
            tracing::error!(call = %job.call_id, error = %err, "could not store call results");
        }
        let tool_calls: Vec<NewToolCall> = outcome
            .tool_calls
            .iter()
            .map(|call| NewToolCall {
                turn_seq: i64::try_from(call.turn_index).unwrap_or(i64::MAX),
                tool_call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.to_string(),
                result: call.result.as_ref().map(Value::to_string),
                error: call.error.clone(),
                latency_ms: i64::try_from(call.latency.as_millis()).unwrap_or(i64::MAX),
                created_at: unix_ms(call.at),
            })
            .collect();
        let calendar = tool_service.calendar_outcome();
        let tool_outcome = CallToolOutcome {
            calendar_status: calendar.status.map(str::to_owned),
            calendar_event_url: calendar.event_url,
            calendar_error: calendar.error,
            transferred_to: outcome.transfer.as_ref().map(|(to, _)| to.clone()),
            transferred_at: outcome.transfer.as_ref().map(|(_, at)| unix_ms(*at)),
        };
        if let Err(err) = self
            .store
            .record_tool_outcome(call_id, org_id, &tool_calls, &tool_outcome)
            .await
        {
            tracing::error!(call = %job.call_id, error = %err, "could not store the call's tool calls");
        }
        if let Some(rec) = &outcome.recording {
            self.store_recording(org_id, call_id, rec).await;
        }
        reason
    }
}
