//! The one worker of leased jobs: post-call analyses, ratings and webhook
//! deliveries each implement [`LeasedJob`] with their work and how their
//! outcome is stored, and this loop does the rest for all of them. Every
//! period it claims a batch of due rows for this node
//! ([`Store::claim_due_jobs`]), runs them concurrently, renews each lease
//! while its job runs, settles each job (done, failed, or due again after a
//! backoff when the kind retries), and stops when the node stops.
//!
//! A job's lease says which node runs it; a node that dies mid-job leaves
//! leases that run out, so a peer runs those jobs after it. Renewing keeps a
//! slow job of a live node from being taken over.

use crate::domain::NodeId;
use crate::domain::clock::SharedClock;
use crate::store::leased_jobs::JobTable;
use crate::store::{Store, StoreError};
use futures::StreamExt;
use std::convert::Infallible;
use std::fmt::Display;
use std::future::Future;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// The node a worker runs on: where it claims, and whose leases it holds.
#[derive(Clone)]
pub struct WorkerNode {
    /// The store the jobs live in.
    pub store: Store,
    /// "Now", for leases and backoff (a manual clock in tests).
    pub clock: SharedClock,
    /// This node, the owner of the leases it takes.
    pub node: NodeId,
}

impl WorkerNode {
    fn now_ms(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }
}

/// How a kind retries a failed attempt: after the n-th failure (1-based) it
/// waits `waits[n - 1]` (the last entry for later ones), until
/// `max_attempts` were made.
///
/// Not `backon`'s exponential builder: that gives min·factorⁿ, and the
/// webhook schedule is a documented table (60 s, 5 min, 15 min, 1 h, 3 h,
/// 6 h, 12 h), persisted per row as `next_attempt_at` rather than slept.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    /// Attempts before a job is given up.
    pub max_attempts: i64,
    /// The waits after each failure.
    pub waits: &'static [Duration],
}

impl Retry {
    /// When a job whose `made`-th attempt just failed at `now_ms` runs
    /// again, Unix ms; None when it is given up.
    pub fn next_at(&self, made: i64, now_ms: i64) -> Option<i64> {
        let last = self.waits.len().checked_sub(1)?;
        if made >= self.max_attempts {
            return None;
        }
        let wait = self.waits[usize::try_from(made - 1).unwrap_or(0).min(last)];
        let wait_ms = i64::try_from(wait.as_millis()).unwrap_or(i64::MAX);
        Some(now_ms.saturating_add(wait_ms))
    }
}

/// Why a job did not produce its outcome.
#[derive(Debug)]
pub enum JobError<F> {
    /// The job failed: recorded, and retried when the kind retries and
    /// `retryable` holds.
    Failed {
        /// Why, as the kind records it.
        failure: F,
        /// Whether another attempt could succeed.
        retryable: bool,
    },
    /// The store failed before the job could be judged: nothing is recorded,
    /// and the job runs again once its lease runs out.
    Store(StoreError),
}

impl<F> From<StoreError> for JobError<F> {
    fn from(err: StoreError) -> Self {
        Self::Store(err)
    }
}

/// How a claimed job ended.
#[derive(Debug)]
pub enum Settled<O, F> {
    /// It worked, and its outcome is stored.
    Done(O),
    /// It failed, for good, and that is stored.
    Failed(F),
    /// It failed, and is due again at `at_ms`.
    Retrying {
        /// Why it failed.
        failure: F,
        /// When it is due again, Unix ms.
        at_ms: i64,
    },
    /// It was superseded (a re-run) or taken over (its lease ran out) while
    /// it ran: its outcome was dropped.
    Stale,
}

/// One kind of leased job: its table, its pace, its work, and how its
/// outcome is stored.
pub trait LeasedJob: Send + Sync + 'static {
    /// A claimed row, as the claim's `RETURNING` gives it.
    type Row: for<'r> sqlx::FromRow<'r, sqlx::sqlite::SqliteRow>
        + for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow>
        + Send
        + Sync
        + Unpin;
    /// What a job that worked produced.
    type Outcome: Send + Sync;
    /// Why a job failed.
    type Failure: Display + Send + Sync;

    /// The kind's name, in logs.
    const KIND: &'static str;
    /// Its table.
    const TABLE: &'static JobTable;
    /// How long a claim holds before a peer may take the job; renewed every
    /// third of it while the job runs.
    const LEASE: Duration;
    /// Rows claimed per pass; they run concurrently.
    const BATCH: i64;
    /// Whether a pass claims again at once while batches come back full, so
    /// a backlog drains at the jobs' pace rather than a batch per period.
    const DRAIN: bool = false;
    /// How failures are retried; None: a failure is final.
    const RETRY: Option<Retry> = None;

    /// The row's key.
    fn key(row: &Self::Row) -> String;

    /// Attempts the row had made before this one (the backoff's count).
    fn attempts_made(_row: &Self::Row) -> i64 {
        0
    }

    /// Does the job's work.
    fn run(
        &self,
        row: &Self::Row,
    ) -> impl Future<Output = Result<Self::Outcome, JobError<Self::Failure>>> + Send;

    /// Stores what the job produced, with whatever it settles; false when
    /// the job is no longer current.
    fn complete(
        &self,
        row: &Self::Row,
        outcome: &Self::Outcome,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;

    /// Stores the failure: given up when `retry_at` is None, else due again
    /// then; false when the job is no longer current.
    fn fail(
        &self,
        row: &Self::Row,
        failure: &Self::Failure,
        retry_at: Option<i64>,
    ) -> impl Future<Output = Result<bool, StoreError>> + Send;
}

fn lease_ms<J: LeasedJob>() -> i64 {
    i64::try_from(J::LEASE.as_millis()).unwrap_or(i64::MAX)
}

/// Renews the lease of the job `key` every third of the lease while the
/// job runs (it is raced against the job, never ends by itself). Once the
/// lease is no longer this node's it stops renewing: the job's outcome will
/// be refused as stale.
async fn hold_lease<J: LeasedJob>(node: &WorkerNode, key: &str) -> Infallible {
    let every = J::LEASE / 3;
    loop {
        tokio::time::sleep(every).await;
        let until = node.now_ms().saturating_add(lease_ms::<J>());
        match node
            .store
            .renew_job_lease(J::TABLE, key, &node.node, until)
            .await
        {
            Ok(true) => {}
            Ok(false) => return std::future::pending().await,
            // A missed renewal is not fatal: the lease still has two thirds
            // left, and the next tick tries again.
            Err(err) => {
                tracing::warn!(kind = J::KIND, job = key, error = %err, "could not renew a lease");
            }
        }
    }
}

/// Runs one claimed job, renewing its lease meanwhile, and stores its
/// outcome: the loop's step, and what a request that took a job for an
/// immediate run (a re-run, rate-now) calls. Err when the store failed: the
/// job is left to its lease.
pub async fn run_claimed<J: LeasedJob>(
    node: &WorkerNode,
    job: &J,
    row: &J::Row,
) -> Result<Settled<J::Outcome, J::Failure>, StoreError> {
    let key = J::key(row);
    let result = tokio::select! {
        result = job.run(row) => result,
        never = hold_lease::<J>(node, &key) => match never {},
    };
    match result {
        Ok(outcome) => Ok(if job.complete(row, &outcome).await? {
            Settled::Done(outcome)
        } else {
            Settled::Stale
        }),
        Err(JobError::Store(err)) => Err(err),
        Err(JobError::Failed { failure, retryable }) => {
            let made = J::attempts_made(row).saturating_add(1);
            let retry_at = J::RETRY
                .filter(|_| retryable)
                .and_then(|retry| retry.next_at(made, node.now_ms()));
            Ok(match (job.fail(row, &failure, retry_at).await?, retry_at) {
                (false, _) => Settled::Stale,
                (true, Some(at_ms)) => Settled::Retrying { failure, at_ms },
                (true, None) => Settled::Failed(failure),
            })
        }
    }
}

/// Claims and runs due jobs of one kind for this node (peers running the
/// same pass claim others): one batch, or, for kinds that drain, batches
/// until one comes back short. Returns how many ran.
pub async fn run_due<J: LeasedJob>(node: &WorkerNode, job: &J) -> Result<usize, StoreError> {
    let mut total = 0;
    loop {
        let now = node.now_ms();
        let rows: Vec<J::Row> = node
            .store
            .claim_due_jobs(
                J::TABLE,
                &node.node,
                now,
                now.saturating_add(lease_ms::<J>()),
                J::BATCH,
            )
            .await?;
        let claimed = rows.len();
        let concurrency = usize::try_from(J::BATCH).unwrap_or(1).max(1);
        futures::stream::iter(&rows)
            .for_each_concurrent(concurrency, |row| async move {
                log_settled::<J>(row, run_claimed(node, job, row).await);
            })
            .await;
        total += claimed;
        if !J::DRAIN || i64::try_from(claimed).unwrap_or(i64::MAX) < J::BATCH {
            return Ok(total);
        }
    }
}

/// What the loop says of one job's end.
fn log_settled<J: LeasedJob>(
    row: &J::Row,
    settled: Result<Settled<J::Outcome, J::Failure>, StoreError>,
) {
    let job = J::key(row);
    let attempt = J::attempts_made(row).saturating_add(1);
    match settled {
        Ok(Settled::Done(_)) => {}
        Ok(Settled::Failed(failure)) => {
            tracing::warn!(kind = J::KIND, %job, attempt, reason = %failure, "job failed");
        }
        Ok(Settled::Retrying { failure, at_ms }) => {
            tracing::warn!(kind = J::KIND, %job, attempt, reason = %failure, retry_at = at_ms, "job failed; it will be retried");
        }
        Ok(Settled::Stale) => {
            tracing::warn!(kind = J::KIND, %job, "job was superseded or outlived its lease; its outcome was dropped");
        }
        Err(err) => {
            tracing::warn!(kind = J::KIND, %job, error = %err, "job could not be run or recorded; it runs again after its lease");
        }
    }
}

/// Runs [`run_due`] for `job` every `period` on `tasks` until `stop`.
/// A pass in flight when `stop` fires finishes, unless `abandon` is given
/// and fires: then the jobs are dropped where they are, left pending under
/// leases the node's stop releases.
pub fn spawn<J: LeasedJob>(
    tasks: &TaskTracker,
    node: WorkerNode,
    job: J,
    period: Duration,
    stop: &CancellationToken,
    abandon: Option<&CancellationToken>,
) {
    let stop = stop.clone();
    let abandon = abandon.cloned();
    tasks.spawn(async move {
        let mut ticker = tokio::time::interval(period);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // A stop that is due wins over a tick that is too.
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                _ = ticker.tick() => {}
            }
            let pass = run_due(&node, &job);
            let ran = match &abandon {
                Some(abandon) => tokio::select! {
                    ran = pass => ran,
                    () = abandon.cancelled() => continue,
                },
                None => pass.await,
            };
            if let Err(err) = ran {
                tracing::warn!(kind = J::KIND, error = %err, "leased-job pass failed");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_webhook_schedule_waits_by_attempt_and_gives_up_at_the_last() {
        const WAITS: [Duration; 3] = [
            Duration::from_secs(60),
            Duration::from_secs(300),
            Duration::from_secs(900),
        ];
        let retry = Retry {
            max_attempts: 5,
            waits: &WAITS,
        };
        assert_eq!(retry.next_at(1, 1_000), Some(61_000));
        assert_eq!(retry.next_at(2, 1_000), Some(301_000));
        assert_eq!(
            retry.next_at(4, 1_000),
            Some(901_000),
            "the last wait repeats"
        );
        assert_eq!(retry.next_at(5, 1_000), None, "given up");
        let none = Retry {
            max_attempts: 5,
            waits: &[],
        };
        assert_eq!(none.next_at(1, 0), None);
    }
}
