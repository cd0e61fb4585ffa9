//! One call of a workspace: its detail row, existence, transcript text,
//! turns (whole or paged) and status events.

use super::{CallReadRow, ROW_COLUMNS};
use crate::domain::hours_override::HoursOverride;
use crate::domain::{CallId, OrgId};
use crate::store::{Store, StoreResult, with_pool};
use sqlx::AssertSqlSafe;
/// A call with the JSON columns and transcript text the detail read adds.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CallDetailRow {
    /// The list columns.
    #[sqlx(flatten)]
    pub call: CallReadRow,
    /// JSON object of the variables the call was placed with.
    pub variables: String,
    /// JSON object of fields extracted after the call.
    pub extracted: String,
    /// JSON array of per-turn latencies.
    pub latencies: String,
    /// The whole transcript as one text.
    pub transcript_text: String,
    /// Prompt tokens the conversation's LLM turns used.
    pub llm_prompt_tokens: i64,
    /// Tokens the conversation's LLM turns generated.
    pub llm_completion_tokens: i64,
    /// The permitted override that placed it outside its calling hours, if one did.
    pub calling_hours_override: Option<HoursOverride>,
    /// The carrier's id of the call (the SIP Call-ID on `sip`).
    pub carrier_call_id: Option<String>,
    /// The carrier's final code (the SIP status code on `sip`).
    pub carrier_code: Option<i32>,
}
/// One stored transcript turn.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CallTurnRow {
    /// Order within the call, from 0 or 1.
    pub seq: i64,
    /// `assistant` or `user`.
    pub speaker: String,
    /// What was said.
    pub text: String,
    /// Time, Unix ms.
    pub created_at: i64,
}
/// One persisted status transition.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CallEventRow {
    /// Raw status entered.
    pub status: String,
    /// Time, Unix ms.
    pub at: i64,
}
impl Store {
    /// One call of a workspace with its JSON columns and transcript text.
    pub async fn call_detail(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> StoreResult<Option<CallDetailRow>> {
        let sql = format!(
            "SELECT {ROW_COLUMNS}, c.variables, c.extracted, c.latencies, c.transcript_text,
               c.llm_prompt_tokens, c.llm_completion_tokens, c.calling_hours_override,
               c.carrier_call_id, c.carrier_code
             FROM calls c WHERE c.id = $1 AND c.org_id = $2"
        );
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, CallDetailRow>(AssertSqlSafe(sql))
                .bind(call_id)
                .bind(org_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row)
    }
    /// Whether a call exists in a workspace.
    pub async fn call_exists(&self, org_id: OrgId, call_id: CallId) -> StoreResult<bool> {
        let found = with_pool!(self, pool => {
            sqlx::query_scalar::<_, String>("SELECT id FROM calls WHERE id = $1 AND org_id = $2")
                .bind(call_id)
                .bind(org_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(found.is_some())
    }
    /// The transcript text of a call of a workspace; `None` when there is no such call.
    pub async fn call_transcript_text(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> StoreResult<Option<String>> {
        let text = with_pool!(self, pool => {
            sqlx::query_scalar::<_, String>(
                "SELECT transcript_text FROM calls WHERE id = $1 AND org_id = $2",
            )
            .bind(call_id)
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(text)
    }
    /// Every stored turn of a call, in order.
    pub async fn call_turns(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> StoreResult<Vec<CallTurnRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, CallTurnRow>(
                "SELECT seq, speaker, text, created_at FROM call_turns
                 WHERE call_id = $1 AND org_id = $2 ORDER BY seq",
            )
            .bind(call_id)
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }
    /// One page of a call's turns in order, and how many it has.
    pub async fn call_turns_page(
        &self,
        org_id: OrgId,
        call_id: CallId,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<CallTurnRow>, i64)> {
        let page = with_pool!(self, pool => {
            let rows = sqlx::query_as::<_, CallTurnRow>(
                "SELECT seq, speaker, text, created_at FROM call_turns
                 WHERE call_id = $1 AND org_id = $2 ORDER BY seq LIMIT $3 OFFSET $4",
            )
            .bind(call_id)
            .bind(org_id)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?;
            let total = sqlx::query_scalar::<_, i64>(
                "SELECT CAST(COUNT(*) AS BIGINT) FROM call_turns WHERE call_id = $1 AND org_id = $2",
            )
            .bind(call_id)
            .bind(org_id)
            .fetch_one(pool)
            .await?;
            (rows, total)
        });
        Ok(page)
    }
    /// A call's status transitions in the order they happened.
    pub async fn call_events(&self, call_id: CallId) -> StoreResult<Vec<CallEventRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, CallEventRow>(
                "SELECT status, at FROM call_events WHERE call_id = $1
                 ORDER BY at, CASE status WHEN 'queued' THEN 0 WHEN 'ringing' THEN 1
                   WHEN 'in-progress' THEN 2 ELSE 3 END",
            )
            .bind(call_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }
}
