//! The one lifecycle of the store's leased jobs (post-call analyses,
//! ratings, webhook deliveries): due rows claimed for a node under a lease,
//! the lease renewed while the job runs, the job settled (done, failed, or
//! pending again for a retry), and a node's leases released when its jobs
//! are known to be gone.
//!
//! Each kind describes its table once in a [`JobTable`]; the SQL is built
//! from it here, with [`QueryBuilder`], so the claim, renewal and release are
//! written once for every kind. A kind whose settling has side effects (the
//! analysis and rating release held webhooks and queue follow-up events)
//! starts the update with [`JobTable::settle`], adds its own columns, closes
//! it with [`JobTable::push_holder`], runs it on its own transaction and goes
//! on in that transaction.

use super::{Db, Store, StoreResult, with_writer};
use crate::domain::NodeId;
use sqlx::{Database, Encode, QueryBuilder, Type};

/// How one table of leased jobs names its columns and picks its due rows.
/// The names are the tables' real columns (see `migrations/`).
#[derive(Debug)]
pub struct JobTable {
    /// The table.
    pub table: &'static str,
    /// Its key column.
    pub id: &'static str,
    /// `pending` while the job is to run; the settled status otherwise.
    pub status: &'static str,
    /// The status a job that worked settles in (`done`, `delivered`).
    pub done_status: &'static str,
    /// The node holding the lease (NULL when none does).
    pub lease_owner: &'static str,
    /// Until when the lease holds, Unix ms (0 when free).
    pub lease_until: &'static str,
    /// The attempts column.
    pub attempts: &'static str,
    /// Why the last attempt failed.
    pub error: &'static str,
    /// When a pending row is due at the earliest, Unix ms, for kinds that
    /// retry later; None when a pending row is due as soon as it is free.
    pub next_attempt_at: Option<&'static str>,
    /// The job's generation, for kinds whose re-runs supersede a job in
    /// flight; None when only the lease says whose a job is.
    pub generation: Option<&'static str>,
    /// Whether a current job may settle a row that is no longer pending: a
    /// rating re-scored keeps its done scorecard readable meanwhile.
    pub settles_settled: bool,
    /// Any further condition a due row meets (SQL over the table's columns).
    pub due_also: Option<&'static str>,
    /// The claim order, oldest first (the key breaks ties).
    pub order_by: &'static str,
    /// What a claim returns: the kind's row (SQL over the table's columns).
    pub returning: &'static str,
}

/// Where a job settles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settle<'a> {
    /// It worked: the table's done status, the error cleared.
    Done,
    /// It failed for good, with this error.
    Failed {
        /// Why.
        error: &'a str,
    },
    /// It failed and is due again at `at_ms` (kinds with `next_attempt_at`).
    Retry {
        /// Why.
        error: &'a str,
        /// When it is due again, Unix ms.
        at_ms: i64,
    },
}

/// What a settled job writes into the attempts column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempts {
    /// One more (each run is one attempt).
    Count,
    /// This many (a kind counting something of its own, e.g. model calls).
    Set(i64),
}

/// Whose job a settling update stands for; a job superseded or taken over
/// settles nothing.
#[derive(Debug, Clone, Copy)]
pub enum Holder<'a> {
    /// The node holding the row's lease.
    Lease(&'a NodeId),
    /// The job's generation (tables with a generation column).
    Generation(i64),
}

impl JobTable {
    /// `UPDATE … RETURNING`: claims for `node` up to `limit` pending rows
    /// that are due at `now_ms` and free, oldest first, leased until
    /// `lease_until`; `lock` follows the row choice.
    fn claim_sql<DB>(
        &self,
        node: &NodeId,
        now_ms: i64,
        lease_until: i64,
        limit: i64,
        lock: &str,
    ) -> QueryBuilder<DB>
    where
        DB: Database,
        DB::Arguments: Default,
        for<'t> String: Encode<'t, DB> + Type<DB>,
        for<'t> i64: Encode<'t, DB> + Type<DB>,
    {
        let (table, id) = (self.table, self.id);
        let mut q = QueryBuilder::new(format!("UPDATE {table} SET {} = ", self.lease_owner));
        q.push_bind(node.to_string());
        q.push(format!(", {} = ", self.lease_until));
        q.push_bind(lease_until);
        q.push(format!(
            " FROM (SELECT {id} FROM {table} WHERE {} = 'pending' AND {} <= ",
            self.status, self.lease_until
        ));
        q.push_bind(now_ms);
        if let Some(next) = self.next_attempt_at {
            q.push(format!(" AND {next} <= "));
            q.push_bind(now_ms);
        }
        if let Some(also) = self.due_also {
            q.push(format!(" AND {also}"));
        }
        q.push(format!(" ORDER BY {}, {id} LIMIT ", self.order_by));
        q.push_bind(limit);
        q.push(format!(
            " {lock}) AS due WHERE {table}.{id} = due.{id} RETURNING {}",
            self.returning
        ));
        q
    }

    /// The start of the update that settles one job: its status, its lease
    /// freed, its attempts and error. The caller may push further
    /// `, column = value` pairs, then must close it with [`Self::push_holder`].
    pub(crate) fn settle<DB>(&self, to: Settle<'_>, attempts: Attempts) -> QueryBuilder<DB>
    where
        DB: Database,
        DB::Arguments: Default,
        for<'t> String: Encode<'t, DB> + Type<DB>,
        for<'t> i64: Encode<'t, DB> + Type<DB>,
    {
        let mut q = QueryBuilder::new(format!("UPDATE {} SET {} = ", self.table, self.status));
        q.push_bind(
            match to {
                Settle::Done => self.done_status,
                Settle::Failed { .. } => "failed",
                Settle::Retry { .. } => "pending",
            }
            .to_string(),
        );
        q.push(format!(
            ", {} = 0, {} = NULL, {} = ",
            self.lease_until, self.lease_owner, self.attempts
        ));
        match attempts {
            Attempts::Count => q.push(format!("{} + 1", self.attempts)),
            Attempts::Set(n) => q.push_bind(n),
        };
        q.push(format!(", {} = ", self.error));
        match to {
            Settle::Done => q.push("NULL"),
            Settle::Failed { error } | Settle::Retry { error, .. } => {
                q.push_bind(error.to_string())
            }
        };
        if let (Settle::Retry { at_ms, .. }, Some(next)) = (to, self.next_attempt_at) {
            q.push(format!(", {next} = "));
            q.push_bind(at_ms);
        }
        q
    }

    /// Closes a [`Self::settle`] update with the row and the guard that the
    /// job is still `holder`'s (and, unless the table settles settled rows,
    /// still pending).
    pub(crate) fn push_holder<DB>(&self, q: &mut QueryBuilder<DB>, key: &str, holder: Holder<'_>)
    where
        DB: Database,
        DB::Arguments: Default,
        for<'t> String: Encode<'t, DB> + Type<DB>,
        for<'t> i64: Encode<'t, DB> + Type<DB>,
    {
        q.push(format!(" WHERE {} = ", self.id));
        q.push_bind(key.to_string());
        match (holder, self.generation) {
            (Holder::Lease(node), _) => {
                q.push(format!(" AND {} = ", self.lease_owner));
                q.push_bind(node.to_string());
            }
            (Holder::Generation(generation), Some(column)) => {
                q.push(format!(" AND {column} = "));
                q.push_bind(generation);
            }
            // A table without generations has no job a generation names.
            (Holder::Generation(_), None) => {
                q.push(" AND 1 = 0");
            }
        }
        if !self.settles_settled {
            q.push(format!(" AND {} = 'pending'", self.status));
        }
    }
}

impl Store {
    /// Claims for `node` up to `limit` due rows of `jobs` no one holds,
    /// oldest first, leased until `lease_until`. On Postgres rows another
    /// node is claiming are skipped (`FOR UPDATE SKIP LOCKED`), so nodes
    /// claiming at once split the work; SQLite has one writer, so the
    /// statement alone is atomic.
    pub async fn claim_due_jobs<R>(
        &self,
        jobs: &JobTable,
        node: &NodeId,
        now_ms: i64,
        lease_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<R>>
    where
        R: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
            + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
            + Send
            + Unpin,
    {
        let rows = match &self.write_db {
            Db::Sqlite(pool) => {
                jobs.claim_sql::<sqlx::Sqlite>(node, now_ms, lease_until, limit, "")
                    .build_query_as::<R>()
                    .fetch_all(pool)
                    .await?
            }
            Db::Postgres(pool) => {
                jobs.claim_sql::<sqlx::Postgres>(
                    node,
                    now_ms,
                    lease_until,
                    limit,
                    "FOR UPDATE SKIP LOCKED",
                )
                .build_query_as::<R>()
                .fetch_all(pool)
                .await?
            }
        };
        Ok(rows)
    }

    /// Extends `node`'s lease of the pending row `key` to `lease_until`, for
    /// a job still running; false when the lease is no longer the node's (the
    /// job settled, or its row was released or taken over).
    pub async fn renew_job_lease(
        &self,
        jobs: &JobTable,
        key: &str,
        node: &NodeId,
        lease_until: i64,
    ) -> StoreResult<bool> {
        let n = with_writer!(self, pool => {
            let mut q = QueryBuilder::new(format!("UPDATE {} SET {} = ", jobs.table, jobs.lease_until));
            q.push_bind(lease_until);
            q.push(format!(" WHERE {} = ", jobs.id));
            q.push_bind(key.to_string());
            q.push(format!(" AND {} = ", jobs.lease_owner));
            q.push_bind(node.to_string());
            q.push(format!(" AND {} = 'pending' AND {} <> 0", jobs.status, jobs.lease_until));
            q.build().execute(pool).await?.rows_affected()
        });
        Ok(n > 0)
    }

    /// Frees the leases of `jobs` that `node` holds, when its jobs are known
    /// to be gone (its own start after a crash, its clean stop, a dead
    /// peer's recovery), so they run again at once; a live peer's leases are
    /// left alone. On SQLite, the one node, every lease. Returns how many.
    pub async fn release_job_leases(&self, jobs: &JobTable, node: &NodeId) -> StoreResult<u64> {
        let every = !self.is_shared();
        let n = with_writer!(self, pool => {
            let mut q = QueryBuilder::new(format!(
                "UPDATE {t} SET {until} = 0, {owner} = NULL WHERE {status} = 'pending' AND {until} <> 0",
                t = jobs.table,
                until = jobs.lease_until,
                owner = jobs.lease_owner,
                status = jobs.status,
            ));
            if !every {
                q.push(format!(" AND {} = ", jobs.lease_owner));
                q.push_bind(node.to_string());
            }
            q.build().execute(pool).await?.rows_affected()
        });
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000_000;

    /// A table of its own, so the lifecycle is seen without any kind's rules.
    const TEST_JOBS: JobTable = JobTable {
        table: "test_jobs",
        id: "id",
        status: "status",
        done_status: "done",
        lease_owner: "lease_owner",
        lease_until: "lease_until",
        attempts: "attempts",
        error: "last_error",
        next_attempt_at: Some("next_attempt_at"),
        generation: Some("generation"),
        settles_settled: false,
        due_also: Some("id <> 'never'"),
        order_by: "next_attempt_at",
        returning: "test_jobs.id, test_jobs.attempts",
    };

    #[derive(Debug, sqlx::FromRow)]
    struct Row {
        id: String,
        attempts: i64,
    }

    /// `(status, attempts, last_error, lease_owner, lease_until, next_attempt_at)`.
    type State = (String, i64, Option<String>, Option<String>, i64, i64);

    async fn store() -> (tempfile::TempDir, Store, sqlx::SqlitePool) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}", dir.path().join("jobs.db").display());
        let store = Store::connect(&url, 2).await.unwrap();
        let Db::Sqlite(pool) = &store.db else {
            unreachable!("a sqlite url")
        };
        let pool = pool.clone();
        sqlx::query(
            "CREATE TABLE test_jobs (id TEXT PRIMARY KEY, status TEXT NOT NULL DEFAULT 'pending',
               attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT, lease_owner TEXT,
               lease_until INTEGER NOT NULL DEFAULT 0, next_attempt_at INTEGER NOT NULL,
               generation INTEGER NOT NULL DEFAULT 0)",
        )
        .execute(&pool)
        .await
        .unwrap();
        for (id, status, due) in [
            ("b", "pending", 0),
            ("a", "pending", 0),
            ("later", "pending", NOW + 1_000),
            ("settled", "done", 0),
            ("never", "pending", 0),
        ] {
            sqlx::query("INSERT INTO test_jobs (id, status, next_attempt_at) VALUES ($1, $2, $3)")
                .bind(id)
                .bind(status)
                .bind(due)
                .execute(&pool)
                .await
                .unwrap();
        }
        (dir, store, pool)
    }

    async fn state(pool: &sqlx::SqlitePool, id: &str) -> State {
        sqlx::query_as(
            "SELECT status, attempts, last_error, lease_owner, lease_until, next_attempt_at
             FROM test_jobs WHERE id = $1",
        )
        .bind(id)
        .fetch_one(pool)
        .await
        .unwrap()
    }

    async fn settle(
        pool: &sqlx::SqlitePool,
        id: &str,
        holder: Holder<'_>,
        to: Settle<'_>,
        attempts: Attempts,
    ) -> bool {
        let mut q = TEST_JOBS.settle::<sqlx::Sqlite>(to, attempts);
        TEST_JOBS.push_holder(&mut q, id, holder);
        q.build().execute(pool).await.unwrap().rows_affected() == 1
    }

    async fn claim(store: &Store, node: &NodeId, now: i64) -> Vec<String> {
        let rows: Vec<Row> = store
            .claim_due_jobs(&TEST_JOBS, node, now, now + 100, 10)
            .await
            .unwrap();
        rows.into_iter().map(|r| r.id).collect()
    }

    #[tokio::test]
    async fn sqlite_claims_renews_settles_and_releases() {
        let (_dir, store, pool) = store().await;
        let one: NodeId = "node-one".parse().unwrap();
        let two: NodeId = "node-two".parse().unwrap();

        // Due, free and pending, oldest first (the key breaks the tie); not
        // the later, settled or excluded ones.
        let first: Vec<Row> = store
            .claim_due_jobs(&TEST_JOBS, &one, NOW, NOW + 100, 1)
            .await
            .unwrap();
        assert_eq!(
            first
                .iter()
                .map(|r| (r.id.as_str(), r.attempts))
                .collect::<Vec<_>>(),
            [("a", 0)]
        );
        assert_eq!(claim(&store, &one, NOW).await, ["b"]);
        assert_eq!(
            state(&pool, "a").await,
            (
                "pending".into(),
                0,
                None,
                Some("node-one".into()),
                NOW + 100,
                0
            )
        );
        assert!(
            claim(&store, &two, NOW).await.is_empty(),
            "leased to node one"
        );

        // Only the holder renews.
        assert!(
            !store
                .renew_job_lease(&TEST_JOBS, "a", &two, NOW + 500)
                .await
                .unwrap()
        );
        assert!(
            store
                .renew_job_lease(&TEST_JOBS, "a", &one, NOW + 500)
                .await
                .unwrap()
        );
        assert_eq!(state(&pool, "a").await.4, NOW + 500);
        // A renewed lease outlives the first one; the other one's ran out.
        assert_eq!(claim(&store, &two, NOW + 200).await, ["b"]);

        // Only the holder settles: "a" is done, counted, its lease freed.
        assert!(
            !settle(
                &pool,
                "a",
                Holder::Lease(&two),
                Settle::Done,
                Attempts::Count
            )
            .await
        );
        assert!(
            settle(
                &pool,
                "a",
                Holder::Lease(&one),
                Settle::Done,
                Attempts::Count
            )
            .await
        );
        assert_eq!(
            state(&pool, "a").await,
            ("done".into(), 1, None, None, 0, 0)
        );
        assert!(
            !store
                .renew_job_lease(&TEST_JOBS, "a", &one, NOW + 900)
                .await
                .unwrap(),
            "a settled job's lease is not renewed"
        );
        assert!(
            !settle(
                &pool,
                "a",
                Holder::Lease(&one),
                Settle::Done,
                Attempts::Count
            )
            .await,
            "settled once"
        );

        // A retry frees the lease and is due again at its time, not before.
        let retry = Settle::Retry {
            error: "receiver answered 500",
            at_ms: NOW + 300,
        };
        assert!(settle(&pool, "b", Holder::Lease(&two), retry, Attempts::Count).await);
        assert_eq!(
            state(&pool, "b").await,
            (
                "pending".into(),
                1,
                Some("receiver answered 500".into()),
                None,
                0,
                NOW + 300
            )
        );
        assert!(claim(&store, &one, NOW + 299).await.is_empty());
        assert_eq!(claim(&store, &one, NOW + 300).await, ["b"]);

        // A generation names the job: a superseded one settles nothing.
        let failed = Settle::Failed { error: "gave up" };
        assert!(!settle(&pool, "b", Holder::Generation(1), failed, Attempts::Set(3)).await);
        assert!(settle(&pool, "b", Holder::Generation(0), failed, Attempts::Set(3)).await);
        assert_eq!(
            state(&pool, "b").await,
            (
                "failed".into(),
                3,
                Some("gave up".into()),
                None,
                0,
                NOW + 300
            )
        );

        // On SQLite, the one node, a release frees every pending lease.
        assert_eq!(claim(&store, &two, NOW + 1_000).await, ["later"]);
        assert_eq!(store.release_job_leases(&TEST_JOBS, &one).await.unwrap(), 1);
        assert_eq!(state(&pool, "later").await.3, None);
        assert_eq!(claim(&store, &one, NOW + 1_000).await, ["later"]);
    }
}
