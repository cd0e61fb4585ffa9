//! Sums over a workspace's calls for the dashboard and analytics: totals
//! or per agent, provider or ended reason, calls per IST day, and post-call
//! analysis outcomes per agent and IST day.

use crate::domain::{OrgId, Paise};
use crate::store::{Store, StoreResult, with_pool};
use sqlx::AssertSqlSafe;
/// Milliseconds IST is ahead of UTC, for bucketing calls by IST day in SQL.
const IST_OFFSET_MS: i64 = 19_800_000;
/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;
/// Aggregates over a set of calls; `group_key`/`group_name` name the group when grouped.
#[derive(Debug, Clone, Default, sqlx::FromRow)]
pub struct CallAggregateRow {
    /// Agent id, provider or ended reason; empty when not grouped.
    pub group_key: String,
    /// A display name for the group (agent name); empty otherwise.
    pub group_name: String,
    /// Calls.
    pub calls: i64,
    /// Calls created since the "today" mark given to the query.
    pub calls_today: i64,
    /// Completed calls.
    pub completed: i64,
    /// Failed calls.
    pub failed: i64,
    /// Unanswered calls.
    pub no_answer: i64,
    /// Busy calls.
    pub busy: i64,
    /// Canceled calls.
    pub canceled: i64,
    /// Calls in a terminal status.
    pub finished: i64,
    /// Terminal calls that were answered.
    pub answered: i64,
    /// Sum of talk time of the calls, seconds.
    pub talk_seconds: i64,
    /// Sum of charges.
    pub spend_paise: Paise,
}
/// Calls of one IST day.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CallDayRow {
    /// Days since 1970-01-01 in IST.
    pub ist_day: i64,
    /// Calls created that day.
    pub calls: i64,
    /// Of which completed.
    pub completed: i64,
    /// Of which failed, unanswered or busy.
    pub unsuccessful: i64,
}
/// Calls of one IST day in one status, with their talk time and charges.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CallDayStatusRow {
    /// Days since 1970-01-01 in IST.
    pub ist_day: i64,
    /// Raw status.
    pub status: String,
    /// Calls created that day now in this status.
    pub calls: i64,
    /// Sum of their talk time, seconds.
    pub talk_seconds: i64,
    /// Sum of their charges.
    pub spend_paise: Paise,
}
/// Post-call analysis outcomes of one agent's calls created on one IST day.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AnalysisDayAggregateRow {
    /// Agent id, as the analyses store it.
    pub agent_id: String,
    /// The agent's name on its latest such call.
    pub agent_name: String,
    /// Days since 1970-01-01 in IST.
    pub ist_day: i64,
    /// Analyses done.
    pub analyzed: i64,
    /// Of which judged a success.
    pub passed: i64,
    /// Of which judged not a success.
    pub not_passed: i64,
    /// Analyses that failed.
    pub failed: i64,
}
/// How [`Store::call_aggregates`] groups calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallGrouping {
    /// One row for all calls.
    Total,
    /// One row per agent.
    Agent,
    /// One row per telephony provider.
    Provider,
    /// One row per ended reason (calls without one are left out).
    EndedReason,
}
/// The aggregate columns of [`CallAggregateRow`] past the group columns; `$2` is the "today" mark.
const AGGREGATE_COLUMNS: &str = "CAST(COUNT(*) AS BIGINT) AS calls,
    CAST(COALESCE(SUM(CASE WHEN c.created_at >= $2 THEN 1 ELSE 0 END), 0) AS BIGINT) AS calls_today,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'completed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS completed,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS failed,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'no-answer' THEN 1 ELSE 0 END), 0) AS BIGINT) AS no_answer,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'busy' THEN 1 ELSE 0 END), 0) AS BIGINT) AS busy,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'canceled' THEN 1 ELSE 0 END), 0) AS BIGINT) AS canceled,
    CAST(COALESCE(SUM(CASE WHEN c.status IN ('completed', 'failed', 'no-answer', 'busy', 'canceled', 'voicemail')
        THEN 1 ELSE 0 END), 0) AS BIGINT) AS finished,
    CAST(COALESCE(SUM(CASE WHEN c.status IN ('completed', 'failed', 'no-answer', 'busy', 'canceled', 'voicemail')
        AND c.answered_at IS NOT NULL THEN 1 ELSE 0 END), 0) AS BIGINT) AS answered,
    CAST(COALESCE(SUM(c.duration_seconds), 0) AS BIGINT) AS talk_seconds,
    CAST(COALESCE(SUM(c.cost_paise), 0) AS BIGINT) AS spend_paise";
impl Store {
    /// Aggregates over a workspace's calls created at or after `since_ms`,
    /// grouped by `grouping`; `today_ms` marks where `calls_today` starts.
    /// Groups come largest first, at most 100.
    pub async fn call_aggregates(
        &self,
        org_id: OrgId,
        since_ms: i64,
        today_ms: i64,
        grouping: CallGrouping,
    ) -> StoreResult<Vec<CallAggregateRow>> {
        let (key, name, extra_where) = match grouping {
            CallGrouping::Total => ("''", "''", ""),
            CallGrouping::Agent => ("c.agent_id", "MAX(c.agent_name)", ""),
            CallGrouping::Provider => ("c.provider", "MAX(c.provider)", ""),
            CallGrouping::EndedReason => (
                "c.ended_reason",
                "MAX(c.ended_reason)",
                " AND c.ended_reason IS NOT NULL",
            ),
        };
        let group_by = match grouping {
            CallGrouping::Total => String::new(),
            _ => format!(" GROUP BY {key}"),
        };
        let sql = format!(
            "SELECT {key} AS group_key, {name} AS group_name, {AGGREGATE_COLUMNS}
             FROM calls c WHERE c.org_id = $1 AND c.created_at >= $3{extra_where}{group_by}
             ORDER BY calls DESC LIMIT 100"
        );
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, CallAggregateRow>(AssertSqlSafe(sql))
                .bind(org_id)
                .bind(today_ms)
                .bind(since_ms)
                .fetch_all(pool)
                .await?
        });
        Ok(rows)
    }
    /// Calls per IST day of a workspace, created at or after `since_ms`; days without calls are absent.
    pub async fn calls_per_ist_day(
        &self,
        org_id: OrgId,
        since_ms: i64,
    ) -> StoreResult<Vec<CallDayRow>> {
        let sql = format!(
            "SELECT CAST((c.created_at + {IST_OFFSET_MS}) / {DAY_MS} AS BIGINT) AS ist_day,
               CAST(COUNT(*) AS BIGINT) AS calls,
               CAST(COALESCE(SUM(CASE WHEN c.status = 'completed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS completed,
               CAST(COALESCE(SUM(CASE WHEN c.status IN ('failed', 'no-answer', 'busy') THEN 1 ELSE 0 END), 0) AS BIGINT)
                 AS unsuccessful
             FROM calls c WHERE c.org_id = $1 AND c.created_at >= $2
             GROUP BY (c.created_at + {IST_OFFSET_MS}) / {DAY_MS}
             ORDER BY ist_day"
        );
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, CallDayRow>(AssertSqlSafe(sql))
                .bind(org_id)
                .bind(since_ms)
                .fetch_all(pool)
                .await?
        });
        Ok(rows)
    }
    /// Calls of a workspace created in `[since_ms, until_ms)`, per IST day
    /// and status with their talk time and charges, oldest day first; days
    /// and statuses without calls are absent.
    pub async fn calls_per_ist_day_and_status(
        &self,
        org_id: OrgId,
        since_ms: i64,
        until_ms: i64,
    ) -> StoreResult<Vec<CallDayStatusRow>> {
        let sql = format!(
            "SELECT CAST((c.created_at + {IST_OFFSET_MS}) / {DAY_MS} AS BIGINT) AS ist_day, c.status AS status,
               CAST(COUNT(*) AS BIGINT) AS calls,
               CAST(COALESCE(SUM(c.duration_seconds), 0) AS BIGINT) AS talk_seconds,
               CAST(COALESCE(SUM(c.cost_paise), 0) AS BIGINT) AS spend_paise
             FROM calls c WHERE c.org_id = $1 AND c.created_at >= $2 AND c.created_at < $3
             GROUP BY (c.created_at + {IST_OFFSET_MS}) / {DAY_MS}, c.status
             ORDER BY ist_day, status"
        );
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, CallDayStatusRow>(AssertSqlSafe(sql))
                .bind(org_id)
                .bind(since_ms)
                .bind(until_ms)
                .fetch_all(pool)
                .await?
        });
        Ok(rows)
    }
    /// Analysis outcomes of a workspace's calls created at or after
    /// `since_ms`, per agent and IST day of the call's creation, oldest day
    /// first; days and agents without analyses are absent. A call whose
    /// analysis is pending or skipped counts nowhere.
    pub async fn analysis_per_agent_day(
        &self,
        org_id: OrgId,
        since_ms: i64,
    ) -> StoreResult<Vec<AnalysisDayAggregateRow>> {
        let sql = format!(
            "SELECT a.agent_id AS agent_id, MAX(c.agent_name) AS agent_name,
               CAST((a.call_created_at + {IST_OFFSET_MS}) / {DAY_MS} AS BIGINT) AS ist_day,
               CAST(COALESCE(SUM(CASE WHEN a.status = 'done' THEN 1 ELSE 0 END), 0) AS BIGINT) AS analyzed,
               CAST(COALESCE(SUM(CASE WHEN a.status = 'done' AND a.success_pass = TRUE THEN 1 ELSE 0 END), 0)
                 AS BIGINT) AS passed,
               CAST(COALESCE(SUM(CASE WHEN a.status = 'done' AND a.success_pass = FALSE THEN 1 ELSE 0 END), 0)
                 AS BIGINT) AS not_passed,
               CAST(COALESCE(SUM(CASE WHEN a.status = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS failed
             FROM call_analyses a JOIN calls c ON c.id = a.call_id
             WHERE a.org_id = $1 AND a.call_created_at >= $2 AND a.status IN ('done', 'failed')
             GROUP BY a.agent_id, (a.call_created_at + {IST_OFFSET_MS}) / {DAY_MS}
             ORDER BY ist_day, agent_id"
        );
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, AnalysisDayAggregateRow>(AssertSqlSafe(sql))
                .bind(org_id)
                .bind(since_ms)
                .fetch_all(pool)
                .await?
        });
        Ok(rows)
    }
}
