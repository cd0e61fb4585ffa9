//! A post-call analysis backlog seeded in bulk (`voxline loadgen --analysis-backlog`): ended
//! calls as the engine leaves them (completed, answered, with their status events, transcript
//! turns and transcript text) and a pending analysis for each, many rows per statement in
//! transactions of [`CALLS_PER_TRANSACTION`] calls.
//!
//! The analyses are written held: leased until a marker time, so the analysis worker leaves
//! them alone while the rest is seeded, and [`Store::release_analysis_backlog`] hands them all
//! to it at once when the measured run starts.

use super::analyses::AnalysisProgress;
use super::calls::{billable_seconds, billed_minutes};
use super::{BeginWrite, Store, StoreResult, with_pool, with_writer};
use crate::domain::{AgentId, CallId, OrgId, Paise};
use sqlx::QueryBuilder;

/// Calls written per transaction.
pub const CALLS_PER_TRANSACTION: usize = 500;

/// Rows per multi-row INSERT: a few thousand binds per statement at most, well inside
/// SQLite's and Postgres's limits (calls take 19 binds a row, turns 6, events 3, analyses 8).
const CALLS_PER_STATEMENT: usize = 100;
/// Turn rows per statement.
const TURNS_PER_STATEMENT: usize = 500;
/// Event rows per statement.
const EVENTS_PER_STATEMENT: usize = 1_000;
/// Analysis rows per statement.
const ANALYSES_PER_STATEMENT: usize = 250;

/// One transcript turn of a seeded call.
#[derive(Debug, Clone)]
pub struct BacklogTurn {
    /// `assistant` or `user`, as the engine stores speakers.
    pub speaker: &'static str,
    /// What was said.
    pub text: String,
    /// When the turn ended, Unix ms.
    pub at_ms: i64,
}

/// One ended call to seed.
#[derive(Debug, Clone)]
pub struct BacklogCall {
    /// Call id.
    pub id: CallId,
    /// The number dialed (E.164).
    pub phone: String,
    /// The person called.
    pub target_name: String,
    /// Creation and queueing time, Unix ms.
    pub queued_at: i64,
    /// Ringing time, Unix ms.
    pub ringing_at: i64,
    /// Answer time, Unix ms.
    pub answered_at: i64,
    /// End time, Unix ms.
    pub ended_at: i64,
    /// Why it ended (`agent-hangup`, `caller-hangup`, …).
    pub ended_reason: &'static str,
    /// The end-of-call summary the engine writes.
    pub summary: String,
    /// "Bot: …\nCandidate: …", as the engine stores it.
    pub transcript_text: String,
    /// The transcript, in order.
    pub turns: Vec<BacklogTurn>,
}

/// What every seeded call shares: its workspace, agent, line and rate, and the hold.
#[derive(Debug, Clone, Copy)]
pub struct BacklogOwner<'a> {
    /// Workspace.
    pub org_id: OrgId,
    /// The agent whose analysis plan the worker applies.
    pub agent_id: AgentId,
    /// The agent's name.
    pub agent_name: &'a str,
    /// Caller ID.
    pub from_number: &'a str,
    /// Carrier.
    pub provider: &'a str,
    /// Per-minute rate; the cost is stored on the call, the wallet is not charged.
    pub rate_paise: Paise,
    /// How long `call.completed` waited for the analysis after the end, ms.
    pub analysis_wait_ms: i64,
    /// The analyses are leased until then (Unix ms), the marker the release looks for.
    pub held_until: i64,
}

impl Store {
    /// Seeds `calls` as ended calls of `owner` with pending analyses held until
    /// `owner.held_until`; returns how many calls were written.
    pub async fn seed_analysis_backlog(
        &self,
        owner: &BacklogOwner<'_>,
        calls: &[BacklogCall],
    ) -> StoreResult<u64> {
        let o = owner;
        with_writer!(self, pool => {
            for group in calls.chunks(CALLS_PER_TRANSACTION) {
                let mut tx = pool.begin_write().await?;
                for part in group.chunks(CALLS_PER_STATEMENT) {
                    let mut sql = QueryBuilder::new(
                        "INSERT INTO calls (id, org_id, agent_id, agent_name, engine, phone, target_name,
                           from_number, provider, status, ended_reason, variables, source, attempt,
                           dispatched, not_before, queued_at, ringing_at, answered_at, ended_at,
                           duration_seconds, rate_paise, cost_paise, summary, transcript_text, created_at) ",
                    );
                    sql.push_values(part, |mut row, c| {
                        let seconds = billable_seconds(Some(c.answered_at), c.ended_at);
                        row.push_bind(c.id)
                            .push_bind(o.org_id)
                            .push_bind(o.agent_id)
                            .push_bind(o.agent_name)
                            .push("'pipeline'")
                            .push_bind(c.phone.as_str())
                            .push_bind(c.target_name.as_str())
                            .push_bind(o.from_number)
                            .push_bind(o.provider)
                            .push("'completed'")
                            .push_bind(c.ended_reason)
                            .push("'{}'")
                            .push("'api'")
                            .push("1")
                            .push("TRUE")
                            .push_bind(c.queued_at)
                            .push_bind(c.queued_at)
                            .push_bind(c.ringing_at)
                            .push_bind(c.answered_at)
                            .push_bind(c.ended_at)
                            .push_bind(seconds)
                            .push_bind(o.rate_paise)
                            .push_bind(o.rate_paise.times(billed_minutes(seconds)))
                            .push_bind(c.summary.as_str())
                            .push_bind(c.transcript_text.as_str())
                            .push_bind(c.queued_at);
                    });
                    sql.build().execute(&mut *tx).await?;
                }
                let events: Vec<(CallId, &str, i64)> = group
                    .iter()
                    .flat_map(|c| {
                        [
                            (c.id, "queued", c.queued_at),
                            (c.id, "ringing", c.ringing_at),
                            (c.id, "in-progress", c.answered_at),
                            (c.id, "completed", c.ended_at),
                        ]
                    })
                    .collect();
                for part in events.chunks(EVENTS_PER_STATEMENT) {
                    let mut sql = QueryBuilder::new("INSERT INTO call_events (call_id, status, at) ");
                    sql.push_values(part, |mut row, (id, status, at)| {
                        row.push_bind(*id).push_bind(*status).push_bind(*at);
                    });
                    sql.build().execute(&mut *tx).await?;
                }
                let turns: Vec<(CallId, i64, &BacklogTurn)> = group
                    .iter()
                    .flat_map(|c| {
                        c.turns
                            .iter()
                            .enumerate()
                            .map(move |(seq, turn)| (c.id, i64::try_from(seq).unwrap_or(i64::MAX), turn))
                    })
                    .collect();
                for part in turns.chunks(TURNS_PER_STATEMENT) {
                    let mut sql = QueryBuilder::new(
                        "INSERT INTO call_turns (call_id, org_id, seq, speaker, text, created_at) ",
                    );
                    sql.push_values(part, |mut row, (id, seq, turn)| {
                        row.push_bind(*id)
                            .push_bind(o.org_id)
                            .push_bind(*seq)
                            .push_bind(turn.speaker)
                            .push_bind(turn.text.as_str())
                            .push_bind(turn.at_ms);
                    });
                    sql.build().execute(&mut *tx).await?;
                }
                for part in group.chunks(ANALYSES_PER_STATEMENT) {
                    let mut sql = QueryBuilder::new(
                        "INSERT INTO call_analyses (call_id, org_id, agent_id, status, lease_until,
                           webhook_deadline, call_created_at, created_at, updated_at) ",
                    );
                    sql.push_values(part, |mut row, c| {
                        row.push_bind(c.id)
                            .push_bind(o.org_id)
                            .push_bind(o.agent_id)
                            .push("'pending'")
                            .push_bind(o.held_until)
                            .push_bind(c.ended_at + o.analysis_wait_ms)
                            .push_bind(c.queued_at)
                            .push_bind(c.ended_at)
                            .push_bind(c.ended_at);
                    });
                    sql.build().execute(&mut *tx).await?;
                }
                tx.commit().await?;
            }
        });
        Ok(calls.len() as u64)
    }

    /// Hands the held backlog of `agent_id` to the analysis worker: frees the
    /// pending analyses leased until exactly `held_until`; returns how many.
    pub async fn release_analysis_backlog(
        &self,
        org_id: OrgId,
        agent_id: AgentId,
        held_until: i64,
    ) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE call_analyses SET lease_until = 0
                 WHERE org_id = $1 AND agent_id = $2 AND status = 'pending' AND lease_until = $3",
            )
            .bind(org_id)
            .bind(agent_id)
            .bind(held_until)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Counts of one agent's analyses in a workspace by status.
    pub async fn agent_analysis_progress(
        &self,
        org_id: OrgId,
        agent_id: AgentId,
    ) -> StoreResult<AnalysisProgress> {
        let progress = with_pool!(self, pool => {
            sqlx::query_as::<_, AnalysisProgress>(
                "SELECT COUNT(*) AS total,
                   COALESCE(SUM(CASE WHEN status = 'pending' THEN 1 ELSE 0 END), 0) AS pending,
                   COALESCE(SUM(CASE WHEN status = 'done' THEN 1 ELSE 0 END), 0) AS done,
                   COALESCE(SUM(CASE WHEN status = 'failed' THEN 1 ELSE 0 END), 0) AS failed,
                   COALESCE(SUM(CASE WHEN status = 'skipped' THEN 1 ELSE 0 END), 0) AS skipped
                 FROM call_analyses WHERE org_id = $1 AND agent_id = $2",
            )
            .bind(org_id)
            .bind(agent_id)
            .fetch_one(pool)
            .await?
        });
        Ok(progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::analyses::{ANALYSIS_JOBS, ClaimedAnalysis};
    use sqlx::Connection;

    const NOW: i64 = 1_800_000_000_000;

    fn calls(n: usize) -> Vec<BacklogCall> {
        (0..n)
            .map(|i| {
                let queued_at = NOW - 3_600_000 + i as i64 * 1_000;
                let turns = ["Hello, do you have a minute?", "Yes.", "Goodbye!"]
                    .iter()
                    .enumerate()
                    .map(|(k, text)| BacklogTurn {
                        speaker: if k % 2 == 0 { "assistant" } else { "user" },
                        text: (*text).to_owned(),
                        at_ms: queued_at + 5_000 + k as i64 * 3_000,
                    })
                    .collect();
                BacklogCall {
                    id: CallId::new(),
                    phone: format!("+9197{:08}", 10_000_000 + i),
                    target_name: "Asha".into(),
                    queued_at,
                    ringing_at: queued_at + 500,
                    answered_at: queued_at + 2_000,
                    ended_at: queued_at + 75_000,
                    ended_reason: "agent-hangup",
                    summary: String::new(),
                    transcript_text: "Bot: Hello\nCandidate: Yes.".into(),
                    turns,
                }
            })
            .collect()
    }

    /// Seeds 600 calls (two transactions), checks the hold, the release and what was written.
    async fn seeds_holds_and_releases(store: &Store) {
        let now = chrono::DateTime::from_timestamp_millis(NOW).unwrap();
        let org = crate::admin::ops::create_org(store, "Backlog", None, None, now)
            .await
            .unwrap();
        let agent_id = AgentId::new();
        let owner = BacklogOwner {
            org_id: org.id,
            agent_id,
            agent_name: "Screening",
            from_number: "+918035740101",
            provider: "sim",
            rate_paise: Paise(200),
            analysis_wait_ms: 60_000,
            held_until: NOW + 86_400_000,
        };
        let calls = calls(600);
        assert_eq!(
            store.seed_analysis_backlog(&owner, &calls).await.unwrap(),
            600
        );
        let progress = store
            .agent_analysis_progress(org.id, agent_id)
            .await
            .unwrap();
        assert_eq!((progress.total, progress.pending), (600, 600));
        let node: crate::domain::NodeId = "node-backlog-test".parse().unwrap();
        assert!(
            store
                .claim_due_jobs::<ClaimedAnalysis>(&ANALYSIS_JOBS, &node, NOW, NOW + 1_000, 10)
                .await
                .unwrap()
                .is_empty(),
            "held"
        );
        assert_eq!(
            store
                .release_analysis_backlog(org.id, agent_id, owner.held_until)
                .await
                .unwrap(),
            600
        );
        let last = calls[599].id;
        assert_eq!(store.call_turns(org.id, last).await.unwrap().len(), 3);
        assert_eq!(
            store.call_status(org.id, last).await.unwrap().as_deref(),
            Some("completed")
        );
        let claimed = store
            .claim_due_jobs::<ClaimedAnalysis>(&ANALYSIS_JOBS, &node, NOW, NOW + 1_000, 1_000)
            .await
            .unwrap();
        assert_eq!(claimed.len(), 600, "all released");
        assert!(claimed.iter().all(|c| c.agent_id == agent_id));
        assert!(claimed.iter().any(|c| c.call_id == last));
        // A second release finds nothing held.
        assert_eq!(
            store
                .release_analysis_backlog(org.id, agent_id, owner.held_until)
                .await
                .unwrap(),
            0
        );
    }

    #[tokio::test]
    async fn sqlite_seeds_holds_and_releases() {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("b.db").display());
        seeds_holds_and_releases(&Store::connect(&url, 2).await.unwrap()).await;
    }

    /// Runs against `VOXLINE_TEST_DATABASE_URL` (a Postgres server) when it is set.
    #[tokio::test]
    async fn postgres_seeds_holds_and_releases() {
        let Ok(admin_url) = std::env::var("VOXLINE_TEST_DATABASE_URL") else {
            return;
        };
        let name = format!("voxline_test_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&admin_url).await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&mut admin)
            .await
            .unwrap();
        let mut url = reqwest::Url::parse(&admin_url).unwrap();
        url.set_path(&format!("/{name}"));
        let store = Store::connect(url.as_str(), 2).await.unwrap();
        seeds_holds_and_releases(&store).await;
        store.close().await;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await
        .unwrap();
    }
}
