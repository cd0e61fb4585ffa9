//! Creating, editing and switching agents: the one place the API and the
//! console save an agent, so both apply the spec's validation, the egress
//! check of function URLs, function secrets and the welcome-audio cache alike.

use crate::calls::welcome_cache::WelcomeCache;
use crate::domain::agent::{AgentInput, AgentSpecError, AgentStatus};
use crate::domain::clock::SharedClock;
use crate::domain::tools::{AgentTool, ToolsError, fill_function_secrets, new_function_secret};
use crate::domain::{AgentId, OrgId};
use crate::egress::address_guard::{EgressError, check_url_for_storage};
use crate::providers::select::ProviderSelector;
use crate::store::Store;
use crate::store::{AgentRow, StoreError};
use std::sync::Arc;
use std::time::Duration;

/// Why an agent operation was refused.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// No such agent in the workspace (or, for live-only operations, it is deleted).
    #[error("Agent {0} not found")]
    NotFound(String),
    /// Restore of an agent that is not deleted.
    #[error("Agent {0} is not deleted")]
    NotDeleted(String),
    /// The spec does not hold together; the message names the field.
    #[error(transparent)]
    Spec(#[from] AgentSpecError),
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The agents room's dependencies, built once at start; cheap to clone.
#[derive(Clone)]
pub struct AgentService {
    /// Where agents and chat sessions are stored.
    pub(crate) store: Store,
    /// Time source for stamps.
    pub(crate) clock: SharedClock,
    /// Warm welcome audio, refreshed when an agent changes.
    pub(crate) welcome_cache: Arc<WelcomeCache>,
    /// Hosts a function tool may name although they resolve privately.
    pub(crate) allow_hosts: Arc<[String]>,
    /// Builds the models text chats run on, the same as calls'.
    pub(crate) selector: Arc<ProviderSelector>,
}

impl AgentService {
    /// The service over these parts.
    pub fn new(
        store: Store,
        clock: SharedClock,
        welcome_cache: Arc<WelcomeCache>,
        allow_hosts: &[String],
        selector: ProviderSelector,
    ) -> Self {
        Self {
            store,
            clock,
            welcome_cache,
            allow_hosts: allow_hosts.into(),
            selector: Arc::new(selector),
        }
    }
}

/// How long one function URL's host may take to resolve when an agent is saved.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(5);

impl AgentService {
    /// Refuses `function` tools whose URL resolves into loopback, private,
    /// link-local or metadata addresses, unless the host is on the server's
    /// allow-list: the server calls these URLs during calls, so a customer must
    /// not be able to point it at our own network. Checked when saved so the
    /// mistake shows at once rather than as failed calls.
    async fn refuse_private_function_urls(&self, tools: &[AgentTool]) -> Result<(), AgentError> {
        let allow = &self.allow_hosts;
        let checks = tools.iter().enumerate().filter_map(|(index, tool)| {
            let function = tool.as_function()?;
            Some(async move {
                let checked = tokio::time::timeout(
                    RESOLVE_TIMEOUT,
                    check_url_for_storage(&function.url, allow),
                )
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

    /// Loads an agent of the workspace, deleted ones included; `raw_id` is the
    /// id as the client wrote it (anything unparsable names no agent).
    pub async fn load_any(&self, org: OrgId, raw_id: &str) -> Result<AgentRow, AgentError> {
        let not_found = || AgentError::NotFound(raw_id.to_string());
        let id: AgentId = raw_id.parse().map_err(|_| not_found())?;
        self.store.agent(org, id).await?.ok_or_else(not_found)
    }

    /// Loads a live (not deleted) agent of the workspace.
    pub async fn load_live(&self, org: OrgId, raw_id: &str) -> Result<AgentRow, AgentError> {
        let row = self.load_any(org, raw_id).await?;
        if row.status() == AgentStatus::Deleted {
            return Err(AgentError::NotFound(raw_id.to_string()));
        }
        Ok(row)
    }

    /// Creates an agent from a client's input (`name` required) and warms its welcome audio.
    pub async fn create(&self, org: OrgId, input: AgentInput) -> Result<AgentRow, AgentError> {
        let tools_sent = input.tools.is_some();
        let mut spec = input.into_new_spec()?;
        if tools_sent {
            self.refuse_private_function_urls(&spec.tools).await?;
        }
        fill_function_secrets(&mut spec.tools, &[], new_function_secret);
        let id = AgentId::new();
        let now = self.clock.now().timestamp_millis();
        let row = self.store.insert_agent(id, org, &spec, now).await?;
        self.welcome_cache.warm(org, id, &spec);
        Ok(row)
    }

    /// Applies a patch to a live agent; the merged spec is validated as a whole.
    pub async fn update(
        &self,
        org: OrgId,
        raw_id: &str,
        input: AgentInput,
    ) -> Result<AgentRow, AgentError> {
        let row = self.load_live(org, raw_id).await?;
        let tools_sent = input.tools.is_some();
        let current = row.spec()?;
        let mut spec = input.patch(&current)?;
        // Tools left out of the patch are the stored ones, already checked.
        if tools_sent {
            self.refuse_private_function_urls(&spec.tools).await?;
        }
        // Secrets of functions kept by name survive an edit that omits them.
        fill_function_secrets(&mut spec.tools, &current.tools, new_function_secret);
        let now = self.clock.now().timestamp_millis();
        if !self
            .store
            .update_agent_spec(org, row.id, &spec, now)
            .await?
        {
            return Err(AgentError::NotFound(raw_id.to_string()));
        }
        let row = self.load_live(org, raw_id).await?;
        if row.status() == AgentStatus::Active && !row.dormant {
            self.welcome_cache.warm(org, row.id, &spec);
        } else {
            self.welcome_cache.forget(row.id);
        }
        Ok(row)
    }

    /// Soft-deletes a live agent; reads treat it as absent until it is restored.
    pub async fn delete(&self, org: OrgId, raw_id: &str) -> Result<(), AgentError> {
        let row = self.load_live(org, raw_id).await?;
        let now = self.clock.now().timestamp_millis();
        self.store
            .set_agent_status(org, row.id, AgentStatus::Deleted, false, now)
            .await?;
        self.welcome_cache.forget(row.id);
        Ok(())
    }

    /// Undoes a soft delete; the agent comes back active.
    pub async fn restore(&self, org: OrgId, raw_id: &str) -> Result<(), AgentError> {
        let row = self.load_any(org, raw_id).await?;
        if row.status() != AgentStatus::Deleted {
            return Err(AgentError::NotDeleted(raw_id.to_string()));
        }
        let now = self.clock.now().timestamp_millis();
        self.store
            .set_agent_status(org, row.id, AgentStatus::Active, false, now)
            .await?;
        Ok(())
    }

    /// Makes a live agent dialable again and re-warms its welcome audio.
    pub async fn activate(&self, org: OrgId, raw_id: &str) -> Result<(), AgentError> {
        let row = self.load_live(org, raw_id).await?;
        let now = self.clock.now().timestamp_millis();
        self.store
            .set_agent_status(org, row.id, AgentStatus::Active, true, now)
            .await?;
        self.welcome_cache.warm(org, row.id, &row.spec()?);
        Ok(())
    }

    /// Stops a live agent from being dialed.
    pub async fn deactivate(&self, org: OrgId, raw_id: &str) -> Result<(), AgentError> {
        let row = self.load_live(org, raw_id).await?;
        let now = self.clock.now().timestamp_millis();
        self.store
            .set_agent_status(org, row.id, AgentStatus::Inactive, false, now)
            .await?;
        self.welcome_cache.forget(row.id);
        Ok(())
    }
}
