//! Which calls a [`CallFilter`] selects, as the `FROM … WHERE` of a
//! statement on either dialect: SQLite's trigram and transcript FTS5 indexes
//! (or `LIKE` for terms too short for trigrams), Postgres' `ILIKE` and GIN
//! full-text index. The statement around it is the reader's.

use crate::domain::OrgId;
use crate::domain::inbound::CallDirection;
use crate::store::{Db, Store};
use sqlx::QueryBuilder;
/// SQLite's trigram index answers substrings of this many characters or more.
const TRIGRAM_MIN_CHARS: usize = 3;
/// Which calls of a workspace a list, count or export covers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CallFilter {
    /// Raw statuses to keep; empty keeps every status.
    pub statuses: Vec<String>,
    /// Case-insensitive substring of the target name, phone, agent name or email.
    pub search: Option<String>,
    /// When set, `search` also matches words of transcripts of calls created at or after this Unix ms.
    pub transcript_since_ms: Option<i64>,
    /// Telephony provider to keep.
    pub provider: Option<String>,
    /// Keep calls whose analysis judged success (true) or not (false).
    pub success: Option<bool>,
    /// Keep calls whose analysis is in this state.
    pub analysis_status: Option<&'static str>,
    /// Keep calls of this agent (its id as calls store it).
    pub agent_id: Option<String>,
    /// Keep calls of this batch (its id as calls store it).
    pub batch_id: Option<String>,
    /// Keep calls that went this way.
    pub direction: Option<CallDirection>,
    /// Keep calls created at or after this Unix ms.
    pub created_from_ms: Option<i64>,
    /// Keep calls created before this Unix ms.
    pub created_before_ms: Option<i64>,
}
impl CallFilter {
    /// Whether the per-status counters answer this filter (they know only
    /// status and provider); otherwise a query counts.
    pub fn counted_by_status(&self) -> bool {
        self.search.is_none()
            && self.success.is_none()
            && self.analysis_status.is_none()
            && self.agent_id.is_none()
            && self.batch_id.is_none()
            && self.direction.is_none()
            && self.created_from_ms.is_none()
            && self.created_before_ms.is_none()
    }
}
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
impl Store {
    pub(super) fn is_sqlite(&self) -> bool {
        matches!(self.db, Db::Sqlite(_))
    }
    /// Appends `FROM … WHERE …` selecting the calls of `org_id` that `filter` keeps, as `c`.
    /// `sqlite_index` forces the index of an unsearched SQLite scan.
    ///
    /// Generic over the database so that `with_pool!` can build the same
    /// statement for either pool; the text still differs by dialect where
    /// the search does.
    pub(super) fn push_filtered_calls<DB>(
        &self,
        sql: &mut QueryBuilder<DB>,
        org_id: OrgId,
        filter: &CallFilter,
        sqlite_index: Option<&'static str>,
    ) where
        DB: sqlx::Database,
        for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        for<'t> i64: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
        for<'t> OrgId: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
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
                    .push(format_args!(" ESCAPE '\\' OR c.email {op} "))
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
        if let Some(agent_id) = &filter.agent_id {
            sql.push(" AND c.agent_id = ").push_bind(agent_id.as_str());
        }
        if let Some(batch_id) = &filter.batch_id {
            sql.push(" AND c.batch_id = ").push_bind(batch_id.as_str());
        }
        if let Some(direction) = filter.direction {
            sql.push(" AND c.direction = ")
                .push_bind(direction.as_str());
        }
        if let Some(from) = filter.created_from_ms {
            sql.push(" AND c.created_at >= ").push_bind(from);
        }
        if let Some(before) = filter.created_before_ms {
            sql.push(" AND c.created_at < ").push_bind(before);
        }
        if let Some(pass) = filter.success {
            // A literal, not a bind: both dialects read TRUE/FALSE as booleans.
            sql.push(format_args!(
                " AND EXISTS (SELECT 1 FROM call_analyses a WHERE a.call_id = c.id AND a.status = 'done' AND a.success_pass = {})",
                if pass { "TRUE" } else { "FALSE" }
            ));
        }
        if let Some(status) = filter.analysis_status {
            sql.push(
                " AND EXISTS (SELECT 1 FROM call_analyses a WHERE a.call_id = c.id AND a.status = ",
            )
            .push_bind(status)
            .push(")");
        }
    }
    /// The search term when `filter`'s search goes through SQLite's full-text indexes.
    pub(super) fn fts_term<'f>(&self, filter: &'f CallFilter) -> Option<&'f str> {
        filter
            .search
            .as_deref()
            .map(str::trim)
            .filter(|term| self.is_sqlite() && term.chars().count() >= TRIGRAM_MIN_CHARS)
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
