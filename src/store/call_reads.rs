//! Reads of calls: filtered lists with stats, details, turns, keyset pages for
//! exports, and the aggregates behind the dashboard and analytics.
//!
//! Search is an index lookup on SQLite: a trigram FTS5 table over target name,
//! phone and agent name (`calls_who_fts`, migration 0020) plus the transcript
//! FTS5 table (`calls_fts`). Counts without a search term come from the
//! trigger-kept `call_status_counts` table there. Postgres uses `ILIKE`, the GIN
//! full-text index on the transcript, and grouped counts.

use super::{Db, Store, StoreResult, with_pool};
use crate::store::BeginWrite;
use sqlx::{AssertSqlSafe, QueryBuilder};

/// SQLite's trigram index answers substrings of this many characters or more.
const TRIGRAM_MIN_CHARS: usize = 3;

/// Milliseconds IST is ahead of UTC, for bucketing calls by IST day in SQL.
const IST_OFFSET_MS: i64 = 19_800_000;

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// Which calls of a workspace a list, count or export covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallFilter {
    /// Raw statuses to keep; empty keeps every status.
    pub statuses: Vec<String>,
    /// Case-insensitive substring of the target name, phone or agent name.
    pub search: Option<String>,
    /// When set, `search` also matches words of transcripts of calls created at or after this Unix ms.
    pub transcript_since_ms: Option<i64>,
    /// Telephony provider to keep.
    pub provider: Option<String>,
}

/// The columns of a call that list rows and exports show.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CallReadRow {
    /// Call id.
    pub id: String,
    /// Agent id.
    pub agent_id: String,
    /// Agent name when the call was placed.
    pub agent_name: String,
    /// Number dialed, E.164.
    pub phone: String,
    /// Name of the person called.
    pub target_name: String,
    /// Email of the person called, when known.
    pub email: Option<String>,
    /// Caller ID.
    pub from_number: String,
    /// Telephony provider.
    pub provider: String,
    /// Raw status.
    pub status: String,
    /// Why the call ended.
    pub ended_reason: Option<String>,
    /// Attempt number, 1 for the first.
    pub attempt: i64,
    /// The first attempt this call retries.
    pub retry_of: Option<String>,
    /// Batch the call belongs to.
    pub batch_id: Option<String>,
    /// Campaign the call belongs to.
    pub campaign_id: Option<String>,
    /// Campaign name at placing time.
    pub campaign_name: Option<String>,
    /// Talk time in seconds.
    pub duration_seconds: i64,
    /// Charge in paise.
    pub cost_paise: i64,
    /// Post-call summary.
    pub summary: String,
    /// Creation time, Unix ms.
    pub created_at: i64,
    /// Answer time, Unix ms.
    pub answered_at: Option<i64>,
    /// End time, Unix ms.
    pub ended_at: Option<i64>,
}

/// A search match as streamed from the full-text indexes: its rowid and the call.
#[derive(Debug, Clone, sqlx::FromRow)]
struct StreamedCallRow {
    rid: i64,
    #[sqlx(flatten)]
    call: CallReadRow,
}

/// Deepest page (`offset + limit`) a search reads from its newest matches;
/// deeper pages sort every match.
const STREAMED_PAGE_MAX_ROWS: i64 = 5_000;

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

/// `{total, completedCount, failedCount}` for a filter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls matching.
    pub total: i64,
    /// Of which completed.
    pub completed: i64,
    /// Of which failed.
    pub failed: i64,
    /// A search matched more than [`SEARCH_COUNT_CAP`] calls: the figures
    /// count the newest `SEARCH_COUNT_CAP` matches only, so they are lower bounds.
    pub capped: bool,
}

/// Most matches a search counts. Counting every match of a common word means
/// reading hundreds of thousands of calls; past this many the counts stop and
/// say so (`totalIsEstimate` in the list).
pub const SEARCH_COUNT_CAP: i64 = 1_000;

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
    /// Sum of charges, paise.
    pub spend_paise: i64,
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

/// A call row (and its turns and events) to insert directly, for tests and benches.
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

/// The list columns, for `SELECT` from `calls c`.
const ROW_COLUMNS: &str = "c.id, c.agent_id, c.agent_name, c.phone, c.target_name, c.email, c.from_number,
    c.provider, c.status, c.ended_reason, c.attempt, c.retry_of, c.batch_id, c.campaign_id,
    c.campaign_name, c.duration_seconds, c.cost_paise, c.summary, c.created_at, c.answered_at, c.ended_at";

/// The aggregate columns of [`CallAggregateRow`] past the group columns; `$2` is the "today" mark.
const AGGREGATE_COLUMNS: &str = "CAST(COUNT(*) AS BIGINT) AS calls,
    CAST(COALESCE(SUM(CASE WHEN c.created_at >= $2 THEN 1 ELSE 0 END), 0) AS BIGINT) AS calls_today,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'completed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS completed,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT) AS failed,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'no-answer' THEN 1 ELSE 0 END), 0) AS BIGINT) AS no_answer,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'busy' THEN 1 ELSE 0 END), 0) AS BIGINT) AS busy,
    CAST(COALESCE(SUM(CASE WHEN c.status = 'canceled' THEN 1 ELSE 0 END), 0) AS BIGINT) AS canceled,
    CAST(COALESCE(SUM(CASE WHEN c.status IN ('completed', 'failed', 'no-answer', 'busy', 'canceled')
        THEN 1 ELSE 0 END), 0) AS BIGINT) AS finished,
    CAST(COALESCE(SUM(CASE WHEN c.status IN ('completed', 'failed', 'no-answer', 'busy', 'canceled')
        AND c.answered_at IS NOT NULL THEN 1 ELSE 0 END), 0) AS BIGINT) AS answered,
    CAST(COALESCE(SUM(c.duration_seconds), 0) AS BIGINT) AS talk_seconds,
    CAST(COALESCE(SUM(c.cost_paise), 0) AS BIGINT) AS spend_paise";

/// `term` as a `LIKE` pattern matching it anywhere, with `\` escaping `%`, `_` and `\`.
fn like_anywhere(term: &str) -> String {
    let mut pattern = String::with_capacity(term.len() + 2);
    pattern.push('%');
    for ch in term.chars() {
        if matches!(ch, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(ch);
    }
    pattern.push('%');
    pattern
}

/// `text` as one FTS5 string (a phrase), with embedded quotes doubled.
fn fts5_phrase(text: &str) -> String {
    format!("\"{}\"", text.replace('"', "\"\""))
}

/// The words of `term` as an FTS5 query requiring all of them (like
/// `plainto_tsquery`); `None` when no word has a letter or digit.
fn fts5_all_words(term: &str) -> Option<String> {
    let words: Vec<String> = term
        .split_whitespace()
        .filter(|w| w.chars().any(char::is_alphanumeric))
        .map(fts5_phrase)
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// Sums per-status counts over `statuses` (all when empty).
fn tally(per_status: &[(String, i64)], statuses: &[String]) -> CallCounts {
    let mut counts = CallCounts::default();
    for (status, calls) in per_status {
        if !statuses.is_empty() && !statuses.iter().any(|s| s == status) {
            continue;
        }
        counts.total += calls;
        match status.as_str() {
            "completed" => counts.completed += calls,
            "failed" => counts.failed += calls,
            _ => {}
        }
    }
    counts
}

impl Store {
    fn is_sqlite(&self) -> bool {
        matches!(self.db, Db::Sqlite(_))
    }

    /// Appends `FROM … WHERE …` selecting the calls of `org_id` that `filter` keeps, as `c`.
    /// `sqlite_index` forces the index of an unsearched SQLite scan.
    ///
    /// Generic over the database so that `with_pool!` can build the same
    /// statement for either pool; the text still differs by dialect where
    /// the search does.
    fn push_filtered_calls<DB>(
        &self,
        sql: &mut QueryBuilder<DB>,
        org_id: &str,
        filter: &CallFilter,
        sqlite_index: Option<&'static str>,
    ) where
        DB: sqlx::Database,
        for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    {
        let search = filter
            .search
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty());
        let sqlite = self.is_sqlite();
        match search {
            Some(term) if sqlite && term.chars().count() >= TRIGRAM_MIN_CHARS => {
                // Candidate rowids come from the indexes; each call is then
                // looked up once by rowid (CROSS JOIN keeps that order).
                // Transcript-only matches must be recent, so the transcript
                // arm checks `created_at` itself: the name/phone/agent phrase
                // is then evaluated once (its trigram doclists are the cost
                // of a full-name search), not again for every old candidate.
                let who = fts5_phrase(term);
                sql.push("FROM (SELECT rowid AS rid FROM calls_who_fts WHERE calls_who_fts MATCH ")
                    .push_bind(who.as_str());
                if let Some((since, words)) = filter.transcript_since_ms.zip(fts5_all_words(term)) {
                    sql.push(
                        " UNION SELECT f.rowid FROM calls_fts f CROSS JOIN calls t ON t.rowid = f.rowid
                         WHERE f.calls_fts MATCH ",
                    )
                    .push_bind(words.as_str())
                    .push(" AND t.created_at >= ")
                    .push_bind(since);
                }
                // Newest rowids first: both indexes deliver that order, so the
                // union merges as it streams and a LIMIT outside stops it early
                // (without a LIMIT here SQLite drops the ORDER BY and builds
                // the whole union in a temporary b-tree first).
                sql.push(" ORDER BY 1 DESC LIMIT 9223372036854775807) m CROSS JOIN calls c ON c.rowid = m.rid WHERE c.org_id = ")
                    .push_bind(org_id);
            }
            Some(term) => {
                let op = if sqlite { "LIKE" } else { "ILIKE" };
                sql.push("FROM calls c WHERE c.org_id = ").push_bind(org_id);
                // The pattern is bound once per column: the builder numbers
                // every placeholder itself, so none is referred to twice.
                let pattern = like_anywhere(term);
                sql.push(format_args!(" AND ((c.target_name {op} "))
                    .push_bind(pattern.as_str())
                    .push(format_args!(" ESCAPE '\\' OR c.phone {op} "))
                    .push_bind(pattern.as_str())
                    .push(format_args!(" ESCAPE '\\' OR c.agent_name {op} "))
                    .push_bind(pattern.as_str())
                    .push(" ESCAPE '\\')");
                match filter.transcript_since_ms {
                    Some(since) if sqlite => {
                        // Only reached with terms too short for the trigram index.
                        if let Some(words) = fts5_all_words(term) {
                            sql.push(" OR (c.created_at >= ")
                                .push_bind(since)
                                .push(
                                    " AND c.rowid IN (SELECT rowid FROM calls_fts WHERE calls_fts MATCH ",
                                )
                                .push_bind(words.as_str())
                                .push("))");
                        }
                    }
                    Some(since) => {
                        sql.push(" OR (c.created_at >= ")
                            .push_bind(since)
                            .push(" AND to_tsvector('simple', c.transcript_text) @@ plainto_tsquery('simple', ")
                            .push_bind(term)
                            .push("))");
                    }
                    None => {}
                }
                sql.push(")");
            }
            None => {
                sql.push("FROM calls c ");
                if let Some(index) = sqlite_index.filter(|_| sqlite) {
                    sql.push("INDEXED BY ").push(index).push(" ");
                }
                sql.push("WHERE c.org_id = ").push_bind(org_id);
            }
        }
        if !filter.statuses.is_empty() {
            sql.push(" AND c.status IN (");
            let mut statuses = sql.separated(", ");
            for status in &filter.statuses {
                statuses.push_bind(status.as_str());
            }
            sql.push(")");
        }
        if let Some(provider) = &filter.provider {
            sql.push(" AND c.provider = ").push_bind(provider.as_str());
        }
    }

    /// One page of a workspace's calls matching `filter`, newest first, with
    /// the counts for the whole filter. A search's counts stop at
    /// [`SEARCH_COUNT_CAP`] matches (`capped`), and on SQLite its page comes
    /// from the newest matches when that is provably exact.
    pub async fn list_calls_counted(
        &self,
        org_id: &str,
        filter: &CallFilter,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<CallReadRow>, CallCounts)> {
        let searching = filter
            .search
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty());
        if !searching {
            if !self.is_sqlite() {
                let rows = self.list_calls(org_id, filter, limit, offset).await?;
                let counts = self.count_calls(org_id, filter).await?;
                return Ok((rows, counts));
            }
            let (counts, index) = self
                .sqlite_plain_plan(org_id, filter, offset + limit)
                .await?;
            let rows = match index {
                Some(index) if offset < counts.total => {
                    self.list_calls_using(org_id, filter, limit, offset, Some(index))
                        .await?
                }
                _ => Vec::new(),
            };
            return Ok((rows, counts));
        }
        if let Some(found) = self
            .sqlite_newest_matches(org_id, filter, limit, offset)
            .await?
        {
            return Ok(found);
        }
        let rows = self.list_calls(org_id, filter, limit, offset).await?;
        let counts = self.count_calls(org_id, filter).await?;
        Ok((rows, counts))
    }

    /// A SQLite search page and its counts read from the newest matches in
    /// one pass, or `None` when that cannot be shown exact (then the caller
    /// sorts every match).
    ///
    /// The full-text indexes hand out matches newest rowid first. Up to
    /// [`SEARCH_COUNT_CAP`] + 1 of them are read: fewer means every match was
    /// read, so counts and page are exact. Otherwise the counts are capped,
    /// and as calls are written in roughly the order they are created, the
    /// newest matches by rowid are almost always the newest by creation time.
    /// That is checked, not assumed: with `lowest` the smallest rowid read and
    /// `oldest` the oldest creation time on or before the page, every match
    /// not read has a rowid below `lowest`, so if no call of the workspace
    /// created at or after `oldest` has a rowid below `lowest`, none of them
    /// can belong on the page. A common word's first page then reads a
    /// thousand calls instead of sorting hundreds of thousands.
    async fn sqlite_newest_matches(
        &self,
        org_id: &str,
        filter: &CallFilter,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Option<(Vec<CallReadRow>, CallCounts)>> {
        let Db::Sqlite(pool) = &self.db else {
            return Ok(None);
        };
        let wanted = offset.saturating_add(limit);
        if self.fts_term(filter).is_none() || wanted > STREAMED_PAGE_MAX_ROWS || limit <= 0 {
            return Ok(None);
        }
        let read_at_most = wanted.max(SEARCH_COUNT_CAP + 1);
        let mut sql = QueryBuilder::<sqlx::Sqlite>::new("SELECT m.rid AS rid, ");
        sql.push(ROW_COLUMNS).push(" ");
        self.push_filtered_calls(&mut sql, org_id, filter, None);
        // No ORDER BY: the rows come in the union's streaming order.
        sql.push(" LIMIT ").push_bind(read_at_most);
        let streamed = sql
            .build_query_as::<StreamedCallRow>()
            .fetch_all(pool)
            .await?;
        // Should SQLite ever plan the stream differently, the argument above
        // no longer holds: fall back rather than guess.
        if streamed.windows(2).any(|w| w[0].rid <= w[1].rid) {
            return Ok(None);
        }
        let read = i64::try_from(streamed.len()).unwrap_or(i64::MAX);
        let every_match_read = read < read_at_most;
        let mut counts = CallCounts {
            capped: read > SEARCH_COUNT_CAP,
            ..CallCounts::default()
        };
        let counted = usize::try_from(SEARCH_COUNT_CAP).unwrap_or(usize::MAX);
        for row in streamed.iter().take(counted) {
            counts.total += 1;
            match row.call.status.as_str() {
                "completed" => counts.completed += 1,
                "failed" => counts.failed += 1,
                _ => {}
            }
        }
        let lowest = streamed.last().map(|row| row.rid);
        let mut calls: Vec<CallReadRow> = streamed.into_iter().map(|row| row.call).collect();
        calls.sort_by(|a, b| {
            b.created_at
                .cmp(&a.created_at)
                .then_with(|| b.id.cmp(&a.id))
        });
        if !every_match_read {
            let last_needed = usize::try_from(wanted - 1).unwrap_or(usize::MAX);
            let (Some(lowest), Some(oldest)) = (lowest, calls.get(last_needed)) else {
                return Ok(None);
            };
            let first_rowid: Option<i64> = sqlx::query_scalar(
                "SELECT MIN(rowid) FROM calls INDEXED BY calls_org_listing
                 WHERE org_id = $1 AND created_at >= $2",
            )
            .bind(org_id)
            .bind(oldest.created_at)
            .fetch_one(pool)
            .await?;
            if first_rowid.is_some_and(|first| first < lowest) {
                let rows = self.list_calls(org_id, filter, limit, offset).await?;
                return Ok(Some((rows, counts)));
            }
        }
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        let take = usize::try_from(limit).unwrap_or(usize::MAX);
        Ok(Some((
            calls.into_iter().skip(skip).take(take).collect(),
            counts,
        )))
    }

    /// The search term when `filter`'s search goes through SQLite's full-text indexes.
    fn fts_term<'f>(&self, filter: &'f CallFilter) -> Option<&'f str> {
        filter
            .search
            .as_deref()
            .map(str::trim)
            .filter(|term| self.is_sqlite() && term.chars().count() >= TRIGRAM_MIN_CHARS)
    }

    /// One page of a workspace's calls matching `filter`, newest first.
    pub async fn list_calls(
        &self,
        org_id: &str,
        filter: &CallFilter,
        limit: i64,
        offset: i64,
    ) -> StoreResult<Vec<CallReadRow>> {
        self.list_calls_using(org_id, filter, limit, offset, None)
            .await
    }

    /// Counts for an unsearched SQLite filter from the counters, and the index
    /// that reads its first `rows_needed` rows cheapest; `None` when nothing matches.
    ///
    /// Walking `calls_org_listing` in order costs about
    /// `rows_needed × calls ÷ matching` index steps; `calls_org_status` costs
    /// the calls in the wanted statuses plus a sort. Without this choice a filter
    /// matching nothing walks every call of the workspace.
    async fn sqlite_plain_plan(
        &self,
        org_id: &str,
        filter: &CallFilter,
        rows_needed: i64,
    ) -> StoreResult<(CallCounts, Option<&'static str>)> {
        let every_provider = self.call_status_counts(org_id, None).await?;
        let counts = match &filter.provider {
            Some(provider) => tally(
                &self.call_status_counts(org_id, Some(provider)).await?,
                &filter.statuses,
            ),
            None => tally(&every_provider, &filter.statuses),
        };
        if counts.total <= 0 {
            return Ok((counts, None));
        }
        let workspace_calls: i64 = every_provider.iter().map(|(_, calls)| calls).sum();
        let in_statuses = tally(&every_provider, &filter.statuses).total;
        let ordered_walk = rows_needed.max(1) as f64 * workspace_calls as f64 / counts.total as f64;
        // A walk step reads only the covering index; a status-index row also
        // reads the call (for the id the sort needs): about ten times dearer.
        let index = if !filter.statuses.is_empty() && (in_statuses as f64) * 10.0 < ordered_walk {
            "calls_org_status"
        } else {
            "calls_org_listing"
        };
        Ok((counts, Some(index)))
    }

    async fn list_calls_using(
        &self,
        org_id: &str,
        filter: &CallFilter,
        limit: i64,
        offset: i64,
        sqlite_index: Option<&'static str>,
    ) -> StoreResult<Vec<CallReadRow>> {
        let rows = with_pool!(self, pool => {
            let mut sql = QueryBuilder::new("SELECT ");
            sql.push(ROW_COLUMNS).push(" ");
            self.push_filtered_calls(&mut sql, org_id, filter, sqlite_index);
            sql.push(" ORDER BY c.created_at DESC, c.id DESC LIMIT ")
                .push_bind(limit)
                .push(" OFFSET ")
                .push_bind(offset);
            sql.build_query_as::<CallReadRow>().fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// Up to `limit` calls matching `filter` strictly older than `after`
    /// (`(created_at, id)` of the last row already read), newest first: keyset
    /// pages for exports.
    pub async fn calls_after(
        &self,
        org_id: &str,
        filter: &CallFilter,
        after: Option<(i64, &str)>,
        limit: i64,
    ) -> StoreResult<Vec<CallReadRow>> {
        let searching = filter
            .search
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty());
        let mut sqlite_index = None;
        if !searching && self.is_sqlite() {
            match self.sqlite_plain_plan(org_id, filter, limit).await? {
                (_, None) => return Ok(Vec::new()),
                (_, index) => sqlite_index = index,
            }
        }
        let rows = with_pool!(self, pool => {
            let mut sql = QueryBuilder::new("SELECT ");
            sql.push(ROW_COLUMNS).push(" ");
            self.push_filtered_calls(&mut sql, org_id, filter, sqlite_index);
            if let Some((created_at, id)) = after {
                sql.push(" AND (c.created_at < ")
                    .push_bind(created_at)
                    .push(" OR (c.created_at = ")
                    .push_bind(created_at)
                    .push(" AND c.id < ")
                    .push_bind(id)
                    .push("))");
            }
            sql.push(" ORDER BY c.created_at DESC, c.id DESC LIMIT ")
                .push_bind(limit);
            sql.build_query_as::<CallReadRow>().fetch_all(pool).await?
        });
        Ok(rows)
    }

    /// How many calls match `filter`, and how many of them completed or failed.
    pub async fn count_calls(&self, org_id: &str, filter: &CallFilter) -> StoreResult<CallCounts> {
        let searching = filter
            .search
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty());
        if !searching && self.is_sqlite() {
            // Trigger-kept counters: O(statuses) instead of a scan.
            let per_status = self
                .call_status_counts(org_id, filter.provider.as_deref())
                .await?;
            return Ok(tally(&per_status, &filter.statuses));
        }
        // A search counts at most SEARCH_COUNT_CAP + 1 matches, newest first;
        // an unsearched Postgres filter counts every call.
        let (total, completed, failed) = with_pool!(self, pool => {
            let mut sql = QueryBuilder::new(
                "SELECT CAST(COUNT(*) AS BIGINT),
               CAST(COALESCE(SUM(CASE WHEN s.status = 'completed' THEN 1 ELSE 0 END), 0) AS BIGINT),
               CAST(COALESCE(SUM(CASE WHEN s.status = 'failed' THEN 1 ELSE 0 END), 0) AS BIGINT)
             FROM (SELECT c.status ",
            );
            self.push_filtered_calls(&mut sql, org_id, filter, None);
            if searching {
                sql.push(" LIMIT ").push_bind(SEARCH_COUNT_CAP + 1);
            }
            sql.push(") s");
            sql.build_query_as::<(i64, i64, i64)>().fetch_one(pool).await?
        });
        if searching && total > SEARCH_COUNT_CAP {
            let completed = completed.min(SEARCH_COUNT_CAP);
            return Ok(CallCounts {
                total: SEARCH_COUNT_CAP,
                completed,
                failed: failed.min(SEARCH_COUNT_CAP - completed),
                capped: true,
            });
        }
        Ok(CallCounts {
            total,
            completed,
            failed,
            capped: false,
        })
    }

    /// Calls per raw status of a workspace (optionally of one provider); statuses without calls may be absent.
    pub async fn call_status_counts(
        &self,
        org_id: &str,
        provider: Option<&str>,
    ) -> StoreResult<Vec<(String, i64)>> {
        let rows = match &self.db {
            Db::Sqlite(pool) => {
                sqlx::query_as::<_, (String, i64)>(
                    "SELECT status, CAST(SUM(calls) AS BIGINT) FROM call_status_counts
                     WHERE org_id = $1 AND ($2 IS NULL OR provider = $2)
                     GROUP BY status",
                )
                .bind(org_id)
                .bind(provider)
                .fetch_all(pool)
                .await?
            }
            Db::Postgres(pool) => {
                sqlx::query_as::<_, (String, i64)>(
                    "SELECT status, CAST(COUNT(*) AS BIGINT) FROM calls
                     WHERE org_id = $1 AND ($2::TEXT IS NULL OR provider = $2)
                     GROUP BY status",
                )
                .bind(org_id)
                .bind(provider)
                .fetch_all(pool)
                .await?
            }
        };
        Ok(rows)
    }

    /// One call of a workspace with its JSON columns and transcript text.
    pub async fn call_detail(
        &self,
        org_id: &str,
        call_id: &str,
    ) -> StoreResult<Option<CallDetailRow>> {
        let sql = format!(
            "SELECT {ROW_COLUMNS}, c.variables, c.extracted, c.latencies, c.transcript_text
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
    pub async fn call_exists(&self, org_id: &str, call_id: &str) -> StoreResult<bool> {
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
        org_id: &str,
        call_id: &str,
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
    pub async fn call_turns(&self, org_id: &str, call_id: &str) -> StoreResult<Vec<CallTurnRow>> {
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
        org_id: &str,
        call_id: &str,
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
    pub async fn call_events(&self, call_id: &str) -> StoreResult<Vec<CallEventRow>> {
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

    /// Aggregates over a workspace's calls created at or after `since_ms`,
    /// grouped by `grouping`; `today_ms` marks where `calls_today` starts.
    /// Groups come largest first, at most 100.
    pub async fn call_aggregates(
        &self,
        org_id: &str,
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
        org_id: &str,
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
        with_pool!(self, pool => {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_patterns_escape_wildcards() {
        assert_eq!(like_anywhere("a%b_c\\"), "%a\\%b\\_c\\\\%");
    }

    #[test]
    fn fts5_queries_quote_every_word() {
        assert_eq!(fts5_phrase("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(
            fts5_all_words("  interview   next-week "),
            Some("\"interview\" \"next-week\"".to_string())
        );
        assert_eq!(fts5_all_words("-- !!"), None);
    }
}
