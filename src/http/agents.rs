//! `/api/agents`: create, read, edit, soft-delete, restore, activate, deactivate.

use super::MessageBody;
use super::auth::Caller;
use super::error::{ApiError, ApiResult};
use super::extract::ApiJson;
use crate::agents::service::AgentError;
use crate::agents::service::AgentService;
use crate::domain::AgentId;
use crate::domain::agent::{AgentInput, AgentSpec, AgentStatus};
use crate::domain::clock::iso;
use crate::http::agent_cache::AgentCache;
use crate::http::agent_cache::CachedAgent;
use crate::http::state::AppState;
use crate::store::AgentRow;
use crate::store::Store;
use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Serialize;
use std::sync::Arc;
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

impl From<AgentError> for ApiError {
    fn from(err: AgentError) -> Self {
        match err {
            AgentError::NotFound(_) => Self::NotFound(err.to_string()),
            AgentError::NotDeleted(_) => Self::conflict(err.to_string()),
            AgentError::Spec(err) => err.into(),
            AgentError::Store(err) => Self::Store(err),
        }
    }
}

fn not_found(id: &str) -> ApiError {
    AgentError::NotFound(id.to_string()).into()
}

/// Loads an agent of the caller's workspace, deleted ones included.
pub async fn load_agent_any(
    agents: &AgentService,
    caller: &Caller,
    id: &str,
) -> ApiResult<AgentRow> {
    Ok(agents.load_any(caller.org_id, id).await?)
}

/// Loads a live (not deleted) agent of the caller's workspace.
pub async fn load_agent(agents: &AgentService, caller: &Caller, id: &str) -> ApiResult<AgentRow> {
    Ok(agents.load_live(caller.org_id, id).await?)
}

/// List the workspace's agents.
#[utoipa::path(get, path = "/api/agents", tag = "agents",
    responses((status = 200, description = "Agents, newest first", body = [AgentView])))]
async fn list_agents(
    State(store): State<Store>,
    caller: Caller,
) -> ApiResult<Json<Vec<AgentView>>> {
    let rows = store.agents(caller.org_id).await?;
    rows.iter()
        .map(AgentView::from_row)
        .collect::<ApiResult<Vec<_>>>()
        .map(Json)
}

/// Create an agent; `name` is required.
#[utoipa::path(post, path = "/api/agents", tag = "agents", request_body = AgentInput,
    responses((status = 201, body = AgentView), (status = 400, body = MessageBody)))]
async fn create_agent(
    State(agents): State<AgentService>,
    caller: Caller,
    ApiJson(input): ApiJson<AgentInput>,
) -> ApiResult<(StatusCode, Json<AgentView>)> {
    let row = agents.create(caller.org_id, input).await?;
    Ok((StatusCode::CREATED, Json(AgentView::from_row(&row)?)))
}

/// Read one agent.
#[utoipa::path(get, path = "/api/agents/{agentId}", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = AgentView), (status = 404, body = MessageBody)))]
async fn get_agent(
    State(store): State<Store>,
    State(agent_cache): State<AgentCache>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<Response> {
    let id: AgentId = agent_id.parse().map_err(|_| not_found(&agent_id))?;
    let agent = match agent_cache.get(id) {
        Ok(hit) => hit,
        Err(miss) => {
            let Some(row) = store.agent(caller.org_id, id).await? else {
                return Err(not_found(&agent_id));
            };
            let body = serde_json::to_vec(&AgentView::from_row(&row)?)
                .map_err(|err| ApiError::Internal(err.into()))?;
            let read = Arc::new(CachedAgent {
                row,
                body: Bytes::from(body),
            });
            if let Some(miss) = miss {
                agent_cache.put(miss, read.clone());
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
    State(agents): State<AgentService>,
    caller: Caller,
    Path(agent_id): Path<String>,
    ApiJson(input): ApiJson<AgentInput>,
) -> ApiResult<Json<AgentView>> {
    let row = agents.update(caller.org_id, &agent_id, input).await?;
    Ok(Json(AgentView::from_row(&row)?))
}

/// Soft-delete an agent; reads answer 404 until it is restored.
#[utoipa::path(delete, path = "/api/agents/{agentId}", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 204, description = "Deleted"), (status = 404, body = MessageBody)))]
async fn delete_agent(
    State(agents): State<AgentService>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<StatusCode> {
    agents.delete(caller.org_id, &agent_id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Undo a soft delete.
#[utoipa::path(post, path = "/api/agents/{agentId}/restore", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody), (status = 409, body = MessageBody)))]
async fn restore_agent(
    State(agents): State<AgentService>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    agents.restore(caller.org_id, &agent_id).await?;
    Ok(MessageBody::json("Agent restored"))
}

/// Make an agent dialable again and re-warm its welcome audio.
#[utoipa::path(post, path = "/api/agents/{agentId}/activate", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody)))]
async fn activate_agent(
    State(agents): State<AgentService>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    agents.activate(caller.org_id, &agent_id).await?;
    Ok(MessageBody::json("Agent activated"))
}

/// Stop an agent from being dialed.
#[utoipa::path(post, path = "/api/agents/{agentId}/deactivate", tag = "agents",
    params(("agentId" = String, Path, description = "Agent id")),
    responses((status = 200, body = MessageBody), (status = 404, body = MessageBody)))]
async fn deactivate_agent(
    State(agents): State<AgentService>,
    caller: Caller,
    Path(agent_id): Path<String>,
) -> ApiResult<Json<MessageBody>> {
    agents.deactivate(caller.org_id, &agent_id).await?;
    Ok(MessageBody::json("Agent deactivated"))
}
