//! Speech and language providers: the streaming ASR, LLM and TTS traits the conversation loop
//! drives. The simulated implementations of decisions §11 are in [`crate::sim::providers`].
//!
//! The traits are shaped after the network clients that will implement them (a Deepgram
//! websocket, an OpenAI-compatible SSE stream with tool calls, streamed TTS over HTTP or a
//! websocket), so adding one never changes the call loop:
//! - every `next_*` method is cancel-safe, because the loop polls it inside `tokio::select!`;
//! - dropping a stream stops it at once (the loop drops streams on barge-in and hang-up);
//! - audio goes to the ASR without awaiting, so a slow vendor never stalls playback.

pub mod analysis;
pub mod end_of_turn;
pub mod scorecard;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

pub use end_of_turn::{EndOfTurnModel, EndOfTurnVerdict};

/// Which of the three providers something concerns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    /// Speech recognition.
    Asr,
    /// The language model.
    Llm,
    /// Speech synthesis.
    Tts,
}

impl ProviderKind {
    /// The lowercase name (`asr`, `llm`, `tts`).
    pub const fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Asr => "asr",
            ProviderKind::Llm => "llm",
            ProviderKind::Tts => "tts",
        }
    }
}

impl fmt::Display for ProviderKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A provider failure; its [`provider`](Self::provider) decides the call's `endedReason`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ProviderError {
    /// Opening a stream or sending a request failed (connection, auth, HTTP status).
    #[error("{provider} request failed: {message}")]
    Request {
        /// The failing provider.
        provider: ProviderKind,
        /// What went wrong.
        message: String,
    },
    /// A stream that was running broke or sent something unreadable.
    #[error("{provider} stream failed: {message}")]
    Stream {
        /// The failing provider.
        provider: ProviderKind,
        /// What went wrong.
        message: String,
    },
    /// The provider did not answer in time.
    #[error("{provider} timed out after {after:?}")]
    Timeout {
        /// The failing provider.
        provider: ProviderKind,
        /// How long the loop waited.
        after: Duration,
    },
    /// A failure injected by the sim config
    /// ([`SimConfig::fail`](crate::sim::providers::SimConfig::fail)), for tests.
    #[error("{provider} failure injected by the sim config")]
    Injected {
        /// The failing provider.
        provider: ProviderKind,
    },
}

impl ProviderError {
    /// The provider that failed.
    pub fn provider(&self) -> ProviderKind {
        match self {
            ProviderError::Request { provider, .. }
            | ProviderError::Stream { provider, .. }
            | ProviderError::Timeout { provider, .. }
            | ProviderError::Injected { provider } => *provider,
        }
    }
}

/// What an ASR stream needs to know about the call when it is opened.
#[derive(Debug, Clone, Default)]
pub struct AsrContext {
    /// Our call id, for logs and vendor metadata.
    pub call_id: String,
    /// The agent's language (BCP 47, e.g. `en-US`).
    pub language: String,
    /// Rate of the audio that will be pushed, in Hz.
    pub sample_rate: u32,
    /// The simulated caller's spoken lines, in order (only the sim ASR reads them).
    pub sim_script: Arc<[String]>,
}

/// Something the recognizer reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AsrEvent {
    /// A hypothesis that may still change.
    Interim(String),
    /// Settled text for part or all of an utterance.
    Final {
        /// The recognized words.
        text: String,
    },
    /// The recognizer heard speech begin (advisory: the loop's own VAD decides barge-in).
    SpeechStarted,
    /// Every final for the utterance has been delivered (always sent after
    /// [`AsrStream::finalize`]).
    UtteranceEnd,
}

/// Opens streaming recognition sessions.
#[async_trait]
pub trait AsrProvider: Send + Sync {
    /// Opens one session for one call.
    async fn open(&self, context: AsrContext) -> Result<Box<dyn AsrStream>, ProviderError>;
}

/// One call's recognition session.
///
/// The loop's endpointer decides when an utterance ends and calls [`finalize`](Self::finalize);
/// the stream then delivers its remaining `Final`s followed by `UtteranceEnd`.
#[async_trait]
pub trait AsrStream: Send {
    /// Queues caller audio (16-bit PCM at `sample_rate`); must not block, so network clients
    /// hand it to their writer task.
    fn push_audio(&mut self, samples: &[i16], sample_rate: u32) -> Result<(), ProviderError>;
    /// The caller's utterance ended: flush its transcript (Deepgram `Finalize`).
    fn finalize(&mut self) -> Result<(), ProviderError>;
    /// The caller's sound since the last utterance was not a turn (a backchannel over the
    /// agent, noise): forget it, so it does not start the next utterance's transcript. A
    /// streaming recognizer has nothing to do (the loop drops its words); one that buffers
    /// an utterance's audio drops it.
    fn discard(&mut self) -> Result<(), ProviderError> {
        Ok(())
    }
    /// The caller paused mid-utterance and the loop has no words to judge the pause on
    /// ([`TurnAction::PeekWords`](voxline_media::turn_taking::TurnAction::PeekWords)). A
    /// recognizer without interim results transcribes the utterance so far and reports it
    /// as an [`AsrEvent::Interim`], returning `true`; a streaming one already sends its
    /// interims and returns `false`. `over_agent`: the talk is over the agent, most likely a
    /// backchannel (a recognizer may be primed for one).
    fn peek(&mut self, over_agent: bool) -> Result<bool, ProviderError> {
        let _ = over_agent;
        Ok(false)
    }
    /// The next event; `None` once the stream has ended. Cancel-safe.
    async fn next_event(&mut self) -> Option<Result<AsrEvent, ProviderError>>;
    /// Ends the session politely (Deepgram `CloseStream`).
    async fn close(&mut self) -> Result<(), ProviderError>;
}

/// Who said a chat message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatRole {
    /// Instructions.
    System,
    /// The caller.
    User,
    /// The agent.
    Assistant,
    /// A tool's result, answering the assistant's call of it.
    Tool,
}

/// One tool call the model made: its id (echoed by the result), the tool and the arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCallRequest {
    /// The call's id (OpenAI `tool_calls[].id`); the `tool` message answering it repeats it.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as a JSON text, as the model wrote them.
    pub arguments_json: String,
}

/// One message of the conversation history sent to the LLM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    /// Who said it.
    pub role: ChatRole,
    /// What was said (for the assistant: what the caller actually heard; for a tool: its
    /// result as JSON text).
    pub content: String,
    /// The tools the assistant called in this message (assistant messages only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallRequest>,
    /// The call this message answers (tool messages only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message from `role` saying `content`.
    pub fn new(role: ChatRole, content: impl Into<String>) -> Self {
        Self {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
        }
    }

    /// The assistant calling `calls` (with no text of its own).
    pub fn tool_calls(calls: Vec<ToolCallRequest>) -> Self {
        Self {
            role: ChatRole::Assistant,
            content: String::new(),
            tool_calls: calls,
            tool_call_id: None,
        }
    }

    /// The result of call `id`, as JSON text.
    pub fn tool_result(id: impl Into<String>, content: impl Into<String>) -> Self {
        Self {
            role: ChatRole::Tool,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: Some(id.into()),
        }
    }
}

/// A tool the LLM may call, in OpenAI function-calling shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// The function name.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// JSON Schema of the arguments.
    pub parameters: serde_json::Value,
}

/// The name of the tool that ends the call.
pub const END_CALL_TOOL: &str = "end_call";
/// The name of the tool that records the callee's opt-out and ends the call.
pub const OPT_OUT_TOOL: &str = "opt_out";
/// The name of the tool that bridges the callee to a person.
pub const TRANSFER_TOOL: &str = "transfer_call";
/// The name of the tool that presses keys.
pub const DTMF_TOOL: &str = "dtmf";
/// The name of the tool that lists free calendar slots.
pub const AVAILABILITY_TOOL: &str = "check_availability";
/// The name of the tool that books a calendar slot.
pub const BOOKING_TOOL: &str = "book_appointment";

impl ToolSpec {
    /// The `opt_out` tool: the callee asked not to be called again; the agent hangs up after
    /// its current reply (a short confirmation) and the number is never dialed again.
    pub fn opt_out() -> Self {
        Self {
            name: OPT_OUT_TOOL.to_owned(),
            description: "The caller asked not to be called again (\"don't call me again\", \
                          \"remove my number\", \"stop calling\", in any language). Confirm \
                          briefly that they will not be called again, then call this tool: the \
                          call ends after your reply and the number is never dialed again."
                .to_owned(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        }
    }

    /// The `end_call` tool: the agent hangs up after its current reply.
    pub fn end_call() -> Self {
        Self {
            name: END_CALL_TOOL.to_owned(),
            description: "End the phone call after your reply has been spoken. Use it when the \
                          caller says goodbye or the conversation is complete."
                .to_owned(),
            parameters: serde_json::json!({"type": "object", "properties": {}}),
        }
    }
}

/// One LLM turn request.
#[derive(Debug, Clone, Default)]
pub struct LlmRequest {
    /// The agent prompt with placeholders filled.
    pub system_prompt: String,
    /// The conversation so far, oldest first.
    pub history: Vec<ChatMessage>,
    /// Tools the model may call.
    pub tools: Vec<ToolSpec>,
    /// The simulated caller's spoken lines (only the sim LLM reads them, to know when the
    /// script is exhausted).
    pub sim_script: Arc<[String]>,
    /// The questions the agent must ask, one per analysis field, in order (only the sim LLM
    /// reads them: it asks each in turn, then closes the call).
    pub sim_questions: Arc<[String]>,
    /// Free text, one JSON object, or an object matching a JSON Schema; the sim LLM answers
    /// a JSON request carrying a scorecard or analysis request with its deterministic answer.
    pub response_format: ResponseFormat,
    /// The most tokens the model may generate (live turns: the agent's `maxTokens`).
    pub max_tokens: Option<u32>,
    /// Sampling temperature; the server's default when `None`.
    pub temperature: Option<f32>,
}

/// What shape the model's reply must take.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum ResponseFormat {
    /// Free text (a conversation turn).
    #[default]
    Text,
    /// One JSON object (OpenAI `response_format: json_object`).
    JsonObject,
    /// One JSON object matching `schema` (OpenAI `json_schema`, strict).
    JsonSchema {
        /// The schema's name, `[a-zA-Z0-9_-]{1,64}`.
        name: String,
        /// The JSON Schema the reply must match.
        schema: serde_json::Value,
    },
}

impl ResponseFormat {
    /// Whether the reply must be JSON.
    pub fn is_json(&self) -> bool {
        !matches!(self, Self::Text)
    }
}

/// Token counts of one LLM turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LlmUsage {
    /// Tokens in the prompt and history.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub completion_tokens: u32,
}

/// Something the model streamed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LlmEvent {
    /// A piece of the reply text.
    Token(String),
    /// A complete tool call (streamed argument fragments already joined). Several may come
    /// in one turn; they are announced after the turn's text.
    ToolCall {
        /// The call's id (the vendor's, or one made up when it sends none).
        id: String,
        /// The tool's name.
        name: String,
        /// The arguments as a JSON text.
        arguments_json: String,
    },
    /// The turn is complete.
    Done {
        /// Token counts, when the vendor reports them.
        usage: LlmUsage,
    },
}

/// Starts streamed LLM turns.
#[async_trait]
pub trait LlmProvider: Send + Sync {
    /// Starts one turn; dropping the returned stream cancels it.
    async fn stream(&self, request: LlmRequest) -> Result<Box<dyn LlmStream>, ProviderError>;
}

/// One streamed LLM turn.
#[async_trait]
pub trait LlmStream: Send {
    /// The next event; `None` after `Done` or when the stream ended. Cancel-safe.
    async fn next_event(&mut self) -> Option<Result<LlmEvent, ProviderError>>;
}

/// Starts streamed speech synthesis.
#[async_trait]
pub trait TtsProvider: Send + Sync {
    /// Synthesizes `text` with `voice`, preferably at `sample_rate` (the stream declares the
    /// rate it actually produces); dropping the stream cancels it.
    async fn synthesize(
        &self,
        text: &str,
        voice: &str,
        sample_rate: u32,
    ) -> Result<Box<dyn TtsStream>, ProviderError>;
}

/// One synthesis in progress.
#[async_trait]
pub trait TtsStream: Send {
    /// Rate of the PCM the stream yields, in Hz.
    fn sample_rate(&self) -> u32;
    /// The next chunk of 16-bit mono PCM; `None` when the text is fully spoken. Cancel-safe.
    async fn next_chunk(&mut self) -> Option<Result<Vec<i16>, ProviderError>>;
}

/// The three providers one call uses.
#[derive(Clone)]
pub struct Providers {
    /// Speech recognition.
    pub asr: Arc<dyn AsrProvider>,
    /// The language model.
    pub llm: Arc<dyn LlmProvider>,
    /// Speech synthesis.
    pub tts: Arc<dyn TtsProvider>,
}

impl fmt::Debug for Providers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Providers").finish_non_exhaustive()
    }
}
