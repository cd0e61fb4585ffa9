//! Text endpoints of the Agents table: chat with an agent without a call,
//! draft an agent from a brief, and improve a prompt. All three go through the
//! same LLM selection as calls (the agent's `llmProvider`/`llmModel`, the
//! workspace's own key when it has one), and run deterministically on `sim`.

use super::MessageBody;
use super::agents::AgentView;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiJson;
use crate::agents::chat::{ChatError, ChatTurn, instant_sim};
use crate::agents::service::AgentService;
use crate::config::Settings;
use crate::domain::agent::{AgentSpec, AgentSpecError, LlmVendor};
use crate::domain::clock::SharedClock;
use crate::domain::text::Variables;
use crate::domain::{AgentId, OrgId};
use crate::http::state::AppState;
use crate::providers::drafting::{
    assist_prompt_sim, assist_prompt_with, draft_agent_sim, draft_agent_with,
};
use crate::providers::select::SelectError;
use crate::store::Store;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use voxline_actors::providers::{LlmProvider, ProviderError};

/// The longest brief or instruction accepted, in characters.
const MAX_BRIEF_CHARS: usize = 4_000;

/// The text routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(chat))
        .routes(routes!(generate))
        .routes(routes!(prompt_assist))
}

/// `POST /api/agents/{agentId}/chat` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChatRequest {
    /// What the user says. May be empty only when starting a session: the
    /// reply is then the agent's welcome message.
    #[serde(default)]
    pub message: String,
    /// Continues a session; omitted to start one.
    pub session_id: Option<String>,
    /// Fills {placeholders} in the welcome message and prompt; only when starting.
    #[schema(value_type = Option<Object>)]
    pub variables: Option<Variables>,
}

/// The agent's reply.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct ChatReply {
    /// What the agent says.
    pub message: String,
    /// The session, to send with the next message.
    pub session_id: String,
    /// The agent chose to end the conversation (`end_call`).
    pub ended: bool,
}

/// `POST /api/agents/generate` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GenerateRequest {
    /// What the agent should do, in plain language.
    #[schema(min_length = 10, pattern = r"\S")]
    pub brief: String,
    /// Create the agent instead of only returning the draft.
    #[serde(default)]
    pub create: bool,
    /// BCP 47 language of the agent (the model chooses when omitted).
    #[schema(pattern = r"^[A-Za-z]{2,3}(-[A-Za-z0-9]{2,8})*$")]
    pub language: Option<String>,
    /// `sim` or `openai`; the server's default text LLM when omitted.
    #[schema(value_type = Option<crate::domain::agent::LlmVendor>)]
    pub llm_provider: Option<String>,
    /// Model name for `openai`.
    pub llm_model: Option<String>,
}

/// A drafted agent.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct GenerateReply {
    /// What happened.
    pub message: String,
    /// The draft: name, engine, welcome message, prompt, language, rating template.
    pub agent: AgentSpec,
    /// Whether the agent was created.
    pub created: bool,
    /// The created agent's id.
    pub id: Option<String>,
}

/// `POST /api/agents/prompt-assist` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromptAssistRequest {
    /// The prompt to improve.
    #[schema(pattern = r"\S")]
    pub prompt: String,
    /// What to change, in plain language.
    pub instruction: Option<String>,
    /// `sim` or `openai`; the server's default text LLM when omitted.
    #[schema(value_type = Option<crate::domain::agent::LlmVendor>)]
    pub llm_provider: Option<String>,
    /// Model name for `openai`.
    pub llm_model: Option<String>,
}

/// An improved prompt.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptAssistReply {
    /// What happened.
    pub message: String,
    /// The improved prompt.
    pub prompt: String,
    /// What changed, one short line each.
    pub changes: Vec<String>,
}

/// A vendor the workspace has no key for is the client's to fix (pick
/// another `llmProvider`, or store a credential): a 400, not a 5xx that says
/// the server is failing.
fn select_failed(err: SelectError) -> ApiError {
    match err {
        SelectError::Store(err) => ApiError::Store(err),
        other => ApiError::BadRequest(other.to_string()),
    }
}

impl From<ChatError> for ApiError {
    fn from(err: ChatError) -> Self {
        match err {
            ChatError::Agent(err) => err.into(),
            ChatError::Store(err) => Self::Store(err),
            ChatError::SessionNotFound(_) => Self::NotFound(err.to_string()),
            ChatError::Model(_) => Self::Unavailable(err.to_string()),
            ChatError::Corrupt(err) => Self::Internal(err.into()),
            ChatError::MessageTooLong
            | ChatError::MessageBlank
            | ChatError::VariablesMidSession
            | ChatError::Select(_) => Self::BadRequest(err.to_string()),
        }
    }
}

fn model_failed(err: ProviderError) -> ApiError {
    tracing::warn!(error = %err, "text request to the LLM failed");
    ApiError::Unavailable(format!("The language model failed: {err}"))
}

fn check_len(field: &str, text: &str, max: usize) -> ApiResult<()> {
    if text.chars().count() > max {
        return Err(ApiError::BadRequest(format!(
            "{field} must be at most {max} characters"
        )));
    }
    Ok(())
}

/// Send a message to an agent and get its reply, without a phone call.
#[utoipa::path(post, path = "/api/agents/{agentId}/chat", tag = "agents", request_body = ChatRequest,
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = ChatReply), (status = 400, body = MessageBody),
        (status = 404, body = MessageBody), (status = 503, body = MessageBody)))]
async fn chat(
    State(agents): State<AgentService>,
    caller: Caller,
    Path(agent_id): Path<String>,
    ApiJson(body): ApiJson<ChatRequest>,
) -> ApiResult<Json<ChatReply>> {
    let turn = ChatTurn {
        message: body.message,
        session_id: body.session_id,
        variables: body.variables,
    };
    let answer = agents.chat(caller.org_id, &agent_id, turn).await?;
    Ok(Json(ChatReply {
        message: answer.message,
        session_id: answer.session_id.to_string(),
        ended: answer.ended,
    }))
}

/// The LLM for generate and prompt-assist: the request's choice, else the server default.
async fn text_llm(
    settings: &Settings,
    agents: &AgentService,
    org: OrgId,
    provider: Option<&str>,
    model: Option<&str>,
) -> ApiResult<Option<std::sync::Arc<dyn LlmProvider>>> {
    let providers = &settings.providers;
    let provider = provider.unwrap_or(&providers.text_llm);
    match provider {
        "sim" => Ok(None),
        "openai" => {
            let model = model.unwrap_or(&providers.openai_models.text);
            let chosen = agents
                .selector()
                .llm(org, LlmVendor::OpenAi, model, &instant_sim())
                .await
                .map_err(select_failed)?;
            Ok(Some(chosen.llm))
        }
        other => Err(ApiError::BadRequest(format!(
            "llmProvider must be one of sim, openai (got {other})"
        ))),
    }
}

/// Draft a complete agent from a plain-language brief; created only with `create: true`.
#[utoipa::path(post, path = "/api/agents/generate", tag = "agents", request_body = GenerateRequest,
    responses((status = 200, body = GenerateReply), (status = 201, body = GenerateReply),
        (status = 400, body = MessageBody), (status = 503, body = MessageBody)))]
async fn generate(
    State(store): State<Store>,
    State(clock): State<SharedClock>,
    State(settings): State<Arc<Settings>>,
    State(agents): State<AgentService>,
    caller: Caller,
    ApiJson(body): ApiJson<GenerateRequest>,
) -> ApiResult<(StatusCode, Json<GenerateReply>)> {
    let brief = body.brief.trim();
    if brief.chars().count() < 10 {
        return Err(ApiError::BadRequest(
            "brief is required and must be at least 10 characters".into(),
        ));
    }
    check_len("brief", brief, MAX_BRIEF_CHARS)?;
    let org = caller.org_id;
    let llm = text_llm(
        &settings,
        &agents,
        org,
        body.llm_provider.as_deref(),
        body.llm_model.as_deref(),
    )
    .await?;
    let language = body.language.as_deref().map(str::trim);
    let spec = match llm {
        None => draft_agent_sim(brief, language),
        Some(llm) => draft_agent_with(llm.as_ref(), brief, language)
            .await
            .map_err(model_failed)?,
    };
    spec.validate().map_err(|reason| match language {
        Some(_) if reason == AgentSpecError::Language => ApiError::BadRequest(reason.to_string()),
        _ => ApiError::Unavailable(format!("The drafted agent is not valid: {reason}")),
    })?;
    if !body.create {
        return Ok((
            StatusCode::OK,
            Json(GenerateReply {
                message: "Agent drafted; review it, then send create: true or POST /api/agents"
                    .into(),
                agent: spec,
                created: false,
                id: None,
            }),
        ));
    }
    let id = AgentId::new();
    let now = clock.now().timestamp_millis();
    let row = store.insert_agent(id, org, &spec, now).await?;
    let view = AgentView::from_row(&row)?;
    Ok((
        StatusCode::CREATED,
        Json(GenerateReply {
            message: "Agent created".into(),
            agent: view.spec,
            created: true,
            id: Some(view.id),
        }),
    ))
}

/// Improve a prompt by an instruction; returns the new prompt and what changed.
#[utoipa::path(post, path = "/api/agents/prompt-assist", tag = "agents", request_body = PromptAssistRequest,
    responses((status = 200, body = PromptAssistReply), (status = 400, body = MessageBody),
        (status = 503, body = MessageBody)))]
async fn prompt_assist(
    State(settings): State<Arc<Settings>>,
    State(agents): State<AgentService>,
    caller: Caller,
    ApiJson(body): ApiJson<PromptAssistRequest>,
) -> ApiResult<Json<PromptAssistReply>> {
    if body.prompt.trim().is_empty() {
        return Err(ApiError::BadRequest(
            "prompt is required and must not be blank".into(),
        ));
    }
    check_len("prompt", &body.prompt, 100_000)?;
    let instruction = body
        .instruction
        .as_deref()
        .map(str::trim)
        .filter(|i| !i.is_empty());
    if let Some(instruction) = instruction {
        check_len("instruction", instruction, MAX_BRIEF_CHARS)?;
    }
    let org = caller.org_id;
    let llm = text_llm(
        &settings,
        &agents,
        org,
        body.llm_provider.as_deref(),
        body.llm_model.as_deref(),
    )
    .await?;
    let (prompt, changes) = match llm {
        None => assist_prompt_sim(&body.prompt, instruction),
        Some(llm) => assist_prompt_with(llm.as_ref(), &body.prompt, instruction)
            .await
            .map_err(model_failed)?,
    };
    let message = if changes.is_empty() {
        "The prompt already follows the guidelines; nothing changed".to_string()
    } else {
        format!("Prompt improved with {} change(s)", changes.len())
    };
    Ok(Json(PromptAssistReply {
        message,
        prompt,
        changes,
    }))
}
