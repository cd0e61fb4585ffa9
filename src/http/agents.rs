//! `/api/agents`: create, read, edit, soft-delete, restore, activate, deactivate.

use super::MessageBody;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiJson;
use crate::app::state::AppState;
use crate::domain::AgentId;
use crate::domain::agent::{AgentInput, AgentSpec, AgentSpecError, AgentStatus};
use crate::domain::clock::iso;
use crate::domain::tools::{AgentTool, ToolsError, fill_function_secrets, new_function_secret};
use crate::egress::address_guard::{EgressError, check_url_for_storage};
use crate::http::agent_cache::CachedAgent;
use crate::store::AgentRow;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// An agent as returned by every read.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentView {
    /// Agent id.
    pub id: String,
    /// active or inactive (deleted agents are not returned).
    pub status: AgentStatus,
    /// Idle past the inactivity window; `activate` re-warms it.
    pub dormant: bool,
    /// Placeholders used by welcomeMessage and prompt.
    pub placeholders: Vec<String>,
    /// Creation time.
    pub created_at: String,
    /// Last change.
    pub updated_at: String,
    /// The configurable fields.
    #[serde(flatten)]
    pub spec: AgentSpec,
}

impl AgentView {
    /// Builds the view of a stored agent.
    pub fn from_row(row: &AgentRow) -> ApiResult<Self> {
        let spec = row.spec()?;
        Ok(Self {
            id: row.id.to_string(),
            status: row.status(),
            dormant: row.dormant,
            placeholders: spec.placeholders(),
            created_at: iso(row.created_at),
            updated_at: iso(row.updated_at),
            spec,
        })
    }
}

/// The agent routes.
pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_agents, create_agent))
        .routes(routes!(get_agent, patch_agent, delete_agent))
        .routes(routes!(restore_agent))
        .routes(routes!(activate_agent))
        .routes(routes!(deactivate_agent))
}

fn not_found(id: &str) -> ApiError {
    ApiError::NotFound(format!("Agent {id} not found"))
}

/// How long one function URL's host may take to resolve when an agent is saved.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

/// Refuses `function` tools whose URL resolves into loopback, private,
/// link-local or metadata addresses, unless the host is on the server's
/// allow-list: the server calls these URLs during calls, so a customer must
/// not be able to point it at our own network. Checked when saved so the
/// mistake shows at once rather than as failed calls.
async fn refuse_private_function_urls(state: &AppState, tools: &[AgentTool]) -> ApiResult<()> {
    let allow = &state.settings.webhook_allow_hosts;
    let checks = tools.iter().enumerate().filter_map(|(index, tool)| {
        let function = tool.as_function()?;
        Some(async move {
            let checked =
                tokio::time::timeout(RESOLVE_TIMEOUT, check_url_for_storage(&function.url, allow))
                    .await;
            match checked {
                Ok(Ok(())) => Ok(()),
                Ok(Err(EgressError::Refused(why))) => Err(ToolsError::url_refused(
                    index,
                    format!(
                        "{why}, a loopback, private, link-local or metadata address; \
                         only hosts on the server's allow-list may be called"
                    ),
                )),
                Ok(Err(other)) => Err(ToolsError::url_refused(index, other.to_string())),
                Err(_) => Err(ToolsError::url_refused(
                    index,
                    format!(
                        "its host did not resolve within {}s",
                        RESOLVE_TIMEOUT.as_secs()
                    ),
                )),
            }
        })
    });
    // All at once (an agent has up to 32 tools); the first refusal by index is reported.
    for result in futures::future::join_all(checks).await {
        result.map_err(AgentSpecError::from)?;
    }
    Ok(())
}

/// Loads an agent of the caller's workspace, deleted ones included.
pub async fn load_agent_any(state: &AppState, caller: &Caller, id: &str) -> ApiResult<AgentRow> {
    let parsed: AgentId = id.parse().map_err(|_| not_found(id))?;
    state
        .store
        .agent(caller.org_id, parsed)
        .await?
        .ok_or_else(|| not_found(id))
}

/// Loads a live (not deleted) agent of the caller's workspace.
pub async fn load_agent(state: &AppState, caller: &Caller, id: &str) -> ApiResult<AgentRow> {
    let row = load_agent_any(state, caller, id).await?;
    if row.status() == AgentStatus::Deleted {
        return Err(not_found(id));
    }
    Ok(row)
}

/// List the workspace's agents.
#[utoipa::path(get, path = "/api/agents", tag = "agents",
    responses((status = 200, description = "Agents, newest first", body = [AgentView])))]
async fn list_agents(
    State(state): State<AppState>,
    caller: Caller,
) -> ApiResult<Json<Vec<AgentView>>> {
    let rows = state.store.agents(caller.org_id).await?;
    rows.iter()
        .map(AgentView::from_row)
        .collect::<ApiResult<Vec<_>>>()
        .map(Json)
}

/// Create an agent; `name` is required.
#[utoipa::path(post, path = "/api/agents", tag = "agents", request_body = AgentInput,
    responses((status = 201, body = AgentView), (status = 400, body = MessageBody)))]
async fn create_agent(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(input): ApiJson<AgentInput>,
) -> ApiResult<(StatusCode, Json<AgentView>)> {
    let tools_sent = input.tools.is_some();
    let mut spec = input.into_new_spec()?;
    if tools_sent {
        refuse_private_function_urls(&state, &spec.tools).await?;
    }
    fill_function_secrets(&mut spec.tools, &[], new_function_secret);
    let id = AgentId::new();
    let now = state.clock.now().timestamp_millis();
    let row = state
        .store
        .insert_agent(id, caller.org_id, &spec, now)
        .await?;
    state.welcome_cache.warm(caller.org_id, id, &spec);
    Ok((StatusCode::CREATED, Json(AgentView::from_row(&row)?)))
}

/// Read one agent.
#[utoipa::path(get, path = "/api/agents/{agentId}", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentView), (status = 404, body = MessageBody)))]
async fn get_agent(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<Response> {
    let id: AgentId = agent_id.parse().map_err(|_| not_found(&agent_id))?;
    let agent = match state.agent_cache.get(id) {
        Ok(hit) => hit,
        Err(miss) => {
            let Some(row) = state.store.agent(caller.org_id, id).await? else {
                return Err(not_found(&agent_id));
            };
            let body = serde_json::to_vec(&AgentView::from_row(&row)?)
                .map_err(|err| ApiError::Internal(err.into()))?;
            let read = Arc::new(CachedAgent {
                row,
                body: Bytes::from(body),
            });
            if let Some(miss) = miss {
                state.agent_cache.put(miss, read.clone());
            }
            read
        }
    };
    // The cache is keyed by id alone: another workspace's agent is not found.
    if agent.row.org_id != caller.org_id || agent.row.status() == AgentStatus::Deleted {
        return Err(not_found(&agent_id));
    }
    Ok((
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        agent.body.clone(),
    )
        .into_response())
}

/// Change any subset of an agent's fields; the result is validated as a whole.
#[utoipa::path(patch, path = "/api/agents/{agentId}", tag = "agents", request_body = AgentInput,
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentView), (status = 400, body = MessageBody), (status = 404, body = MessageBody)))]
async fn patch_agent(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
    ApiJson(input): ApiJson<AgentInput>,
) -> ApiResult<Json<AgentView>> {
    let row = load_agent(&state, &caller, &agent_id).await?;
    let tools_sent = input.tools.is_some();
    let current = row.spec()?;
    let mut spec = input.patch(&current)?;
    // Tools left out of the patch are the stored ones, already checked.
    if tools_sent {
        refuse_private_function_urls(&state, &spec.tools).await?;
    }
    fill_function_secrets(&mut spec.tools, &current.tools, new_function_secret);
    let now = state.clock.now().timestamp_millis();
    if !state
        .store
        .update_agent_spec(caller.org_id, row.id, &spec, now)
        .await?
    {
        return Err(not_found(&agent_id));
    }
    let row = load_agent(&state, &caller, &agent_id).await?;
    if row.status() == AgentStatus::Active && !row.dormant {
        state.welcome_cache.warm(caller.org_id, row.id, &spec);
    } else {
        state.welcome_cache.forget(row.id);
    }
    Ok(Json(AgentView::from_row(&row)?))
}

/// Soft-delete an agent; reads answer 404 until it is restored.
#[utoipa::path(delete, path = "/api/agents/{agentId}", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 204, description = "Deleted"), (status = 404, body = MessageBody)))]
async fn delete_agent(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<StatusCode> {
    let row = load_agent(&state, &caller, &agent_id).await?;
    let now = state.clock.now().timestamp_millis();
    state
        .store
        .set_agent_status(caller.org_id, row.id, AgentStatus::Deleted, false, now)
        .await?;
    state.welcome_cache.forget(row.id);
    Ok(StatusCode::NO_CONTENT)
}

/// Undo a soft delete.
#[utoipa::path(post, path = "/api/agents/{agentId}/restore", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody), (status = 409, body = MessageBody)))]
async fn restore_agent(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    let row = load_agent_any(&state, &caller, &agent_id).await?;
    if row.status() != AgentStatus::Deleted {
        return Err(ApiError::conflict(format!(
            "Agent {agent_id} is not deleted"
        )));
    }
    let now = state.clock.now().timestamp_millis();
    state
        .store
        .set_agent_status(caller.org_id, row.id, AgentStatus::Active, false, now)
        .await?;
    Ok(MessageBody::json("Agent restored"))
}

/// Make an agent dialable again and re-warm its welcome audio.
#[utoipa::path(post, path = "/api/agents/{agentId}/activate", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody)))]
async fn activate_agent(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    let row = load_agent(&state, &caller, &agent_id).await?;
    let now = state.clock.now().timestamp_millis();
    state
        .store
        .set_agent_status(caller.org_id, row.id, AgentStatus::Active, true, now)
        .await?;
    state
        .welcome_cache
        .warm(caller.org_id, row.id, &row.spec()?);
    Ok(MessageBody::json("Agent activated"))
}

/// Stop an agent from being dialed.
#[utoipa::path(post, path = "/api/agents/{agentId}/deactivate", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody)))]
async fn deactivate_agent(
    State(state): State<AppState>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    let row = load_agent(&state, &caller, &agent_id).await?;
    let now = state.clock.now().timestamp_millis();
    state
        .store
        .set_agent_status(caller.org_id, row.id, AgentStatus::Inactive, false, now)
        .await?;
    state.welcome_cache.forget(row.id);
    Ok(MessageBody::json("Agent deactivated"))
}
