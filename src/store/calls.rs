//! The write side of calls: creation, transitions, the terminal outcome with
//! its charge, and the durable dispatch queue.

use super::{Store, StoreResult, with_pool, with_writer};
use crate::domain::hours_override::HoursOverride;
use crate::domain::{AgentId, BatchId, CallId, CampaignId, OrgId, Paise, WalletTxId};
use crate::store::BeginWrite;
use sqlx::QueryBuilder;

/// Calls per multi-row INSERT. Chosen small when the rows' binds were
/// named `$N`, which SQLite finds by scanning the statement's list of names
/// (binding costs grew with the square of the binds per statement: 500 rows
/// of 20 binds took longer than 2,000 single-row statements); the builder's
/// binds are positional now, but the size stays as measured.
const INSERT_CHUNK_ROWS: usize = 50;

/// `INSERT INTO calls` for `chunk`, one row of binds per call, all `queued`.
fn insert_calls_sql<DB>(chunk: &[NewCall]) -> QueryBuilder<DB>
where
    DB: sqlx::Database,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> bool: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> CallId: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> OrgId: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> AgentId: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<CallId>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<BatchId>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Paise: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut sql = QueryBuilder::new(
        "INSERT INTO calls (id, org_id, agent_id, agent_name, engine, phone, target_name, email, from_number,
               provider, status, variables, source, attempt, retry_of, batch_id, campaign_id, campaign_name,
               dispatched, not_before, queued_at, rate_paise, created_at, calling_hours_override) ",
    );
    sql.push_values(chunk, |mut row, c| {
        row.push_bind(c.id)
            .push_bind(c.org_id)
            .push_bind(c.agent_id)
            .push_bind(c.agent_name.as_str())
            .push_bind(c.engine.as_str())
            .push_bind(c.phone.as_str())
            .push_bind(c.target_name.as_str())
            .push_bind(c.email.as_deref())
            .push_bind(c.from_number.as_str())
            .push_bind(c.provider.as_str())
            .push("'queued'")
            .push_bind(c.variables.as_str())
            .push_bind(c.source.as_str())
            .push_bind(c.attempt)
            .push_bind(c.retry_of)
            .push_bind(c.batch_id)
            .push_bind(c.campaign_id)
            .push_bind(c.campaign_name.as_deref())
            .push_bind(c.dispatched)
            .push_bind(c.not_before)
            .push_bind(c.now_ms)
            .push_bind(c.rate_paise)
            .push_bind(c.now_ms)
            .push_bind(c.calling_hours_override.map(HoursOverride::as_str));
    });
    sql
}

/// `INSERT INTO call_events` of the `queued` event of every call of `chunk`.
fn insert_queued_events_sql<DB>(chunk: &[NewCall]) -> QueryBuilder<DB>
where
    DB: sqlx::Database,
    for<'a> CallId: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    let mut sql = QueryBuilder::new("INSERT INTO call_events (call_id, status, at) ");
    sql.push_values(chunk, |mut row, c| {
        row.push_bind(c.id).push("'queued'").push_bind(c.now_ms);
    });
    sql
}

/// A live call's progress short of its end, as the engine reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CallProgress {
    /// The call reached `status` at `at_ms`.
    Status {
        /// The call.
        call_id: CallId,
        /// Where it got.
        status: ProgressStatus,
        /// When (Unix ms).
        at_ms: i64,
    },
    /// The carrier named its own id for the call.
    CarrierCallId {
        /// The call.
        call_id: CallId,
        /// The carrier's id (a Twilio `CA…` SID, a SIP Call-ID).
        carrier_call_id: String,
    },
}

/// The statuses a call passes through before it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProgressStatus {
    /// The carrier is ringing the callee.
    Ringing,
    /// The callee answered.
    InProgress,
}

impl ProgressStatus {
    /// The status of a stored call's `status` column, if it is one of these.
    pub fn parse(status: &str) -> Option<Self> {
        match status {
            "ringing" => Some(Self::Ringing),
            "in-progress" => Some(Self::InProgress),
            _ => None,
        }
    }

    /// The `status` column's text.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ringing => "ringing",
            Self::InProgress => "in-progress",
        }
    }

    /// The guarded update to this status: a call only moves forward.
    fn update_sql(self) -> &'static str {
        match self {
            Self::Ringing => {
                "UPDATE calls SET status = 'ringing', ringing_at = $1 WHERE id = $2 AND status = 'queued'"
            }
            // The answer is the call's first sign of life; the node's
            // heartbeat stamps the later ones.
            Self::InProgress => {
                "UPDATE calls SET status = 'in-progress', answered_at = $1, last_seen_at = $1
                   WHERE id = $2 AND status IN ('queued', 'ringing')"
            }
        }
    }
}

/// A call to create.
#[derive(Debug, Clone)]
pub struct NewCall {
    /// Call id.
    pub id: CallId,
    /// Workspace.
    pub org_id: OrgId,
    /// Agent.
    pub agent_id: AgentId,
    /// Agent name at creation.
    pub agent_name: String,
    /// pipeline, announcement or keypad.
    pub engine: String,
    /// E.164 dialed.
    pub phone: String,
    /// The person called.
    pub target_name: String,
    /// Their email address, parsed at the edge.
    pub email: Option<String>,
    /// Caller ID.
    pub from_number: String,
    /// Carrier.
    pub provider: String,
    /// JSON object of variables.
    pub variables: String,
    /// test-call, api, alert, batch, campaign or retry.
    pub source: String,
    /// 1 for the first attempt.
    pub attempt: i64,
    /// First attempt's id for retries.
    pub retry_of: Option<CallId>,
    /// Owning batch.
    pub batch_id: Option<BatchId>,
    /// Owning campaign.
    pub campaign_id: Option<CampaignId>,
    /// Campaign name for display.
    pub campaign_name: Option<String>,
    /// Per-minute rate.
    pub rate_paise: Paise,
    /// Earliest dial time, Unix ms.
    pub not_before: i64,
    /// Already handed to the engine.
    pub dispatched: bool,
    /// Creation time, Unix ms.
    pub now_ms: i64,
    /// The permitted override that placed it outside its calling hours, if one did.
    pub calling_hours_override: Option<HoursOverride>,
}

/// A finished recording, stored in the recordings store.
#[derive(Debug, Clone)]
pub struct NewRecording<'a> {
    /// The recorded call.
    pub call_id: CallId,
    /// Its workspace.
    pub org_id: OrgId,
    /// The recording's key in the recordings store.
    pub object_key: &'a str,
    /// wav or ogg.
    pub format: &'a str,
    /// Length in milliseconds.
    pub duration_ms: i64,
    /// File size.
    pub bytes: i64,
    /// The Ogg Opus copy's key and size, when one was written.
    pub ogg: Option<(&'a str, i64)>,
    /// Time written, Unix ms.
    pub now_ms: i64,
}

/// What the dispatcher needs to turn a stored call into an engine job.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DispatchRow {
    /// Call id.
    pub id: CallId,
    /// Workspace.
    pub org_id: OrgId,
    /// Agent.
    pub agent_id: AgentId,
    /// Engine at creation.
    pub engine: String,
    /// Number dialed.
    pub phone: String,
    /// Caller ID.
    pub from_number: String,
    /// Carrier.
    pub provider: String,
    /// Variables JSON.
    pub variables: String,
    /// Attempt number: above 1 for a scheduled retry.
    pub attempt: i64,
    /// Owning batch, whose calling hours it keeps.
    pub batch_id: Option<BatchId>,
    /// The override that placed it outside its calling hours, if one did.
    pub calling_hours_override: Option<HoursOverride>,
}

/// A call that just reached its terminal status.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct FinishedCall {
    /// Workspace.
    pub org_id: OrgId,
    /// Agent.
    pub agent_id: AgentId,
    /// Attempt number.
    pub attempt: i64,
    /// First attempt's id, if this was a retry.
    pub retry_of: Option<CallId>,
    /// Number dialed.
    pub phone: String,
    /// Person called.
    pub target_name: String,
    /// Their email address.
    pub email: Option<String>,
    /// Caller ID.
    pub from_number: String,
    /// Carrier.
    pub provider: String,
    /// Engine.
    pub engine: String,
    /// Agent name.
    pub agent_name: String,
    /// Variables JSON.
    pub variables: String,
    /// Source of the call.
    pub source: String,
    /// Batch.
    pub batch_id: Option<BatchId>,
    /// Campaign.
    pub campaign_id: Option<CampaignId>,
    /// Campaign name.
    pub campaign_name: Option<String>,
    /// Rate.
    pub rate_paise: Paise,
    /// Billed seconds.
    pub duration_seconds: i64,
    /// Charge.
    pub cost_paise: Paise,
}

/// The terminal outcome to record.
#[derive(Debug, Clone)]
pub struct CallOutcome<'a> {
    /// Call id.
    pub call_id: CallId,
    /// Terminal raw status.
    pub status: &'a str,
    /// Why it ended.
    pub ended_reason: &'a str,
    /// Answer time, Unix ms.
    pub answered_at: Option<i64>,
    /// End time, Unix ms.
    pub ended_at: i64,
    /// IST month key for the minute quota.
    pub month: &'a str,
    /// How long `call.completed` waits for the rating of a rated call (decisions §8), ms.
    pub rating_wait_ms: i64,
    /// The callee asked not to be called again: the number is listed and
    /// `number.opted_out` queued with the outcome.
    pub opted_out: bool,
}

/// Whole seconds between answer and end; unanswered calls last zero seconds.
pub fn billable_seconds(answered_at: Option<i64>, ended_at: i64) -> i64 {
    answered_at.map_or(0, |a| ((ended_at - a).max(0)) / 1000)
}

/// Minutes billed for a duration: every started minute counts.
pub fn billed_minutes(duration_seconds: i64) -> i64 {
    (duration_seconds + 59) / 60
}

/// Creates calls and their `queued` events in the caller's transaction `tx`.
///
/// Shared by [`Store::insert_calls`] and the batch claim, which must store its
/// call in the same transaction as the claim.
pub(super) async fn insert_calls_in<DB>(
    tx: &mut sqlx::Transaction<'_, DB>,
    calls: &[NewCall],
) -> StoreResult<()>
where
    DB: sqlx::Database,
    for<'c> &'c mut DB::Connection: sqlx::Executor<'c, Database = DB>,
    DB::Arguments: sqlx::IntoArguments<DB>,
    for<'a> &'a str: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<&'a str>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> i64: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> CallId: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> OrgId: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> AgentId: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<CallId>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Option<BatchId>: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> Paise: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
    for<'a> bool: sqlx::Encode<'a, DB> + sqlx::Type<DB>,
{
    // Multi-row statements: two round trips per chunk instead of two per
    // call (a 1,000-number alert is 20 chunks).
    for chunk in calls.chunks(INSERT_CHUNK_ROWS) {
        insert_calls_sql::<DB>(chunk)
            .build()
            .execute(&mut **tx)
            .await?;
        insert_queued_events_sql::<DB>(chunk)
            .build()
            .execute(&mut **tx)
            .await?;
    }
    Ok(())
}

/// Calls stamped by one statement of [`Store::touch_live_calls`] (far below
/// SQLite's limit of bound parameters).
pub const TOUCH_PER_STATEMENT: usize = 500;

impl Store {
    /// Creates calls and their `queued` events in one transaction.
    pub async fn insert_calls(&self, calls: &[NewCall]) -> StoreResult<()> {
        if calls.is_empty() {
            return Ok(());
        }
        with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            insert_calls_in(&mut tx, calls).await?;
            tx.commit().await?;
        });
        Ok(())
    }

    /// The live (queued, ringing or in-progress) call to `phone`, if any.
    pub async fn live_call_to(&self, org_id: OrgId, phone: &str) -> StoreResult<Option<CallId>> {
        let id = with_pool!(self, pool => {
            sqlx::query_scalar::<_, CallId>(
                "SELECT id FROM calls WHERE org_id = $1 AND phone = $2
                   AND status IN ('queued', 'ringing', 'in-progress')
                 ORDER BY created_at DESC LIMIT 1",
            )
            .bind(org_id)
            .bind(phone)
            .fetch_optional(pool)
            .await?
        });
        Ok(id)
    }

    /// The raw status of a call of a workspace.
    pub async fn call_status(&self, org_id: OrgId, call_id: CallId) -> StoreResult<Option<String>> {
        let status = with_pool!(self, pool => {
            sqlx::query_scalar::<_, String>("SELECT status FROM calls WHERE id = $1 AND org_id = $2")
                .bind(call_id)
                .bind(org_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(status)
    }

    /// The workspace that owns a call (carrier callbacks carry only the call id).
    pub async fn call_org(&self, call_id: CallId) -> StoreResult<Option<OrgId>> {
        let org = with_pool!(self, pool => {
            sqlx::query_scalar::<_, OrgId>("SELECT org_id FROM calls WHERE id = $1")
                .bind(call_id)
                .fetch_optional(pool)
                .await?
        });
        Ok(org)
    }

    /// Records a non-terminal transition; ignored once the call is terminal.
    pub async fn call_transition(
        &self,
        call_id: CallId,
        status: &str,
        at_ms: i64,
    ) -> StoreResult<bool> {
        let Some(status) = ProgressStatus::parse(status) else {
            return Ok(false);
        };
        let progress = [CallProgress::Status {
            call_id,
            status,
            at_ms,
        }];
        Ok(self.record_progress(&progress).await? > 0)
    }

    /// Records several calls' progress in one write transaction, in order,
    /// and returns how many changed a call. A status that no longer fits the
    /// call (ringing once answered, anything once it ended) changes nothing,
    /// so reports applied late or twice are harmless.
    pub async fn record_progress(&self, progress: &[CallProgress]) -> StoreResult<u64> {
        if progress.is_empty() {
            return Ok(0);
        }
        let changed = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let mut changed = 0;
            for report in progress {
                match report {
                    CallProgress::Status { call_id, status, at_ms } => {
                        let n = sqlx::query(status.update_sql())
                            .bind(at_ms)
                            .bind(call_id)
                            .execute(&mut *tx)
                            .await?
                            .rows_affected();
                        if n > 0 {
                            sqlx::query(
                                "INSERT INTO call_events (call_id, status, at) VALUES ($1, $2, $3)",
                            )
                            .bind(call_id)
                            .bind(status.as_str())
                            .bind(at_ms)
                            .execute(&mut *tx)
                            .await?;
                        }
                        changed += n;
                    }
                    CallProgress::CarrierCallId { call_id, carrier_call_id } => {
                        changed += sqlx::query("UPDATE calls SET carrier_call_id = $1 WHERE id = $2")
                            .bind(carrier_call_id)
                            .bind(call_id)
                            .execute(&mut *tx)
                            .await?
                            .rows_affected();
                    }
                }
            }
            tx.commit().await?;
            changed
        });
        Ok(changed)
    }

    /// Records the carrier's final code for a call (the SIP status code).
    pub async fn set_carrier_code(&self, call_id: CallId, code: u16) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query("UPDATE calls SET carrier_code = $1 WHERE id = $2")
                .bind(i32::from(code))
                .bind(call_id)
                .execute(pool)
                .await?;
        });
        Ok(())
    }

    /// Records the terminal outcome, the charge, the wallet transaction and the
    /// minute usage in one transaction. Returns None when the call was already
    /// terminal, so a twice-reported end is billed once.
    pub async fn finish_call(&self, o: &CallOutcome<'_>) -> StoreResult<Option<FinishedCall>> {
        let tx_id = WalletTxId::new();
        let finished = with_writer!(self, pool => {
            let mut tx = pool.begin_write().await?;
            let claimed: Option<(Paise, Option<i64>)> = sqlx::query_as(
                "UPDATE calls SET status = $1
                 WHERE id = $2 AND status NOT IN ('completed', 'failed', 'no-answer', 'busy', 'canceled', 'voicemail')
                 RETURNING rate_paise, answered_at",
            )
            .bind(o.status)
            .bind(o.call_id)
            .fetch_optional(&mut *tx)
            .await?;
            let Some((rate, stored_answer)) = claimed else {
                tx.rollback().await?;
                return Ok(None);
            };
            let answered_at = stored_answer.or(o.answered_at);
            // A machine that answered is billed like a person who did.
            let billed = matches!(o.status, "completed" | "voicemail");
            let duration = if billed { billable_seconds(answered_at, o.ended_at) } else { 0 };
            // An answered call has started its first minute, however short.
            let minutes = if billed && answered_at.is_some() {
                billed_minutes(duration).max(1)
            } else {
                billed_minutes(duration)
            };
            let cost = rate.times(minutes);
            let row: FinishedCall = sqlx::query_as(
                "UPDATE calls SET ended_reason = $1, ended_at = $2, answered_at = $3,
                   duration_seconds = $4, cost_paise = $5
                 WHERE id = $6
                 RETURNING org_id, agent_id, attempt, retry_of, phone, target_name, email, from_number, provider, engine,
                   agent_name, variables, source, batch_id, campaign_id, campaign_name, rate_paise,
                   duration_seconds, cost_paise",
            )
            .bind(o.ended_reason)
            .bind(o.ended_at)
            .bind(answered_at)
            .bind(duration)
            .bind(cost)
            .bind(o.call_id)
            .fetch_one(&mut *tx)
            .await?;
            sqlx::query("INSERT INTO call_events (call_id, status, at) VALUES ($1, $2, $3)")
                .bind(o.call_id)
                .bind(o.status)
                .bind(o.ended_at)
                .execute(&mut *tx)
                .await?;
            if minutes > 0 {
                let balance: Paise = sqlx::query_scalar(
                    "UPDATE orgs SET wallet_paise = wallet_paise - $1 WHERE id = $2 RETURNING wallet_paise",
                )
                .bind(cost)
                .bind(row.org_id)
                .fetch_one(&mut *tx)
                .await?;
                if cost > Paise::ZERO {
                    sqlx::query(
                        "INSERT INTO wallet_transactions (id, org_id, kind, amount_paise, balance_after_paise, call_id, created_at)
                         VALUES ($1, $2, 'call-charge', $3, $4, $5, $6)",
                    )
                    .bind(tx_id)
                    .bind(row.org_id)
                    .bind(-cost)
                    .bind(balance)
                    .bind(o.call_id)
                    .bind(o.ended_at)
                    .execute(&mut *tx)
                    .await?;
                }
                sqlx::query(
                    "INSERT INTO org_minute_usage (org_id, month, minutes) VALUES ($1, $2, $3)
                     ON CONFLICT (org_id, month) DO UPDATE SET minutes = org_minute_usage.minutes + excluded.minutes",
                )
                .bind(row.org_id)
                .bind(o.month)
                .bind(minutes)
                .execute(&mut *tx)
                .await?;
            }
            // A completed call in which the callee spoke is rated; its pending
            // rating commits with the outcome, so a restart cannot lose it.
            let conversed = o.status == "completed"
                && sqlx::query_scalar::<_, i64>(
                    "SELECT COUNT(*) FROM call_turns WHERE call_id = $1 AND speaker = 'user'",
                )
                .bind(o.call_id)
                .fetch_one(&mut *tx)
                .await?
                    > 0;
            // Every ended call gets its analysis row in this transaction:
            // pending for a call that connected, skipped for one that never did.
            let connected = answered_at.is_some() && matches!(o.status, "completed" | "failed");
            let analysis_deadline = if connected {
                let spec: Option<String> = sqlx::query_scalar("SELECT spec FROM agents WHERE id = $1")
                    .bind(row.agent_id)
                    .fetch_optional(&mut *tx)
                    .await?;
                // The outcome must commit even when the agent's spec no longer
                // parses (failing here would leave the call unfinished), so the
                // default wait stands in; the decode logs the row, and the
                // analysis job fails on the same spec with the error.
                let wait_seconds = match spec.map(|s| {
                    super::decode_json::<crate::domain::agent::AgentSpec>("agents", "spec", row.agent_id, &s)
                }) {
                    Some(Ok(spec)) => spec.analysis_plan().timeout_seconds,
                    _ => crate::domain::analysis::DEFAULT_TIMEOUT_SECONDS,
                };
                Some(o.ended_at + i64::from(wait_seconds) * 1_000)
            } else {
                None
            };
            sqlx::query(
                "INSERT INTO call_analyses (call_id, org_id, agent_id, batch_id, status, webhook_deadline,
                   call_created_at, created_at, updated_at, completed_at)
                 SELECT id, org_id, agent_id, batch_id, $2, $3, created_at, $4, $4, $5 FROM calls WHERE id = $1
                 ON CONFLICT (call_id) DO NOTHING",
            )
            .bind(o.call_id)
            .bind(if connected { "pending" } else { "skipped" })
            .bind(analysis_deadline.unwrap_or(o.ended_at))
            .bind(o.ended_at)
            .bind((!connected).then_some(o.ended_at))
            .execute(&mut *tx)
            .await?;
            // call.completed waits for the post-call work (decisions §8) until
            // the analysis plan's timeoutSeconds (the rating's own wait when
            // nothing is analyzed); a rating or analysis finishing later
            // follows as its own event.
            let deadline = analysis_deadline.unwrap_or(o.ended_at + o.rating_wait_ms);
            if conversed {
                sqlx::query(
                    "INSERT INTO ratings (call_id, org_id, agent_id, status, webhook_deadline, call_created_at,
                       created_at, updated_at)
                     SELECT id, org_id, agent_id, 'pending', $2, created_at, $3, $3 FROM calls WHERE id = $1
                     ON CONFLICT (call_id) DO NOTHING",
                )
                .bind(o.call_id)
                .bind(deadline)
                .bind(o.ended_at)
                .execute(&mut *tx)
                .await?;
            }
            if o.opted_out {
                super::do_not_call::opt_out_in_tx!(tx, row.org_id, o.call_id, &row.phone, o.ended_at);
            }
            let held = conversed || connected;
            let due = if held { deadline } else { o.ended_at };
            let event_id = super::webhook_outbox::event_id(o.call_id, "call.completed");
            super::webhook_outbox::queue_in_tx!(
                &mut *tx, row.org_id, o.call_id, "call.completed", o.ended_at, due, held, &event_id
            );
            tx.commit().await?;
            Some(row)
        });
        Ok(finished)
    }

    /// Queued calls due for dialing that no engine holds, oldest first.
    pub async fn due_calls(&self, now_ms: i64, limit: i64) -> StoreResult<Vec<DispatchRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, DispatchRow>(
                "SELECT id, org_id, agent_id, engine, phone, from_number, provider, variables,
                   attempt, batch_id, calling_hours_override FROM calls
                 WHERE status = 'queued' AND dispatched = FALSE AND not_before <= $1
                 ORDER BY not_before, created_at, id LIMIT $2",
            )
            .bind(now_ms)
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Hands a claimed queued call back to the dispatchers, due at `not_before`
    /// (its calling hours' opening); false when it is no longer queued.
    pub async fn defer_call(&self, call_id: CallId, not_before: i64) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE calls SET not_before = $2, dispatched = FALSE, node_id = NULL
                 WHERE id = $1 AND status = 'queued'",
            )
            .bind(call_id)
            .bind(not_before)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// Claims a queued call for the engine; false if another pass took it.
    pub async fn claim_call(&self, call_id: CallId) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            sqlx::query("UPDATE calls SET dispatched = TRUE WHERE id = $1 AND dispatched = FALSE AND status = 'queued'")
                .bind(call_id)
                .execute(pool)
                .await?
                .rows_affected()
        });
        Ok(n > 0)
    }

    /// Hands queued calls back to the dispatcher (all, or one workspace's).
    pub async fn release_queued_calls(&self, org_id: Option<OrgId>) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            match org_id {
                Some(org) => sqlx::query("UPDATE calls SET dispatched = FALSE WHERE status = 'queued' AND direction = 'outbound' AND org_id = $1")
                    .bind(org)
                    .execute(pool)
                    .await?
                    .rows_affected(),
                None => sqlx::query("UPDATE calls SET dispatched = FALSE WHERE status = 'queued' AND direction = 'outbound'")
                    .execute(pool)
                    .await?
                    .rows_affected(),
            }
        });
        Ok(n)
    }

    /// Stamps the last sign of life (`at_ms`) of the live calls `call_ids`, which a
    /// restart bills an orphaned answered call up to: one statement per
    /// [`TOUCH_PER_STATEMENT`] calls, however many are live. Calls that ended
    /// meanwhile are left alone. Returns how many rows were stamped.
    pub async fn touch_live_calls(&self, call_ids: &[CallId], at_ms: i64) -> StoreResult<u64> {
        let mut stamped = 0;
        with_writer!(self, pool => {
            for part in call_ids.chunks(TOUCH_PER_STATEMENT) {
                let mut sql = sqlx::QueryBuilder::new("UPDATE calls SET last_seen_at = ");
                sql.push_bind(at_ms)
                    .push(" WHERE status IN ('ringing', 'in-progress') AND id IN (");
                let mut ids = sql.separated(", ");
                for id in part {
                    ids.push_bind(*id);
                }
                sql.push(")");
                stamped += sql.build().execute(pool).await?.rows_affected();
            }
        });
        Ok(stamped)
    }

    /// Appends one transcript turn.
    pub async fn insert_turn(
        &self,
        call_id: CallId,
        org_id: OrgId,
        seq: i64,
        speaker: &str,
        text: &str,
        at_ms: i64,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO call_turns (call_id, org_id, seq, speaker, text, created_at) VALUES ($1, $2, $3, $4, $5, $6)
                 ON CONFLICT (call_id, seq) DO NOTHING",
            )
            .bind(call_id)
            .bind(org_id)
            .bind(seq)
            .bind(speaker)
            .bind(text)
            .bind(at_ms)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Stores what the conversation produced, before the terminal outcome.
    pub async fn set_call_results(
        &self,
        call_id: CallId,
        transcript_text: &str,
        summary: &str,
        extracted: &str,
        latencies: &str,
    ) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "UPDATE calls SET transcript_text = $1, summary = $2, extracted = $3, latencies = $4 WHERE id = $5",
            )
            .bind(transcript_text)
            .bind(summary)
            .bind(extracted)
            .bind(latencies)
            .bind(call_id)
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Records a call's recording.
    pub async fn insert_recording(&self, r: &NewRecording<'_>) -> StoreResult<()> {
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO recordings (call_id, org_id, object_key, format, duration_ms, bytes, created_at,
                   ogg_object_key, ogg_bytes)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                 ON CONFLICT (call_id) DO UPDATE SET object_key = excluded.object_key, format = excluded.format,
                   duration_ms = excluded.duration_ms, bytes = excluded.bytes,
                   ogg_object_key = excluded.ogg_object_key, ogg_bytes = excluded.ogg_bytes",
            )
            .bind(r.call_id)
            .bind(r.org_id)
            .bind(r.object_key)
            .bind(r.format)
            .bind(r.duration_ms)
            .bind(r.bytes)
            .bind(r.now_ms)
            .bind(r.ogg.map(|(key, _)| key))
            .bind(r.ogg.map(|(_, bytes)| bytes))
            .execute(pool)
            .await?;
        });
        Ok(())
    }
}

impl Store {
    /// The agent and variables a call runs with, in one read (it is on the
    /// path to the greeting); `None` when the call or its agent is gone.
    pub async fn call_agent(
        &self,
        org_id: OrgId,
        call_id: CallId,
    ) -> StoreResult<Option<CallAgent>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, CallAgent>(
                "SELECT a.id, a.org_id, a.status, a.spec, a.dormant, a.last_active_at,
                        a.created_at, a.updated_at, c.variables
                   FROM calls c JOIN agents a ON a.id = c.agent_id AND a.org_id = c.org_id
                  WHERE c.id = $1 AND c.org_id = $2",
            )
            .bind(call_id)
            .bind(org_id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }
}

/// A call's agent and the variables it was placed with.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CallAgent {
    /// The agent as stored.
    #[sqlx(flatten)]
    pub agent: super::AgentRow,
    /// The call's variables, as stored JSON.
    pub variables: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_started_minute_is_billed() {
        assert_eq!(billed_minutes(0), 0);
        assert_eq!(billed_minutes(1), 1);
        assert_eq!(billed_minutes(60), 1);
        assert_eq!(billed_minutes(61), 2);
        assert_eq!(billable_seconds(Some(1_000), 62_999), 61);
        assert_eq!(billable_seconds(None, 62_999), 0);
    }

    fn new_call() -> NewCall {
        NewCall {
            id: CallId::new(),
            org_id: OrgId::new(),
            agent_id: AgentId::new(),
            agent_name: "Agent".to_string(),
            engine: "pipeline".to_string(),
            phone: "+919800000000".to_string(),
            target_name: "Asha".to_string(),
            email: Some("asha@example.com".to_string()),
            from_number: "+918000000000".to_string(),
            provider: "mock".to_string(),
            variables: "{}".to_string(),
            source: "api".to_string(),
            attempt: 1,
            retry_of: None,
            batch_id: None,
            campaign_id: None,
            campaign_name: None,
            rate_paise: Paise(100),
            not_before: 5,
            dispatched: false,
            now_ms: 5,
            calling_hours_override: None,
        }
    }

    #[test]
    fn multi_row_inserts_number_each_rows_binds_after_the_last() {
        let chunk = [new_call(), new_call()];
        let calls = insert_calls_sql::<sqlx::Postgres>(&chunk).into_string();
        let first: Vec<String> = (1..=23).map(|k| format!("${k}")).collect();
        let second: Vec<String> = (24..=46).map(|k| format!("${k}")).collect();
        let row = |binds: &[String]| {
            format!(
                "({}, 'queued', {})",
                binds[..10].join(", "),
                binds[10..].join(", ")
            )
        };
        assert!(
            calls.ends_with(&format!(
                "created_at, calling_hours_override) VALUES {}, {}",
                row(&first),
                row(&second)
            )),
            "{calls}"
        );
        assert_eq!(
            insert_queued_events_sql::<sqlx::Postgres>(&chunk).into_string(),
            "INSERT INTO call_events (call_id, status, at) VALUES ($1, 'queued', $2), ($3, 'queued', $4)"
        );
        assert_eq!(
            insert_queued_events_sql::<sqlx::Sqlite>(&chunk).into_string(),
            "INSERT INTO call_events (call_id, status, at) VALUES (?, 'queued', ?), (?, 'queued', ?)"
        );
    }
}
