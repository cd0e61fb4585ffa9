//! Background passes that only one node at a time may run (the janitor, the
//! batch scheduler): a Postgres session advisory lock per pass, held on one
//! pooled connection for as long as the pass runs. SQLite is one node, so the
//! lock is always granted there.
//!
//! Use [`Store::run_singleton`] around a pass; [`Store::try_singleton`] gives
//! the lock itself when the holder must decide when to let go.

use super::{Db, Store, StoreResult};
use sqlx::pool::PoolConnection;

/// A pass that runs on one node at a time; each has its own lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Singleton {
    /// Number renewals, agent dormancy and retention ([`crate::background::janitor`]).
    Janitor,
    /// The batch scheduler's pass over running batches.
    BatchScheduler,
}

impl Singleton {
    /// The lock's name; Postgres hashes it into the advisory lock key, in a
    /// namespace of its own (`voxline-singleton:`).
    pub fn name(self) -> &'static str {
        match self {
            Self::Janitor => "janitor",
            Self::BatchScheduler => "batch-scheduler",
        }
    }
}

/// A singleton's lock, held until [`SingletonLock::release`] or drop.
///
/// On Postgres it owns the pooled connection whose session holds the lock:
/// `release` unlocks and returns the connection to the pool; a drop without
/// it (a panic, a cancelled pass) closes the connection instead, which ends
/// the session and with it the lock, so a lock is never left behind in the pool.
#[derive(Debug)]
#[must_use = "the lock is let go when this is dropped"]
pub struct SingletonLock {
    singleton: Singleton,
    session: Option<PoolConnection<sqlx::Postgres>>,
}

impl SingletonLock {
    /// Which singleton this lock is for.
    pub fn singleton(&self) -> Singleton {
        self.singleton
    }

    /// Lets go of the lock, so another node may take it at once.
    pub async fn release(mut self) -> StoreResult<()> {
        let Some(mut session) = self.session.take() else {
            return Ok(());
        };
        let unlocked = sqlx::query_scalar::<_, bool>(
            "SELECT pg_advisory_unlock(hashtextextended('voxline-singleton:' || $1, 0))",
        )
        .bind(self.singleton.name())
        .fetch_one(&mut *session)
        .await;
        match unlocked {
            Ok(true) => Ok(()),
            // Not held by this session after all: nothing is left to release,
            // but the session is suspect, so it does not go back to the pool.
            Ok(false) => {
                session.close_on_drop();
                Ok(())
            }
            Err(err) => {
                session.close_on_drop();
                Err(err.into())
            }
        }
    }
}

impl Drop for SingletonLock {
    fn drop(&mut self) {
        if let Some(session) = self.session.as_mut() {
            // No async unlock in drop: ending the session frees the lock.
            session.close_on_drop();
        }
    }
}

impl Store {
    /// Takes `singleton`'s lock if no node (this one included) holds it;
    /// `None` when another holder has it. Never waits for the lock. On
    /// SQLite, the one node, always granted.
    pub async fn try_singleton(&self, singleton: Singleton) -> StoreResult<Option<SingletonLock>> {
        let Db::Postgres(pool) = &self.db else {
            return Ok(Some(SingletonLock {
                singleton,
                session: None,
            }));
        };
        let mut session = pool.acquire().await?;
        let locked: bool = sqlx::query_scalar(
            "SELECT pg_try_advisory_lock(hashtextextended('voxline-singleton:' || $1, 0))",
        )
        .bind(singleton.name())
        .fetch_one(&mut *session)
        .await?;
        Ok(locked.then_some(SingletonLock {
            singleton,
            session: Some(session),
        }))
    }

    /// Runs `pass` under `singleton`'s lock and returns its output, or `None`
    /// without running it when another node holds the lock. The lock is let
    /// go when the pass ends, so the next pass goes to whichever node asks
    /// first.
    pub async fn run_singleton<T>(
        &self,
        singleton: Singleton,
        pass: impl Future<Output = T>,
    ) -> StoreResult<Option<T>> {
        let Some(lock) = self.try_singleton(singleton).await? else {
            return Ok(None);
        };
        let output = pass.await;
        if let Err(err) = lock.release().await {
            // The session was closed instead, which frees the lock as well.
            tracing::warn!(singleton = singleton.name(), error = %err, "could not unlock a singleton");
        }
        Ok(Some(output))
    }
}
