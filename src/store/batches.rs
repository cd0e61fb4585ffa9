//! Batches and campaigns (one table, told apart by `kind`) and their items.
//!
//! An item is `pending` until it is claimed for dialing; the claim and the
//! item's call are written in one transaction, so an item is dialed at most
//! once however the process stops. From then on the item's status follows its
//! latest call through the triggers of migration 0003.

use super::calls::{NewCall, insert_calls_in};
use super::stored_json::decode_json;
use super::{Db, Store, StoreResult, with_pool, with_writer};
use crate::domain::calling_hours::{CallingHours, WindowCheck};
use crate::domain::{AgentId, BatchId, CallId, OrgId};

/// Advisory lock key of the Postgres item count fold ("vxbc").
const BATCH_COUNT_FOLD_LOCK: i64 = 0x7678_6263;

/// Raw item statuses that still need work: waiting or on a live call.
pub const OPEN_ITEM_STATUSES: [&str; 5] =
    ["pending", "waiting", "queued", "ringing", "in-progress"];

/// A batch or campaign as stored.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BatchRow {
    /// Batch id.
    pub id: BatchId,
    /// Workspace.
    pub org_id: OrgId,
    /// `batch` or `campaign`.
    pub kind: String,
    /// Display name.
    pub name: String,
    /// Agent that places the calls.
    pub agent_id: AgentId,
    /// Agent name at creation.
    pub agent_name: String,
    /// Caller ID override.
    pub from_number: Option<String>,
    /// draft, scheduled, running, paused, completed or stopped.
    pub status: String,
    /// Why the service changed the status itself (e.g. paused: wallet empty).
    pub status_reason: Option<String>,
    /// Automatic start time, Unix ms.
    pub scheduled_start_at: Option<i64>,
    /// First start, Unix ms.
    pub started_at: Option<i64>,
    /// Completion or stop, Unix ms.
    pub finished_at: Option<i64>,
    /// Creation, Unix ms.
    pub created_at: i64,
    /// Last change, Unix ms.
    pub updated_at: i64,
    /// The batch's own calling hours as stored JSON; None: the agent's or the
    /// workspace's. Read through [`BatchRow::calling_hours`].
    pub calling_hours: Option<String>,
}

impl BatchRow {
    /// The batch's own calling hours; None when it keeps the agent's or the workspace's.
    pub fn calling_hours(&self) -> StoreResult<Option<CallingHours>> {
        self.calling_hours
            .as_deref()
            .map(|text| decode_json("batches", "calling_hours", self.id, text))
            .transpose()
    }
}

/// A batch to create.
#[derive(Debug, Clone)]
pub struct NewBatch<'a> {
    /// Batch id.
    pub id: BatchId,
    /// Workspace.
    pub org_id: OrgId,
    /// `batch` or `campaign`.
    pub kind: &'a str,
    /// Display name.
    pub name: &'a str,
    /// Agent.
    pub agent_id: AgentId,
    /// Agent name.
    pub agent_name: &'a str,
    /// Caller ID override.
    pub from_number: Option<&'a str>,
    /// draft or scheduled.
    pub status: &'a str,
    /// Automatic start, Unix ms.
    pub scheduled_start_at: Option<i64>,
    /// The batch's own calling hours (None: the agent's or the workspace's).
    pub calling_hours: Option<&'a CallingHours>,
    /// Creation time, Unix ms.
    pub now_ms: i64,
}

/// The rule an item outside its calling hours waits (or is skipped) under.
pub const CALLING_HOURS_RULE: &str = "calling-hours";

/// The `reason` of an item whose number's time zones share no open time.
pub const NO_COMMON_WINDOW: &str =
    "the number's candidate time zones share no time inside the calling hours; it is never dialed";

/// Most items one claim defers before it commits and lets the feed ask again.
const MAX_DEFERRALS_PER_CLAIM: usize = 500;

/// What one claim of a batch's next item found.
#[derive(Debug)]
pub enum ItemClaim {
    /// An item to dial, and its stored call.
    Claimed(Box<(ClaimedItem, NewCall)>),
    /// Items were deferred to their calling hours; there may be more to look at now.
    Deferred,
    /// Nothing to dial now.
    Nothing,
}

/// The `reason` of an item skipped because its number is on the do-not-call list.
pub const DO_NOT_CALL_ITEM_REASON: &str = "phone is on the workspace's do-not-call list";

/// An item to append.
#[derive(Debug, Clone)]
pub struct NewItem {
    /// Person's name.
    pub name: String,
    /// E.164 number, or the raw text of a malformed one.
    pub phone: String,
    /// Variables JSON object.
    pub variables: String,
    /// Their email address, parsed at the edge; their calls carry it.
    pub email: Option<String>,
    /// `pending`, or `skipped` for a malformed, repeated or listed number.
    pub status: &'static str,
    /// Why it was skipped.
    pub reason: Option<String>,
    /// The rule that skipped it (`do-not-call`), when one did.
    pub skip_reason: Option<&'static str>,
}

/// An item as read back.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ItemRow {
    /// Position in the batch, from 1.
    pub seq: i64,
    /// Person's name.
    pub name: String,
    /// Number.
    pub phone: String,
    /// Variables JSON.
    pub variables: String,
    /// Latest raw status.
    pub status: String,
    /// Why it was skipped.
    pub reason: Option<String>,
    /// The rule that skipped it (`do-not-call`), when one did.
    pub skip_reason: Option<String>,
    /// Latest call.
    pub call_id: Option<CallId>,
    /// Calls made for it.
    pub attempts: i64,
    /// While `waiting`: when its calling hours open, Unix ms.
    pub next_attempt_at: Option<i64>,
    /// The rule that last deferred it (`calling-hours`), kept after it is dialed.
    pub wait_reason: Option<String>,
}

/// An item with its latest call's results and analysis, for the batch and
/// campaign exports.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ItemResultRow {
    /// The item.
    #[sqlx(flatten)]
    pub item: ItemRow,
    /// Talk time of the latest call.
    pub duration_seconds: Option<i64>,
    /// Its summary.
    pub summary: Option<String>,
    /// Its keypad choices (JSON object).
    pub extracted: Option<String>,
    /// Why it ended.
    pub ended_reason: Option<String>,
    /// Its analysis' extracted fields (JSON object), once analyzed.
    pub structured_data: Option<String>,
    /// Its analysis' verdict, JSON `{rubric, value, pass, reason}`.
    pub success: Option<String>,
    /// The verdict as pass or fail.
    pub success_pass: Option<bool>,
}

/// The call template an item is dialed with; the item fills in the person.
#[derive(Debug, Clone)]
pub struct ItemCall {
    /// The new call's id.
    pub call_id: CallId,
    /// Everything but phone, name, variables and email, which come from the item.
    pub call: NewCall,
}

/// A claimed item: who its new call rings.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ClaimedItem {
    /// Position in the batch.
    pub seq: i64,
    /// Person's name.
    pub name: String,
    /// E.164 number.
    pub phone: String,
    /// Variables JSON.
    pub variables: String,
    /// Email address.
    pub email: Option<String>,
}

impl Store {
    /// Stores a new batch.
    pub async fn insert_batch(&self, b: &NewBatch<'_>) -> StoreResult<()> {
        let hours = b.calling_hours.map(serde_json::to_string).transpose()?;
        with_writer!(self, pool => {
            sqlx::query(
                "INSERT INTO batches (id, org_id, kind, name, agent_id, agent_name, from_number, status,
                   scheduled_start_at, created_at, updated_at, calling_hours)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $10, $11)",
            )
            .bind(b.id)
            .bind(b.org_id)
            .bind(b.kind)
            .bind(b.name)
            .bind(b.agent_id)
            .bind(b.agent_name)
            .bind(b.from_number)
            .bind(b.status)
            .bind(b.scheduled_start_at)
            .bind(b.now_ms)
            .bind(hours.as_deref())
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// One batch of a workspace, of one kind.
    pub async fn batch(
        &self,
        org_id: OrgId,
        kind: &str,
        id: BatchId,
    ) -> StoreResult<Option<BatchRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, BatchRow>(
                "SELECT id, org_id, kind, name, agent_id, agent_name, from_number, status, status_reason,
                   scheduled_start_at, started_at, finished_at, created_at, updated_at, calling_hours
                 FROM batches WHERE id = $1 AND org_id = $2 AND kind = $3",
            )
            .bind(id)
            .bind(org_id)
            .bind(kind)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// A batch by id alone (for the feed, which has no workspace context).
    pub async fn batch_by_id(&self, id: BatchId) -> StoreResult<Option<BatchRow>> {
        let row = with_pool!(self, pool => {
            sqlx::query_as::<_, BatchRow>(
                "SELECT id, org_id, kind, name, agent_id, agent_name, from_number, status, status_reason,
                   scheduled_start_at, started_at, finished_at, created_at, updated_at, calling_hours
                 FROM batches WHERE id = $1",
            )
            .bind(id)
            .fetch_optional(pool)
            .await?
        });
        Ok(row)
    }

    /// One page of a workspace's batches of one kind, newest first, and the total.
    pub async fn list_batches(
        &self,
        org_id: OrgId,
        kind: &str,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<BatchRow>, i64)> {
        let (rows, total) = with_pool!(self, pool => {
            let rows = sqlx::query_as::<_, BatchRow>(
                "SELECT id, org_id, kind, name, agent_id, agent_name, from_number, status, status_reason,
                   scheduled_start_at, started_at, finished_at, created_at, updated_at, calling_hours
                 FROM batches WHERE org_id = $1 AND kind = $2
                 ORDER BY created_at DESC, id DESC LIMIT $3 OFFSET $4",
            )
            .bind(org_id)
            .bind(kind)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?;
            let total: i64 = sqlx::query_scalar(
                "SELECT CAST(COUNT(*) AS BIGINT) FROM batches WHERE org_id = $1 AND kind = $2",
            )
            .bind(org_id)
            .bind(kind)
            .fetch_one(pool)
            .await?;
            (rows, total)
        });
        Ok((rows, total))
    }

    /// A batch's skipped items counted by the rule that skipped them (`None`:
    /// a malformed or repeated number), most first. Reads only the skipped
    /// items, through the `(batch_id, status)` index.
    pub async fn batch_skip_counts(
        &self,
        batch_id: BatchId,
    ) -> StoreResult<Vec<(Option<String>, i64)>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, (Option<String>, i64)>(
                "SELECT skip_reason, COUNT(*) FROM batch_items WHERE batch_id = $1 AND status = 'skipped'
                 GROUP BY skip_reason ORDER BY COUNT(*) DESC, skip_reason",
            )
            .bind(batch_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Item counts per raw status of one batch.
    ///
    /// SQLite reads the trigger-kept counters (migration 0021); Postgres reads
    /// its folded counters plus the deltas not folded yet (migration 0031). So
    /// the read costs a few rows however many items the batch has and however
    /// busy the dialer is.
    pub async fn batch_item_counts(&self, batch_id: BatchId) -> StoreResult<Vec<(String, i64)>> {
        let rows =
            match &self.db {
                Db::Sqlite(pool) => sqlx::query_as::<_, (String, i64)>(
                    "SELECT status, items FROM batch_item_counts WHERE batch_id = $1 AND items > 0",
                )
                .bind(batch_id)
                .fetch_all(pool)
                .await?,
                Db::Postgres(pool) => {
                    // One statement, so the counters and the deltas not yet folded
                    // into them are read from the same snapshot.
                    sqlx::query_as::<_, (String, i64)>(
                        "SELECT status, CAST(SUM(items) AS BIGINT) FROM (
                       SELECT status, items FROM batch_item_counts WHERE batch_id = $1
                       UNION ALL
                       SELECT status, delta FROM batch_item_count_deltas WHERE batch_id = $1
                     ) counted GROUP BY status HAVING SUM(items) > 0",
                    )
                    .bind(batch_id)
                    .fetch_all(pool)
                    .await?
                }
            };
        Ok(rows)
    }

    /// Moves the item count deltas written since the last pass into the
    /// per-(batch, status) counters (Postgres, migration 0031); returns how
    /// many counter rows changed. SQLite's triggers keep the counters directly.
    ///
    /// One server at a time folds (a transaction-scoped advisory lock), so the
    /// counter rows have a single writer and never deadlock; a pass that finds
    /// the lock taken does nothing.
    pub async fn fold_batch_item_counts(&self) -> StoreResult<u64> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(0);
        };
        let mut tx = pool.begin().await?;
        let locked: bool = sqlx::query_scalar("SELECT pg_try_advisory_xact_lock($1)")
            .bind(BATCH_COUNT_FOLD_LOCK)
            .fetch_one(&mut *tx)
            .await?;
        if !locked {
            return Ok(0);
        }
        // The DELETE removes exactly the deltas its snapshot sees, and the
        // same statement adds exactly those to the counters.
        let folded = sqlx::query(
            "WITH moved AS (
               DELETE FROM batch_item_count_deltas RETURNING batch_id, status, delta
             ), summed AS (
               SELECT batch_id, status, SUM(delta) AS delta
               FROM moved GROUP BY batch_id, status
             )
             INSERT INTO batch_item_counts (batch_id, status, items)
               SELECT batch_id, status, delta FROM summed
             ON CONFLICT (batch_id, status) DO UPDATE SET items = batch_item_counts.items + EXCLUDED.items",
        )
        .execute(&mut *tx)
        .await?
        .rows_affected();
        if folded > 0 {
            // Counters of deleted batches and emptied statuses.
            sqlx::query("DELETE FROM batch_item_counts WHERE items = 0")
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
        Ok(folded)
    }

    /// Appends items after the batch's last one, in order, in one transaction;
    /// only while the batch is in one of `open_statuses`. Returns false otherwise.
    ///
    /// Items are numbered 1, 2, … `next_seq` without gaps (the range is
    /// reserved in the same transaction, and items leave only with their
    /// batch): [`Store::batch_items_page`] relies on it.
    pub async fn append_items(
        &self,
        batch_id: BatchId,
        open_statuses: &[&str],
        items: &[NewItem],
        now_ms: i64,
    ) -> StoreResult<bool> {
        let count = i64::try_from(items.len()).unwrap_or(i64::MAX);
        let statuses = open_statuses.join(",");
        with_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            // Reserving the seq range first takes the write lock before anything is read.
            let reserved: Option<i64> = sqlx::query_scalar(
                "UPDATE batches SET next_seq = next_seq + $1, updated_at = $2
                 WHERE id = $3 AND ',' || CAST($4 AS TEXT) || ',' LIKE '%,' || status || ',%'
                 RETURNING next_seq",
            )
            .bind(count)
            .bind(now_ms)
            .bind(batch_id)
            .bind(&statuses)
            .fetch_optional(&mut *tx)
            .await?;
            let Some(end) = reserved else {
                tx.rollback().await?;
                return Ok(false);
            };
            let mut seq = end - count;
            for item in items {
                seq += 1;
                sqlx::query(
                    "INSERT INTO batch_items (batch_id, seq, name, phone, variables, status, reason, email, skip_reason)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                )
                .bind(batch_id)
                .bind(seq)
                .bind(&item.name)
                .bind(&item.phone)
                .bind(&item.variables)
                .bind(item.status)
                .bind(&item.reason)
                .bind(&item.email)
                .bind(item.skip_reason)
                .execute(&mut *tx)
                .await?;
            }
            tx.commit().await?;
        });
        Ok(true)
    }

    /// The numbers already in a batch (valid ones), for de-duplication.
    pub async fn batch_phones(&self, batch_id: BatchId) -> StoreResult<Vec<String>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_scalar::<_, String>(
                "SELECT phone FROM batch_items WHERE batch_id = $1 AND status <> 'skipped'",
            )
            .bind(batch_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// One page of a batch's items in order, optionally of one raw status, and the total.
    ///
    /// Unfiltered, item `offset + 1` is the one numbered `offset + 1` (see
    /// [`Store::append_items`]), so the page is an index range and the total
    /// the batch's `next_seq`: no walk past `offset` items and no count over
    /// items the dialer is updating (on Postgres that count read every item).
    pub async fn batch_items_page(
        &self,
        batch_id: BatchId,
        status: Option<&str>,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<ItemRow>, i64)> {
        let Some(status) = status else {
            let (rows, total) = with_pool!(self, pool => {
                let rows = sqlx::query_as::<_, ItemRow>(
                    "SELECT seq, name, phone, variables, status, reason, skip_reason, call_id, attempts, next_attempt_at, wait_reason FROM batch_items
                     WHERE batch_id = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                )
                .bind(batch_id)
                .bind(offset)
                .bind(limit)
                .fetch_all(pool)
                .await?;
                let total: Option<i64> =
                    sqlx::query_scalar("SELECT next_seq FROM batches WHERE id = $1")
                        .bind(batch_id)
                        .fetch_optional(pool)
                        .await?;
                (rows, total.unwrap_or(0))
            });
            return Ok((rows, total));
        };
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, ItemRow>(
                "SELECT seq, name, phone, variables, status, reason, skip_reason, call_id, attempts, next_attempt_at, wait_reason FROM batch_items
                 WHERE batch_id = $1 AND status = $2 ORDER BY seq LIMIT $3 OFFSET $4",
            )
            .bind(batch_id)
            .bind(status)
            .bind(limit)
            .bind(offset)
            .fetch_all(pool)
            .await?
        });
        let total = self
            .batch_item_counts(batch_id)
            .await?
            .into_iter()
            .filter(|(s, _)| s == status)
            .map(|(_, items)| items)
            .sum();
        Ok((rows, total))
    }

    /// Items after `after_seq` with their latest call's results and its
    /// analysis (when it has one), in order.
    pub async fn batch_results_after(
        &self,
        batch_id: BatchId,
        after_seq: i64,
        limit: i64,
    ) -> StoreResult<Vec<ItemResultRow>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, ItemResultRow>(
                "SELECT i.seq, i.name, i.phone, i.variables, i.status, i.reason, i.skip_reason, i.call_id, i.attempts, i.next_attempt_at, i.wait_reason,
                   c.duration_seconds, c.summary, c.extracted, c.ended_reason,
                   a.structured_data, a.success, a.success_pass
                 FROM batch_items i LEFT JOIN calls c ON c.id = i.call_id
                   LEFT JOIN call_analyses a ON a.call_id = i.call_id
                 WHERE i.batch_id = $1 AND i.seq > $2 ORDER BY i.seq LIMIT $3",
            )
            .bind(batch_id)
            .bind(after_seq)
            .bind(limit)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Moves a batch from one of `from` to `to`, recording `reason`; false
    /// when its status was none of `from`. `started` also stamps the first start,
    /// `finished` the end.
    #[allow(clippy::too_many_arguments)]
    pub async fn transition_batch(
        &self,
        id: BatchId,
        from: &[&str],
        to: &str,
        reason: Option<&str>,
        started: bool,
        finished: bool,
        now_ms: i64,
    ) -> StoreResult<bool> {
        let from = from.join(",");
        let n = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE batches SET status = $1, status_reason = $2, updated_at = $3,
                   started_at = CASE WHEN $4 THEN COALESCE(started_at, $3) ELSE started_at END,
                   finished_at = CASE WHEN $5 THEN $3 ELSE NULL END
                 WHERE id = $6 AND ',' || CAST($7 AS TEXT) || ',' LIKE '%,' || status || ',%'",
            )
            .bind(to)
            .bind(reason)
            .bind(now_ms)
            .bind(started)
            .bind(finished)
            .bind(id)
            .bind(&from)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n > 0)
    }

    /// Renames a batch and/or changes its schedule (and with it draft ↔
    /// scheduled) and its own calling hours.
    pub async fn update_batch(
        &self,
        id: BatchId,
        name: &str,
        status: &str,
        scheduled_start_at: Option<i64>,
        calling_hours: Option<&CallingHours>,
        now_ms: i64,
    ) -> StoreResult<()> {
        let hours = calling_hours.map(serde_json::to_string).transpose()?;
        with_writer!(self, pool => {
            sqlx::query(
                "UPDATE batches SET name = $1, status = $2, scheduled_start_at = $3, updated_at = $4,
                   calling_hours = $6 WHERE id = $5",
            )
            .bind(name)
            .bind(status)
            .bind(scheduled_start_at)
            .bind(now_ms)
            .bind(id)
            .bind(hours.as_deref())
            .execute(pool)
            .await?;
        });
        Ok(())
    }

    /// Deletes a batch and its items unless it is in one of `busy` statuses;
    /// false when it was.
    pub async fn delete_batch(&self, id: BatchId, busy: &[&str]) -> StoreResult<bool> {
        let busy = busy.join(",");
        let n = with_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            let n = sqlx::query(
                "DELETE FROM batches WHERE id = $1 AND ',' || CAST($2 AS TEXT) || ',' NOT LIKE '%,' || status || ',%'",
            )
            .bind(id)
            .bind(&busy)
            .execute(&mut *tx)
            .await?
            .rows_affected();
            if n > 0 {
                sqlx::query("DELETE FROM batch_items WHERE batch_id = $1")
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
            }
            tx.commit().await?;
            n
        });
        Ok(n > 0)
    }

    /// Marks every pending item of a batch canceled (a stop); returns how many.
    pub async fn drop_pending_items(&self, batch_id: BatchId) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE batch_items SET status = 'canceled', reason = 'batch-stopped', next_attempt_at = NULL
                 WHERE batch_id = $1 AND status IN ('pending', 'waiting')",
            )
            .bind(batch_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Calls of a batch waiting for a later dial (scheduled retries) that no engine holds.
    pub async fn undispatched_batch_calls(&self, batch_id: BatchId) -> StoreResult<Vec<CallId>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_scalar::<_, CallId>(
                "SELECT id FROM calls WHERE batch_id = $1 AND status = 'queued' AND dispatched = FALSE",
            )
            .bind(batch_id)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Puts items whose latest call failed, went unanswered, was busy or
    /// reached an answering machine back to pending; returns how many.
    pub async fn reset_failed_items(&self, batch_id: BatchId) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE batch_items SET status = 'pending'
                 WHERE batch_id = $1 AND status IN ('failed', 'no-answer', 'busy', 'voicemail')",
            )
            .bind(batch_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Claims the next pending item of a running batch and stores its call,
    /// in one transaction. `hours` says whether a number may be dialed now:
    /// items outside their calling hours wait (`waiting`, with the time they
    /// open) and those whose window never opens are skipped, both with the
    /// rule `calling-hours`.
    pub async fn claim_next_item(
        &self,
        batch_id: BatchId,
        template: &ItemCall,
        hours: &(dyn Fn(&str) -> WindowCheck + Send + Sync),
    ) -> StoreResult<ItemClaim> {
        let claimed = with_writer!(self, pool => {
            let mut tx = pool.begin().await?;
            // The batch's next pending items whose numbers the workspace listed as
            // do-not-call are skipped first (the check at dial time, so a number
            // listed while its batch runs is not dialed from then on). This is the
            // transaction's first statement, so it takes the write lock at once.
            loop {
                let skipped: Option<i64> = sqlx::query_scalar(
                    "UPDATE batch_items SET status = 'skipped', skip_reason = $2, reason = $3
                     WHERE batch_id = $1 AND status = 'pending'
                       AND seq = (SELECT seq FROM batch_items WHERE batch_id = $1 AND status = 'pending' ORDER BY seq LIMIT 1)
                       AND EXISTS (SELECT 1 FROM batches b JOIN do_not_call d ON d.org_id = b.org_id
                                   WHERE b.id = $1 AND b.status = 'running' AND d.phone = batch_items.phone)
                     RETURNING seq",
                )
                .bind(batch_id)
                .bind(crate::domain::do_not_call::SKIP_REASON)
                .bind(DO_NOT_CALL_ITEM_REASON)
                .fetch_optional(&mut *tx)
                .await?;
                if skipped.is_none() {
                    break;
                }
            }
            // Then the next pending item whose number is under the workspace's
            // attempt caps is claimed, the count and the call's insert in this
            // transaction (on Postgres under the (workspace, number) lock, see
            // `store::attempt_caps`); items at their cap are skipped with
            // `skipReason: attempt-cap` and the time they could be dialed again.
            let now_ms = template.call.now_ms;
            let org_id = template.call.org_id;
            let mut deferred = 0;
            let item = loop {
                let next: Option<(i64, String)> = sqlx::query_as(
                    "SELECT seq, phone FROM batch_items WHERE batch_id = $1 AND status = 'pending'
                       AND EXISTS (SELECT 1 FROM batches WHERE id = $1 AND status = 'running')
                     ORDER BY seq LIMIT 1",
                )
                .bind(batch_id)
                .fetch_optional(&mut *tx)
                .await?;
                let Some((seq, phone)) = next else {
                    break None;
                };
                match hours(&phone) {
                    WindowCheck::Open => {}
                    WindowCheck::ClosedUntil(opens) => {
                        sqlx::query(
                            "UPDATE batch_items SET status = 'waiting', next_attempt_at = $3, wait_reason = $4
                             WHERE batch_id = $1 AND seq = $2 AND status = 'pending'",
                        )
                        .bind(batch_id)
                        .bind(seq)
                        .bind(opens.timestamp_millis())
                        .bind(CALLING_HOURS_RULE)
                        .execute(&mut *tx)
                        .await?;
                        deferred += 1;
                        if deferred >= MAX_DEFERRALS_PER_CLAIM {
                            // Bounds the write lock a window's edge holds when
                            // thousands of items close at once; the feed asks again.
                            tx.commit().await?;
                            return Ok(ItemClaim::Deferred);
                        }
                        continue;
                    }
                    WindowCheck::Never => {
                        sqlx::query(
                            "UPDATE batch_items SET status = 'skipped', skip_reason = $3, reason = $4
                             WHERE batch_id = $1 AND seq = $2 AND status = 'pending'",
                        )
                        .bind(batch_id)
                        .bind(seq)
                        .bind(CALLING_HOURS_RULE)
                        .bind(NO_COMMON_WINDOW)
                        .execute(&mut *tx)
                        .await?;
                        continue;
                    }
                }
                let hit = super::attempt_caps::check_in_tx!(
                    self, tx, org_id, phone.as_str(), template.call_id, now_ms
                );
                if let Some(hit) = hit {
                    sqlx::query(
                        "UPDATE batch_items SET status = 'skipped', skip_reason = $3, reason = $4
                         WHERE batch_id = $1 AND seq = $2 AND status = 'pending'",
                    )
                    .bind(batch_id)
                    .bind(seq)
                    .bind(super::attempt_caps::SKIP_REASON)
                    .bind(hit.message(&phone))
                    .execute(&mut *tx)
                    .await?;
                    continue;
                }
                let item: Option<ClaimedItem> = sqlx::query_as(
                    "UPDATE batch_items SET status = 'queued', call_id = $1, root_call_id = $1, attempts = attempts + 1
                     WHERE batch_id = $2 AND seq = $3 AND status = 'pending'
                     RETURNING seq, name, phone, variables, email",
                )
                .bind(template.call_id)
                .bind(batch_id)
                .bind(seq)
                .fetch_optional(&mut *tx)
                .await?;
                // Another node claimed it meanwhile: look again.
                if item.is_some() {
                    break item;
                }
            };
            let Some(item) = item else {
                // Commits the skips above, if any.
                tx.commit().await?;
                return Ok(if deferred > 0 { ItemClaim::Deferred } else { ItemClaim::Nothing });
            };
            let mut call = template.call.clone();
            call.id = template.call_id;
            call.phone = item.phone.clone();
            call.target_name = item.name.clone();
            call.variables = item.variables.clone();
            call.email = item.email.clone();
            insert_calls_in(&mut tx, std::slice::from_ref(&call)).await?;
            tx.commit().await?;
            ItemClaim::Claimed(Box::new((item, call)))
        });
        Ok(claimed)
    }

    /// Puts items whose calling hours have opened back to `pending`; returns
    /// the running batches that now have items to dial.
    pub async fn release_waiting_items(&self, now_ms: i64) -> StoreResult<Vec<BatchId>> {
        let mut ids = with_writer!(self, pool => {
            sqlx::query_scalar::<_, BatchId>(
                "UPDATE batch_items SET status = 'pending', next_attempt_at = NULL
                 WHERE status = 'waiting' AND next_attempt_at <= $1
                 RETURNING batch_id",
            )
            .bind(now_ms)
            .fetch_all(pool)
            .await?
        });
        ids.sort();
        ids.dedup();
        Ok(ids)
    }

    /// Puts a batch's waiting items back to `pending`, to be checked against
    /// calling hours that changed; returns how many.
    pub async fn recheck_waiting_items(&self, batch_id: BatchId) -> StoreResult<u64> {
        let n = with_writer!(self, pool => {
            sqlx::query(
                "UPDATE batch_items SET status = 'pending', next_attempt_at = NULL
                 WHERE batch_id = $1 AND status = 'waiting'",
            )
            .bind(batch_id)
            .execute(pool)
            .await?
            .rows_affected()
        });
        Ok(n)
    }

    /// Starts every scheduled batch whose time has come; returns them.
    pub async fn start_due_batches(&self, now_ms: i64) -> StoreResult<Vec<BatchRow>> {
        let rows = with_writer!(self, pool => {
            sqlx::query_as::<_, BatchRow>(
                "UPDATE batches SET status = 'running', started_at = COALESCE(started_at, $1), updated_at = $1
                 WHERE status = 'scheduled' AND scheduled_start_at <= $1
                 RETURNING id, org_id, kind, name, agent_id, agent_name, from_number, status, status_reason,
                   scheduled_start_at, started_at, finished_at, created_at, updated_at, calling_hours",
            )
            .bind(now_ms)
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }

    /// Marks running batches with no open item completed; returns their ids.
    pub async fn complete_finished_batches(&self, now_ms: i64) -> StoreResult<Vec<BatchId>> {
        let ids = with_writer!(self, pool => {
            sqlx::query_scalar::<_, BatchId>(
                "UPDATE batches SET status = 'completed', finished_at = $1, updated_at = $1
                 WHERE status = 'running' AND NOT EXISTS (
                   SELECT 1 FROM batch_items i WHERE i.batch_id = batches.id
                     AND i.status IN ('pending', 'waiting', 'queued', 'ringing', 'in-progress'))
                 RETURNING id",
            )
            .bind(now_ms)
            .fetch_all(pool)
            .await?
        });
        Ok(ids)
    }

    /// Running batches that still have items waiting to be dialed: `(id, org_id)`.
    pub async fn running_batches_with_pending(&self) -> StoreResult<Vec<(BatchId, OrgId)>> {
        let rows = with_pool!(self, pool => {
            sqlx::query_as::<_, (BatchId, OrgId)>(
                "SELECT b.id, b.org_id FROM batches b WHERE b.status = 'running' AND EXISTS (
                   SELECT 1 FROM batch_items i WHERE i.batch_id = b.id AND i.status = 'pending')",
            )
            .fetch_all(pool)
            .await?
        });
        Ok(rows)
    }
}
