//! A text chat with an agent, without a phone call: the session is stored,
//! the agent's LLM is chosen as for calls (its `llmProvider`/`llmModel`, the
//! workspace's own key when it has one), and the sim answers at once.

use super::service::{AgentError, AgentService};
use crate::domain::agent::fill_placeholders;
use crate::domain::text::Variables;
use crate::domain::{ChatSessionId, OrgId};
use crate::providers::drafting::collect_reply;
use crate::providers::select::{ProviderSelector, SelectError};
use crate::store::chat::ChatSessionRow;
use crate::store::{StoreError, decode_json};
use serde_json::{Map, Value};
use std::time::Duration;
use voxline_actors::providers::{ChatMessage, ChatRole, LlmRequest, ProviderError, ToolSpec};
use voxline_actors::sim::providers::SimConfig;

/// The longest chat message accepted, in characters.
pub const MAX_MESSAGE_CHARS: usize = 4_000;
/// Messages a session keeps; older ones are dropped from the model's context.
const MAX_SESSION_MESSAGES: usize = 200;

/// One thing a user says to an agent.
#[derive(Debug, Clone, Default)]
pub struct ChatTurn {
    /// What the user says; may be empty only when starting a session (the
    /// reply is then the agent's welcome message).
    pub message: String,
    /// The session to continue, as the client wrote it; none starts one.
    pub session_id: Option<String>,
    /// Fills {placeholders}; only when starting a session.
    pub variables: Option<Variables>,
}

/// The agent's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatAnswer {
    /// What the agent says.
    pub message: String,
    /// The session, to send with the next message.
    pub session_id: ChatSessionId,
    /// The agent chose to end the conversation (`end_call`).
    pub ended: bool,
}

/// Why a chat turn was refused or failed.
#[derive(Debug, thiserror::Error)]
pub enum ChatError {
    /// The message is over [`MAX_MESSAGE_CHARS`].
    #[error("message must be at most {MAX_MESSAGE_CHARS} characters")]
    MessageTooLong,
    /// A blank message in a session that already started.
    #[error("message is required and must not be blank")]
    MessageBlank,
    /// Variables sent with a session id.
    #[error("variables can only be given when a session starts (without sessionId)")]
    VariablesMidSession,
    /// No such session of this agent.
    #[error("Chat session {0} not found")]
    SessionNotFound(String),
    /// The agent is missing or deleted.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// No usable LLM for the agent (e.g. no key for its vendor): the client's to fix.
    #[error("{0}")]
    Select(String),
    /// The model failed to answer.
    #[error("The language model failed: {0}")]
    Model(ProviderError),
    /// A session that cannot be written as JSON (a stored one that no longer
    /// parses is [`StoreError::CorruptColumn`]).
    #[error("chat session is not valid JSON: {0}")]
    Corrupt(#[from] serde_json::Error),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl From<SelectError> for ChatError {
    fn from(err: SelectError) -> Self {
        match err {
            SelectError::Store(err) => Self::Store(err),
            other => Self::Select(other.to_string()),
        }
    }
}

/// The sim LLM answers at once outside calls: nobody is listening to its pacing.
pub fn instant_sim() -> SimConfig {
    SimConfig {
        llm_first_token: Duration::ZERO,
        llm_token_interval: Duration::ZERO,
        ..SimConfig::default()
    }
}

impl AgentService {
    /// The provider selector text requests use: the same as calls'.
    pub fn selector(&self) -> &ProviderSelector {
        &self.selector
    }

    /// Sends one message to a live agent of the workspace and returns its reply,
    /// starting a session (opened by the welcome message) when none is given.
    pub async fn chat(
        &self,
        org: OrgId,
        raw_agent_id: &str,
        turn: ChatTurn,
    ) -> Result<ChatAnswer, ChatError> {
        if turn.message.chars().count() > MAX_MESSAGE_CHARS {
            return Err(ChatError::MessageTooLong);
        }
        let agent = self.load_live(org, raw_agent_id).await?;
        let spec = agent.spec()?;
        let now = self.clock.now().timestamp_millis();
        let message = turn.message.trim().to_string();

        let (session, mut history) = match &turn.session_id {
            Some(raw) => {
                if turn.variables.is_some() {
                    return Err(ChatError::VariablesMidSession);
                }
                let not_found = || ChatError::SessionNotFound(raw.clone());
                let id: ChatSessionId = raw.parse().map_err(|_| not_found())?;
                let row = self
                    .store
                    .chat_session(org, id)
                    .await?
                    .filter(|row| row.agent_id == agent.id)
                    .ok_or_else(not_found)?;
                let history: Vec<ChatMessage> =
                    decode_json("chat_sessions", "messages", row.id, &row.messages)?;
                (row, history)
            }
            None => {
                let variables = turn
                    .variables
                    .clone()
                    .map(Variables::into_map)
                    .unwrap_or_default();
                let welcome = fill_placeholders(&spec.welcome_message, &variables);
                let history = if welcome.trim().is_empty() {
                    Vec::new()
                } else {
                    vec![ChatMessage::new(ChatRole::Assistant, welcome)]
                };
                let row = ChatSessionRow {
                    id: ChatSessionId::new(),
                    agent_id: agent.id,
                    variables: Value::Object(variables).to_string(),
                    messages: serde_json::to_string(&history)?,
                };
                self.store.insert_chat_session(&row, org, now).await?;
                if message.is_empty() {
                    // The conversation opens with the agent's welcome message.
                    let reply = history
                        .first()
                        .map(|m| m.content.clone())
                        .unwrap_or_default();
                    return Ok(ChatAnswer {
                        message: reply,
                        session_id: row.id,
                        ended: false,
                    });
                }
                (row, history)
            }
        };
        if message.is_empty() {
            return Err(ChatError::MessageBlank);
        }
        let variables: Map<String, Value> =
            decode_json("chat_sessions", "variables", session.id, &session.variables)?;
        history.push(ChatMessage::new(ChatRole::User, message));
        let chosen = self
            .selector()
            .llm(org, spec.llm_provider, &spec.llm_model, &instant_sim())
            .await?;
        let context_start = history.len().saturating_sub(MAX_SESSION_MESSAGES);
        let request = LlmRequest {
            system_prompt: fill_placeholders(&spec.prompt, &variables),
            history: history[context_start..].to_vec(),
            tools: vec![ToolSpec::end_call()],
            sim_script: Vec::new().into(),
            max_tokens: Some(spec.max_tokens),
            temperature: spec.temperature,
            ..LlmRequest::default()
        };
        let reply = collect_reply(chosen.llm.as_ref(), request)
            .await
            .map_err(|err| {
                tracing::warn!(error = %err, "text request to the LLM failed");
                ChatError::Model(err)
            })?;
        history.push(ChatMessage::new(ChatRole::Assistant, reply.text.clone()));
        let keep_from = history.len().saturating_sub(MAX_SESSION_MESSAGES);
        let stored = serde_json::to_string(&history[keep_from..])?;
        self.store
            .update_chat_messages(org, session.id, &stored, now)
            .await?;
        Ok(ChatAnswer {
            message: reply.text,
            session_id: session.id,
            ended: reply.end_call,
        })
    }
}
