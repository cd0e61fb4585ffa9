//! Pages of a workspace's calls and their counts: the list (with its capped
//! search counts and SQLite's newest-matches shortcut and index choice), the
//! bare counts, and the keyset pages exports walk.

use super::filter::CallFilter;
use super::{CallReadRow, ROW_COLUMNS};
use crate::domain::{CallId, OrgId};
use crate::store::{Db, Store, StoreResult, with_pool};
use sqlx::QueryBuilder;
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
    /// One page of a workspace's calls matching `filter`, newest first, with
    /// the counts for the whole filter. A search's counts stop at
    /// [`SEARCH_COUNT_CAP`] matches (`capped`), and on SQLite its page comes
    /// from the newest matches when that is provably exact.
    pub async fn list_calls_counted(
        &self,
        org_id: OrgId,
        filter: &CallFilter,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<CallReadRow>, CallCounts)> {
        let searching = filter
            .search
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty());
        if !searching {
            if !self.is_sqlite() || !filter.counted_by_status() {
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
        org_id: OrgId,
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
    /// One page of a workspace's calls matching `filter`, newest first.
    pub async fn list_calls(
        &self,
        org_id: OrgId,
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
        org_id: OrgId,
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
        org_id: OrgId,
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
        org_id: OrgId,
        filter: &CallFilter,
        after: Option<(i64, CallId)>,
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
    pub async fn count_calls(&self, org_id: OrgId, filter: &CallFilter) -> StoreResult<CallCounts> {
        let searching = filter
            .search
            .as_deref()
            .is_some_and(|s| !s.trim().is_empty());
        if !searching && self.is_sqlite() && filter.counted_by_status() {
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
        org_id: OrgId,
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
}
