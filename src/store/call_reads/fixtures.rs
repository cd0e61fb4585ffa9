//! Calls with their turns and events written straight into the tables,
//! bypassing the engine, so tests and benches can set up any history.

use crate::store::{BeginWrite, Store, StoreResult, with_writer};
/// A call row (and its turns and events) to insert directly, for tests and
/// benches. Its fields are the raw column values, so a fixture can store
/// what the service itself never would.
#[doc(hidden)]
#[derive(Debug, Clone, Default)]
pub struct CallFixture {
    /// Call id.
    pub id: String,
    /// Workspace id.
    pub org_id: String,
    /// Agent id.
    pub agent_id: String,
    /// Agent name.
    pub agent_name: String,
    /// Number dialed.
    pub phone: String,
    /// Person called.
    pub target_name: String,
    /// Caller ID.
    pub from_number: String,
    /// Provider.
    pub provider: String,
    /// Raw status.
    pub status: String,
    /// Ended reason.
    pub ended_reason: Option<String>,
    /// Talk seconds.
    pub duration_seconds: i64,
    /// Charge.
    pub cost_paise: i64,
    /// Summary.
    pub summary: String,
    /// Transcript text.
    pub transcript_text: String,
    /// Campaign id.
    pub campaign_id: Option<String>,
    /// Campaign name.
    pub campaign_name: Option<String>,
    /// Batch id.
    pub batch_id: Option<String>,
    /// Attempt number (0 is stored as 1).
    pub attempt: i64,
    /// Creation time, Unix ms.
    pub created_at: i64,
    /// Answer time, Unix ms.
    pub answered_at: Option<i64>,
    /// End time, Unix ms.
    pub ended_at: Option<i64>,
    /// Variables JSON (empty is stored as `{}`).
    pub variables: String,
    /// Extracted JSON (empty is stored as `{}`).
    pub extracted: String,
    /// Latencies JSON (empty is stored as `[]`).
    pub latencies: String,
    /// Turns: (speaker, text, Unix ms), stored with seq 1, 2, …
    pub turns: Vec<(String, String, i64)>,
    /// Status events: (raw status, Unix ms).
    pub events: Vec<(String, i64)>,
}
impl Store {
    /// Inserts one call with its turns and events, bypassing the engine.
    #[doc(hidden)]
    pub async fn insert_call_fixture(&self, call: &CallFixture) -> StoreResult<()> {
        self.insert_call_fixtures(std::slice::from_ref(call)).await
    }
    /// Inserts calls with their turns and events in one transaction, bypassing the engine.
    #[doc(hidden)]
    pub async fn insert_call_fixtures(&self, calls: &[CallFixture]) -> StoreResult<()> {
        fn or_default<'a>(value: &'a str, default: &'a str) -> &'a str {
            if value.is_empty() { default } else { value }
        }
        with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            for c in calls {
                sqlx::query(
                    "INSERT INTO calls (id, org_id, agent_id, agent_name, engine, phone, target_name, from_number,
                       provider, status, ended_reason, variables, source, attempt, batch_id, campaign_id,
                       campaign_name, dispatched, not_before, queued_at, answered_at, ended_at, duration_seconds,
                       rate_paise, cost_paise, summary, transcript_text, extracted, latencies, created_at)
                     VALUES ($1, $2, $3, $4, 'pipeline', $5, $6, $7, $8, $9, $10, $11, 'api', $12, $13, $14,
                       $15, TRUE, $16, $16, $17, $18, $19, 0, $20, $21, $22, $23, $24, $16)",
                )
                .bind(&c.id)
                .bind(&c.org_id)
                .bind(&c.agent_id)
                .bind(&c.agent_name)
                .bind(&c.phone)
                .bind(&c.target_name)
                .bind(&c.from_number)
                .bind(&c.provider)
                .bind(&c.status)
                .bind(&c.ended_reason)
                .bind(or_default(&c.variables, "{}"))
                .bind(c.attempt.max(1))
                .bind(&c.batch_id)
                .bind(&c.campaign_id)
                .bind(&c.campaign_name)
                .bind(c.created_at)
                .bind(c.answered_at)
                .bind(c.ended_at)
                .bind(c.duration_seconds)
                .bind(c.cost_paise)
                .bind(&c.summary)
                .bind(&c.transcript_text)
                .bind(or_default(&c.extracted, "{}"))
                .bind(or_default(&c.latencies, "[]"))
                .execute(&mut *tx)
                .await?;
                for (seq, (speaker, text, at)) in c.turns.iter().enumerate() {
                    sqlx::query(
                        "INSERT INTO call_turns (call_id, org_id, seq, speaker, text, created_at)
                         VALUES ($1, $2, $3, $4, $5, $6)",
                    )
                    .bind(&c.id)
                    .bind(&c.org_id)
                    .bind(i64::try_from(seq).unwrap_or(i64::MAX - 1) + 1)
                    .bind(speaker)
                    .bind(text)
                    .bind(*at)
                    .execute(&mut *tx)
                    .await?;
                }
                for (status, at) in &c.events {
                    sqlx::query("INSERT INTO call_events (call_id, status, at) VALUES ($1, $2, $3)")
                        .bind(&c.id)
                        .bind(status)
                        .bind(*at)
                        .execute(&mut *tx)
                        .await?;
                }
            }
            tx.commit().await?;
        });
        Ok(())
    }
}
