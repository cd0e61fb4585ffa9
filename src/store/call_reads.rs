//! Reads of calls, by what they serve: `filter` turns a [`CallFilter`] into
//! the `FROM … WHERE` of either dialect (the search indexes live there),
//! `pages` reads list pages, counts and keyset export pages through it,
//! `detail` reads one call with its turns and events, `aggregates` sums calls
//! for the dashboard and analytics, and `fixtures` inserts calls directly for
//! tests and benches.
//!
//! Search is an index lookup on SQLite: a trigram FTS5 table over target name,
//! phone, agent name and email (`calls_who_fts`, migrations 0020, 0047) plus the transcript
//! FTS5 table (`calls_fts`). Counts without a search term come from the
//! trigger-kept `call_status_counts` table there. Postgres uses `ILIKE`, the GIN
//! full-text index on the transcript, and grouped counts.

mod aggregates;
mod deliveries;
mod detail;
mod filter;
mod fixtures;
mod pages;

pub use aggregates::{CallAggregateRow, CallDayRow, CallDayStatusRow, CallGrouping};
pub use detail::{CallDetailRow, CallEventRow, CallTurnRow};
pub use filter::CallFilter;
pub use fixtures::CallFixture;
pub use pages::CallCounts;

use crate::domain::inbound::CallDirection;
use crate::domain::{BatchId, CallId, Paise};

/// The columns of a call that list rows and exports show.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CallReadRow {
    /// Call id.
    pub id: CallId,
    /// Agent id as copied onto the call, read back verbatim: the column has
    /// no foreign key, and call fixtures store readable names in it.
    pub agent_id: String,
    /// Agent name when the call was placed.
    pub agent_name: String,
    /// Number dialed, E.164.
    pub phone: String,
    /// Name of the person called.
    pub target_name: String,
    /// Email of the person called, when known.
    pub email: Option<String>,
    /// Caller ID: ours on outbound calls, the caller's on inbound ones.
    pub from_number: String,
    /// Which way the call went.
    pub direction: CallDirection,
    /// The workspace number an inbound caller dialed.
    pub to_number: Option<String>,
    /// Telephony provider.
    pub provider: String,
    /// Raw status.
    pub status: String,
    /// Why the call ended.
    pub ended_reason: Option<String>,
    /// Attempt number, 1 for the first.
    pub attempt: i64,
    /// The first attempt this call retries.
    pub retry_of: Option<CallId>,
    /// Batch the call belongs to.
    pub batch_id: Option<BatchId>,
    /// Campaign the call belongs to, read back verbatim like `agent_id`.
    pub campaign_id: Option<String>,
    /// Campaign name at placing time.
    pub campaign_name: Option<String>,
    /// Talk time in seconds.
    pub duration_seconds: i64,
    /// Charge.
    pub cost_paise: Paise,
    /// Post-call summary.
    pub summary: String,
    /// Creation time, Unix ms.
    pub created_at: i64,
    /// Answer time, Unix ms.
    pub answered_at: Option<i64>,
    /// End time, Unix ms.
    pub ended_at: Option<i64>,
    /// Calendar booking: `booked`, `failed`, or null when none was tried.
    pub calendar_status: Option<String>,
    /// The booked event's page.
    pub calendar_event_url: Option<String>,
    /// Why the booking failed.
    pub calendar_error: Option<String>,
    /// Where the agent transferred the callee.
    pub transferred_to: Option<String>,
    /// When, Unix ms.
    pub transferred_at: Option<i64>,
    /// What the carrier reported about the bridged leg.
    pub transfer_status: Option<String>,
    /// How long the bridged leg lasted.
    pub transfer_duration_seconds: Option<i64>,
}
/// The list columns, for `SELECT` from `calls c`.
pub(super) const ROW_COLUMNS: &str = "c.id, c.agent_id, c.agent_name, c.phone, c.target_name, c.email, c.from_number,
    c.direction, c.to_number, c.provider, c.status, c.ended_reason, c.attempt, c.retry_of, c.batch_id, c.campaign_id,
    c.campaign_name, c.duration_seconds, c.cost_paise, c.summary, c.created_at, c.answered_at, c.ended_at,
    c.calendar_status, c.calendar_event_url, c.calendar_error, c.transferred_to, c.transferred_at,
    c.transfer_status, c.transfer_duration_seconds";
