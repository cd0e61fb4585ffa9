//! The tool calls an agent made during a call, and the call columns the
//! calendar and transfer tools fill.

use super::{BeginWrite, Store, StoreResult, with_pool, with_writer};
use crate::domain::{CallId, OrgId};
use sqlx::QueryBuilder;

/// One tool call to store.
#[derive(Debug, Clone)]
pub struct NewToolCall {
    /// The transcript turn (its `seq`) of the agent turn that made it.
    pub turn_seq: i64,
    /// The model's id for the call.
    pub tool_call_id: String,
    /// The tool.
    pub name: String,
    /// The arguments, JSON.
    pub arguments: String,
    /// The result, JSON, when it succeeded.
    pub result: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
    /// From the call to its result.
    pub latency_ms: i64,
    /// When it was called, Unix ms.
    pub created_at: i64,
}

/// A stored tool call.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow)]
pub struct ToolCallRow {
    /// Order within the call.
    pub seq: i64,
    /// The agent turn that made it.
    pub turn_seq: i64,
    /// The model's id.
    pub tool_call_id: String,
    /// The tool.
    pub name: String,
    /// Arguments, JSON.
    pub arguments: String,
    /// Result, JSON.
    pub result: Option<String>,
    /// Error text.
    pub error: Option<String>,
    /// Latency.
    pub latency_ms: i64,
    /// Unix ms.
    pub created_at: i64,
}

/// What a call's tools changed on its record.
#[derive(Debug, Clone, Default)]
pub struct CallToolOutcome {
    /// `booked` or `failed`; `None` when no booking was tried.
    pub calendar_status: Option<String>,
    /// The booked event's page.
    pub calendar_event_url: Option<String>,
    /// Why the booking failed.
    pub calendar_error: Option<String>,
    /// Where the callee was transferred.
    pub transferred_to: Option<String>,
    /// When, Unix ms.
    pub transferred_at: Option<i64>,
}

/// A call's calendar columns.
#[derive(Debug, Clone, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct CallCalendarRow {
    /// `booked`, `failed` or null.
    pub calendar_status: Option<String>,
    /// The event page.
    pub calendar_event_url: Option<String>,
    /// Why it failed.
    pub calendar_error: Option<String>,
}

impl Store {
    /// The carrier's id for a call, once it has named it.
    pub async fn carrier_call_id(&self, call_id: CallId) -> StoreResult<Option<String>> {
        let id = with_pool!(self, pool => {
            sqlx::query_scalar::<_, Option<String>>("SELECT carrier_call_id FROM calls WHERE id = $1")
                .bind(call_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(id.flatten())
    }

    /// The name of the person a call is for, when it has one.
    pub async fn call_target_name(&self, call_id: CallId) -> StoreResult<Option<String>> {
        let name = with_pool!(self, pool => {
            sqlx::query_scalar::<_, String>("SELECT target_name FROM calls WHERE id = $1")
                .bind(call_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(name.filter(|n| !n.trim().is_empty()))
    }

    /// Stores a finished call's tool calls and what they changed on the call, in one
    /// transaction.
    pub async fn record_tool_outcome(
        &self,
        call_id: CallId,
        org_id: OrgId,
        calls: &[NewToolCall],
        outcome: &CallToolOutcome,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            if !calls.is_empty() {
                let mut insert = QueryBuilder::new(
                    "INSERT INTO call_tool_calls (call_id, seq, org_id, turn_seq, tool_call_id, \
                     name, arguments, result, error, latency_ms, created_at) ",
                );
                insert.push_values(calls.iter().enumerate(), |mut row, (seq, call)| {
                    row.push_bind(call_id)
                        .push_bind(i64::try_from(seq).unwrap_or(i64::MAX))
                        .push_bind(org_id)
                        .push_bind(call.turn_seq)
                        .push_bind(&call.tool_call_id)
                        .push_bind(&call.name)
                        .push_bind(&call.arguments)
                        .push_bind(&call.result)
                        .push_bind(&call.error)
                        .push_bind(call.latency_ms)
                        .push_bind(call.created_at);
                });
                insert.push(" ON CONFLICT (call_id, seq) DO NOTHING");
                insert.build().execute(&mut *tx).await?;
            }
            if outcome.calendar_status.is_some() || outcome.transferred_to.is_some() {
                sqlx::query(
                    "UPDATE calls SET calendar_status = $1, calendar_event_url = $2,
                       calendar_error = $3, transferred_to = $4, transferred_at = $5
                     WHERE id = $6",
                )
                .bind(&outcome.calendar_status)
                .bind(&outcome.calendar_event_url)
                .bind(&outcome.calendar_error)
                .bind(&outcome.transferred_to)
                .bind(outcome.transferred_at)
                .bind(call_id)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(())
    }

    /// A call's tool calls, in order.
    pub async fn tool_calls(&self, call_id: CallId) -> StoreResult<Vec<ToolCallRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, ToolCallRow>(
                "SELECT seq, turn_seq, tool_call_id, name, arguments, result, error, latency_ms,
                   created_at
                 FROM call_tool_calls WHERE call_id = $1 ORDER BY seq",
            )
            .bind(call_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// A call's calendar columns (all null when it has none or does not exist).
    pub async fn call_calendar(&self, call_id: CallId) -> StoreResult<CallCalendarRow> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, CallCalendarRow>(
                "SELECT calendar_status, calendar_event_url, calendar_error FROM calls WHERE id = $1",
            )
            .bind(call_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row.unwrap_or_default())
    }
}
