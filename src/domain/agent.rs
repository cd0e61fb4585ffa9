//! Agents: the AI persona that runs a call, and the rules for editing one.

use crate::domain::analysis::{AnalysisPlan, PlanError, PlanField};
use crate::domain::calling_hours::CallingHours;
use crate::domain::json_object::{object_only, present_object};
use crate::domain::text::{Line, Prose};
use crate::domain::tools::{AgentTool, ToolLimits, ToolsError, parse_tools, validate_tools};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeSet;
use utoipa::ToSchema;

/// How a call's conversation is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "lowercase")]
pub enum ConversationEngine {
    /// Two-way conversation: ASR → LLM → TTS.
    #[default]
    Pipeline,
    /// Play one message, then hang up.
    Announcement,
    /// A DTMF menu.
    Keypad,
}

impl ConversationEngine {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pipeline => "pipeline",
            Self::Announcement => "announcement",
            Self::Keypad => "keypad",
        }
    }
}

/// Whether an agent can be dialed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum AgentStatus {
    /// Dialable.
    Active,
    /// Deactivated: refused for new calls.
    Inactive,
    /// Soft-deleted: hidden until restored.
    Deleted,
}

impl AgentStatus {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Inactive => "inactive",
            Self::Deleted => "deleted",
        }
    }

    /// Parses the stored form; unknown text reads as inactive so it is never dialed.
    pub fn from_stored(s: &str) -> Self {
        match s {
            "active" => Self::Active,
            "deleted" => Self::Deleted,
            _ => Self::Inactive,
        }
    }
}

/// Declares a closed set of names clients send: the enum (serde and the
/// OpenAPI document use the names), `ALL`, `as_str`, `Display` and `FromStr`.
macro_rules! wire_names {
    (
        $(#[doc = $doc:literal])*
        $name:ident {
            $( $(#[doc = $vdoc:literal])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[doc = $doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        pub enum $name {
            $( $(#[doc = $vdoc])* #[serde(rename = $wire)] $variant, )+
        }

        // By hand: the derive does not see a `rename` whose value came
        // through a macro, and documented the Rust names ("Sim", not "sim").
        impl utoipa::PartialSchema for $name {
            fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
                utoipa::openapi::ObjectBuilder::new()
                    .schema_type(utoipa::openapi::schema::Type::String)
                    .enum_values(Some([$($wire),+]))
                    .description(Some(concat!($($doc),*).trim()))
                    .into()
            }
        }

        impl ToSchema for $name {}

        impl $name {
            /// Every value, in the order the docs list them.
            pub const ALL: &[Self] = &[$(Self::$variant),+];

            /// The wire name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $wire,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl std::str::FromStr for $name {
            type Err = UnknownName;

            fn from_str(s: &str) -> Result<Self, UnknownName> {
                Self::ALL
                    .iter()
                    .copied()
                    .find(|v| v.as_str() == s)
                    .ok_or_else(|| UnknownName(s.to_string()))
            }
        }
    };
}

/// A name outside one of the closed sets below.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown name {0:?}")]
pub struct UnknownName(pub String);

wire_names! {
    /// The LLM vendor of an agent's replies.
    LlmVendor {
        /// The built-in simulator.
        Sim = "sim",
        /// OpenAI or an OpenAI-compatible server.
        OpenAi = "openai",
    }
}

wire_names! {
    /// The ASR vendor that transcribes the callee.
    AsrVendor {
        /// The built-in simulator.
        Sim = "sim",
        /// Deepgram streaming.
        Deepgram = "deepgram",
        /// OpenAI or an OpenAI-compatible server.
        OpenAi = "openai",
        /// A local Whisper server (faster-whisper-server), one request per utterance.
        Whisper = "whisper",
    }
}

impl AsrVendor {
    /// Whether it transcribes each utterance whole once it has ended (and so answers only
    /// after decoding all of it), rather than streaming as the caller talks.
    pub fn transcribes_whole_utterances(self) -> bool {
        matches!(self, Self::OpenAi | Self::Whisper)
    }
}

wire_names! {
    /// The TTS vendor that speaks for the agent.
    TtsVendor {
        /// The built-in simulator.
        Sim = "sim",
        /// OpenAI or an OpenAI-compatible server.
        OpenAi = "openai",
        /// ElevenLabs.
        ElevenLabs = "elevenlabs",
        /// The local espeak-ng program.
        Espeak = "espeak",
        /// A local Piper server (`python -m piper.http_server`).
        Piper = "piper",
    }
}

wire_names! {
    /// The carrier a call rings through.
    TelephonyProvider {
        /// The built-in simulated carrier.
        Sim = "sim",
        /// Twilio.
        Twilio = "twilio",
        /// Plivo.
        Plivo = "plivo",
        /// Exotel.
        Exotel = "exotel",
        /// Vonage.
        Vonage = "vonage",
        /// Telnyx.
        Telnyx = "telnyx",
        /// The workspace's own SIP trunk or PBX.
        Sip = "sip",
    }
}

/// Re-dial policy for unanswered attempts (decisions §5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RetryPolicy {
    /// Total attempts including the first.
    #[schema(minimum = 1, maximum = 10)]
    pub max_attempts: u32,
    /// Wait between attempts.
    #[schema(maximum = 604_800)]
    pub retry_after_seconds: u32,
    /// Outcomes that trigger a re-dial: no-answer, busy, failed, voicemail.
    pub retry_on: Vec<String>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 1,
            retry_after_seconds: 300,
            retry_on: vec!["no-answer".into(), "busy".into(), "failed".into()],
        }
    }
}

/// A scorecard column the post-call rating fills.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RatingColumn {
    /// Column name.
    pub name: String,
    /// What the column judges.
    #[serde(default)]
    pub description: String,
}

/// The rating template attached to an agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RatingTemplate {
    /// Columns scored after each call.
    pub columns: Vec<RatingColumn>,
}

/// One field extracted from the conversation after the call: the spec's spelling of
/// an analysis plan field.
pub type ExtractionField = PlanField;

/// Fields to extract after the call (`analysis.fields`, as the spec spells it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Extraction {
    /// The fields.
    pub fields: Vec<ExtractionField>,
}

/// One keypad menu choice.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct KeypadOption {
    /// The key: 0-9, * or #.
    pub digit: String,
    /// What the agent says when chosen.
    #[serde(default)]
    pub say: String,
    /// Value stored in the call's extracted fields.
    #[serde(default)]
    pub value: String,
}

/// The DTMF menu of a keypad agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KeypadConfig {
    /// The menu read to the caller.
    pub prompt: String,
    /// The choices.
    pub options: Vec<KeypadOption>,
    /// Seconds to wait for a key before re-prompting.
    #[serde(default = "default_keypad_timeout")]
    pub timeout_seconds: u32,
    /// Prompts before giving up.
    #[serde(default = "default_keypad_attempts")]
    pub attempts: u32,
    /// A key (0-9, * or #, none of the options' keys) that opts the callee
    /// out: the agent says a short confirmation, the call ends `opt-out`, and
    /// the number goes on the workspace's do-not-call list (source `opt-out`,
    /// event `number.opted_out`). Name it in the prompt ("press 9 to stop
    /// these calls").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[0-9*#]$", min_length = 1, max_length = 1)]
    pub opt_out_digit: Option<String>,
}

fn default_keypad_timeout() -> u32 {
    8
}

fn default_keypad_attempts() -> u32 {
    3
}

/// Announcement engine settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnnouncementConfig {
    /// How many times the message is played.
    pub repeat: u32,
}

impl Default for AnnouncementConfig {
    fn default() -> Self {
        Self { repeat: 1 }
    }
}

/// What an agent does when an answering machine takes the call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema, Default)]
#[serde(rename_all = "camelCase")]
pub enum VoicemailMode {
    /// Hang up at once (the default); the call ends `voicemail`.
    #[default]
    Hangup,
    /// Wait for the beep, say `message`, then hang up; the call ends `voicemail`.
    LeaveMessage,
}

impl VoicemailMode {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Hangup => "hangup",
            Self::LeaveMessage => "leaveMessage",
        }
    }
}

/// Longest voicemail message, in characters.
pub const MAX_VOICEMAIL_MESSAGE_CHARS: usize = 1_000;

/// The agent's answering-machine setting (`voicemail`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct VoicemailSetting {
    /// `hangup` or `leaveMessage`.
    pub action: VoicemailMode,
    /// What `leaveMessage` says after the beep; may hold {placeholders}.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Whether answering machines are detected at all (the engine listens, and the carrier
    /// is asked where it offers detection); false talks to a machine like a person.
    #[serde(default = "default_true")]
    pub detect: bool,
}

fn default_true() -> bool {
    true
}

impl Default for VoicemailSetting {
    fn default() -> Self {
        Self {
            action: VoicemailMode::Hangup,
            message: None,
            detect: true,
        }
    }
}

/// A client's `voicemail` body: the whole setting, unknown fields refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VoicemailInput {
    /// `hangup` or `leaveMessage`.
    pub action: VoicemailMode,
    /// Required (not blank) for `leaveMessage`; may hold {placeholders}.
    #[schema(value_type = Option<String>, max_length = 1_000)]
    pub message: Option<Prose<1_000>>,
    /// Detect answering machines (default true).
    pub detect: Option<bool>,
}

impl VoicemailInput {
    /// The setting it asks for; a `leaveMessage` without a message is refused.
    fn into_setting(self) -> Result<VoicemailSetting, AgentSpecError> {
        let message = self
            .message
            .map(Prose::into_string)
            .filter(|text| !text.trim().is_empty());
        if self.action == VoicemailMode::LeaveMessage && message.is_none() {
            return Err(AgentSpecError::VoicemailMessage);
        }
        Ok(VoicemailSetting {
            action: self.action,
            message,
            detect: self.detect.unwrap_or(true),
        })
    }
}

/// How the end of the caller's turn is found (`turnDetection.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum TurnDetectionMode {
    /// The caller's words, the end-of-turn model and silence together: waits through a
    /// pause inside an answer ("I live in … Pune", a phone number read in groups) and
    /// answers a complete one sooner. Without the model installed, silence with the words.
    Smart,
    /// A fixed silence (600 ms) ends the turn.
    Silence,
}

/// Shortest short pause, in ms.
const MIN_SILENCE_RANGE: (i64, i64) = (100, 1_000);
/// Longest wait on a pause, in ms.
const MAX_SILENCE_RANGE: (i64, i64) = (500, 5_000);
/// Default short pause at which the turn is judged, in ms.
pub const DEFAULT_MIN_SILENCE_MS: u32 = 200;
/// Default longest wait on a pause that is not the end, in ms.
pub const DEFAULT_MAX_SILENCE_MS: u32 = 2_500;
/// Default model probability that ends a turn.
pub const DEFAULT_TURN_THRESHOLD: f32 = 0.5;

/// The agent's turn detection (`turnDetection`): how it knows the caller has finished.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct TurnDetection {
    /// `smart` or `silence`; absent: smart when the end-of-turn model is installed on the
    /// server, silence otherwise (decided when each call starts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<TurnDetectionMode>,
    /// Smart mode: the short pause at which the words and the model are asked (100–1000,
    /// default 200).
    #[serde(default = "default_min_silence_ms")]
    #[schema(minimum = 100, maximum = 1_000)]
    pub min_silence_ms: u32,
    /// Smart mode: the longest the agent waits on a pause the words or the model say is not
    /// the end (500–5000, at least `minSilenceMs`, default 2500).
    #[serde(default = "default_max_silence_ms")]
    #[schema(minimum = 500, maximum = 5_000)]
    pub max_silence_ms: u32,
    /// Smart mode: the model's probability at or above which the turn is complete (0–1,
    /// default 0.5).
    #[serde(default = "default_turn_threshold")]
    #[schema(minimum = 0, maximum = 1)]
    pub threshold: f32,
}

fn default_min_silence_ms() -> u32 {
    DEFAULT_MIN_SILENCE_MS
}

fn default_max_silence_ms() -> u32 {
    DEFAULT_MAX_SILENCE_MS
}

fn default_turn_threshold() -> f32 {
    DEFAULT_TURN_THRESHOLD
}

impl Default for TurnDetection {
    fn default() -> Self {
        Self {
            mode: None,
            min_silence_ms: DEFAULT_MIN_SILENCE_MS,
            max_silence_ms: DEFAULT_MAX_SILENCE_MS,
            threshold: DEFAULT_TURN_THRESHOLD,
        }
    }
}

impl TurnDetection {
    fn validate(&self) -> Result<(), AgentSpecError> {
        let (min, max) = MIN_SILENCE_RANGE;
        within(
            "turnDetection.minSilenceMs",
            i64::from(self.min_silence_ms),
            min,
            max,
        )?;
        let (min, max) = MAX_SILENCE_RANGE;
        within(
            "turnDetection.maxSilenceMs",
            i64::from(self.max_silence_ms),
            min.max(i64::from(self.min_silence_ms)),
            max,
        )?;
        if !(0.0..=1.0).contains(&self.threshold) {
            return Err(AgentSpecError::OutOfRange {
                field: "turnDetection.threshold",
                min: 0,
                max: 1,
            });
        }
        Ok(())
    }
}

/// A client's `turnDetection` body: the whole setting (fields left out take their
/// defaults), unknown fields refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TurnDetectionInput {
    /// `smart` or `silence`; absent: smart when the model is installed.
    pub mode: Option<TurnDetectionMode>,
    /// See [`TurnDetection::min_silence_ms`].
    #[schema(minimum = 100, maximum = 1_000)]
    pub min_silence_ms: Option<u32>,
    /// See [`TurnDetection::max_silence_ms`].
    #[schema(minimum = 500, maximum = 5_000)]
    pub max_silence_ms: Option<u32>,
    /// See [`TurnDetection::threshold`].
    #[schema(minimum = 0, maximum = 1)]
    pub threshold: Option<f32>,
}

impl TurnDetectionInput {
    fn into_setting(self) -> TurnDetection {
        TurnDetection {
            mode: self.mode,
            min_silence_ms: self.min_silence_ms.unwrap_or(DEFAULT_MIN_SILENCE_MS),
            max_silence_ms: self.max_silence_ms.unwrap_or(DEFAULT_MAX_SILENCE_MS),
            threshold: self.threshold.unwrap_or(DEFAULT_TURN_THRESHOLD),
        }
    }
}

/// What makes the caller's talk over the agent an interruption (`interruption.mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum InterruptionMode {
    /// The agent pauses as soon as the caller speaks, resumes after a backchannel ("uh-huh",
    /// "haan") or noise, and stops for anything more.
    Words,
    /// The agent stops after `interruptionMs` of caller speech.
    Duration,
}

/// Default number of backchannel words that still do not interrupt.
pub const DEFAULT_MIN_WORDS: u32 = 3;
/// Default quiet after wordless talk before the paused agent resumes, in ms.
pub const DEFAULT_RESUME_AFTER_MS: u32 = 800;
/// Most backchannel phrases an agent may list.
pub const MAX_BACKCHANNELS: usize = 100;
/// Longest backchannel phrase, in characters.
pub const MAX_BACKCHANNEL_CHARS: usize = 40;

/// The agent's interruption rule (`interruption`); `interruptible: false` turns
/// interruptions off whatever this says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct InterruptionSetting {
    /// `words` or `duration`; absent: words with a streaming ASR (sim, deepgram), duration
    /// with one that transcribes whole utterances (openai, whisper), decided per call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<InterruptionMode>,
    /// Words mode: more words than this interrupt even if all are backchannels (1–20,
    /// default 3).
    #[serde(default = "default_min_words")]
    #[schema(minimum = 1, maximum = 20)]
    pub min_words: u32,
    /// Words mode: what the caller may say without interrupting; absent: English and
    /// Hindi (romanised) acknowledgements ("uh-huh", "yeah", "okay", "right", "haan",
    /// "achha", …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backchannels: Option<Vec<String>>,
    /// Words mode: quiet after talk without words before the agent resumes (200–5000,
    /// default 800).
    #[serde(default = "default_resume_after_ms")]
    #[schema(minimum = 200, maximum = 5_000)]
    pub resume_after_ms: u32,
}

fn default_min_words() -> u32 {
    DEFAULT_MIN_WORDS
}

fn default_resume_after_ms() -> u32 {
    DEFAULT_RESUME_AFTER_MS
}

impl Default for InterruptionSetting {
    fn default() -> Self {
        Self {
            mode: None,
            min_words: DEFAULT_MIN_WORDS,
            backchannels: None,
            resume_after_ms: DEFAULT_RESUME_AFTER_MS,
        }
    }
}

impl InterruptionSetting {
    fn validate(&self) -> Result<(), AgentSpecError> {
        within("interruption.minWords", i64::from(self.min_words), 1, 20)?;
        within(
            "interruption.resumeAfterMs",
            i64::from(self.resume_after_ms),
            200,
            5_000,
        )?;
        if let Some(phrases) = &self.backchannels {
            if phrases.len() > MAX_BACKCHANNELS {
                return Err(AgentSpecError::TooMany {
                    field: "interruption.backchannels",
                    max: MAX_BACKCHANNELS,
                });
            }
            for phrase in phrases {
                if phrase.trim().is_empty() {
                    return Err(AgentSpecError::Blank("interruption.backchannels[]"));
                }
                if phrase.chars().count() > MAX_BACKCHANNEL_CHARS {
                    return Err(AgentSpecError::TooLong {
                        field: "interruption.backchannels[]",
                        max: MAX_BACKCHANNEL_CHARS,
                    });
                }
            }
        }
        Ok(())
    }
}

/// A client's `interruption` body: the whole setting (fields left out take their
/// defaults), unknown fields refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InterruptionInput {
    /// `words` or `duration`; absent: chosen by the ASR (see [`InterruptionSetting::mode`]).
    pub mode: Option<InterruptionMode>,
    /// See [`InterruptionSetting::min_words`].
    #[schema(minimum = 1, maximum = 20)]
    pub min_words: Option<u32>,
    /// See [`InterruptionSetting::backchannels`]; each phrase one line of at most 40
    /// characters, at most 100 of them.
    #[schema(value_type = Option<Vec<String>>, max_items = 100)]
    pub backchannels: Option<Vec<Line<40>>>,
    /// See [`InterruptionSetting::resume_after_ms`].
    #[schema(minimum = 200, maximum = 5_000)]
    pub resume_after_ms: Option<u32>,
}

impl InterruptionInput {
    fn into_setting(self) -> InterruptionSetting {
        InterruptionSetting {
            mode: self.mode,
            min_words: self.min_words.unwrap_or(DEFAULT_MIN_WORDS),
            backchannels: self
                .backchannels
                .map(|phrases| phrases.into_iter().map(Line::into_string).collect()),
            resume_after_ms: self.resume_after_ms.unwrap_or(DEFAULT_RESUME_AFTER_MS),
        }
    }
}

/// Everything a client configures on an agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentSpec {
    /// Shown in dashboards and on call records.
    pub name: String,
    /// pipeline, announcement or keypad.
    pub conversation_engine: ConversationEngine,
    /// Spoken when the call connects; may hold {placeholders}.
    pub welcome_message: String,
    /// Instructions for the rest of the call; may hold {placeholders}.
    pub prompt: String,
    /// BCP 47 language tag, e.g. en-IN.
    pub language: String,
    /// LLM vendor: sim or openai.
    pub llm_provider: LlmVendor,
    /// Model name passed to the LLM vendor.
    pub llm_model: String,
    /// ASR vendor: sim, deepgram or openai.
    pub asr_provider: AsrVendor,
    /// TTS vendor: sim, openai, elevenlabs or espeak.
    pub tts_provider: TtsVendor,
    /// Voice name passed to the TTS vendor.
    pub voice: String,
    /// Carrier: sim, twilio, plivo, exotel, vonage or telnyx.
    pub telephony_provider: TelephonyProvider,
    /// Hard cap on call length.
    pub max_duration_seconds: u32,
    /// Caller silence that ends the call.
    pub silence_timeout_seconds: u32,
    /// Whether caller speech interrupts the agent.
    pub interruptible: bool,
    /// How long the caller must talk over the agent before it stops (100–2000 ms, default
    /// 400): shorter stops sooner, longer lets a "mm-hmm" pass.
    #[serde(default = "default_interruption_ms")]
    pub interruption_ms: u32,
    /// Phrases that end the call when the agent says them.
    pub end_call_phrases: Vec<String>,
    /// Re-dial policy.
    pub retry_policy: RetryPolicy,
    /// Post-call scorecard template.
    pub rating_template: Option<RatingTemplate>,
    /// Post-call extraction fields: the same list as `analysis.fields`.
    pub extraction: Option<Extraction>,
    /// Post-call analysis plan: summary, extracted fields, success rubric, webhook wait.
    #[serde(default)]
    pub analysis: Option<AnalysisPlan>,
    /// Keypad menu (keypad engine).
    pub keypad: Option<KeypadConfig>,
    /// Announcement settings (announcement engine).
    pub announcement: AnnouncementConfig,
    /// Bundled per-minute rate in paise.
    pub per_minute_rate_paise: i64,
    /// Per-minute rate in paise of the calls the agent answers (inbound);
    /// null: the same as `perMinuteRatePaise`.
    #[serde(default)]
    pub inbound_per_minute_rate_paise: Option<i64>,
    /// What the agent can do during the call; none means only hanging up (`endCall`).
    #[serde(default)]
    pub tools: Vec<AgentTool>,
    /// The most tokens the model may generate in one reply (1–4096, default 150: a spoken
    /// turn, so a slow or chatty model cannot talk for minutes).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Sampling temperature (0–2); the model server's default when absent.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// How many tool calls the model may make per reply and per call.
    #[serde(default)]
    pub tool_limits: ToolLimits,
    /// What happens when an answering machine answers (default: hang up).
    #[serde(default)]
    pub voicemail: VoicemailSetting,
    /// How the end of the caller's turn is found.
    #[serde(default)]
    pub turn_detection: TurnDetection,
    /// What makes the caller's talk over the agent an interruption.
    #[serde(default)]
    pub interruption: InterruptionSetting,
    /// Lawful-calling rules the agent follows during a call.
    #[serde(default)]
    pub compliance: Compliance,
}

/// An agent's lawful-calling rules (issue 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Compliance {
    /// When the callee asks not to be called again, the agent confirms, hangs
    /// up (`endedReason: opt-out`) and the number goes on the workspace's
    /// do-not-call list (source `opt-out`); the model is offered an `opt_out`
    /// tool for it. Default true.
    #[serde(default = "default_opt_out")]
    pub opt_out: bool,
    /// The agent's own calling hours, over the workspace's (a batch's own
    /// override this); null keeps the workspace's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub calling_hours: Option<CallingHours>,
    /// Whether `POST /api/calls` may waive the calling hours with
    /// `"respectCallingHours": false` (recorded on the call). Default false.
    #[serde(default)]
    pub allow_calling_hours_override: bool,
    /// Alert dials of this agent are emergencies: they ring outside calling
    /// hours too, each call recording it. Default false.
    #[serde(default)]
    pub bypass_calling_hours: bool,
}

fn default_opt_out() -> bool {
    true
}

impl Default for Compliance {
    fn default() -> Self {
        Self {
            opt_out: true,
            calling_hours: None,
            allow_calling_hours_override: false,
            bypass_calling_hours: false,
        }
    }
}

/// The wire names of [`TelephonyProvider`], for the admin CLI's `--provider`.
pub const TELEPHONY_PROVIDERS: &[&str] = &[
    "sim", "twilio", "plivo", "exotel", "vonage", "telnyx", "sip",
];

/// Outcomes a retry policy may re-dial on.
const RETRY_OUTCOMES: &[&str] = &["no-answer", "busy", "failed", "voicemail"];

/// Why an agent spec is refused; each message names the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AgentSpecError {
    /// A new agent without a name.
    #[error("name is required")]
    NameMissing,
    /// A blank name.
    #[error("name is required and must not be blank")]
    NameBlank,
    /// Not a BCP 47 language tag.
    #[error("language must be a BCP 47 tag such as en or en-IN")]
    Language,
    /// A text field that must hold something.
    #[error("{0} must not be blank")]
    Blank(&'static str),
    /// A text field over its length cap.
    #[error("{field} must be at most {max} characters")]
    TooLong {
        /// The field's path.
        field: &'static str,
        /// Its cap.
        max: usize,
    },
    /// A number outside its range.
    #[error("{field} must be between {min} and {max}")]
    OutOfRange {
        /// The field's path.
        field: &'static str,
        /// Smallest allowed.
        min: i64,
        /// Largest allowed.
        max: i64,
    },
    /// A number over its cap.
    #[error("{field} must be at most {max}")]
    TooLarge {
        /// The field's path.
        field: &'static str,
        /// Largest allowed.
        max: i64,
    },
    /// A value outside a closed list.
    #[error("{field} must be one of {}", .allowed.join(", "))]
    NotOneOf {
        /// The field's path.
        field: &'static str,
        /// The allowed values.
        allowed: &'static [&'static str],
    },
    /// A part the conversation engine needs is missing.
    #[error("{field} is required when conversationEngine is {}", .engine.as_str())]
    RequiredFor {
        /// The field's path.
        field: &'static str,
        /// The engine that needs it.
        engine: ConversationEngine,
    },
    /// A keypad without choices.
    #[error("keypad.options must hold at least one option")]
    NoKeypadOptions,
    /// A keypad key that is not a phone key.
    #[error("keypad.options[].digit must be one of 0-9, * or #")]
    KeypadDigit,
    /// The same keypad key twice.
    #[error("keypad.options[].digit {0} is repeated")]
    RepeatedDigit(String),
    /// An opt-out key that is not a phone key, or is an option's key too.
    #[error("keypad.optOutDigit must be one of 0-9, * or # and not an option's digit")]
    OptOutDigit,
    /// An analysis plan that does not hold together; names the path.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// Different field lists in `analysis.fields` and `extraction.fields`.
    #[error("extraction.fields differs from analysis.fields; give the fields once")]
    FieldsTwice,
    /// Tools or tool limits that do not hold together; names the path.
    #[error(transparent)]
    Tools(#[from] ToolsError),
    /// A list longer than its cap.
    #[error("{field} must hold at most {max} entries")]
    TooMany {
        /// The field's path.
        field: &'static str,
        /// Its cap.
        max: usize,
    },
    /// `leaveMessage` with nothing to say.
    #[error(
        "voicemail.message is required and must not be blank when voicemail.action is leaveMessage"
    )]
    VoicemailMessage,
}

impl AgentSpecError {
    /// The path of the field the refusal is about (`name`, `retryPolicy.maxAttempts`,
    /// `analysis.fields[0].options`, `tools[2].url`), so a form can show it beside
    /// that field.
    pub fn field(&self) -> String {
        match self {
            Self::NameMissing | Self::NameBlank => "name".into(),
            Self::Language => "language".into(),
            Self::Blank(field)
            | Self::TooLong { field, .. }
            | Self::OutOfRange { field, .. }
            | Self::TooLarge { field, .. }
            | Self::NotOneOf { field, .. }
            | Self::RequiredFor { field, .. }
            | Self::TooMany { field, .. } => (*field).into(),
            Self::NoKeypadOptions => "keypad.options".into(),
            Self::KeypadDigit | Self::RepeatedDigit(_) => "keypad.options[].digit".into(),
            Self::OptOutDigit => "keypad.optOutDigit".into(),
            Self::Plan(err) => err.path.clone(),
            Self::FieldsTwice => "extraction.fields".into(),
            Self::Tools(err) => err.path.clone(),
            Self::VoicemailMessage => "voicemail.message".into(),
        }
    }
}

/// `Err(OutOfRange)` unless `value` lies in `min..=max`.
fn within(field: &'static str, value: i64, min: i64, max: i64) -> Result<(), AgentSpecError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(AgentSpecError::OutOfRange { field, min, max })
    }
}

/// Tokens a reply may use unless the agent says otherwise: about a minute of speech at most.
pub const DEFAULT_MAX_TOKENS: u32 = 150;

fn default_max_tokens() -> u32 {
    DEFAULT_MAX_TOKENS
}

/// Caller speech over the agent that stops it, unless the agent says otherwise.
pub const DEFAULT_INTERRUPTION_MS: u32 = 400;

fn default_interruption_ms() -> u32 {
    DEFAULT_INTERRUPTION_MS
}

/// Default bundled rate: ₹6 a minute.
pub const DEFAULT_RATE_PAISE: i64 = 600;

impl AgentSpec {
    /// The analysis plan calls of this agent get: the saved one, or the default (a
    /// summary) with the fields an older spec listed under `extraction`.
    pub fn analysis_plan(&self) -> AnalysisPlan {
        match (&self.analysis, &self.extraction) {
            (Some(plan), _) => plan.clone(),
            (None, Some(extraction)) => AnalysisPlan {
                fields: extraction.fields.clone(),
                ..AnalysisPlan::default()
            },
            (None, None) => AnalysisPlan::default(),
        }
    }

    /// The per-minute rate of the calls the agent answers.
    pub fn inbound_rate_paise(&self) -> i64 {
        self.inbound_per_minute_rate_paise
            .unwrap_or(self.per_minute_rate_paise)
    }

    /// Whether calls of this agent bypass the concurrency slots (announcements do).
    pub fn bypasses_slots(&self) -> bool {
        self.conversation_engine == ConversationEngine::Announcement
    }

    /// A spec with every default and the given name.
    pub fn with_name(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            conversation_engine: ConversationEngine::Pipeline,
            welcome_message: String::new(),
            prompt: String::new(),
            language: "en-IN".into(),
            llm_provider: LlmVendor::Sim,
            llm_model: "sim-1".into(),
            asr_provider: AsrVendor::Sim,
            tts_provider: TtsVendor::Sim,
            voice: "sim-default".into(),
            telephony_provider: TelephonyProvider::Sim,
            max_duration_seconds: 600,
            silence_timeout_seconds: 20,
            interruptible: true,
            end_call_phrases: Vec::new(),
            retry_policy: RetryPolicy::default(),
            rating_template: None,
            extraction: None,
            analysis: None,
            keypad: None,
            announcement: AnnouncementConfig::default(),
            per_minute_rate_paise: DEFAULT_RATE_PAISE,
            inbound_per_minute_rate_paise: None,
            tools: Vec::new(),
            max_tokens: DEFAULT_MAX_TOKENS,
            interruption_ms: DEFAULT_INTERRUPTION_MS,
            temperature: None,
            tool_limits: ToolLimits::default(),
            voicemail: VoicemailSetting::default(),
            turn_detection: TurnDetection::default(),
            interruption: InterruptionSetting::default(),
            compliance: Compliance::default(),
        }
    }

    /// Placeholders used by the welcome message and prompt, sorted and unique.
    pub fn placeholders(&self) -> Vec<String> {
        let mut set = BTreeSet::new();
        for text in [&self.welcome_message, &self.prompt] {
            for name in placeholder_names(text) {
                set.insert(name.to_string());
            }
        }
        if let Some(keypad) = &self.keypad {
            for name in placeholder_names(&keypad.prompt) {
                set.insert(name.to_string());
            }
        }
        if let Some(message) = &self.voicemail.message {
            for name in placeholder_names(message) {
                set.insert(name.to_string());
            }
        }
        set.into_iter().collect()
    }

    /// Checks cross-field rules; the error names the field. Vendor names are
    /// already known: they are enums.
    pub fn validate(&self) -> Result<(), AgentSpecError> {
        use AgentSpecError as E;
        let name = self.name.trim();
        if name.is_empty() {
            return Err(E::NameBlank);
        }
        if name.chars().count() > 200 {
            return Err(E::TooLong {
                field: "name",
                max: 200,
            });
        }
        if !is_language_tag(&self.language) {
            return Err(E::Language);
        }
        if self.llm_model.trim().is_empty() {
            return Err(E::Blank("llmModel"));
        }
        within(
            "maxDurationSeconds",
            i64::from(self.max_duration_seconds),
            10,
            14_400,
        )?;
        within(
            "silenceTimeoutSeconds",
            i64::from(self.silence_timeout_seconds),
            2,
            3_600,
        )?;
        if self.welcome_message.len() > 4_000 {
            return Err(E::TooLong {
                field: "welcomeMessage",
                max: 4_000,
            });
        }
        if self.prompt.len() > 100_000 {
            return Err(E::TooLong {
                field: "prompt",
                max: 100_000,
            });
        }
        within("maxTokens", i64::from(self.max_tokens), 1, 4_096)?;
        within(
            "interruptionMs",
            i64::from(self.interruption_ms),
            100,
            2_000,
        )?;
        if let Some(temperature) = self.temperature
            && !(0.0..=2.0).contains(&temperature)
        {
            return Err(E::OutOfRange {
                field: "temperature",
                min: 0,
                max: 2,
            });
        }
        let policy = &self.retry_policy;
        within(
            "retryPolicy.maxAttempts",
            i64::from(policy.max_attempts),
            1,
            10,
        )?;
        if policy.retry_after_seconds > 7 * 86_400 {
            return Err(E::TooLarge {
                field: "retryPolicy.retryAfterSeconds",
                max: 7 * 86_400,
            });
        }
        if policy
            .retry_on
            .iter()
            .any(|o| !RETRY_OUTCOMES.contains(&o.as_str()))
        {
            return Err(E::NotOneOf {
                field: "retryPolicy.retryOn",
                allowed: RETRY_OUTCOMES,
            });
        }
        within(
            "announcement.repeat",
            i64::from(self.announcement.repeat),
            1,
            10,
        )?;
        within("perMinuteRatePaise", self.per_minute_rate_paise, 0, 100_000)?;
        if let Some(rate) = self.inbound_per_minute_rate_paise {
            within("inboundPerMinuteRatePaise", rate, 0, 100_000)?;
        }
        if let Some(template) = &self.rating_template
            && template.columns.iter().any(|c| c.name.trim().is_empty())
        {
            return Err(E::Blank("ratingTemplate.columns[].name"));
        }
        match (&self.keypad, self.conversation_engine) {
            (None, ConversationEngine::Keypad) => {
                return Err(E::RequiredFor {
                    field: "keypad",
                    engine: ConversationEngine::Keypad,
                });
            }
            (Some(keypad), _) => validate_keypad(keypad)?,
            _ => {}
        }
        if self.conversation_engine == ConversationEngine::Announcement
            && self.welcome_message.trim().is_empty()
        {
            return Err(E::RequiredFor {
                field: "welcomeMessage",
                engine: ConversationEngine::Announcement,
            });
        }
        validate_tools(&self.tools)?;
        self.tool_limits.validate()?;
        self.turn_detection.validate()?;
        self.interruption.validate()?;
        let voicemail = &self.voicemail;
        let message = voicemail.message.as_deref().unwrap_or("");
        if voicemail.action == VoicemailMode::LeaveMessage && message.trim().is_empty() {
            return Err(E::VoicemailMessage);
        }
        if message.chars().count() > MAX_VOICEMAIL_MESSAGE_CHARS {
            return Err(E::TooLong {
                field: "voicemail.message",
                max: MAX_VOICEMAIL_MESSAGE_CHARS,
            });
        }
        Ok(())
    }
}

/// Whether `key` is one phone key: 0-9, * or #.
fn is_phone_key(key: &str) -> bool {
    key.len() == 1
        && key
            .chars()
            .all(|c| c.is_ascii_digit() || c == '*' || c == '#')
}

fn validate_keypad(keypad: &KeypadConfig) -> Result<(), AgentSpecError> {
    if keypad.prompt.trim().is_empty() {
        return Err(AgentSpecError::Blank("keypad.prompt"));
    }
    if keypad.options.is_empty() {
        return Err(AgentSpecError::NoKeypadOptions);
    }
    let mut seen = BTreeSet::new();
    for option in &keypad.options {
        if !is_phone_key(&option.digit) {
            return Err(AgentSpecError::KeypadDigit);
        }
        if !seen.insert(option.digit.clone()) {
            return Err(AgentSpecError::RepeatedDigit(option.digit.clone()));
        }
    }
    if let Some(key) = &keypad.opt_out_digit
        && (!is_phone_key(key) || seen.contains(key))
    {
        return Err(AgentSpecError::OptOutDigit);
    }
    within(
        "keypad.timeoutSeconds",
        i64::from(keypad.timeout_seconds),
        1,
        60,
    )?;
    within("keypad.attempts", i64::from(keypad.attempts), 1, 10)
}

fn is_language_tag(tag: &str) -> bool {
    let mut parts = tag.split('-');
    let primary_ok = parts
        .next()
        .is_some_and(|p| (2..=3).contains(&p.len()) && p.chars().all(|c| c.is_ascii_alphabetic()));
    primary_ok
        && parts.all(|p| (2..=8).contains(&p.len()) && p.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// Names of `{placeholder}`s in `text`, in order of appearance.
pub fn placeholder_names(text: &str) -> impl Iterator<Item = &str> {
    text.split('{').skip(1).filter_map(|chunk| {
        let name = chunk.split_once('}')?.0;
        let valid = !name.is_empty()
            && name.len() <= 64
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        valid.then_some(name)
    })
}

/// Replaces `{name}` placeholders with the variables' values; unknown ones stay as written.
pub fn fill_placeholders(
    text: &str,
    variables: &serde_json::Map<String, serde_json::Value>,
) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) => {
                let name = &after[..close];
                match variables.get(name) {
                    Some(serde_json::Value::String(s)) => out.push_str(s),
                    Some(serde_json::Value::Null) | None => {
                        out.push('{');
                        out.push_str(name);
                        out.push('}');
                    }
                    Some(other) => out.push_str(&other.to_string()),
                }
                rest = &after[close + 1..];
            }
            None => {
                out.push_str(&rest[open..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// A client's create or patch body: every field optional, unknown fields refused.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentInput {
    /// See [`AgentSpec::name`].
    #[schema(value_type = Option<String>, max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$")]
    pub name: Option<Line<200>>,
    /// See [`AgentSpec::conversation_engine`].
    pub conversation_engine: Option<ConversationEngine>,
    /// See [`AgentSpec::welcome_message`].
    #[schema(value_type = Option<String>, max_length = 4_000)]
    pub welcome_message: Option<Prose<4_000>>,
    /// See [`AgentSpec::prompt`].
    #[schema(value_type = Option<String>, max_length = 100_000)]
    pub prompt: Option<Prose<100_000>>,
    /// See [`AgentSpec::language`].
    #[schema(pattern = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")]
    pub language: Option<String>,
    /// See [`AgentSpec::llm_provider`].
    pub llm_provider: Option<LlmVendor>,
    /// See [`AgentSpec::llm_model`].
    #[schema(value_type = Option<String>, max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*[^\s\x00-\x1f\x7f-\x9f][^\x00-\x1f\x7f-\x9f]*$")]
    pub llm_model: Option<Line<200>>,
    /// See [`AgentSpec::asr_provider`].
    pub asr_provider: Option<AsrVendor>,
    /// See [`AgentSpec::tts_provider`].
    pub tts_provider: Option<TtsVendor>,
    /// See [`AgentSpec::voice`].
    #[schema(value_type = Option<String>, max_length = 200, pattern = r"^[^\x00-\x1f\x7f-\x9f]*$")]
    pub voice: Option<Line<200>>,
    /// See [`AgentSpec::telephony_provider`].
    pub telephony_provider: Option<TelephonyProvider>,
    /// See [`AgentSpec::max_duration_seconds`].
    #[schema(minimum = 10, maximum = 14_400)]
    pub max_duration_seconds: Option<u32>,
    /// See [`AgentSpec::silence_timeout_seconds`].
    #[schema(minimum = 2, maximum = 3_600)]
    pub silence_timeout_seconds: Option<u32>,
    /// See [`AgentSpec::interruptible`].
    pub interruptible: Option<bool>,
    /// See [`AgentSpec::interruption_ms`].
    #[schema(minimum = 100, maximum = 2_000)]
    pub interruption_ms: Option<u32>,
    /// See [`AgentSpec::end_call_phrases`].
    #[schema(value_type = Option<Vec<String>>)]
    pub end_call_phrases: Option<Vec<Line<200>>>,
    /// See [`AgentSpec::retry_policy`].
    #[serde(default, deserialize_with = "object_only")]
    pub retry_policy: Option<RetryPolicy>,
    /// See [`AgentSpec::rating_template`]; null clears it.
    #[serde(default, deserialize_with = "present_object")]
    pub rating_template: Option<Option<RatingTemplate>>,
    /// See [`AgentSpec::extraction`]; null clears it.
    #[serde(default, deserialize_with = "present_object")]
    pub extraction: Option<Option<Extraction>>,
    /// See [`AgentSpec::analysis`]; null clears it.
    #[serde(default, deserialize_with = "present_object")]
    pub analysis: Option<Option<AnalysisPlan>>,
    /// See [`AgentSpec::keypad`]; null clears it.
    #[serde(default, deserialize_with = "present_object")]
    pub keypad: Option<Option<KeypadConfig>>,
    /// See [`AgentSpec::announcement`].
    #[serde(default, deserialize_with = "object_only")]
    pub announcement: Option<AnnouncementConfig>,
    /// See [`AgentSpec::per_minute_rate_paise`]; the bounds are those `validate` holds it to.
    #[schema(minimum = 0, maximum = 100_000)]
    pub per_minute_rate_paise: Option<i64>,
    /// See [`AgentSpec::inbound_per_minute_rate_paise`]; null: the outbound rate.
    #[serde(default, deserialize_with = "present")]
    #[schema(value_type = Option<i64>, minimum = 0, maximum = 100_000)]
    pub inbound_per_minute_rate_paise: Option<Option<i64>>,
    /// See [`AgentSpec::tools`]; replaces the whole list.
    pub tools: Option<Vec<AgentTool>>,
    /// See [`AgentSpec::tool_limits`]; fields left out take their defaults.
    #[serde(default, deserialize_with = "object_only")]
    pub tool_limits: Option<ToolLimits>,
    /// See [`AgentSpec::max_tokens`].
    #[schema(minimum = 1, maximum = 4_096)]
    pub max_tokens: Option<u32>,
    /// See [`AgentSpec::temperature`]; null returns to the server's default.
    #[serde(default, deserialize_with = "present")]
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<Option<f32>>,
    /// See [`AgentSpec::voicemail`]; replaces the whole setting.
    #[serde(default, deserialize_with = "object_only")]
    pub voicemail: Option<VoicemailInput>,
    /// See [`AgentSpec::turn_detection`]; replaces the whole setting.
    #[serde(default, deserialize_with = "object_only")]
    pub turn_detection: Option<TurnDetectionInput>,
    /// See [`AgentSpec::interruption`]; replaces the whole setting.
    #[serde(default, deserialize_with = "object_only")]
    pub interruption: Option<InterruptionInput>,
    /// See [`AgentSpec::compliance`]; replaces the whole setting (fields left out take their defaults).
    #[serde(default, deserialize_with = "object_only")]
    pub compliance: Option<Compliance>,
}

/// Distinguishes an explicit `null` (Some(None)) from an absent field (None).
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl AgentInput {
    /// Builds a new agent's spec; `name` is required.
    pub fn into_new_spec(mut self) -> Result<AgentSpec, AgentSpecError> {
        let name = self.name.take().ok_or(AgentSpecError::NameMissing)?;
        let mut spec = AgentSpec::with_name(name.into_string());
        self.apply_to(&mut spec)?;
        spec.validate()?;
        Ok(spec)
    }

    /// Applies a patch to an existing spec and revalidates the result.
    pub fn patch(self, spec: &AgentSpec) -> Result<AgentSpec, AgentSpecError> {
        let mut next = spec.clone();
        self.apply_to(&mut next)?;
        next.validate()?;
        Ok(next)
    }

    fn apply_to(mut self, spec: &mut AgentSpec) -> Result<(), AgentSpecError> {
        let extraction = self.extraction.take();
        let analysis = self.analysis.take();
        if let Some(tools) = self.tools.take() {
            spec.tools = parse_tools(tools)?;
        }
        if let Some(voicemail) = self.voicemail.take() {
            spec.voicemail = voicemail.into_setting()?;
        }
        if let Some(turn_detection) = self.turn_detection.take() {
            spec.turn_detection = turn_detection.into_setting();
        }
        if let Some(interruption) = self.interruption.take() {
            spec.interruption = interruption.into_setting();
        }
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = self.$field { spec.$field = v; } )* };
        }
        // Text parsed at the edge (see `domain::text`) is stored as plain strings.
        if let Some(name) = self.name {
            spec.name = name.into_string();
        }
        if let Some(text) = self.welcome_message {
            spec.welcome_message = text.into_string();
        }
        if let Some(text) = self.prompt {
            spec.prompt = text.into_string();
        }
        if let Some(text) = self.llm_model {
            spec.llm_model = text.into_string();
        }
        if let Some(text) = self.voice {
            spec.voice = text.into_string();
        }
        if let Some(phrases) = self.end_call_phrases {
            spec.end_call_phrases = phrases.into_iter().map(Line::into_string).collect();
        }
        set!(
            conversation_engine,
            language,
            llm_provider,
            asr_provider,
            tts_provider,
            telephony_provider,
            max_duration_seconds,
            silence_timeout_seconds,
            interruptible,
            interruption_ms,
            retry_policy,
            rating_template,
            keypad,
            announcement,
            per_minute_rate_paise,
            inbound_per_minute_rate_paise,
            tool_limits,
            max_tokens,
            temperature,
            compliance
        );
        let given_fields = match &analysis {
            Some(Some(plan)) => {
                plan.validate("analysis")?;
                spec.analysis = Some(plan.clone());
                !plan.fields.is_empty()
            }
            Some(None) => {
                spec.analysis = None;
                false
            }
            None => false,
        };
        match extraction {
            Some(Some(extraction)) => {
                let mut plan = spec.analysis.take().unwrap_or_else(|| spec.analysis_plan());
                if given_fields && plan.fields != extraction.fields {
                    return Err(AgentSpecError::FieldsTwice);
                }
                plan.fields = extraction.fields;
                plan.schema = None;
                plan.validate("extraction")?;
                spec.analysis = Some(plan);
            }
            Some(None) if analysis.is_none() => {
                if let Some(plan) = &mut spec.analysis {
                    plan.fields.clear();
                }
            }
            _ => {}
        }
        // Both spellings read back the same list.
        spec.extraction = spec
            .analysis
            .as_ref()
            .filter(|plan| !plan.fields.is_empty())
            .map(|plan| Extraction {
                fields: plan.fields.clone(),
            });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn placeholders_are_listed_and_filled() {
        let mut spec = AgentSpec::with_name("A");
        spec.welcome_message = "Hi {name}, about the {role} role".into();
        spec.prompt = "You call {name} {company_name}. Not {1bad} or { spaced }".into();
        assert_eq!(spec.placeholders(), vec!["company_name", "name", "role"]);
        let vars = json!({"name": "Asha", "role": "QA"});
        let filled = fill_placeholders(&spec.welcome_message, vars.as_object().unwrap());
        assert_eq!(filled, "Hi Asha, about the QA role");
        assert_eq!(fill_placeholders("{x} {", &serde_json::Map::new()), "{x} {");
    }

    #[test]
    fn patch_validates_the_merged_result() {
        let spec = AgentSpec::with_name("A");
        let input: AgentInput =
            serde_json::from_value(json!({"conversationEngine": "keypad"})).unwrap();
        assert!(
            input
                .patch(&spec)
                .unwrap_err()
                .to_string()
                .contains("keypad")
        );
        let input: AgentInput = serde_json::from_value(json!({"language": "english!"})).unwrap();
        assert!(
            input
                .patch(&spec)
                .unwrap_err()
                .to_string()
                .contains("language")
        );
        let input: AgentInput = serde_json::from_value(json!({"ratingTemplate": null})).unwrap();
        assert_eq!(input.rating_template, Some(None));
    }

    #[test]
    fn refusals_keep_their_messages() {
        let mut spec = AgentSpec::with_name("A");
        spec.max_duration_seconds = 1;
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            "maxDurationSeconds must be between 10 and 14400"
        );
        let mut spec = AgentSpec::with_name("A");
        spec.retry_policy.retry_on = vec!["boredom".into()];
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            "retryPolicy.retryOn must be one of no-answer, busy, failed, voicemail"
        );
        let mut spec = AgentSpec::with_name("A");
        spec.conversation_engine = ConversationEngine::Announcement;
        assert_eq!(
            spec.validate().unwrap_err().to_string(),
            "welcomeMessage is required when conversationEngine is announcement"
        );
    }

    #[test]
    fn stored_specs_without_tools_read_the_defaults() {
        let mut stored = serde_json::to_value(AgentSpec::with_name("Old")).unwrap();
        let map = stored.as_object_mut().unwrap();
        map.remove("tools");
        map.remove("toolLimits");
        let spec: AgentSpec = serde_json::from_value(stored).unwrap();
        assert!(spec.tools.is_empty());
        assert_eq!(spec.tool_limits, ToolLimits::default());
        assert_eq!(
            (spec.tool_limits.per_turn, spec.tool_limits.per_call),
            (4, 16)
        );
    }

    #[test]
    fn tool_refusals_become_spec_errors_naming_the_path() {
        let input: AgentInput = serde_json::from_value(json!({
            "name": "A",
            "tools": [{"type": "endCall", "message": "x".repeat(501)}],
        }))
        .unwrap();
        let err = input.into_new_spec().unwrap_err();
        assert!(matches!(err, AgentSpecError::Tools(_)));
        assert_eq!(
            err.to_string(),
            "tools[0].message must be at most 500 characters"
        );
        let input: AgentInput =
            serde_json::from_value(json!({"toolLimits": {"perTurn": 11}})).unwrap();
        assert_eq!(
            input
                .patch(&AgentSpec::with_name("A"))
                .unwrap_err()
                .to_string(),
            "toolLimits.perTurn must be between 1 and 10"
        );
    }

    #[test]
    fn refusals_name_their_field() {
        let mut spec = AgentSpec::with_name("A");
        spec.retry_policy.max_attempts = 0;
        assert_eq!(
            spec.validate().unwrap_err().field(),
            "retryPolicy.maxAttempts"
        );
        let input: AgentInput = serde_json::from_value(json!({
            "name": "A",
            "analysis": {"fields": [{"name": "tier", "type": "enum", "options": []}]},
        }))
        .unwrap();
        let err = input.into_new_spec().unwrap_err();
        assert!(err.field().starts_with("analysis.fields[0]"), "{err:?}");
        let input: AgentInput = serde_json::from_value(
            json!({"name": "A", "tools": [{"type": "endCall", "message": "x".repeat(501)}]}),
        )
        .unwrap();
        assert_eq!(
            input.into_new_spec().unwrap_err().field(),
            "tools[0].message"
        );
        assert_eq!(AgentSpecError::NameBlank.field(), "name");
    }

    #[test]
    fn vendor_names_are_the_wire_names() {
        let carriers: Vec<&str> = TelephonyProvider::ALL.iter().map(|p| p.as_str()).collect();
        assert_eq!(carriers, TELEPHONY_PROVIDERS);
        assert_eq!(
            serde_json::to_value(TtsVendor::ElevenLabs).unwrap(),
            json!("elevenlabs")
        );
        assert_eq!("openai".parse::<LlmVendor>(), Ok(LlmVendor::OpenAi));
        let input: Result<AgentInput, _> = serde_json::from_value(json!({"asrProvider": "skynet"}));
        assert!(input.is_err());
        let field: ExtractionField = serde_json::from_value(json!({"name": "x"})).unwrap();
        assert_eq!(field.kind, crate::domain::analysis::FieldType::String);
    }
}
