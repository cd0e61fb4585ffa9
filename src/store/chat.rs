//! Text chat sessions with agents, and the provider side of a call's bill:
//! LLM usage and whether the call ran on the workspace's own keys.

use super::{Store, StoreResult, with_pool, with_writer};
use crate::domain::{AgentId, CallId, ChatSessionId, OrgId, Paise};

/// A stored chat session.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ChatSessionRow {
    /// Session id.
    pub id: ChatSessionId,
    /// The agent chatted with.
    pub agent_id: AgentId,
    /// Variables JSON object given when the session started.
    pub variables: String,
    /// JSON array of `{role, content}` messages, oldest first.
    pub messages: String,
}

/// How a call's providers were paid for.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct CallProviderBilling {
    /// Per-minute rate the call is billed at.
    pub rate_paise: Paise,
    /// Every paid provider ran on the workspace's own credential.
    pub own_credentials: bool,
    /// LLM prompt tokens over the call.
    pub llm_prompt_tokens: i64,
    /// LLM completion tokens over the call.
    pub llm_completion_tokens: i64,
}

impl Store {
    /// Creates a chat session.
    pub async fn insert_chat_session(
        &self,
        row: &ChatSessionRow,
        org_id: OrgId,
        now_ms: i64,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO chat_sessions (id, org_id, agent_id, variables, messages, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $6)",
            )
            .bind(row.id)
            .bind(org_id)
            .bind(row.agent_id)
            .bind(&row.variables)
            .bind(&row.messages)
            .bind(now_ms)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// A chat session of the workspace.
    pub async fn chat_session(
        &self,
        org_id: OrgId,
        id: ChatSessionId,
    ) -> StoreResult<Option<ChatSessionRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, ChatSessionRow>(
                "SELECT id, agent_id, variables, messages FROM chat_sessions WHERE org_id = $1 AND id = $2",
            )
            .bind(org_id)
            .bind(id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// Replaces a session's messages.
    pub async fn update_chat_messages(
        &self,
        org_id: OrgId,
        id: ChatSessionId,
        messages: &str,
        now_ms: i64,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query("UPDATE chat_sessions SET messages = $1, updated_at = $2 WHERE org_id = $3 AND id = $4")
                .bind(messages)
                .bind(now_ms)
                .bind(org_id)
                .bind(id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Marks a live call as running on the workspace's own keys: it is billed
    /// at `fee_paise` a minute when that is below its bundled rate (decisions §5).
    pub async fn bill_call_at_platform_fee(
        &self,
        call_id: CallId,
        fee_paise: Paise,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "UPDATE calls SET own_credentials = TRUE,
                   rate_paise = CASE WHEN rate_paise > $1 THEN $1 ELSE rate_paise END
                 WHERE id = $2",
            )
            .bind(fee_paise)
            .bind(call_id)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Records a call's LLM token usage.
    pub async fn set_call_llm_usage(
        &self,
        call_id: CallId,
        prompt_tokens: i64,
        completion_tokens: i64,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query("UPDATE calls SET llm_prompt_tokens = $1, llm_completion_tokens = $2 WHERE id = $3")
                .bind(prompt_tokens)
                .bind(completion_tokens)
                .bind(call_id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// How a call's providers were billed.
    pub async fn call_provider_billing(
        &self,
        call_id: CallId,
    ) -> StoreResult<Option<CallProviderBilling>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, CallProviderBilling>(
                "SELECT rate_paise, own_credentials, llm_prompt_tokens, llm_completion_tokens FROM calls WHERE id = $1",
            )
            .bind(call_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }
}
