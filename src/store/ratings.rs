//! Post-call scorecards: pending rows leased by the rating worker, completed
//! or failed together with the webhook outbox, and the workspace's reads.

use super::leased_jobs::{Attempts, Holder, JobTable, Settle};
use super::{BeginWrite, Store, StoreResult, with_pool, with_writer};
use crate::domain::{AgentId, CallId, NodeId, OrgId};

/// Columns of a rating read, joined with its call and agent.
macro_rules! rating_select {
    () => {
        "SELECT r.call_id, r.org_id, r.agent_id, r.status, r.overall, r.columns, r.template, r.attempts,
           r.version, r.last_error, r.call_created_at, r.created_at, r.rated_at,
           c.target_name, c.phone, COALESCE(a.name, c.agent_name) AS agent_name
         FROM ratings r JOIN calls c ON c.id = r.call_id LEFT JOIN agents a ON a.id = r.agent_id "
    };
}

/// The list filter, shared by the list, analytics and bulk re-scoring.
macro_rules! rating_filter {
    () => {
        "WHERE r.org_id = $1
           AND ($2 = 'all' OR r.status = $2)
           AND (CAST($3 AS TEXT) IS NULL OR r.agent_id = $3)
           AND (CAST($4 AS BIGINT) IS NULL OR r.call_created_at >= $4)
           AND (CAST($5 AS BIGINT) IS NULL OR r.call_created_at < $5)
           AND (CAST($6 AS DOUBLE PRECISION) IS NULL OR r.overall >= $6)
           AND (CAST($7 AS DOUBLE PRECISION) IS NULL OR r.overall <= $7) "
    };
}

/// A rating with what its reads show of the call.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RatingRow {
    /// The rated call.
    pub call_id: CallId,
    /// Workspace.
    pub org_id: OrgId,
    /// Agent of the call.
    pub agent_id: AgentId,
    /// pending, done or failed.
    pub status: String,
    /// Mean of the column scores, once done.
    pub overall: Option<f64>,
    /// JSON array of `{name, score, reason}`.
    pub columns: String,
    /// JSON template used for the last scoring.
    pub template: Option<String>,
    /// Scoring attempts of the last job.
    pub attempts: i64,
    /// Scorecards produced so far.
    pub version: i64,
    /// Why the last job failed.
    pub last_error: Option<String>,
    /// The call's creation time, Unix ms.
    pub call_created_at: i64,
    /// When the rating was first queued, Unix ms.
    pub created_at: i64,
    /// When the current scorecard was produced, Unix ms.
    pub rated_at: Option<i64>,
    /// The person called.
    pub target_name: String,
    /// Number dialed.
    pub phone: String,
    /// The agent's name.
    pub agent_name: String,
}

/// Which ratings a list, analytics or bulk request covers.
#[derive(Debug, Clone, Default)]
pub struct RatingFilter {
    /// `pending`, `done`, `failed` or `all`.
    pub status: String,
    /// Only this agent's calls, as the client gave it: a value that is not
    /// an agent id matches no rating (the list answers empty, not 4xx).
    pub agent_id: Option<String>,
    /// Calls created at or after, Unix ms.
    pub from_ms: Option<i64>,
    /// Calls created before, Unix ms.
    pub to_ms: Option<i64>,
    /// Overall at least.
    pub min_score: Option<f64>,
    /// Overall at most.
    pub max_score: Option<f64>,
}

/// A pending rating a worker now holds.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedRating {
    /// The call to rate.
    pub call_id: CallId,
    /// Its workspace.
    pub org_id: OrgId,
    /// Its agent.
    pub agent_id: AgentId,
    /// The job's generation: its result is stored only if still current.
    pub generation: i64,
}

/// What a rating job needs to know about its call.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RatingSource {
    /// Why the call ended.
    pub ended_reason: Option<String>,
    /// Variables JSON (sim knobs live here).
    pub variables: String,
}

/// A finished scorecard to store.
#[derive(Debug, Clone)]
pub struct CompletedRating<'a> {
    /// The rated call.
    pub call_id: CallId,
    /// The job's generation.
    pub generation: i64,
    /// Mean score.
    pub overall: f64,
    /// JSON array of `{name, score, reason}`.
    pub columns: &'a str,
    /// JSON template used.
    pub template: &'a str,
    /// Attempts the job made.
    pub attempts: i64,
    /// Completion time, Unix ms.
    pub now_ms: i64,
}

/// Counts and averages across a workspace.
#[derive(Debug, Clone, Copy, sqlx::FromRow)]
pub struct RatingCounts {
    /// Every rating.
    pub total: i64,
    /// Waiting or being scored.
    pub pending: i64,
    /// Scored.
    pub done: i64,
    /// Given up.
    pub failed: i64,
    /// Mean overall of the done ones.
    pub average_overall: Option<f64>,
}

/// One agent's rated calls.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AgentRatingRow {
    /// Agent id.
    pub agent_id: AgentId,
    /// Agent name.
    pub agent_name: String,
    /// Done ratings.
    pub rated: i64,
    /// Their mean overall.
    pub average_overall: Option<f64>,
}

/// Ratings as leased jobs: due as soon as no one holds them, oldest first;
/// a re-score bumps the generation (superseding a job in flight) and may
/// leave the done scorecard readable meanwhile, so the current job settles
/// a row whatever its status; failures are final.
pub const RATING_JOBS: JobTable = JobTable {
    table: "ratings",
    id: "call_id",
    status: "status",
    done_status: "done",
    lease_owner: "lease_owner",
    lease_until: "lease_until",
    attempts: "attempts",
    error: "last_error",
    next_attempt_at: None,
    generation: Some("generation"),
    settles_settled: true,
    due_also: None,
    order_by: "created_at",
    returning: "ratings.call_id, ratings.org_id, ratings.agent_id, ratings.generation",
};

impl Store {
    /// Takes a call's rating for an immediate job (rate-now, regenerate),
    /// creating it if the call has none: a new generation, leased until
    /// `lease_until`, its current scorecard (if any) left readable meanwhile.
    pub async fn take_rating_now(
        &self,
        node: &NodeId,
        org_id: OrgId,
        call_id: CallId,
        now_ms: i64,
        lease_until: i64,
    ) -> StoreResult<Option<ClaimedRating>> {
        let claimed = with_writer!(self, pool => {
            sqlx::query_as::<_, ClaimedRating>(
                "INSERT INTO ratings (call_id, org_id, agent_id, status, lease_until, lease_owner,
                   webhook_deadline, call_created_at, created_at, updated_at)
                 SELECT id, org_id, agent_id, 'pending', $3, $5, $4, created_at, $4, $4
                 FROM calls WHERE id = $1 AND org_id = $2
                 ON CONFLICT (call_id) DO UPDATE SET generation = ratings.generation + 1,
                   lease_until = excluded.lease_until, lease_owner = excluded.lease_owner,
                   updated_at = excluded.updated_at
                 RETURNING call_id, org_id, agent_id, generation",
            )
            .bind(call_id)
            .bind(org_id)
            .bind(lease_until)
            .bind(now_ms)
            .bind(node)
            .fetch_optional(pool)
            .await?
        });
        Ok(claimed)
    }

    /// The call facts a rating job reads.
    pub async fn rating_source(&self, call_id: CallId) -> StoreResult<Option<RatingSource>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, RatingSource>("SELECT ended_reason, variables FROM calls WHERE id = $1")
                .bind(call_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row)
    }

    /// Stores a scorecard if its job is still current, and settles the
    /// webhooks (decisions §8) in the same transaction: a `call.completed`
    /// still held for it becomes due at once (it will carry the rating); if
    /// the deadline had passed, or this replaces an earlier scorecard, a
    /// `rating.completed` event is queued. Returns false for a stale job.
    pub async fn complete_rating(&self, r: &CompletedRating<'_>) -> StoreResult<bool> {
        let stored = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let mut update = RATING_JOBS.settle(Settle::Done, Attempts::Set(r.attempts));
            update.push(", overall = ").push_bind(r.overall);
            update.push(", columns = ").push_bind(r.columns);
            update.push(", template = ").push_bind(r.template);
            update.push(", version = version + 1, rated_at = ").push_bind(r.now_ms);
            update.push(", updated_at = ").push_bind(r.now_ms);
            RATING_JOBS.push_holder(&mut update, &r.call_id.to_string(), Holder::Generation(r.generation));
            update.push(" RETURNING org_id, version, webhook_deadline");
            let row: Option<(OrgId, i64, i64)> =
                update.build_query_as().fetch_optional(&mut *tx).await?;
            let Some((org_id, version, deadline)) = row else {
                tx.rollback().await?;
                return Ok(false);
            };
            super::analyses::release_if_settled!(&mut *tx, r.call_id, r.now_ms);
            if version > 1 || r.now_ms >= deadline {
                let event_id = super::webhook_outbox::event_id(
                    r.call_id,
                    &format!("rating.completed/{version}"),
                );
                super::webhook_outbox::queue_in_tx!(
                    &mut *tx, org_id, r.call_id, "rating.completed", r.now_ms, r.now_ms, false, &event_id
                );
            }
            tx.commit().await?;
            true
        });
        Ok(stored)
    }

    /// Marks a current job's rating failed with `error`; a `call.completed`
    /// held for it goes out at once, with `rating: null`.
    pub async fn fail_rating(
        &self,
        call_id: CallId,
        generation: i64,
        error: &str,
        attempts: i64,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let stored = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let mut update = RATING_JOBS.settle(Settle::Failed { error }, Attempts::Set(attempts));
            update.push(", updated_at = ").push_bind(now_ms);
            RATING_JOBS.push_holder(&mut update, &call_id.to_string(), Holder::Generation(generation));
            let n = update.build().execute(&mut *tx).await?.rows_affected();
            if n == 0 {
                tx.rollback().await?;
                return Ok(false);
            }
            super::analyses::release_if_settled!(&mut *tx, call_id, now_ms);
            tx.commit().await?;
            true
        });
        Ok(stored)
    }

    /// One call's rating in a workspace.
    pub async fn rating(&self, org_id: OrgId, call_id: CallId) -> StoreResult<Option<RatingRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, RatingRow>(concat!(rating_select!(), "WHERE r.call_id = $1 AND r.org_id = $2"))
                .bind(call_id)
                .bind(org_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(row)
    }

    /// A call's done scorecard overall, for webhook bodies.
    pub async fn rating_overall(&self, call_id: CallId) -> StoreResult<Option<f64>> {
        let overall = with_pool!(self, pool => {
            sqlx::query_scalar::<_, Option<f64>>(
                "SELECT overall FROM ratings WHERE call_id = $1 AND status = 'done'",
            )
            .bind(call_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(overall.flatten())
    }

    /// One page of a workspace's ratings, newest call first, and the total.
    pub async fn list_ratings(
        &self,
        org_id: OrgId,
        f: &RatingFilter,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<RatingRow>, i64)> {
        let result = with_pool!(self, pool => {
            let rows = sqlx::query_as::<_, RatingRow>(concat!(
                rating_select!(),
                rating_filter!(),
                "ORDER BY r.call_created_at DESC, r.call_id DESC LIMIT $8 OFFSET $9"
            ))
            .bind(org_id)
            .bind(&f.status)
            .bind(&f.agent_id)
            .bind(f.from_ms)
            .bind(f.to_ms)
            .bind(f.min_score)
            .bind(f.max_score)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?;
            let total: i64 = sqlx::query_scalar(concat!("SELECT COUNT(*) FROM ratings r ", rating_filter!()))
                .bind(org_id)
                .bind(&f.status)
                .bind(&f.agent_id)
                .bind(f.from_ms)
                .bind(f.to_ms)
                .bind(f.min_score)
                .bind(f.max_score)
                .fetch_one(pool)
                .await?;
            (rows, total)
        });
        Ok(result)
    }

    /// The page after `after` (call_created_at, call_id) in list order, for streamed exports.
    pub async fn ratings_after(
        &self,
        org_id: OrgId,
        f: &RatingFilter,
        after: Option<(i64, CallId)>,
        limit: i64,
    ) -> StoreResult<Vec<RatingRow>> {
        let first = after.is_none();
        // On the first page `$8` is true and the keyset bounds are never compared.
        let (at, id) = after.map_or((i64::MAX, None), |(at, id)| (at, Some(id)));
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, RatingRow>(concat!(
                rating_select!(),
                rating_filter!(),
                "AND ($8 OR r.call_created_at < $9 OR (r.call_created_at = $9 AND r.call_id < $10))
                 ORDER BY r.call_created_at DESC, r.call_id DESC LIMIT $11"
            ))
            .bind(org_id)
            .bind(&f.status)
            .bind(&f.agent_id)
            .bind(f.from_ms)
            .bind(f.to_ms)
            .bind(f.min_score)
            .bind(f.max_score)
            .bind(first)
            .bind(at)
            .bind(id)
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Every rating of calls to `phone` in a workspace with `status` (or `all`), newest first.
    pub async fn ratings_by_phone(
        &self,
        org_id: OrgId,
        phone: &str,
        status: &str,
    ) -> StoreResult<Vec<RatingRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, RatingRow>(concat!(
                rating_select!(),
                "WHERE r.org_id = $1 AND c.phone = $2 AND ($3 = 'all' OR r.status = $3)
                 ORDER BY r.call_created_at DESC, r.call_id DESC"
            ))
            .bind(org_id)
            .bind(phone)
            .bind(status)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Counts by status and the average overall of a workspace, and each agent's average.
    pub async fn rating_stats(
        &self,
        org_id: OrgId,
    ) -> StoreResult<(RatingCounts, Vec<AgentRatingRow>)> {
        let result = with_pool!(self, pool => {
            let counts = sqlx::query_as::<_, RatingCounts>(
                "SELECT COUNT(*) AS total,
                   COUNT(CASE WHEN status = 'pending' THEN 1 END) AS pending,
                   COUNT(CASE WHEN status = 'done' THEN 1 END) AS done,
                   COUNT(CASE WHEN status = 'failed' THEN 1 END) AS failed,
                   AVG(CASE WHEN status = 'done' THEN overall END) AS average_overall
                 FROM ratings WHERE org_id = $1",
            )
            .bind(org_id)
            .fetch_one(pool)
            .await?;
            let agents = sqlx::query_as::<_, AgentRatingRow>(
                "SELECT r.agent_id, MAX(COALESCE(a.name, '')) AS agent_name, COUNT(*) AS rated,
                   AVG(r.overall) AS average_overall
                 FROM ratings r LEFT JOIN agents a ON a.id = r.agent_id
                 WHERE r.org_id = $1 AND r.status = 'done'
                 GROUP BY r.agent_id ORDER BY r.agent_id",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?;
            (counts, agents)
        });
        Ok(result)
    }

    /// Puts matching ratings back in the queue (bulk re-scoring); returns how many.
    pub async fn requeue_ratings(
        &self,
        org_id: OrgId,
        f: &RatingFilter,
        now_ms: i64,
    ) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query(concat!(
                "UPDATE ratings SET status = 'pending', generation = generation + 1, lease_until = 0,
                   attempts = 0, updated_at = $8
                 WHERE call_id IN (SELECT r.call_id FROM ratings r ",
                rating_filter!(),
                ")"
            ))
            .bind(org_id)
            .bind(&f.status)
            .bind(&f.agent_id)
            .bind(f.from_ms)
            .bind(f.to_ms)
            .bind(f.min_score)
            .bind(f.max_score)
            .bind(now_ms)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Puts the named calls' ratings back in the queue; returns how many exist.
    pub async fn requeue_rating_ids(
        &self,
        org_id: OrgId,
        call_ids: &[CallId],
        now_ms: i64,
    ) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let mut n = 0;
            for id in call_ids {
                n += sqlx::query(
                    "UPDATE ratings SET status = 'pending', generation = generation + 1, lease_until = 0,
                       attempts = 0, updated_at = $1
                     WHERE call_id = $2 AND org_id = $3",
                )
                .bind(now_ms)
                .bind(*id)
                .bind(org_id)
                .execute(&mut *tx)
                .await?
                .rows_affected();
            }
            tx.commit().await?;
            n
        });
        Ok(n)
    }

    /// The ids of agents with ratings in a workspace.
    pub async fn rated_agent_ids(&self, org_id: OrgId) -> StoreResult<Vec<AgentId>> {
        let ids = with_pool!(self, pool => {
            sqlx::query_scalar::<_, AgentId>(
                "SELECT DISTINCT agent_id FROM ratings WHERE org_id = $1 ORDER BY agent_id",
            )
            .bind(org_id)
            .fetch_all(pool)
            .await?
        });
        Ok(ids)
    }
}

impl Store {
    /// Whether a workspace's call completed with the callee speaking.
    pub async fn call_conversed(&self, org_id: OrgId, call_id: CallId) -> StoreResult<bool> {
        let n = with_pool!(self, pool => {
            sqlx::query_scalar::<_, i64>(
                "SELECT COUNT(*) FROM calls c JOIN call_turns t ON t.call_id = c.id
                 WHERE c.id = $1 AND c.org_id = $2 AND c.status = 'completed' AND t.speaker = 'user'",
            )
            .bind(call_id)
            .bind(org_id)
            .fetch_one(pool)
            .await?
        });
        Ok(n > 0)
    }
}
