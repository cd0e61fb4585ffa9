//! Post-call analyses: the row written with the call's end, leased by the
//! analysis worker (a [`JobTable`] of [`super::leased_jobs`]), completed or failed together with the webhook outbox,
//! re-queued by a re-run, and read back with the call.

use super::leased_jobs::{Attempts, Holder, JobTable, Settle};
use super::{BeginWrite, Store, StoreResult, with_pool, with_writer};
use crate::domain::{AgentId, BatchId, CallId, NodeId, OrgId};
use sqlx::QueryBuilder;

/// Columns of an analysis read.
macro_rules! analysis_columns {
    () => {
        "call_id, status, summary, structured_data, success, success_pass, error, model,
         prompt_tokens, completion_tokens, latency_ms, attempts, version, completed_at"
    };
}

/// Releases a `call.completed` held for post-call work once nothing of the
/// call is pending any more (its analysis and its rating): the delivery
/// becomes due at once and carries both. Runs inside the transaction that
/// settled the last of them.
///
/// The no-op update locks the call's row first (Postgres; SQLite has one
/// writer anyway), so an analysis and a rating settling at once on two
/// connections are counted one after the other: the second sees the first
/// committed, and one of them releases the webhook. Without it, each could
/// see the other still pending and neither release it.
macro_rules! release_if_settled {
    ($conn:expr, $call_id:expr, $now_ms:expr) => {{
        sqlx::query("UPDATE calls SET id = id WHERE id = $1")
            .bind($call_id)
            .execute(&mut *$conn)
            .await?;
        let pending: i64 = sqlx::query_scalar(
            "SELECT (SELECT COUNT(*) FROM call_analyses WHERE call_id = $1 AND status = 'pending')
                  + (SELECT COUNT(*) FROM ratings WHERE call_id = $1 AND status = 'pending')",
        )
        .bind($call_id)
        .fetch_one(&mut *$conn)
        .await?;
        if pending == 0 {
            sqlx::query(
                "UPDATE webhook_deliveries SET next_attempt_at = $1
                 WHERE call_id = $2 AND held_for_rating AND status = 'pending' AND attempts = 0
                   AND next_attempt_at > $1",
            )
            .bind($now_ms)
            .bind($call_id)
            .execute(&mut *$conn)
            .await?;
            sqlx::query(
                "UPDATE webhook_deliveries SET held_for_rating = FALSE WHERE call_id = $1 AND held_for_rating",
            )
            .bind($call_id)
            .execute(&mut *$conn)
            .await?;
        }
    }};
}
pub(crate) use release_if_settled;

/// A call's analysis as its reads show it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AnalysisRow {
    /// The analyzed call.
    pub call_id: CallId,
    /// pending, done, failed or skipped.
    pub status: String,
    /// The model's summary, when the plan asks for one.
    pub summary: Option<String>,
    /// JSON object of the extracted fields.
    pub structured_data: Option<String>,
    /// JSON `{rubric, value, pass, reason}`.
    pub success: Option<String>,
    /// The verdict as pass or fail.
    pub success_pass: Option<bool>,
    /// Why the last job failed.
    pub error: Option<String>,
    /// The model that answered.
    pub model: Option<String>,
    /// Prompt tokens of the last job.
    pub prompt_tokens: i64,
    /// Generated tokens of the last job.
    pub completion_tokens: i64,
    /// Time the model took, ms.
    pub latency_ms: i64,
    /// Model calls the last job made.
    pub attempts: i64,
    /// Analyses produced so far.
    pub version: i64,
    /// When the current analysis was produced, Unix ms.
    pub completed_at: Option<i64>,
}

/// A pending analysis a worker now holds.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedAnalysis {
    /// The call to analyze.
    pub call_id: CallId,
    /// Its workspace.
    pub org_id: OrgId,
    /// Its agent.
    pub agent_id: AgentId,
    /// The job's generation: its result is stored only if still current.
    pub generation: i64,
    /// The plan a re-run asked for (JSON), instead of the agent's.
    pub plan: Option<String>,
}

/// A finished analysis to store.
#[derive(Debug, Clone)]
pub struct CompletedAnalysis<'a> {
    /// The analyzed call.
    pub call_id: CallId,
    /// The job's generation.
    pub generation: i64,
    /// The summary, when asked for.
    pub summary: Option<&'a str>,
    /// JSON object of the extracted fields.
    pub structured_data: &'a str,
    /// JSON `{rubric, value, pass, reason}`, when success is judged.
    pub success: Option<&'a str>,
    /// The verdict as pass or fail.
    pub success_pass: Option<bool>,
    /// The model that answered.
    pub model: &'a str,
    /// Prompt tokens.
    pub prompt_tokens: i64,
    /// Generated tokens.
    pub completion_tokens: i64,
    /// Time the model took, ms.
    pub latency_ms: i64,
    /// Model calls made.
    pub attempts: i64,
    /// Completion time, Unix ms.
    pub now_ms: i64,
}

/// How far a batch's analyses have got.
#[derive(Debug, Clone, Copy, Default, sqlx::FromRow)]
pub struct AnalysisProgress {
    /// Analyses of the batch's calls.
    pub total: i64,
    /// Waiting or running.
    pub pending: i64,
    /// Produced.
    pub done: i64,
    /// Given up.
    pub failed: i64,
    /// Calls that never connected.
    pub skipped: i64,
}

/// Success and failure counts of one agent on one day.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AnalysisDayRow {
    /// Agent id.
    pub agent_id: AgentId,
    /// IST day, `YYYY-MM-DD`.
    pub day: String,
    /// Analyses done.
    pub done: i64,
    /// Of which judged a success.
    pub passed: i64,
    /// Of which judged a failure.
    pub not_passed: i64,
    /// Analyses failed.
    pub failed: i64,
}

/// Analyses as leased jobs: due as soon as no one holds them, oldest
/// update first; a re-run bumps the generation, which supersedes a job in
/// flight; failures are final (the analyst retries the model itself).
pub const ANALYSIS_JOBS: JobTable = JobTable {
    table: "call_analyses",
    id: "call_id",
    status: "status",
    done_status: "done",
    lease_owner: "lease_owner",
    lease_until: "lease_until",
    attempts: "attempts",
    error: "error",
    next_attempt_at: None,
    generation: Some("generation"),
    settles_settled: false,
    due_also: None,
    order_by: "updated_at",
    returning: "call_analyses.call_id, call_analyses.org_id, call_analyses.agent_id,
        call_analyses.generation, call_analyses.plan",
};

impl Store {
    /// Takes a call's analysis for an immediate re-run with `plan` (JSON, or
    /// the agent's when None), creating it for a call that has none: a new
    /// generation, pending and leased until `lease_until`. None when the call
    /// is not in the workspace.
    pub async fn take_analysis_now(
        &self,
        node: &NodeId,
        org_id: OrgId,
        call_id: CallId,
        plan: Option<&str>,
        now_ms: i64,
        lease_until: i64,
    ) -> StoreResult<Option<ClaimedAnalysis>> {
        let claimed = with_writer!(self, pool => {
            sqlx::query_as::<_, ClaimedAnalysis>(
                "INSERT INTO call_analyses (call_id, org_id, agent_id, batch_id, status, plan, lease_until,
                   lease_owner, webhook_deadline, call_created_at, created_at, updated_at)
                 SELECT id, org_id, agent_id, batch_id, 'pending', $3, $4, $6, $5, created_at, $5, $5
                 FROM calls WHERE id = $1 AND org_id = $2
                 ON CONFLICT (call_id) DO UPDATE SET status = 'pending', generation = call_analyses.generation + 1,
                   plan = excluded.plan, lease_until = excluded.lease_until,
                   lease_owner = excluded.lease_owner, attempts = 0, updated_at = excluded.updated_at
                 RETURNING call_id, org_id, agent_id, generation, plan",
            )
            .bind(call_id)
            .bind(org_id)
            .bind(plan)
            .bind(lease_until)
            .bind(now_ms)
            .bind(node)
            .fetch_optional(pool)
            .await?
        });
        Ok(claimed)
    }

    /// Puts the analyses of every connected call of a batch back in the queue
    /// (creating them for calls analyzed before analysis existed), with the
    /// agent's plan; returns how many.
    pub async fn requeue_batch_analyses(
        &self,
        org_id: OrgId,
        batch_id: BatchId,
        now_ms: i64,
    ) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO call_analyses (call_id, org_id, agent_id, batch_id, status, webhook_deadline,
                   call_created_at, created_at, updated_at)
                 SELECT id, org_id, agent_id, batch_id, 'pending', $3, created_at, $3, $3
                 FROM calls WHERE org_id = $1 AND batch_id = $2 AND answered_at IS NOT NULL
                   AND status IN ('completed', 'failed')
                 ON CONFLICT (call_id) DO UPDATE SET status = 'pending', generation = call_analyses.generation + 1,
                   plan = NULL, lease_until = 0, attempts = 0, updated_at = excluded.updated_at",
            )
            .bind(org_id)
            .bind(batch_id)
            .bind(now_ms)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Counts of a batch's analyses by status.
    pub async fn batch_analysis_progress(
        &self,
        org_id: OrgId,
        batch_id: BatchId,
    ) -> StoreResult<AnalysisProgress> {
        let progress = with_pool!(self, pool => {
            sqlx::query_as::<_, AnalysisProgress>(
                "SELECT COUNT(*) AS total,
                   COALESCE(SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END), 0) AS pending,
                   COALESCE(SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), 0) AS done,
                   COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0) AS failed,
                   COALESCE(SUM(CASE WHEN status = 'skipped' THEN 1 ELSE 0 END), 0) AS skipped
                 FROM call_analyses WHERE org_id = $1 AND batch_id = $2",
            )
            .bind(org_id)
            .bind(batch_id)
            .fetch_one(pool)
            .await?
        });
        Ok(progress)
    }

    /// Stores an analysis if its job is still current, in one transaction
    /// with what it settles: the call's summary, a `call.completed` held for
    /// it (released once the rating is settled too), and a `call.analyzed`
    /// event when the completed webhook already went out without it or this
    /// is a re-run. Returns false for a stale job.
    pub async fn complete_analysis(&self, a: &CompletedAnalysis<'_>) -> StoreResult<bool> {
        let stored = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let mut update = ANALYSIS_JOBS.settle(Settle::Done, Attempts::Set(a.attempts));
            update.push(", summary = ").push_bind(a.summary);
            update.push(", structured_data = ").push_bind(a.structured_data);
            update.push(", success = ").push_bind(a.success);
            update.push(", success_pass = ").push_bind(a.success_pass);
            update.push(", model = ").push_bind(a.model);
            update.push(", prompt_tokens = ").push_bind(a.prompt_tokens);
            update.push(", completion_tokens = ").push_bind(a.completion_tokens);
            update.push(", latency_ms = ").push_bind(a.latency_ms);
            update.push(", version = version + 1, completed_at = ").push_bind(a.now_ms);
            update.push(", updated_at = ").push_bind(a.now_ms);
            ANALYSIS_JOBS.push_holder(&mut update, &a.call_id.to_string(), Holder::Generation(a.generation));
            update.push(" RETURNING org_id, version, webhook_deadline");
            let row: Option<(OrgId, i64, i64)> =
                update.build_query_as().fetch_optional(&mut *tx).await?;
            let Some((org_id, version, deadline)) = row else {
                tx.rollback().await?;
                return Ok(false);
            };
            if let Some(summary) = a.summary {
                sqlx::query("UPDATE calls SET summary = $1 WHERE id = $2")
                    .bind(summary)
                    .bind(a.call_id)
                    .execute(&mut *tx)
                    .await?;
            }
            release_if_settled!(&mut *tx, a.call_id, a.now_ms);
            if version > 1 || a.now_ms >= deadline {
                let event_id = super::webhook_outbox::event_id(
                    a.call_id,
                    &format!("call.analyzed/{version}"),
                );
                super::webhook_outbox::queue_in_tx!(
                    &mut *tx, org_id, a.call_id, "call.analyzed", a.now_ms, a.now_ms, false, &event_id
                );
            }
            tx.commit().await?;
            true
        });
        Ok(stored)
    }

    /// Marks a current job's analysis failed with `error`; a `call.completed`
    /// held for it goes out once the rating is settled too, without it.
    pub async fn fail_analysis(
        &self,
        call_id: CallId,
        generation: i64,
        error: &str,
        attempts: i64,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let stored = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let mut update = ANALYSIS_JOBS.settle(Settle::Failed { error }, Attempts::Set(attempts));
            update.push(", updated_at = ").push_bind(now_ms);
            ANALYSIS_JOBS.push_holder(&mut update, &call_id.to_string(), Holder::Generation(generation));
            let n = update.build().execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                tx.rollback().await?;
                return Ok(false);
            }
            release_if_settled!(&mut *tx, call_id, now_ms);
            tx.commit().await?;
            true
        });
        Ok(stored)
    }

    /// One call's analysis in a workspace.
    pub async fn analysis(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> StoreResult<Option<AnalysisRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, AnalysisRow>(concat!(
                "SELECT ", analysis_columns!(), " FROM call_analyses WHERE call_id = $1 AND org_id = $2"
            ))
            .bind(call_id)
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// The analyses of the given calls of a workspace (a list page's), in no order.
    pub async fn analyses_of(
        &self,
        org_id: OrgId,
        call_ids: &[CallId],
    ) -> StoreResult<Vec<AnalysisRow>> {
        if call_ids.is_empty() {
            return Ok(Vec::new());
        }
        let rows = with_pool!(self, pool => {
            let mut sql = QueryBuilder::new(concat!("SELECT ", analysis_columns!(), " FROM call_analyses WHERE org_id = "));
            sql.push_bind(org_id).push(" AND call_id IN (");
            let mut ids = sql.separated(", ");
            for id in call_ids {
                ids.push_bind(*id);
            }
            sql.push(")");
            sql.build_query_as::<AnalysisRow>().fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Per agent and IST day (UTC+5:30) of the call's creation: analyses done,
    /// passed, not passed and failed, for calls created in `[from_ms, to_ms)`.
    pub async fn analysis_days(
        &self,
        org_id: OrgId,
        from_ms: i64,
        to_ms: i64,
    ) -> StoreResult<Vec<AnalysisDayRow>> {
        const IST_OFFSET_MS: i64 = 19_800_000;
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, (AgentId, i64, i64, i64, i64, i64)>(
                "SELECT agent_id, (call_created_at + $4) / 86400000 AS day_number,
                   COALESCE(SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN status = 'done' AND success_pass = TRUE THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN status = 'done' AND success_pass = FALSE THEN 1 ELSE 0 END), 0),
                   COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0)
                 FROM call_analyses
                 WHERE org_id = $1 AND call_created_at >= $2 AND call_created_at < $3
                 GROUP BY 1, 2
                 ORDER BY 2, 1",
            )
            .bind(org_id)
            .bind(from_ms)
            .bind(to_ms)
            .bind(IST_OFFSET_MS)
            .fetch_all(pool)
            .await?
        });
        Ok(rows
            .into_iter()
            .map(|(agent_id, day_number, done, passed, not_passed, failed)| {
                let day = chrono::DateTime::from_timestamp(day_number * 86_400, 0)
                    .map(|d| d.format("%Y-%m-%d").to_string())
                    .unwrap_or_default();
                AnalysisDayRow {
                    agent_id,
                    day,
                    done,
                    passed,
                    not_passed,
                    failed,
                }
            })
            .collect())
    }
}
