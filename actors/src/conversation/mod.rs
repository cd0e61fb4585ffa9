//! The per-call conversation loop: the data plane of an answered call.
//!
//! [`run_conversation`] takes the carrier's media connection and speaks with the caller until
//! the call ends, for each of the three engines (pipeline, announcement, keypad). It reports
//! turns and latencies as they happen through a [`ConversationObserver`] and returns a
//! [`ConversationOutcome`].

mod audio;
mod call_loop;
mod responder;
mod text;
pub mod transport;

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use voxline_media::carrier::{CarrierCodec, CarrierKind, StreamStart};
use voxline_media::turn_taking::TurnConfig;

use crate::ended_reason::EndedReason;
use crate::engine::MachineVerdicts;
use crate::providers::{EndOfTurnModel, Providers};
use crate::tools::{CallTools, ToolCallRecord};

pub use audio::RecordingInfo;
pub use transport::{
    MediaTransport, MemoryTransport, TransportError, TransportMessage, WebSocketTransport,
    memory_pair,
};

/// How the agent runs the call (the agent's `conversationEngine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConversationEngine {
    /// A two-way conversation: ASR → LLM → TTS.
    #[default]
    Pipeline,
    /// Play one message (repeated as configured), then hang up.
    Announcement,
    /// A DTMF menu.
    Keypad,
}

/// One choice of a keypad menu.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeypadOption {
    /// The key that chooses it.
    pub digit: char,
    /// What the agent says when it is chosen.
    pub say: String,
    /// What goes into `extracted.keypad`.
    pub value: serde_json::Value,
}

/// A keypad menu (the agent's `keypad`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeypadMenu {
    /// The menu read to the caller.
    pub prompt: String,
    /// The choices.
    pub options: Vec<KeypadOption>,
    /// How long to wait for a key after the prompt has played.
    pub timeout: Duration,
    /// How many times the menu is offered before giving up.
    pub attempts: u32,
    /// The key that opts the callee out: a short confirmation, then the call ends `opt-out`.
    #[serde(default)]
    pub opt_out_digit: Option<char>,
}

/// What the agent does when an answering machine takes the call (the agent's `voicemail`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VoicemailAction {
    /// Hang up at once; the call ends `voicemail`.
    Hangup,
    /// Wait for the beep (or the greeting's end), say this message (placeholders already
    /// filled), then hang up; the call ends `voicemail`.
    LeaveMessage(String),
}

/// Answering-machine handling for one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoicemailPlan {
    /// Listen for a machine (the engine's detector and the carrier's verdicts); when false,
    /// a machine is talked to like a person.
    pub detect: bool,
    /// What happens on a machine.
    pub action: VoicemailAction,
}

impl Default for VoicemailPlan {
    /// Detection off: what a bare loop (tests, tools) expects. The service turns it on from
    /// the agent's setting.
    fn default() -> Self {
        Self {
            detect: false,
            action: VoicemailAction::Hangup,
        }
    }
}

/// The carrier side of the media connection, handed over by the service.
///
/// The service may read `connected`/`start` itself (to check the media token in the custom
/// parameters) and pass the codec with the parsed start; otherwise the loop waits for `start`.
#[derive(Debug)]
pub struct CarrierSession {
    /// The connection's codec, already fed any messages the service read.
    pub codec: CarrierCodec,
    /// The stream's `start`, if the service has already parsed it.
    pub start: Option<Box<StreamStart>>,
}

impl CarrierSession {
    /// A fresh connection of `kind`; the loop reads `connected` and `start` itself.
    pub fn new(kind: CarrierKind) -> Self {
        Self {
            codec: CarrierCodec::new(kind),
            start: None,
        }
    }

    /// A connection whose `start` the service has parsed with `codec`.
    pub fn started(codec: CarrierCodec, start: Box<StreamStart>) -> Self {
        Self {
            codec,
            start: Some(start),
        }
    }
}

/// Everything the loop needs to know about one call, placeholders already filled.
pub struct ConversationConfig {
    /// Our call id (logs, provider metadata).
    pub call_id: String,
    /// The media connection's carrier side.
    pub carrier: CarrierSession,
    /// Which engine runs the call.
    pub engine: ConversationEngine,
    /// Spoken first (pipeline, keypad) or the announcement itself.
    pub welcome_message: String,
    /// The LLM system prompt (pipeline).
    pub prompt: String,
    /// The agent's language.
    pub language: String,
    /// The TTS voice.
    pub voice: String,
    /// The call is hung up after this long.
    pub max_duration: Duration,
    /// Hang up after this long without caller speech while the agent is quiet.
    pub silence_timeout: Duration,
    /// Phrases that end the call after the agent's reply when either side says them.
    pub end_call_phrases: Vec<String>,
    /// The keypad menu (keypad engine).
    pub keypad: Option<KeypadMenu>,
    /// How many times the announcement plays.
    pub announcement_repeat: u32,
    /// The simulated caller's spoken lines (variable `simScript`), for the sim providers.
    pub sim_script: Vec<String>,
    /// The questions of the agent's analysis plan, one per field, for the sim LLM to ask.
    pub sim_questions: Vec<String>,
    /// Where to write the WAV recording, if the call is recorded.
    pub recording_path: Option<PathBuf>,
    /// The welcome message pre-synthesized at 8 kHz (the warm cache).
    pub welcome_audio: Option<Arc<[i16]>>,
    /// Turn-taking: when the caller's turn ends and what interrupts the agent (speech
    /// onset, minimum utterance, the silence or smart rule, the interruption rule).
    pub turns: TurnConfig,
    /// The end-of-turn model smart turn-taking asks, if one is installed.
    pub end_of_turn: Option<Arc<dyn EndOfTurnModel>>,
    /// How long to wait for the carrier's `start`.
    pub start_timeout: Duration,
    /// How long to wait for the ASR's transcript after the caller stopped talking.
    pub asr_final_timeout: Duration,
    /// What the agent can do besides talking (by default: hang up).
    pub tools: CallTools,
    /// The most tokens one reply may use.
    pub max_tokens: Option<u32>,
    /// Sampling temperature for replies.
    pub temperature: Option<f32>,
    /// A reply is cut after this many sentences, whatever the model still has to say.
    pub max_reply_sentences: usize,
    /// An agent reply saying one of these ends the call after it, as `end_call` would: the
    /// way out when a model server ignores tools.
    pub closing_phrases: Vec<String>,
    /// How long the end of the call waits for tools still running (a booking that has
    /// begun is recorded rather than lost).
    pub tool_drain_timeout: Duration,
    /// What happens when an answering machine answers.
    pub voicemail: VoicemailPlan,
    /// The carrier's answering-machine verdicts, when it was asked for detection.
    pub machine_verdicts: Option<MachineVerdicts>,
}

impl Default for ConversationConfig {
    fn default() -> Self {
        Self {
            call_id: String::new(),
            carrier: CarrierSession::new(CarrierKind::Twilio),
            engine: ConversationEngine::Pipeline,
            welcome_message: String::new(),
            prompt: String::new(),
            language: "en-US".to_owned(),
            voice: "alloy".to_owned(),
            max_duration: Duration::from_secs(600),
            silence_timeout: Duration::from_secs(20),
            end_call_phrases: Vec::new(),
            keypad: None,
            announcement_repeat: 1,
            sim_script: Vec::new(),
            sim_questions: Vec::new(),
            recording_path: None,
            welcome_audio: None,
            turns: TurnConfig::default(),
            end_of_turn: None,
            start_timeout: Duration::from_secs(10),
            asr_final_timeout: Duration::from_secs(3),
            tools: CallTools::default(),
            max_tokens: None,
            temperature: None,
            max_reply_sentences: 12,
            closing_phrases: vec!["goodbye".to_owned(), "good bye".to_owned()],
            tool_drain_timeout: Duration::from_secs(15),
            voicemail: VoicemailPlan::default(),
            machine_verdicts: None,
        }
    }
}

impl fmt::Debug for ConversationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConversationConfig")
            .field("call_id", &self.call_id)
            .field("engine", &self.engine)
            .field("language", &self.language)
            .field("voice", &self.voice)
            .field("turns", &self.turns)
            .field("end_of_turn", &self.end_of_turn.is_some())
            .finish_non_exhaustive()
    }
}

/// Who spoke a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Speaker {
    /// The agent (shown as Bot).
    Assistant,
    /// The person called (shown as Candidate).
    User,
}

impl Speaker {
    /// `assistant` or `user`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Speaker::Assistant => "assistant",
            Speaker::User => "user",
        }
    }
}

/// One finished turn of the transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    /// Who spoke.
    pub speaker: Speaker,
    /// What was said; for the agent, what the caller heard.
    pub text: String,
    /// When the turn ended.
    pub at: SystemTime,
    /// When the turn ended, from the answer.
    pub offset: Duration,
}

/// Where the time went between the caller's end of speech and the agent's first audio frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TurnLatency {
    /// End of speech → first agent audio frame sent.
    pub total: Duration,
    /// End of speech → the endpointer deciding the turn is over.
    pub endpointing: Duration,
    /// Endpoint → final transcript.
    pub asr: Duration,
    /// LLM request → first token.
    pub llm_first_token: Duration,
    /// First TTS request → first audio.
    pub tts_first_byte: Duration,
    /// The rest: sentence assembly, resampling, scheduling.
    pub engine_overhead: Duration,
}

impl TurnLatency {
    /// The record as JSON with millisecond fields (`totalMs`, `endpointingMs`, …).
    pub fn to_json(&self) -> serde_json::Value {
        let ms = |d: Duration| d.as_millis() as u64;
        serde_json::json!({
            "totalMs": ms(self.total),
            "endpointingMs": ms(self.endpointing),
            "asrMs": ms(self.asr),
            "llmFirstTokenMs": ms(self.llm_first_token),
            "ttsFirstByteMs": ms(self.tts_first_byte),
            "engineOverheadMs": ms(self.engine_overhead),
        })
    }
}

/// What a finished conversation produced.
#[derive(Debug, Clone)]
pub struct ConversationOutcome {
    /// Why it ended.
    pub ended_reason: EndedReason,
    /// The failure behind an error reason, for logs.
    pub error: Option<String>,
    /// Every turn in order.
    pub transcript: Vec<Turn>,
    /// Structured results (keypad choice, pipeline DTMF digits).
    pub extracted: serde_json::Map<String, serde_json::Value>,
    /// One record per agent reply to caller speech.
    pub latencies: Vec<TurnLatency>,
    /// Stream start → the greeting's first audio frame.
    pub greeting_latency: Option<Duration>,
    /// When the media stream started; `None` if it never did.
    pub answered_at: Option<SystemTime>,
    /// From the stream start to the end.
    pub duration: Duration,
    /// The finalized recording, if one was written.
    pub recording: Option<RecordingInfo>,
    /// Every tool call, in the order they finished.
    pub tool_calls: Vec<ToolCallRecord>,
    /// Where the callee was transferred, and when.
    pub transfer: Option<(String, SystemTime)>,
}

/// Hears about a conversation while it runs. Calls are made from the loop: they must return
/// quickly (hand work to a channel or a task).
pub trait ConversationObserver: Send + Sync {
    /// The media stream started.
    fn on_answered(&self, _at: SystemTime) {}
    /// A turn ended.
    fn on_turn(&self, _turn: &Turn) {}
    /// An agent reply's first audio went out.
    fn on_latency(&self, _latency: &TurnLatency) {}
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopObserver;

impl ConversationObserver for NoopObserver {}

/// Runs one answered call's conversation until it ends; never fails, the outcome says why it
/// ended. Cancelling `cancel` hangs up with `canceled`.
// A plain fn returning the loop's future: an async wrapper would store its arguments twice
// more in every live call's task.
pub fn run_conversation(
    config: ConversationConfig,
    providers: Providers,
    transport: impl MediaTransport,
    observer: Arc<dyn ConversationObserver>,
    cancel: CancellationToken,
) -> impl Future<Output = ConversationOutcome> {
    call_loop::run(config, providers, transport, observer, cancel)
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tool_tests;
