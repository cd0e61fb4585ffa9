//! Persistence behind one narrow interface, on SQLite or Postgres.
//!
//! Each method is written once: [`with_pool!`] (or [`with_writer!`]) expands
//! its body for whichever native pool is open, so the SQL text is shared
//! wherever the dialects agree (`$1` placeholders, `ON CONFLICT`,
//! `RETURNING`). Ids are UUID text and timestamps Unix milliseconds in both,
//! which keeps time arithmetic in Rust.
//!
//! Writes go through [`with_writer!`]. On a SQLite file the writes have
//! connections of their own, apart from the reads': a write that loses the
//! race for SQLite's write lock sleeps in SQLite's busy handler (1, 2, 5 …
//! 100 ms at a time) while it holds a pooled connection, and under a burst of
//! 1,000 placed calls the reads an answered call needs before its greeting
//! waited behind those sleepers. WAL lets the readers read while one writes.

mod agents;
pub mod analyses;
pub mod analysis_backlog;
pub mod attempt_caps;
pub mod batches;
mod call_reads;
pub mod calls;
mod campaigns;
pub mod change_marker;
pub mod chat;
pub mod do_not_call;
pub mod inbound_callers;
pub mod inbound_calls;
pub mod keys;
pub mod leased_jobs;
pub mod marked_cache;
pub mod nodes;
pub mod numbers;
mod orgs;
pub mod ratings;
mod recordings;
pub mod singletons;
pub mod slots;
mod stored_json;
pub mod tool_calls;
pub mod transfers;
mod usage;
pub mod users;
mod wallet;
pub mod webhook_outbox;
mod webhooks;

pub use agents::AgentRow;
pub use call_reads::{
    CallAggregateRow, CallCounts, CallDayRow, CallDayStatusRow, CallDetailRow, CallEventRow,
    CallFilter, CallFixture, CallGrouping, CallReadRow, CallTurnRow,
};
pub use keys::{ApiKeyRow, KeyAuthRow};
pub use numbers::NumberRow;
pub use orgs::OrgRow;
pub use ratings::{RatingFilter, RatingRow};
pub use recordings::RecordingFileRow;
pub use stored_json::decode_json;
pub use usage::{CountedRequest, UsageDayRow, UsageDelta};
pub use wallet::{RecordingRow, WalletTxRow};
pub use webhooks::{DeliveryLogFilter, DeliveryLogRow, WebhookRow};

use change_marker::ChangeMarker;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions, SqliteSynchronous,
};
use std::str::FromStr;
use std::time::Duration;

/// Everything that can fail in the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed a query.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    /// Applying the embedded migrations failed.
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The database URL is neither sqlite:// nor postgres://.
    #[error("unsupported DATABASE_URL scheme: {0}")]
    UnsupportedUrl(String),
    /// A value could not be encoded as JSON to be stored. (Stored JSON that
    /// does not parse is [`StoreError::CorruptColumn`], which names the row.)
    #[error("JSON encoding failed: {0}")]
    CorruptJson(#[from] serde_json::Error),
    /// A stored JSON column of one row no longer parses as what it holds
    /// ([`decode_json`]); readers get this instead of an empty value.
    #[error("corrupt stored JSON in {table}.{column} of row {id}: {detail}")]
    CorruptColumn {
        /// The table.
        table: &'static str,
        /// The column.
        column: &'static str,
        /// The row's id (its key as text).
        id: String,
        /// The parser's complaint.
        detail: String,
    },
    /// A uniqueness rule was broken, e.g. a phone number already rented.
    #[error("{0}")]
    Conflict(String),
}

/// Every table of leased jobs, for what frees a node's leases (its start
/// and stop, a dead peer's recovery).
pub const LEASED_JOB_TABLES: [&leased_jobs::JobTable; 3] = [
    &ratings::RATING_JOBS,
    &analyses::ANALYSIS_JOBS,
    &webhook_outbox::DELIVERY_JOBS,
];

/// Result alias for store calls.
pub type StoreResult<T> = Result<T, StoreError>;

/// The open pool of one of the two supported databases.
#[derive(Clone, Debug)]
pub enum Db {
    /// Embedded SQLite in WAL mode.
    Sqlite(SqlitePool),
    /// Postgres for deployments beyond one machine.
    Postgres(PgPool),
}

/// The service's storage handle; cheap to clone.
#[derive(Clone, Debug)]
pub struct Store {
    /// What reads go through.
    db: Db,
    /// What writes go through: on a SQLite file a pool of its own,
    /// otherwise the same pool as `db`.
    write_db: Db,
    /// Marked whenever a key is revoked or its caps change, and whenever an
    /// agent changes, so caches of those rows notice on their very next
    /// lookup: files on SQLite (every process on the database sees them),
    /// counters in memory on Postgres (this node's own writes; the other
    /// nodes hear of them through `pg_notify` sent with the change). None for
    /// in-memory SQLite, whose caches stay off.
    markers: Option<std::sync::Arc<Markers>>,
}

/// The change markers of a store.
#[derive(Debug)]
struct Markers {
    keys: ChangeMarker,
    agents: ChangeMarker,
    credentials: ChangeMarker,
}

/// Runs `$body` against whichever pool is open, binding it to `$pool`.
macro_rules! with_pool {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.db {
            $crate::store::Db::Sqlite($pool) => $body,
            $crate::store::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_pool;

/// Runs `$body`, which writes, against the store's writers, binding it to
/// `$pool`; see the module's doc for why SQLite has its own.
macro_rules! with_writer {
    ($store:expr, $pool:ident => $body:expr) => {
        match &$store.write_db {
            $crate::store::Db::Sqlite($pool) => $body,
            $crate::store::Db::Postgres($pool) => $body,
        }
    };
}
pub(crate) use with_writer;

/// Opens a transaction that will write. SQLite takes the write lock at
/// `BEGIN IMMEDIATE`, so a concurrent writer makes it wait (busy timeout)
/// instead of failing with "database is locked" when a deferred transaction
/// tries to upgrade from reading to writing.
pub(crate) trait BeginWrite {
    /// The database of the pool.
    type Db: sqlx::Database;
    /// Begins a write transaction.
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error>;
}

impl BeginWrite for sqlx::SqlitePool {
    type Db = sqlx::Sqlite;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error> {
        self.begin_with("BEGIN IMMEDIATE").await
    }
}

impl BeginWrite for sqlx::PgPool {
    type Db = sqlx::Postgres;
    async fn begin_write(&self) -> Result<sqlx::Transaction<'static, Self::Db>, sqlx::Error> {
        self.begin().await
    }
}

impl Store {
    /// Opens `url` (sqlite://… or postgres://…) with up to `pool_size`
    /// connections and applies the embedded migrations.
    pub async fn connect(url: &str, pool_size: u32) -> StoreResult<Self> {
        let mut markers = None;
        let (db, write_db) = if url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(url)?
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true);
            let pool = SqlitePoolOptions::new()
                .max_connections(pool_size.max(2))
                .min_connections(1)
                .connect_with(options.clone())
                .await?;
            sqlx::migrate!("./migrations/sqlite").run(&pool).await?;
            let file = options.get_filename();
            // In-memory databases (sqlx names them `file:sqlx-in-memory-…`) have no neighbour file.
            let in_memory = file.as_os_str().is_empty()
                || file == std::path::Path::new(":memory:")
                || file.to_string_lossy().starts_with("file:");
            if in_memory {
                // Each connection of an in-memory pool shares one database through
                // SQLite's shared cache, whose table locks the busy timeout does not
                // cover; a second pool would only add lock errors.
                (Db::Sqlite(pool.clone()), Db::Sqlite(pool))
            } else {
                markers = Some(std::sync::Arc::new(Markers {
                    keys: ChangeMarker::beside(file, ".keys-changed"),
                    agents: ChangeMarker::beside(file, ".agents-changed"),
                    credentials: ChangeMarker::beside(file, ".credentials-changed"),
                }));
                let writer = SqlitePoolOptions::new()
                    .max_connections(pool_size.max(2))
                    .min_connections(1)
                    .connect_with(options)
                    .await?;
                (Db::Sqlite(pool), Db::Sqlite(writer))
            }
        } else if url.starts_with("postgres:") || url.starts_with("postgresql:") {
            let options = PgConnectOptions::from_str(url)?;
            let pool = PgPoolOptions::new()
                .max_connections(pool_size.max(2))
                .acquire_timeout(Duration::from_secs(10))
                .connect_with(options)
                .await?;
            sqlx::migrate!("./migrations/postgres").run(&pool).await?;
            markers = Some(std::sync::Arc::new(Markers {
                keys: ChangeMarker::in_memory(),
                agents: ChangeMarker::in_memory(),
                credentials: ChangeMarker::in_memory(),
            }));
            (Db::Postgres(pool.clone()), Db::Postgres(pool))
        } else {
            return Err(StoreError::UnsupportedUrl(
                url.split(':').next().unwrap_or_default().to_string(),
            ));
        };
        Ok(Self {
            db,
            write_db,
            markers,
        })
    }

    /// The marker of key changes; see [`crate::access::key_cache::KeyCache`].
    pub fn keys_marker(&self) -> Option<&ChangeMarker> {
        self.markers.as_deref().map(|m| &m.keys)
    }

    /// The marker of agent changes; see [`crate::http::agent_cache::AgentCache`].
    pub fn agents_marker(&self) -> Option<&ChangeMarker> {
        self.markers.as_deref().map(|m| &m.agents)
    }

    /// The marker of workspace credential changes; see
    /// [`crate::carriers::store_wiring::StoreCredentials`].
    pub fn credentials_marker(&self) -> Option<&ChangeMarker> {
        self.markers.as_deref().map(|m| &m.credentials)
    }

    /// Marks that a workspace credential changed, for servers caching opened credentials.
    fn mark_credentials_changed(&self) {
        if let Some(marker) = self.credentials_marker() {
            marker.mark();
        }
    }

    /// Marks that a key changed, for servers caching key lookups.
    fn mark_keys_changed(&self) {
        if let Some(marker) = self.keys_marker() {
            marker.mark();
        }
    }

    /// Marks that an agent changed, for servers caching agent reads.
    fn mark_agents_changed(&self) {
        if let Some(marker) = self.agents_marker() {
            marker.mark();
        }
    }

    /// Which database this store talks to: "sqlite" or "postgres".
    pub fn dialect(&self) -> &'static str {
        match self.db {
            Db::Sqlite(_) => "sqlite",
            Db::Postgres(_) => "postgres",
        }
    }

    /// A trivial round trip, for readiness checks.
    pub async fn ping(&self) -> StoreResult<()> {
        with_pool!(self, pool => {
            sqlx::query("SELECT 1").execute(pool).await?;
        });
        Ok(())
    }

    /// Closes every pooled connection, waiting for queries in flight.
    pub async fn close(&self) {
        with_writer!(self, pool => pool.close().await);
        with_pool!(self, pool => pool.close().await);
    }
}

/// Postgres: `update` (an `UPDATE … WHERE …` without `RETURNING`) made to
/// send each changed row's `name_column` on the channel bound at
/// `$channel_param`, in the same statement, so the notice leaves exactly
/// when the change commits. Returns one row per changed row. Only the
/// callers' constant SQL goes in (hence `'static`); values are bound.
fn notifying(
    update: &'static str,
    name_column: &'static str,
    channel_param: usize,
) -> sqlx::AssertSqlSafe<String> {
    sqlx::AssertSqlSafe(format!(
        "WITH changed AS ({update} RETURNING {name_column})
         SELECT pg_notify(${channel_param}, {name_column}) FROM changed"
    ))
}

/// Maps a unique-constraint violation to [`StoreError::Conflict`] with `message`.
fn conflict_or(err: sqlx::Error, message: &str) -> StoreError {
    match &err {
        sqlx::Error::Database(db) if db.is_unique_violation() => {
            StoreError::Conflict(message.to_string())
        }
        _ => StoreError::Database(err),
    }
}

#[cfg(test)]
mod tests {
    use super::calls::CallProgress;
    use super::*;
    use crate::domain::CallId;

    /// While a write holds SQLite's write lock and more writes wait behind
    /// it, a read still gets a connection and answers: the waiting writes
    /// hold only the writers' connections while they sleep in SQLite's busy
    /// handler.
    #[tokio::test]
    async fn reads_answer_while_writes_queue_behind_a_held_write() {
        let dir = tempfile::tempdir().expect("temp dir");
        let url = format!("sqlite://{}", dir.path().join("voxline.db").display());
        let store = Store::connect(&url, 4).await.expect("store");
        let Db::Sqlite(writer) = &store.write_db else {
            unreachable!("a sqlite url")
        };
        let held = writer.begin_write().await.expect("write lock");
        let writes: Vec<_> = (0..8)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let report = CallProgress::CarrierCallId {
                        call_id: CallId::new(),
                        carrier_call_id: "CA1".to_string(),
                    };
                    store.record_progress(&[report]).await
                })
            })
            .collect();
        // Let every write reach its wait before the read is asked for.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let read = tokio::time::timeout(Duration::from_secs(3), store.org_count()).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "the read waited behind the writes: {read:?}"
        );
        held.commit().await.expect("release");
        for write in writes {
            write.await.expect("task").expect("queued write");
        }
    }
}
